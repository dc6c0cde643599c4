"""The node and pod inventory read back from kube-state-metrics series in a PromQL store.

This is the inventory half of the large-fleet path (docs/scaling.md): kube-state-metrics
(KSM) is scraped into VictoriaMetrics / Prometheus / Thanos / Mimir, and the FGD measure reads
its series here instead of the ``nodes`` / ``pods`` tables of a DuckDB file. The output tables
have those tables' columns and units (:data:`~sits_observe.domain.tables.NODES` /
``PODS``), so :func:`sits_observe.analytics.fragmentation.fgd_live.live_cluster_of` builds the same
state from either.

Series (names and labels as kube-state-metrics v2 writes them, docs/metrics/cluster/
node-metrics.md and docs/metrics/workload/pod-metrics.md; a resource name is sanitised, every
character outside ``[a-zA-Z0-9_]`` becoming ``_``: ``nvidia.com/gpu`` is ``nvidia_com_gpu``):

- nodes: ``kube_node_status_allocatable{node, resource="cpu"|"memory"|"nvidia_com_gpu"}``
  (cores, bytes, devices), ``kube_node_status_condition{condition="Ready", status}`` (the
  status whose value is 1; ``unknown`` counts as not Ready, as the inventory collector counts
  it), ``kube_node_labels{label_nvidia_com_gpu_product, label_nvidia_com_gpu_memory}`` (only
  when KSM runs with ``--metric-labels-allowlist=nodes=[nvidia.com/gpu.product,...]``;
  without it every node's product is unknown);
- pods: ``kube_pod_info{uid, namespace, pod, node, created_by_kind, created_by_name,
  priority_class}`` (``node=""`` = not bound), ``kube_pod_status_phase{phase}`` (the phase
  whose value is 1), ``kube_pod_status_qos_class{qos_class}`` (the class whose value is 1;
  KSM v2.8 and later, from ``status.qosClass``), ``kube_pod_container_resource_requests`` and
  ``kube_pod_init_container_resource_requests{container, resource}`` (KSM exports
  ``spec.containers[].resources.requests``, which the API server has defaulted from the
  limits), ``kube_pod_init_container_info{restart_policy}`` (sidecars), and, where KSM was
  told to export them, ``kube_pod_nodeselectors{nodeselector_nvidia_com_gpu_product}``
  (opt-in family) and ``kube_pod_annotations{annotation_alibabacloud_com_gpu_milli}``
  (annotations allowlist).

Rules, as the inventory collector's (:mod:`sits_observe.collectors.kube.pods`,
:mod:`~sits_observe.collectors.kube.gpu`):

- a pod's request per resource is ``max(sum(app) + sum(sidecars), max(init) + sum(sidecars))``
  (KSM gives no container order, so every sidecar counts during every init container: exact
  when no init container requests more than the app containers, or when the sidecars come
  first); CPU is rounded to the milli (KSM writes ``MilliValue / 1000``), devices and bytes
  to integers;
- the share of each GPU (``gpu_milli``): the ``alibabacloud.com/gpu-milli`` annotation if
  exported, else HAMi's ``nvidia.com/gpucores`` / ``nvidia.com/gpumem-percentage`` requests
  (the larger, percent of the device, rounded up to the milli; extended resources, so KSM
  exports them), else a whole GPU; a share with several GPUs counts as whole GPUs;
- allowed GPU products (``gpu_types``): the node selector only; required node affinity is not
  in any KSM family, so a pod pinned by affinity reads as "any product";
- assigned devices (``gpu_uuids``) are not read: shares are placed by the default rules.

Times. The **snapshot** is each KSM target's newest scrape in ``[until - lookback_s, until)``
(and not before ``since``): every sample of one scrape carries the scrape's time, so a node
or ``kube_pod_info`` series belongs to the snapshot when its newest raw sample has the newest
time of its target (``job``, ``instance``); a deleted pod's series ends at an earlier scrape.
The **workload** is every pod with a ``kube_pod_info`` series in ``[since, until)``, with the
newest value of each of its series (``last_over_time``: one point per series, not every
scrape; a request series whose ``node`` label changed when the pod was bound is taken once,
the larger value); the snapshot's pods take the same values (the newest scrape's, for a pod
it still serves) and the phase whose series is 1 at its newest sample in the look-back. The
workload's rows carry no phase.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pyarrow as pa

from sits_observe.domain.tables import NODES, PODS, conform
from sits_observe.errors import StoreError
from sits_observe.store.promql.client import PromQLClient, PromSeries

_MS = timedelta(milliseconds=1)
_MIB = 1024 * 1024
_MILLI_PER_GPU = 1000

ALLOCATABLE = "kube_node_status_allocatable"
CONDITION = "kube_node_status_condition"
NODE_LABELS = "kube_node_labels"
POD_INFO = "kube_pod_info"
POD_PHASE = "kube_pod_status_phase"
POD_QOS = "kube_pod_status_qos_class"
REQUESTS = "kube_pod_container_resource_requests"
INIT_REQUESTS = "kube_pod_init_container_resource_requests"
INIT_INFO = "kube_pod_init_container_info"
NODE_SELECTORS = "kube_pod_nodeselectors"
ANNOTATIONS = "kube_pod_annotations"

#: KSM's sanitised resource names (SanitizeLabelName of the Kubernetes names).
GPU = "nvidia_com_gpu"
HAMI_SHARES = ("nvidia_com_gpucores", "nvidia_com_gpumem_percentage")
_RESOURCES = ("cpu", "memory", GPU, *HAMI_SHARES)
PRODUCT_LABEL = "label_nvidia_com_gpu_product"
MEMORY_LABEL = "label_nvidia_com_gpu_memory"
SELECTOR_LABEL = "nodeselector_nvidia_com_gpu_product"
MILLI_ANNOTATION = "annotation_alibabacloud_com_gpu_milli"

#: The families of one snapshot, with the extra matchers that keep only what is used.
_SNAPSHOT: tuple[tuple[str, str], ...] = (
    (ALLOCATABLE, 'resource=~"cpu|memory|nvidia_com_gpu"'),
    (CONDITION, 'condition="Ready"'),
    (NODE_LABELS, ""),
    (POD_INFO, ""),
    (POD_PHASE, ""),
    (POD_QOS, ""),
    (REQUESTS, f'resource=~"{"|".join(_RESOURCES)}"'),
    (INIT_REQUESTS, f'resource=~"{"|".join(_RESOURCES)}"'),
    (INIT_INFO, 'restart_policy="Always"'),
    (NODE_SELECTORS, ""),
    (ANNOTATIONS, ""),
)
_NODE_FAMILIES = (ALLOCATABLE, CONDITION, NODE_LABELS)
_RAW = (*_NODE_FAMILIES, POD_INFO)
_POD_SERIES = (POD_INFO, POD_QOS, REQUESTS, INIT_REQUESTS, INIT_INFO, NODE_SELECTORS, ANNOTATIONS)


@dataclass(frozen=True)
class KsmInventory:
    """The inventory read from KSM series: tables in the ``nodes`` / ``pods`` shapes.

    ``nodes`` / ``pods``: the snapshot (``ts`` = ``nodes_at`` / ``pods_at``, the newest scrape
    time; None and empty tables when no series was found); ``workload``: one ``pods`` row per
    pod seen in the window (``ts`` = ``pods_at``); ``absent``: the optional families that had
    no series (what the reader should know is missing).
    """

    nodes: pa.Table
    nodes_at: datetime | None
    pods: pa.Table
    pods_at: datetime | None
    workload: pa.Table
    absent: tuple[str, ...]


class PromQLKubeSource:
    """The inventory from kube-state-metrics series in a Prometheus-compatible store.

    ``matchers`` are extra PromQL label matchers on every selector (e.g.
    ``job="kube-state-metrics"``).
    """

    name = "promql"

    def __init__(self, client: PromQLClient, *, matchers: str = "") -> None:
        self._client = client
        self._matchers = matchers

    def inventory(
        self, since: datetime | None, until: datetime, *, lookback_s: float
    ) -> KsmInventory:
        """The snapshot at the window's end and the workload of ``[since, until)`` (naive =
        UTC; ``since`` None = the snapshot's look-back only); see the module docstring."""
        if lookback_s <= 0:
            raise StoreError(f"look-back {lookback_s} s must be positive")
        start = until - timedelta(seconds=lookback_s)
        if since is not None:
            start = max(start, since)
        if until <= start:
            raise StoreError(f"empty time range: since {start} is not before until {until}")
        # Raw samples (with their times) only for the node families and kube_pod_info, which
        # say what the newest scrape holds.
        raw = {f: self._raw(f, extra, start, until) for f, extra in _SNAPSHOT if f in _RAW}
        latest = _newest_scrape(raw)
        present = {_pod_key(p) for p in latest[POD_INFO]}
        # A pod's other series give their newest value in the window: for a pod the newest
        # scrape still serves, that scrape's value. One read serves the snapshot and M.
        seen_from = start if since is None else since
        window = {f: self._last(f, extra, seen_from, until) for f, extra in _SNAPSHOT
                  if f in _POD_SERIES}  # fmt: skip
        phase = self._last(POD_PHASE, "", start, until, current=True)
        for family, points in (*window.items(), (POD_PHASE, phase)):
            if family != POD_INFO:
                latest[family] = [p for p in points if _pod_key(p) in present]
        nodes_at = _newest(latest, _NODE_FAMILIES)
        pods_at = _newest(latest, (POD_INFO,))
        nodes = _node_table(latest, nodes_at)
        pods = _pod_table(_Pods(latest), pods_at)
        workload = _pod_table(_Pods(window), pods_at)
        optional = (NODE_LABELS, INIT_REQUESTS, NODE_SELECTORS, ANNOTATIONS)
        absent = tuple(f for f in optional if not raw.get(f) and not window.get(f))
        return KsmInventory(nodes, nodes_at, pods, pods_at, workload, absent)

    def _selector(self, family: str, extra: str) -> str:
        matchers = [m for m in (extra, self._matchers) if m]
        return f"{family}{{{','.join(matchers)}}}"

    def _raw(self, family: str, extra: str, start: datetime, until: datetime) -> list[_Point]:
        """The newest raw sample of each series in ``[start, until)``, with its time."""
        span_ms = max(1, round((until - start) / _MS))
        series = self._client.query(f"{self._selector(family, extra)}[{span_ms}ms]", until - _MS)
        return [_Point(s.labels, round(float(s.t_s[-1]) * 1000), float(s.values[-1]))
                for s in series if s.values.size]  # fmt: skip

    def _last(
        self, family: str, extra: str, start: datetime, until: datetime, *, current: bool = False
    ) -> list[_Point]:
        """The newest value of each series in ``[start, until)`` (time unknown: -1); with
        ``current`` only the series whose newest value is 1 (the phase a pod is in)."""
        span_ms = max(1, round((until - start) / _MS))
        expr = f"last_over_time({self._selector(family, extra)}[{span_ms}ms])"
        expr += " == 1" if current else ""
        return [_Point(s.labels, -1, float(s.values[-1])) for s in _values(
            self._client.query(expr, until - _MS))]  # fmt: skip


def _values(series: Iterable[PromSeries]) -> list[PromSeries]:
    return [s for s in series if s.values.size and math.isfinite(float(s.values[-1]))]


@dataclass(frozen=True)
class _Point:
    """One series' newest sample: labels, time (Unix ms) and value."""

    labels: Mapping[str, str]
    t_ms: int
    value: float

    def label(self, name: str) -> str | None:
        return self.labels.get(name) or None


def _target(labels: Mapping[str, str]) -> tuple[str, str]:
    return labels.get("job", ""), labels.get("instance", "")


def _newest_scrape(snapshot: Mapping[str, list[_Point]]) -> dict[str, list[_Point]]:
    """Per family, the series whose newest sample is their target's newest scrape."""
    newest: dict[tuple[str, str], int] = {}
    for points in snapshot.values():
        for p in points:
            key = _target(p.labels)
            newest[key] = max(newest.get(key, p.t_ms), p.t_ms)
    return {
        family: [p for p in points if p.t_ms == newest[_target(p.labels)]]
        for family, points in snapshot.items()
    }


def _newest(latest: Mapping[str, list[_Point]], families: Iterable[str]) -> datetime | None:
    times = [p.t_ms for f in families for p in latest[f]]
    if not times:
        return None
    return datetime.fromtimestamp(max(times) / 1000, UTC).replace(tzinfo=None)


# -- nodes ---------------------------------------------------------------------------------


def _node_table(latest: Mapping[str, list[_Point]], at: datetime | None) -> pa.Table:
    rows: dict[str, dict[str, object]] = {}

    def row(p: _Point) -> dict[str, object] | None:
        name = p.label("node")
        if name is None:
            return None
        return rows.setdefault(name, {"ts": at, "node": name, "gpu_allocatable": 0})

    for p in latest[ALLOCATABLE]:
        r = row(p)
        resource = p.label("resource")
        if r is None or not math.isfinite(p.value):
            continue
        if resource == "cpu":
            r["cpu_allocatable_milli"] = round(p.value * 1000)
        elif resource == "memory":
            r["memory_allocatable_bytes"] = round(p.value)
        elif resource == GPU:
            r["gpu_allocatable"] = round(p.value)
    for p in latest[CONDITION]:
        r = row(p)
        if r is not None and p.value == 1:
            r["ready"] = p.label("status") == "true"
    for p in latest[NODE_LABELS]:
        r = row(p)
        if r is None:
            continue
        r["gpu_product"] = p.label(PRODUCT_LABEL)
        memory = p.label(MEMORY_LABEL)
        if memory is not None and memory.isdigit():
            r["gpu_memory_bytes"] = int(memory) * _MIB
    return _table(NODES.schema, list(rows.values()), "nodes")


# -- pods ----------------------------------------------------------------------------------


class _Pods:
    """The pod families of one read, grouped by pod (UID, else namespace/name)."""

    def __init__(self, families: Mapping[str, list[_Point]]) -> None:
        def of(family: str) -> list[_Point]:
            return families.get(family, [])

        self.info: dict[str, _Point] = {}
        for p in of(POD_INFO):
            self.info.setdefault(_pod_key(p), p)
        self.phase = {_pod_key(p): p.label("phase") for p in of(POD_PHASE) if p.value == 1}
        # A pod's QoS class never changes (the API server rejects it), so its newest value
        # in the window is the class.
        self.qos = {_pod_key(p): p.label("qos_class") for p in of(POD_QOS) if p.value == 1}
        self.app = _per_container(of(REQUESTS))
        self.init = _per_container(of(INIT_REQUESTS))
        self.sidecars = {(_pod_key(p), p.label("container")) for p in of(INIT_INFO)}
        self.selector = {_pod_key(p): p.label(SELECTOR_LABEL) for p in of(NODE_SELECTORS)}
        self.milli = {_pod_key(p): p.label(MILLI_ANNOTATION) for p in of(ANNOTATIONS)}


def _pod_key(p: _Point) -> str:
    return p.label("uid") or f"{p.label('namespace')}/{p.label('pod')}"


def _per_container(points: list[_Point]) -> dict[str, dict[tuple[str, str], float]]:
    """pod -> {(container, resource) -> request}; of two series of one container (its
    ``node`` label changed at binding) the larger."""
    out: dict[str, dict[tuple[str, str], float]] = defaultdict(dict)
    for p in points:
        if not math.isfinite(p.value):
            continue
        key = (p.label("container") or "", p.label("resource") or "")
        requests = out[_pod_key(p)]
        requests[key] = max(requests.get(key, p.value), p.value)
    return out


def _scaled(resource: str, value: float) -> int:
    """One container's request in the table's unit: milli-CPU, else an integer."""
    return round(value * 1000) if resource == "cpu" else round(value)


def _requests(pods: _Pods, key: str) -> dict[str, int]:
    """The pod's effective request per resource (module docstring)."""
    app: dict[str, int] = defaultdict(int)
    for (_, resource), value in pods.app.get(key, {}).items():
        app[resource] += _scaled(resource, value)
    sidecars: dict[str, int] = defaultdict(int)
    init_peak: dict[str, int] = defaultdict(int)
    for (container, resource), value in pods.init.get(key, {}).items():
        if (key, container) in pods.sidecars:
            sidecars[resource] += _scaled(resource, value)
        else:
            init_peak[resource] = max(init_peak[resource], _scaled(resource, value))
    return {
        r: max(app[r] + sidecars[r], init_peak[r] + sidecars[r])
        for r in set(app) | set(init_peak) | set(sidecars)
    }


def _share(pods: _Pods, key: str, num_gpu: int) -> int:
    """Milli of each GPU (module docstring)."""
    raw = pods.milli.get(key)
    milli = _MILLI_PER_GPU
    if raw is not None and raw.strip().isdigit() and 1 <= int(raw) <= _MILLI_PER_GPU:
        milli = int(raw)
    else:
        percent = max(
            (v for (_, r), v in pods.app.get(key, {}).items() if r in HAMI_SHARES), default=0.0
        )
        if 0 < percent < 100:
            milli = math.ceil(round(percent * 10, 6))
    return milli if num_gpu == 1 else _MILLI_PER_GPU


def _pod_table(pods: _Pods, at: datetime | None) -> pa.Table:
    rows: list[dict[str, object]] = []
    for key, info in sorted(pods.info.items()):
        requests = _requests(pods, key)
        gpus = requests.get(GPU, 0)
        product = pods.selector.get(key)
        rows.append(
            {
                "ts": at,
                "pod_uid": info.label("uid"),
                "namespace": info.label("namespace"),
                "pod": info.label("pod"),
                "node": info.label("node"),
                "phase": pods.phase.get(key),
                "qos_class": pods.qos.get(key),
                "owner_kind": info.label("created_by_kind"),
                "owner_name": info.label("created_by_name"),
                "priority_class": info.label("priority_class"),
                "gpu_request": gpus,
                "cpu_request_milli": requests.get("cpu", 0),
                "memory_request_bytes": requests.get("memory", 0),
                "gpu_milli": _share(pods, key, gpus) if gpus > 0 else None,
                "gpu_types": product if gpus > 0 and product else None,
            }
        )
    return _table(PODS.schema, rows, "pods")


def _table(schema: pa.Schema, rows: list[dict[str, object]], name: str) -> pa.Table:
    return conform(name, pa.Table.from_pylist(rows, schema=schema))
