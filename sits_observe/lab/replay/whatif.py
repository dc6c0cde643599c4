"""Report ``whatif``: replay a trace with placement policies in the scheduling simulator.

The trace is the live cluster of the window (the latest inventory snapshot and the pods seen
in the window) or two CSV files in the Alibaba v2023 schema (:mod:`.whatif_trace`); the
replay is ``sits-observe simulate``'s (:func:`sits_observe.lab.replay.engine.replay.simulate`, the
ATC'23 method: pods arrive onto an empty cluster until ``load_ratio`` times its GPUs are
requested), with ``kube-default`` (kube-scheduler's defaults) and ``kube-sits*``
(kube-scheduler calling the extenders of ``deploy/scheduler-config.yaml`` through the
service's own request handling, :mod:`sits_observe.lab.replay.extender`) among the
policies.

Main table: one row per policy, means over the seeds (allocation at the end, GPUs left
unallocated, the arrived load of the first failure; replay speed in ``-o wide``). ``curve``:
per policy, every :data:`CURVE_STEP` arrived-load steps, allocation and fragmentation (mean
over seeds; the full curve is in :func:`result_document`). ``causes``: per policy, F(M) at
the end by cause in GPUs (why the idle GPUs left are unusable to the typical pods; mean over
seeds). The per-policy JSON
document of ``simulate --format json`` is :func:`result_document`.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import Field

from sits_observe.analytics.fragmentation.fgd.model import CAUSES
from sits_observe.domain.units import Unit
from sits_observe.errors import ConfigError
from sits_observe.lab.replay.engine.replay import PolicyResult, SimulationSettings, Spread, simulate
from sits_observe.lab.replay.extender import all_policy_names, choose_policies
from sits_observe.lab.replay.whatif_trace import Trace, trace_from_files, trace_from_store
from sits_observe.reports.result import Report, col, table_of
from sits_observe.reports.spec import ReportSpec
from sits_observe.reports.window import Window
from sits_observe.store import Store

#: The policies replayed when none are named: FGD and kube-scheduler without and with sits.
DEFAULT_POLICIES = ("fgd", "kube-default", "kube-sits")
#: The curve table keeps every this many arrived-load steps (1% each), and the last one.
CURVE_STEP = 5


class TieBreak(StrEnum):
    """How a replay breaks equal scores (:attr:`SimulationSettings.tie_break`)."""

    node_order = "node_order"
    random = "random"


class WhatIfQuery(SimulationSettings):
    """Settings of the ``whatif`` report (the replay's are ``simulate``'s)."""

    tie_break: TieBreak = Field(  # type: ignore[assignment]
        TieBreak.node_order, description=SimulationSettings.model_fields["tie_break"].description
    )
    policies: tuple[str, ...] = Field(
        DEFAULT_POLICIES,
        min_length=1,
        description=f"placement policies to replay, of {', '.join(all_policy_names())}",
    )
    seeds: int = Field(1, ge=1, le=100, description="replays per policy (seeds 0 .. N-1)")
    trace_nodes: Path | None = Field(
        None, description="node list CSV of a trace (Alibaba v2023 schema) instead of the store"
    )
    trace_pods: Path | None = Field(
        None, description="pod list CSV of a trace (Alibaba v2023 schema), with --trace-nodes"
    )
    scheduler_config: Path | None = Field(
        None,
        description="KubeSchedulerConfiguration whose extenders kube-sits* call "
        "(default: deploy/scheduler-config.yaml)",
    )


def is_trace(query: WhatIfQuery) -> bool:
    """Whether ``query`` names trace files (then no store is read)."""
    return query.trace_nodes is not None or query.trace_pods is not None


_POLICIES = (
    col("policy", "policy"),
    col("alloc_ratio", "alloc", Unit.ratio),
    col("unallocated_gpus", "unalloc GPUs", Unit.number),
    col("first_failure_arrived", "1st fail", Unit.ratio),
    col("seeds_with_failure", "failed seeds", Unit.integer, wide=True),
    col("pods_arrived", "pods", Unit.number, wide=True),
    col("pods_failed", "pods failed", Unit.number, wide=True),
    col("pods_per_s", "pods/s", Unit.number, wide=True),
)
_CURVE = (
    col("policy", "policy"),
    col("arrived_ratio", "arrived", Unit.ratio),
    col("alloc_ratio", "alloc", Unit.ratio),
    col("frag_ratio", "frag", Unit.ratio),
    col("frag_amount_ratio", "frag amount", Unit.ratio, wide=True),
)
_CAUSES = (col("policy", "policy"), *(col(str(c), str(c), Unit.number) for c in CAUSES))
_FAILED = (
    col("policy", "policy"),
    col("kind", "pod kind"),
    col("pods", "pods failed", Unit.number),
    col("gpus", "GPUs requested", Unit.number),
)


def build(store: Store, window: Window, query: WhatIfQuery) -> Report:
    """The ``whatif`` report: the trace replayed with every policy and seed."""
    trace = _trace(store, window, query)
    if len(trace.pods) == 0:
        raise ConfigError("the trace has no pods to replay")
    chosen = choose_policies(list(query.policies), trace.pods, query.scheduler_config)
    sim = SimulationSettings.model_validate(
        query.model_dump(mode="json", include=set(SimulationSettings.model_fields))
    )
    results = simulate(trace.nodes, trace.pods, chosen, list(range(query.seeds)), sim)
    documents = [result_document(r, sim, trace.total_gpus) for r in results]
    rows = [_row(d) for d in documents]
    curve = [
        {
            "policy": d["policy"],
            "arrived_ratio": p["arrived"],
            "alloc_ratio": p["alloc_ratio"],
            "frag_ratio": p["frag_ratio"],
            "frag_amount_ratio": p["frag_amount_ratio"],
        }
        for d in documents
        for i, p in enumerate(d["curve"])
        if i % CURVE_STEP == 0 or i == len(d["curve"]) - 1
    ]
    main = table_of("policies", f"Replay of {trace.label}", rows, _POLICIES)
    causes = [
        {"policy": d["policy"], **{c: s["mean"] for c, s in d["frag_by_cause_gpus"].items()}}
        for d in documents
    ]
    failed = [
        {
            "policy": d["policy"],
            "kind": kind,
            "pods": pods["mean"],
            "gpus": d["failed_gpus_by_kind"][kind]["mean"],
        }
        for d in documents
        for kind, pods in d["failed_pods_by_kind"].items()
    ]
    others = (
        table_of("curve", "Allocation and fragmentation by arrived load", curve, _CURVE),
        table_of("causes", "F(M) at the end by cause, GPUs", causes, _CAUSES),
        table_of("failed", "Pods that failed by kind", failed, _FAILED),
    )
    notes = (
        ("trace files: the window does not apply (no store is read)",) if is_trace(query) else ()
    )
    facts = {
        "trace": trace.label,
        "nodes": len(trace.nodes),
        "gpus": trace.total_gpus,
        "pods": len(trace.pods),
        "replays": sum(len(r.replays) for r in results),
        "seeds": query.seeds,
        "load_ratio": sim.load_ratio,
        "tie_break": sim.tie_break,
        "memory_filter": sim.memory_filter,
    }
    return Report("whatif", window, main, others, notes, facts)


def _trace(store: Store, window: Window, query: WhatIfQuery) -> Trace:
    if not is_trace(query):
        return trace_from_store(store, window)
    if query.trace_nodes is None or query.trace_pods is None:
        raise ConfigError("a trace needs both --trace-nodes NODE_CSV and --trace-pods POD_CSV")
    return trace_from_files(query.trace_nodes, query.trace_pods)


def _row(doc: dict[str, Any]) -> dict[str, Any]:
    def mean(key: str) -> float | None:
        spread = doc[key]
        return None if spread is None else float(spread["mean"])

    return {
        "policy": doc["policy"],
        "alloc_ratio": mean("alloc_ratio"),
        "unallocated_gpus": mean("unallocated_gpus"),
        "first_failure_arrived": mean("first_failure_arrived"),
        "seeds_with_failure": doc["seeds_with_failure"],
        "pods_arrived": mean("pods_arrived"),
        "pods_failed": mean("pods_failed"),
        "pods_per_s": doc["pods_per_s"],
    }


def result_document(
    result: PolicyResult, settings: SimulationSettings, total_gpus: int, workload: str = "default"
) -> dict[str, Any]:
    """The JSON document of one policy (keys in docs/analytics/simulator.md)."""
    curve = []
    for i, arrived in enumerate(result.arrived_ratio):
        point: dict[str, float] = {"arrived": float(arrived)}
        for name in ("alloc_ratio", "frag_ratio", "frag_amount_ratio"):
            band = getattr(result, name)
            point[name] = float(band[0, i])
            point[f"{name}_min"] = float(band[1, i])
            point[f"{name}_max"] = float(band[2, i])
        curve.append(point)
    return {
        "policy": result.policy,
        "workload": workload,
        "seeds": list(result.seeds),
        "load_ratio": settings.load_ratio,
        "tie_break": settings.tie_break,
        "memory_filter": settings.memory_filter,
        "total_gpus": total_gpus,
        "curve": curve,
        "first_failure_arrived": _spread(result.first_failure_arrived),
        "seeds_with_failure": result.seeds_with_failure,
        "unallocated_gpus": _spread(result.unallocated_gpus),
        "alloc_ratio": _spread(result.final_alloc_ratio),
        "pods_arrived": _spread(Spread.of([r.pods_arrived for r in result.replays])),
        "pods_failed": _spread(Spread.of([r.pods_failed for r in result.replays])),
        "pods_per_s": result.pods_per_s,
        "frag_by_cause_gpus": {c: _spread(v) for c, v in result.frag_by_cause_gpus.items()},
        "failed_pods_by_kind": {k: _spread(v) for k, v in result.failed_pods_by_kind.items()},
        "failed_gpus_by_kind": {k: _spread(v) for k, v in result.failed_gpus_by_kind.items()},
    }


def _spread(spread: Spread | None) -> dict[str, float] | None:
    if spread is None:
        return None
    return {"mean": spread.mean, "min": spread.min, "max": spread.max}


SPEC = ReportSpec(
    name="whatif",
    summary="What-if scheduling: replay the live cluster of the window (or a trace) with "
    "placement policies, kube-scheduler with and without the sits extender among them.",
    settings=WhatIfQuery,
    reads=("nodes", "pods"),
    build=build,
    local_files=("trace_nodes", "trace_pods", "scheduler_config"),
    offline=is_trace,
)
