"""The live cluster for the FGD measure, from the inventory tables of the store.

:func:`live_cluster` reads them from a DuckDB store; :func:`live_cluster_of` takes them as
tables in the ``nodes`` / ``pods`` shapes from any source (kube-state-metrics series read
through PromQL: :mod:`sits_observe.store.promql.kube`), so both give the same state for the
same rows.

- Nodes: the latest ``nodes`` snapshot (the rows with the largest ``ts``; the inventory
  collector stamps one snapshot with one time). Each node has ``gpu_allocatable`` GPUs of model
  ``gpu_product`` (``unknown`` when the label is missing) and ``cpu_allocatable_milli`` CPU.
  Nodes whose Ready condition is false are left out: their GPUs are not schedulable.
- Allocations: the latest ``pods`` snapshot; every pod bound to a node and not finished
  (phase not Succeeded / Failed) holds its ``cpu_request_milli`` and ``gpu_request`` devices
  with ``gpu_milli`` each (1000 = whole; NULL, as in rows stored before schema version 4, is
  a whole GPU). Which devices:

  * the ones it was assigned (``gpu_uuids``, HAMi's allocation annotation), each UUID turned
    into the node's GPU index by the latest ``gpu_samples`` row of that UUID on that node
    within ``devices_since_s`` before the node snapshot (whole GPUs only, not MIG instances;
    when two UUIDs claim one index, the more recently sampled one holds it). Assigned devices
    are taken first, for every pod, so a pod without one never lands on a device another pod
    is known to hold;
  * otherwise, and for a UUID that names no GPU of the node (a warning): a share takes the
    GPU with the least free share that still fits it (lowest index on ties), as the replay's
    default; whole GPUs take the lowest-indexed fully free ones.

  Sharing schemes that advertise replicas (time-slicing, MPS, MIG) are not modelled.
- Workload M: the distinct pods (by UID) seen in ``pods`` snapshots within ``since_s`` before
  the latest one, each with its latest request: CPU, GPU count, the share of each GPU and the
  allowed GPU products (``gpu_types``).
- A window: with ``until``, "latest" means the latest before ``until`` (rows at or after it
  are not read), and with ``since`` no row before ``since`` is read (snapshots, pods of M,
  device samples): the inventory at the end of a report's window (``since <= ts < until``).

The snapshots and the workload are read from the inventory's versions
(:mod:`sits_observe.store.inventory_reads`), never by expanding the ``pods`` view over the
window: the same rows, in time that grows with the pods and their versions, not with
pods x snapshots (a week of 2,000 pods is 40 M view rows, about 400,000 versions).
:func:`cluster_at` is the cluster at two given snapshot times (the ``fleet`` series reads one
per chart bucket).

Inconsistent rows (a pod on a node missing from the snapshot, requests above what is left, a
share outside 1-1000 or a partial share of several GPUs) never fail the measure: they are
reported in :attr:`LiveCluster.warnings`, clamped, or counted as whole GPUs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import pyarrow as pa

from sits_observe.analytics.fragmentation.fgd.cluster import ClusterState
from sits_observe.analytics.fragmentation.fgd.model import (
    MILLI_PER_GPU,
    PodShape,
    normalise_gpu_types,
)
from sits_observe.errors import StoreError
from sits_observe.store.duck import Store
from sits_observe.store.gpu_identity import identity_sql
from sits_observe.store.inventory_reads import latest_rows, rows_at

#: Free CPU given to a node whose allocatable CPU is unknown: never the limiting resource.
UNKNOWN_CPU_MILLI = 1 << 40
#: Seconds before the node snapshot in which a GPU's latest sample names its index. Device
#: indices change only when a node reboots or a GPU is replaced; an hour covers agents that
#: ship every few minutes without scanning a day of samples on every view rebuild.
DEVICES_SINCE_S = 3600.0
_DONE_PHASES = ("Succeeded", "Failed")


@dataclass(frozen=True)
class LiveCluster:
    """The cluster as the inventory last saw it, and the recent pods' shapes."""

    state: ClusterState
    shapes: tuple[PodShape, ...]
    nodes_at: datetime
    pods_at: datetime | None
    pods_placed: int
    warnings: tuple[str, ...]


@dataclass(frozen=True)
class _Holding:
    """What one bound pod holds on one node row: ``num_gpu`` devices of ``gpu_milli`` each."""

    who: str
    node: int
    node_name: str
    num_gpu: int
    gpu_milli: int
    uuids: tuple[str, ...]


def live_cluster(
    store: Store,
    *,
    since_s: float | None = 86_400.0,
    devices_since_s: float = DEVICES_SINCE_S,
    since: datetime | None = None,
    until: datetime | None = None,
) -> LiveCluster:
    """Build the cluster state and workload shapes from ``store`` (see the module docstring).

    ``since`` / ``until`` bound every row read (``since <= ts < until``, None = open);
    ``since_s`` None takes every pod of the window into M. Raises :class:`StoreError` when
    there is no ``nodes`` snapshot or no pod in the window.
    """
    bounds = _Bounds(since, until)
    nodes_at = store.scalar(f"SELECT max(ts) FROM node_snapshots WHERE {bounds.sql}", bounds.params)
    if nodes_at is None:
        raise StoreError(
            "no node inventory in the store; run the inventory collector "
            "(sits-observe ingest k8s, or serve with the inventory loop) first"
        )
    pods_at = store.scalar(f"SELECT max(ts) FROM pod_snapshots WHERE {bounds.sql}", bounds.params)
    workload = None
    if pods_at is not None:
        start = None if since_s is None else pods_at - timedelta(seconds=since_s)
        workload = _workload_rows(store, pods_at, bounds.clipped(start))
    live = cluster_at(
        store,
        nodes_at,
        pods_at,
        workload=workload,
        devices_since_s=devices_since_s,
        since=since,
        until=until,
    )
    if not live.shapes:
        within = "in the window" if since_s is None else f"within {since_s:g} s"
        raise StoreError(
            f"no pods in the store {within} of the latest snapshot; "
            "the workload M is built from recent pods (widen --since)"
        )
    return live


def cluster_at(
    store: Store,
    nodes_at: datetime,
    pods_at: datetime | None,
    *,
    workload: pa.Table | None = None,
    devices_since_s: float = DEVICES_SINCE_S,
    since: datetime | None = None,
    until: datetime | None = None,
) -> LiveCluster:
    """The live cluster of the node snapshot stored at ``nodes_at`` and the pod snapshot
    stored at ``pods_at`` (None = no pod placed), read from the inventory's versions
    (:func:`sits_observe.store.inventory_reads.rows_at`), with the workload M of ``workload``
    (:data:`POD_COLUMNS` rows, one per pod; None = no shapes). ``since`` / ``until`` bound the
    GPU samples that name assigned devices, as in :func:`live_cluster`. No error when the
    workload is empty; :func:`live_cluster` is this at the latest snapshots of a window."""
    nodes = rows_at(store, "nodes", nodes_at, NODE_COLUMNS)
    pods = None if pods_at is None else rows_at(store, "pods", pods_at, POD_COLUMNS)
    device_bounds = _Bounds(since, until).clipped(nodes_at - timedelta(seconds=devices_since_s))
    return live_cluster_of(
        InventoryTables(nodes, nodes_at, pods, pods_at, workload),
        devices=lambda: _device_rows(store, device_bounds),
        devices_since_s=devices_since_s,
    )


#: Columns of the ``nodes`` table the live cluster reads.
NODE_COLUMNS = ("node", "gpu_allocatable", "gpu_product", "cpu_allocatable_milli", "ready")
#: Columns of the ``pods`` table the live cluster reads (snapshot and workload alike).
POD_COLUMNS = (
    "pod_uid",
    "namespace",
    "pod",
    "node",
    "phase",
    "gpu_request",
    "gpu_milli",
    "gpu_uuids",
    "cpu_request_milli",
    "gpu_types",
)


@dataclass(frozen=True)
class InventoryTables:
    """One inventory in the ``nodes`` / ``pods`` table shapes (:data:`NODE_COLUMNS`,
    :data:`POD_COLUMNS`; other columns are ignored), from whichever store holds it.

    ``nodes``: the node snapshot taken at ``nodes_at``; ``pods``: the pod snapshot taken at
    ``pods_at`` (None = no pod snapshot); ``workload``: the pods of the workload M, one row
    per pod (its latest request; None = no pod).
    """

    nodes: pa.Table
    nodes_at: datetime
    pods: pa.Table | None = None
    pods_at: datetime | None = None
    workload: pa.Table | None = None


def live_cluster_of(
    tables: InventoryTables,
    *,
    devices: Callable[[], list[dict[str, Any]]] | None = None,
    devices_since_s: float = DEVICES_SINCE_S,
) -> LiveCluster:
    """The live cluster of ``tables`` by the rules of the module docstring (no error when the
    workload is empty: ``shapes`` is then empty).

    ``devices`` returns the GPU index rows (``node``, ``uuid``, ``idx``; newest sample first
    per node) that map assigned UUIDs to indices; it is called only when a pod names
    assigned GPUs. None = no device source: such pods are placed as if unassigned, with a
    warning per node (``devices_since_s`` is the look-back the warning names).
    """
    warnings: list[str] = []
    state = _nodes(tables.nodes, warnings)
    placed = 0
    shapes: tuple[PodShape, ...] = ()
    if tables.pods is not None:
        holdings, placed = _bound_pods(tables.pods, state, warnings)
        _place_gpus(state, holdings, devices=devices, since_s=devices_since_s, warnings=warnings)
    if tables.workload is not None:
        shapes = _shapes(tables.workload, warnings)
    return LiveCluster(state, shapes, tables.nodes_at, tables.pods_at, placed, tuple(warnings))


@dataclass(frozen=True)
class _Bounds:
    """``since <= ts < until`` as SQL (None = open at that end)."""

    since: datetime | None
    until: datetime | None

    @property
    def sql(self) -> str:
        return "(? IS NULL OR ts >= ?) AND (? IS NULL OR ts < ?)"

    @property
    def params(self) -> list[object]:
        return [self.since, self.since, self.until, self.until]

    def clipped(self, start: datetime | None) -> _Bounds:
        """These bounds, starting no earlier than ``start``."""
        if start is None or (self.since is not None and self.since >= start):
            return self
        return _Bounds(start, self.until)


def _sorted_rows(table: pa.Table, keys: Sequence[str]) -> list[dict[str, Any]]:
    """Rows of ``table`` in ``keys`` order (ascending, nulls last: DuckDB's ORDER BY)."""
    rows: list[dict[str, Any]] = table.sort_by([(k, "ascending") for k in keys]).to_pylist()
    return rows


def _nodes(table: pa.Table, warnings: list[str]) -> ClusterState:
    rows = [
        {"gpus": r["gpu_allocatable"] or 0, "cpu": r["cpu_allocatable_milli"], **r}
        for r in _sorted_rows(table, ["node"])
    ]
    kept = [r for r in rows if r["ready"] is not False and r["node"]]
    skipped = len(rows) - len(kept)
    if skipped:
        warnings.append(f"{skipped} node(s) not Ready or unnamed in the snapshot: left out")
    names, cpu, gpus, models = [], [], [], []
    for r in kept:
        names.append(str(r["node"]))
        gpus.append(max(int(r["gpus"]), 0))
        models.append(str(r["gpu_product"] or "unknown"))
        if r["cpu"] is None:
            warnings.append(f"node {r['node']}: allocatable CPU unknown, not treated as a limit")
            cpu.append(UNKNOWN_CPU_MILLI)
        else:
            cpu.append(max(int(r["cpu"]), 0))
    return ClusterState.empty(names, cpu, gpus, models)


def _share(num_gpu: int, gpu_milli: int | None) -> int | None:
    """The per-GPU share of a GPU pod's row; None when the row's share is impossible."""
    if gpu_milli is None:
        return MILLI_PER_GPU  # rows stored before schema version 4: whole GPUs
    if not 1 <= gpu_milli <= MILLI_PER_GPU or (num_gpu > 1 and gpu_milli < MILLI_PER_GPU):
        return None
    return int(gpu_milli)


def _bound_pods(
    table: pa.Table, state: ClusterState, warnings: list[str]
) -> tuple[list[_Holding], int]:
    """Take every bound pod's CPU; return the GPUs they hold (not yet placed) and the count."""
    rows = [
        {
            **r,
            "gpus": r["gpu_request"] or 0,
            "milli": r["gpu_milli"],
            "uuids": r["gpu_uuids"],
            "cpu": r["cpu_request_milli"] or 0,
        }
        for r in _sorted_rows(table, ["namespace", "pod"])
        if r["node"] is not None and (r["phase"] or "") not in _DONE_PHASES
    ]
    holdings: list[_Holding] = []
    placed = 0
    for r in rows:
        who = f"pod {r['namespace']}/{r['pod']}"
        try:
            node = state.node_index(str(r["node"]))
        except KeyError:
            warnings.append(f"{who}: node {r['node']} not in the node snapshot; ignored")
            continue
        cpu = int(r["cpu"])
        free_cpu = int(state.cpu_free_milli[node])
        if cpu > free_cpu:
            warnings.append(f"{who}: requests {cpu} milli-CPU, {free_cpu} left on {r['node']}")
        state.cpu_free_milli[node] = max(free_cpu - cpu, 0)
        placed += 1
        gpus = max(int(r["gpus"]), 0)
        if gpus:
            uuids = tuple(u for u in str(r["uuids"] or "").split(",") if u)
            milli = _share(gpus, r["milli"]) or MILLI_PER_GPU
            holdings.append(_Holding(who, node, str(r["node"]), gpus, milli, uuids))
    return holdings, placed


def _device_rows(store: Store, bounds: _Bounds) -> list[dict[str, Any]]:
    """Each GPU's latest identity from whole-GPU samples in ``bounds``
    (:mod:`sits_observe.store.gpu_identity`): node, uuid, idx, newest first per node."""
    rows: list[dict[str, Any]] = store.query(
        "SELECT node, gpu_uuid AS uuid, gpu_index AS idx, seen_at "
        f"FROM ({identity_sql(bounds.sql, whole_gpu=True)}) "
        "WHERE node IS NOT NULL AND gpu_index IS NOT NULL ORDER BY node, seen_at DESC, uuid",
        bounds.params,
    ).to_pylist()
    return rows


def _devices(rows: list[dict[str, Any]], state: ClusterState) -> dict[str, dict[str, int]]:
    """node -> {GPU UUID -> index} from :func:`_device_rows`' rows."""
    devices: dict[str, dict[str, int]] = {}
    for r in rows:
        name, index = str(r["node"]), int(r["idx"])
        try:
            node = state.node_index(name)
        except KeyError:
            continue
        known = devices.setdefault(name, {})
        # Newest first: an index already named belongs to the more recently sampled UUID.
        if 0 <= index < int(state.gpu_count[node]) and index not in known.values():
            known[str(r["uuid"])] = index
    return devices


def _place_gpus(
    state: ClusterState,
    holdings: list[_Holding],
    *,
    devices: Callable[[], list[dict[str, Any]]] | None,
    since_s: float,
    warnings: list[str],
) -> None:
    """Assigned devices first (every pod), then the rest by the default rules."""
    wanted = devices is not None and any(h.uuids for h in holdings)
    by_node = _devices(devices(), state) if wanted and devices is not None else {}
    unsampled: Counter[str] = Counter()
    rest: list[tuple[_Holding, int]] = []
    for h in holdings:
        known = by_node.get(h.node_name)
        if h.uuids and known is None:
            unsampled[h.node_name] += 1
        taken = 0 if known is None else _take_assigned(state, h, known, warnings)
        if taken < h.num_gpu:
            rest.append((h, h.num_gpu - taken))
    for name, count in sorted(unsampled.items()):
        warnings.append(
            f"node {name}: no GPU samples within {since_s:g} s of the inventory, so the assigned "
            f"GPUs of {count} pod(s) are unknown; placed as if unassigned"
        )
    for h, count in rest:
        _default(state, h, count, warnings)


def _take_assigned(
    state: ClusterState, h: _Holding, known: dict[str, int], warnings: list[str]
) -> int:
    """Take the devices of ``h`` that ``known`` (UUID -> index) names; returns how many."""
    taken = 0
    for uuid in h.uuids[: h.num_gpu]:
        index = known.get(uuid)
        if index is None:
            rule = "least-free" if h.gpu_milli < MILLI_PER_GPU else "lowest free"
            warnings.append(
                f"{h.who}: assigned GPU {uuid} is not one of {h.node_name}'s GPUs in recent "
                f"gpu_samples; placed on the {rule} GPU that fits"
            )
            continue
        free = int(state.gpu_free_milli[h.node, index])
        if free < h.gpu_milli:
            warnings.append(
                f"{h.who}: holds {h.gpu_milli} milli of GPU {uuid} (index {index}), "
                f"{free} left on {h.node_name}"
            )
        state.gpu_free_milli[h.node, index] = max(free - h.gpu_milli, 0)
        taken += 1
    return taken


def _default(state: ClusterState, h: _Holding, count: int, warnings: list[str]) -> None:
    """Place ``count`` devices of ``h`` whose assignment is unknown (module docstring)."""
    free = state.gpu_free_milli[h.node]  # a view: writes change the state
    if h.gpu_milli >= MILLI_PER_GPU:
        whole = np.flatnonzero(free >= MILLI_PER_GPU)
        if count > whole.size:
            warnings.append(f"{h.who}: requests {count} GPU(s), {whole.size} left on {h.node_name}")
        free[whole[:count]] = 0
        return
    fits = np.flatnonzero(free >= h.gpu_milli)
    if fits.size:
        gpu = int(fits[np.argmin(free[fits])])  # argmin: the first (lowest index) on ties
    else:
        warnings.append(
            f"{h.who}: requests 1 GPU(s) of {h.gpu_milli} milli, 0 fit on {h.node_name}"
        )
        gpu = int(np.argmax(free))
    free[gpu] = max(int(free[gpu]) - h.gpu_milli, 0)


def _workload_rows(store: Store, at: datetime, bounds: _Bounds) -> pa.Table:
    """Each pod's latest ``pods`` row in ``bounds`` up to ``at`` (the workload M), read from
    the versions: the pods seen in the window, not every snapshot's rows."""
    return latest_rows(
        store,
        "pods",
        POD_COLUMNS,
        key="coalesce(pod_uid, namespace || '/' || pod)",
        since=bounds.since,
        until=at + timedelta(microseconds=1),
    )


def _shapes(table: pa.Table, warnings: list[str]) -> tuple[PodShape, ...]:
    rows = [
        {
            "cpu": r["cpu_request_milli"] or 0,
            "gpus": r["gpu_request"] or 0,
            "milli": r["gpu_milli"],
            "types": r["gpu_types"],
        }
        for r in table.to_pylist()
    ]
    shapes = []
    impossible = 0
    for r in rows:
        gpus = max(int(r["gpus"]), 0)
        cpu = max(int(r["cpu"]), 0)
        if not gpus:
            shapes.append(PodShape(cpu, 0, 0))
            continue
        milli = _share(gpus, r["milli"])
        if milli is None:
            impossible += 1
        types = normalise_gpu_types(r["types"])
        shapes.append(PodShape(cpu, gpus, milli or MILLI_PER_GPU, types))
    if impossible:
        warnings.append(
            f"{impossible} pod row(s) with a GPU share outside 1-1000 milli, or a partial share "
            "of more than one GPU: counted as whole GPUs"
        )
    return tuple(shapes)
