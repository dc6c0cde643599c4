"""The live cluster for the FGD measure, from the inventory tables of the store.

- Nodes: the latest ``nodes`` snapshot (the rows with the largest ``ts``; the inventory
  collector stamps one snapshot with one time). Each node has ``gpu_allocatable`` GPUs of model
  ``gpu_product`` (``unknown`` when the label is missing) and ``cpu_allocatable_milli`` CPU.
  Nodes whose Ready condition is false are left out: their GPUs are not schedulable.
- Allocations: the latest ``pods`` snapshot; every pod bound to a node and not finished
  (phase not Succeeded / Failed) holds its ``cpu_request_milli`` and ``gpu_request`` whole GPUs
  on that node. Kubernetes' ``nvidia.com/gpu`` is an integer resource, so a pod holds whole
  GPUs (per-GPU share 1000); which GPU it holds is not in the inventory, and it does not
  matter for the measure (only how many are left), so the lowest free indices are taken.
  Sharing schemes (time-slicing, MPS, MIG) that advertise replicas are not modelled.
- Workload M: the distinct pods (by UID) seen in ``pods`` snapshots within ``since_s`` before
  the latest one, each with its latest request; their shapes are CPU, GPU count, 1000 milli
  per GPU, any GPU model (the inventory does not record node selectors).

Inconsistent rows (a pod on a node missing from the snapshot, requests above what is left)
never fail the measure: they are reported in :attr:`LiveCluster.warnings` and clamped.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import numpy as np

from sits_observe.analytics.fgd_cluster import ClusterState
from sits_observe.analytics.fgd_model import MILLI_PER_GPU, PodShape
from sits_observe.errors import StoreError
from sits_observe.store.duck import Store

#: Free CPU given to a node whose allocatable CPU is unknown: never the limiting resource.
UNKNOWN_CPU_MILLI = 1 << 40
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


def live_cluster(store: Store, *, since_s: float = 86_400.0) -> LiveCluster:
    """Build the cluster state and workload shapes from ``store`` (see the module docstring).

    Raises :class:`StoreError` when there is no ``nodes`` snapshot or no pod in the window.
    """
    nodes_at = store.scalar("SELECT max(ts) FROM nodes")
    if nodes_at is None:
        raise StoreError(
            "no node inventory in the store; run the inventory collector "
            "(sits-observe ingest k8s, or serve with the inventory loop) first"
        )
    warnings: list[str] = []
    state = _nodes(store, nodes_at, warnings)
    pods_at = store.scalar("SELECT max(ts) FROM pods")
    placed = 0 if pods_at is None else _allocate(store, state, pods_at, warnings)
    shapes = () if pods_at is None else _shapes(store, pods_at, since_s)
    if not shapes:
        raise StoreError(
            f"no pods in the store within {since_s:g} s of the latest snapshot; "
            "the workload M is built from recent pods (widen --since)"
        )
    return LiveCluster(state, shapes, nodes_at, pods_at, placed, tuple(warnings))


def _nodes(store: Store, at: datetime, warnings: list[str]) -> ClusterState:
    rows = store.query(
        "SELECT node, coalesce(gpu_allocatable, 0) AS gpus, gpu_product, "
        "cpu_allocatable_milli AS cpu, ready FROM nodes WHERE ts = ? ORDER BY node",
        [at],
    ).to_pylist()
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


def _allocate(store: Store, state: ClusterState, at: datetime, warnings: list[str]) -> int:
    rows = store.query(
        "SELECT namespace, pod, node, coalesce(gpu_request, 0) AS gpus, "
        "coalesce(cpu_request_milli, 0) AS cpu FROM pods "
        "WHERE ts = ? AND node IS NOT NULL AND coalesce(phase, '') NOT IN (?, ?) "
        "ORDER BY namespace, pod",
        [at, *_DONE_PHASES],
    ).to_pylist()
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
        want = int(r["gpus"])
        free_gpus = np.flatnonzero(state.gpu_free_milli[node] >= MILLI_PER_GPU)
        if want > free_gpus.size:
            warnings.append(f"{who}: requests {want} GPU(s), {free_gpus.size} left on {r['node']}")
        state.gpu_free_milli[node, free_gpus[:want]] = 0
        placed += 1
    return placed


def _shapes(store: Store, at: datetime, since_s: float) -> tuple[PodShape, ...]:
    start = at - timedelta(seconds=since_s)
    rows = store.query(
        "SELECT arg_max(coalesce(cpu_request_milli, 0), ts) AS cpu, "
        "arg_max(coalesce(gpu_request, 0), ts) AS gpus FROM pods "
        "WHERE ts >= ? AND ts <= ? "
        "GROUP BY coalesce(pod_uid, namespace || '/' || pod)",
        [start, at],
    ).to_pylist()
    shapes = []
    for r in rows:
        gpus = max(int(r["gpus"]), 0)
        cpu = max(int(r["cpu"]), 0)
        shapes.append(PodShape(cpu, gpus, MILLI_PER_GPU if gpus else 0))
    return tuple(shapes)
