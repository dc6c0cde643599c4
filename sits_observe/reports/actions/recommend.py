"""Report ``recommend``: what to change, per namespace, workload and object, krr-style.

One table, one row per recommendation, grouped by namespace (rows sorted by namespace, then
object, then action; cluster-scoped objects such as nodes first):

- the controller's standing plan as of the window's end (:mod:`.recommend_plan`: memory-class
  and fragmentation labels, time slices, QoS quotas, priority classes, namespace quotas held
  under the largest daily peak x 2 and the cluster's allocatable capacity, and, given the
  cluster's Kueue / KAI queues (``queues``, read by the controller's adapter), their GPU
  quota, borrowing limit and limit under the same rule; and the tenant throttle of a
  namespace whose load pushes another out of its P99 SLA, docs/analytics/tenants.md);
- the analytics' findings over the window (:mod:`.recommend_findings`): idle, oversized and
  stranded GPUs with the GPU-hours they waste, GPU memory per workload in the form its stack
  takes, and replicas at the P95 SLO per served model.

Every row has ``current`` (what is set or held now), ``proposed``, ``change`` ((proposed -
current) / current when both are numbers), ``confidence`` (a stated rule per kind of row: the
module docstrings of :mod:`.recommend_plan` and :mod:`.recommend_findings`, docs/controller.md),
a short reason (``why``) and, with ``-o wide`` / JSON, the object's kind, the full reason and
the evidence. A "not enough data" answer is a row whose ``proposed`` is empty, whose
confidence is ``none`` and whose reason starts with "not enough data". Values of
ResourceQuota actions and GPU memory read as Kubernetes quantities (``294Gi``, ``73600m``:
rounded up, so pasting them never gives less than proposed); ``proposed_value`` /
``current_value`` keep the exact amount in the row's ``unit``. The report writes nothing.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from sits_observe.analytics.fragmentation.settings import IdleSettings
from sits_observe.analytics.rightsizing.memory import RightsizingSettings
from sits_observe.analytics.rightsizing.replicas import ReplicaSettings
from sits_observe.control.controller.planning.inputs import QueueState
from sits_observe.control.controller.settings import ControllerSettings
from sits_observe.domain.units import Unit
from sits_observe.errors import NoDataError
from sits_observe.reports.actions import recommend_findings as findings
from sits_observe.reports.actions.recommend_plan import DAWN, plan_rows, short_reason
from sits_observe.reports.result import Report, col, table_of
from sits_observe.reports.spec import ReportSpec, newest
from sits_observe.reports.window import Window, empty_window_message
from sits_observe.store import Store
from sits_observe.store.rows import IN_WINDOW

__all__ = ["SPEC", "RecommendAction", "RecommendQuery", "build", "short_reason"]

#: The tables the rows come from (``--until newest`` = the newest of them).
READS = ("gpu_samples", "requests", "server_windows", "pods", "nodes")

FILLED_BY = (
    "`sits-observe ingest k8s` (the inventory), `ingest dcgm` / `ingest requests`, the node "
    "agent, or `sits-observe demo`"
)


class RecommendAction(StrEnum):
    """What a row recommends: the controller's actions, then the analytics' findings."""

    MEMORY_CLASS = "memory-class"
    FRAGMENTATION = "fragmentation"
    TOPOLOGY_POLICY = "topology-policy"
    TIME_SLICE = "time-slice"
    QOS_MEMORY_QUOTA = "qos-memory-quota"
    QOS_BANDWIDTH_QUOTA = "qos-bandwidth-quota"
    PRIORITY_CLASS = "priority-class"
    QUOTA_GPU = "quota-gpu"
    QUOTA_CPU = "quota-cpu"
    QUOTA_MEMORY = "quota-memory"
    QUEUE_GPU_QUOTA = "queue-gpu-quota"
    QUEUE_GPU_BORROWING_LIMIT = "queue-gpu-borrowing-limit"
    QUEUE_GPU_LIMIT = "queue-gpu-limit"
    TENANT_THROTTLE = "tenant-throttle"
    IDLE_GPU = "idle-gpu"
    OVERSIZED_GPU = "oversized-gpu"
    STRANDED_GPU = "stranded-gpu"
    GPU_MEMORY = "gpu-memory"
    REPLICAS = "replicas"


class RecommendFilters(BaseModel):
    """Which rows ``recommend`` prints."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    namespace: str | None = Field(
        None,
        description="only rows of this namespace (its own quota advice included)",
        json_schema_extra={"flags": ["-n", "--namespace"]},
    )
    action: RecommendAction | None = Field(None, description="only this action")
    sla: tuple[str, ...] = Field(
        (),
        description="NAMESPACE=SECONDS: a namespace's P99 latency SLA (repeat for each), for the "
        "controller's SLA rules (priority class, tenant throttle); none: they leave every "
        "namespace alone",
    )


class RecommendQuery(ReplicaSettings, RightsizingSettings, IdleSettings, RecommendFilters):
    """Settings of the ``recommend`` report: the filters, then the idle-GPU, right-sizing and
    replica rules' settings (pydantic lists the last base's fields first; the controller's
    rules use its defaults)."""

    model_config = ConfigDict(frozen=True, extra="forbid")


_COLUMNS = (
    col("namespace", "namespace"),
    col("name", "name"),
    col("action", "action"),
    col("current", "current"),
    col("proposed", "proposed"),
    col("change_ratio", "change", Unit.ratio, wide=True),
    col("backing", "conf"),
    col("reason_short", "why", wrap=True),
    col("confidence", "conf", wide=True),
    col("history_s", "history", Unit.seconds, wide=True),
    col("kind", "kind", wide=True),
    col("target", "target", wide=True),
    col("workload", "workload", wide=True),
    col("current_value", "current exact", Unit.number, wide=True),
    col("proposed_value", "exact", Unit.number, wide=True),
    col("unit", "unit", wide=True),
    col("reason", "reason", wide=True),
    col("evidence", "evidence", wide=True),
)


def _settings(model: type[Any], query: RecommendQuery) -> Any:
    return model.model_validate(query.model_dump(include=set(model.model_fields)))


def build(
    store: Store, window: Window, query: RecommendQuery, *, queues: QueueState | None = None
) -> Report:
    """The ``recommend`` report over ``window`` (the plan as of its last instant); with
    ``queues`` (:func:`sits_observe.control.signals.kube_queues.read_queues`), their quota rows
    too."""
    _require_any(store, window)
    # The store's look-backs end at ``at`` inclusive; one microsecond (the TIMESTAMP
    # resolution) before ``until`` keeps to ``ts < until``.
    at = window.until - timedelta(microseconds=1)
    since = window.since or DAWN
    controller = ControllerSettings(sla=query.sla)
    rows, notes, plan, capacity = plan_rows(store, window, at, controller, queues=queues)
    idle, idle_notes = findings.waste(
        store, since, window.until, window.seconds, _settings(IdleSettings, query)
    )
    if idle is not None:
        rows += findings.idle_rows(idle, _settings(IdleSettings, query))
    rows += findings.sizing_rows(store, since, window.until, _settings(RightsizingSettings, query))
    rows += findings.replica_rows(store, since, window.until, _settings(ReplicaSettings, query))
    rows = [r for r in rows if _matches(r, query)]
    rows.sort(
        key=lambda r: (r["namespace"] is not None, r["namespace"] or "", r["name"], r["action"])
    )
    main = table_of("recommendations", "Recommendations", rows, _COLUMNS)
    notes += idle_notes
    unset = [r for r in rows if r["action"] == "replicas" and r["reason"].startswith("no P95 SLO")]
    short = findings.not_enough(rows) - len(unset)
    if short:
        notes.append(
            f"{short} row(s) have not enough data (proposed empty): gpu-memory needs "
            f">= {query.min_points} samples over >= {query.min_history_s:g} s, replicas a "
            "safe maximum at the SLO"
        )
    if unset:
        notes.append(
            f"{len(unset)} replicas row(s) have no P95 SLO set, so no proposal: set one per "
            "model with --slo MODEL=SECONDS, or --slo-ms for every model"
        )
    if not rows and (query.namespace is not None or query.action is not None):
        notes.append("no recommendation matches --namespace / --action")
    elif not rows:
        notes.append("no recommendations: every measured value is within its rule's bounds")
    facts = {
        "at": at,
        "current_from": "the store's latest inventory (node labels, pod priority classes, "
        "GPU requests and shares)" + ("" if queues is None else " and the cluster's queues"),
        "suppressed": dict(plan.suppressed),
        "namespace": query.namespace,
        "action": None if query.action is None else str(query.action),
        "allocatable_gpus": None if capacity is None else capacity.gpus,
        "allocatable_cpu_milli": None if capacity is None else capacity.cpu_milli,
        "allocatable_memory_bytes": None if capacity is None else capacity.memory_bytes,
        "wasted_gpu_hours": None if idle is None else dict(idle.wasted_gpu_hours),
    }
    return Report("recommend", window, main, (), tuple(notes), facts)


def _matches(row: dict[str, Any], query: RecommendQuery) -> bool:
    if query.namespace is not None and row["namespace"] != query.namespace:
        return False
    return query.action is None or row["action"] == str(query.action)


def _require_any(store: Store, window: Window) -> None:
    """A :class:`NoDataError` when none of :data:`READS` has a row in ``window``."""
    params: list[object] = window.params
    for table in READS:
        sql = f"SELECT count(*) FROM {table} WHERE {IN_WINDOW}"
        if store.scalar(sql, params):
            return
    if all(store.count(t) == 0 for t in READS):
        raise NoDataError(f"tables {', '.join(READS)} are empty; fill them with {FILLED_BY}")
    what = f"{', '.join(READS)} rows"
    raise NoDataError(empty_window_message(window, what, newest(store, READS)))


def build_live(store: Store, window: Window, query: RecommendQuery, kube_api: Any) -> Report:
    """:func:`build` with the cluster's Kueue / KAI queues read through ``kube_api`` (an
    official-client ``ApiClient``): their quota rows too. A queue list the API refuses is
    left out and named in a note; an absent CRD is no queues."""
    from sits_observe.control.controller.kube import KubeJson
    from sits_observe.control.signals.kube_queues import read_queues

    queues = read_queues(KubeJson(kube_api), ControllerSettings())
    report = build(store, window, query, queues=queues)
    if not queues.errors:
        return report
    note = f"could not list {', '.join(queues.errors)} from the Kubernetes API: left out"
    return replace(report, notes=(*report.notes, note))


SPEC = ReportSpec(
    name="recommend",
    summary="What to change, per namespace and workload: the controller's standing advice, "
    "idle GPUs, GPU memory right-sizing and replicas at the SLO (writes nothing).",
    settings=RecommendQuery,
    reads=READS,
    build=build,
    live=build_live,
)
