"""Where the extender's cluster view reads from: the seam, and its DuckDB implementation.

:func:`sits_observe.control.extender.clusterview.view.build_view` turns four reads into numpy
arrays; a :class:`ViewSource` makes them:

- ``snapshot_times(now)``: the times of the newest node and pod inventory snapshots (the
  view re-reads its inventory only when they change);
- ``inventory(...)``: the FGD cluster state and index, the node labels the view reads
  (per-GPU memory, the topology overrides), the bound pods and each GPU index's UUID;
- ``gpu_memory(...)``: the latest sample of each whole GPU, ranked;
- ``slow_signals(...)``: interference per node, measured memory needs, measured topology.

:class:`DuckViewSource` reads the service's DuckDB store (the SQL the view has always run);
``sits_observe.control.extender.clusterview.source_promql.PromQLViewSource`` reads
kube-state-metrics and dcgm-exporter series from a Prometheus-compatible store, so the extender
needs no DuckDB data (docs/extender.md, "Without the DuckDB file"). The label rules and the state of
a cluster without pods are here, once, for both.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Protocol

import pyarrow as pa

from sits_observe.analytics.fragmentation.fgd.cluster import ClusterState
from sits_observe.analytics.fragmentation.fgd.index import FragmentationIndex
from sits_observe.analytics.fragmentation.fgd.workload import typical_pods
from sits_observe.analytics.fragmentation.fgd_live import live_cluster
from sits_observe.control.extender.clusterview.slow import SlowSignals, slow_signals
from sits_observe.control.extender.nodes import bound_pods, gpu_uuids_by_index
from sits_observe.domain.times import utc_naive
from sits_observe.store import Store

if TYPE_CHECKING:
    from sits_observe.control.extender.clusterview.view_settings import ViewSettings

#: Node labels (ours) that override the inferred GPU topology.
INTERCONNECT_LABEL = "sits.io/gpu-interconnect"
GPUS_PER_NUMA_LABEL = "sits.io/gpus-per-numa"
#: The warning of a view whose store has no pod snapshot.
NO_PODS = "no pods in the store: no FGD target workload"


@dataclass(frozen=True, eq=False)
class InventoryReads:
    """What one inventory read gives the view (the fields of ``Inventory`` a source fills).

    ``gpu_memory_label_bytes``: the per-GPU memory label by node; ``interconnect`` (True =
    NVLink) and ``gpus_per_numa``: the topology label overrides by node; ``gpu_uuids``: per
    row of ``state``, the UUID of each GPU index ("" = not sampled).
    """

    state: ClusterState
    fgd: FragmentationIndex | None
    warnings: tuple[str, ...]
    gpu_memory_label_bytes: Mapping[str, int]
    interconnect: Mapping[str, bool]
    gpus_per_numa: Mapping[str, int]
    bound_pods: frozenset[tuple[str, str]]
    gpu_uuids: tuple[tuple[str, ...], ...]


class ViewSource(Protocol):
    """The reads behind one view (module docstring); times are naive UTC."""

    name: str
    #: The warning of a view built before the first inventory.
    no_inventory: str

    def snapshot_times(self, now: datetime) -> tuple[datetime | None, datetime | None]:
        """``(nodes_at, pods_at)`` of the newest inventory (``nodes_at`` None: no inventory;
        ``pods_at`` None: no pod)."""
        ...

    def inventory(
        self,
        now: datetime,
        settings: ViewSettings,
        nodes_at: datetime,
        pods_at: datetime | None,
    ) -> InventoryReads:
        """The inventory of the snapshots at ``nodes_at`` / ``pods_at``."""
        ...

    def gpu_memory(self, now: datetime, window_s: float) -> pa.Table:
        """The latest sample of each whole GPU in the ``window_s`` before ``now``: columns
        ``node``, ``free`` and ``total`` (bytes, NULL = not sampled) and ``rank`` (0 first:
        GPUs without a pod, then the most free memory, then by UUID)."""
        ...

    def slow_signals(self, now: datetime, settings: ViewSettings) -> SlowSignals:
        """Interference, measured memory needs and topology over ``slow_window_s``."""
        ...

    def close(self) -> None:
        """Release what the reads hold open (an HTTP client); no view is built after."""
        ...


class DuckViewSource:
    """The view's reads from the service's DuckDB store (``nodes`` / ``pods`` snapshots and
    ``gpu_samples``, ``numa_samples``, ``gpu_topology`` / ``gpu_links``)."""

    name = "duckdb"
    no_inventory = "no node inventory in the store yet"

    def __init__(self, store: Store) -> None:
        self.store = store

    def close(self) -> None:
        """Nothing to release: the store belongs to the service (:class:`ViewSource`)."""

    def snapshot_times(self, now: datetime) -> tuple[datetime | None, datetime | None]:
        """``(nodes_at, pods_at)`` of the newest snapshots (:class:`ViewSource`)."""
        nodes_at: datetime | None = self.store.scalar("SELECT max(ts) FROM node_snapshots")
        if nodes_at is None:
            return None, None
        pods_at: datetime | None = self.store.scalar("SELECT max(ts) FROM pod_snapshots")
        return nodes_at, pods_at

    def inventory(
        self,
        now: datetime,
        settings: ViewSettings,
        nodes_at: datetime,
        pods_at: datetime | None,
    ) -> InventoryReads:
        """The inventory of the snapshots (:class:`ViewSource`)."""
        store = self.store
        if pods_at is None:
            rows = store.query(
                "SELECT node, coalesce(gpu_allocatable, 0) AS gpus, gpu_product, "
                "coalesce(cpu_allocatable_milli, 0) AS cpu FROM nodes "
                "WHERE ts = ? AND ready IS NOT false AND node IS NOT NULL ORDER BY node",
                [nodes_at],
            ).to_pylist()
            state, fgd = state_without_pods(rows), None
            warnings: tuple[str, ...] = (NO_PODS,)
        else:
            live = live_cluster(store, since_s=settings.workload_window_s)
            state, warnings = live.state, live.warnings
            fgd = FragmentationIndex(state, typical_pods(live.shapes))
        rows = store.query(
            "SELECT node, gpu_memory_bytes, labels_json FROM nodes WHERE ts = ?", [nodes_at]
        ).to_pylist()
        labels = NodeLabels.of(
            (str(r["node"]), r["gpu_memory_bytes"], _labels(r["labels_json"])) for r in rows
        )
        uuids = gpu_uuids_by_index(
            store,
            state.node_names,
            state.gpu_count,
            nodes_at=nodes_at,
            window_s=settings.gpu_sample_window_s,
        )
        return InventoryReads(
            state,
            fgd,
            warnings,
            labels.gpu_memory_bytes,
            labels.interconnect,
            labels.gpus_per_numa,
            bound_pods(store, pods_at),
            uuids,
        )

    def gpu_memory(self, now: datetime, window_s: float) -> pa.Table:
        """The latest sample of each whole GPU, ranked (:class:`ViewSource`)."""
        since = utc_naive(now) - timedelta(seconds=window_s)
        return self.store.query(
            "WITH latest AS (SELECT node, gpu_uuid, arg_max(fb_free_bytes, ts) AS free, "
            "arg_max(fb_total_bytes, ts) AS total, arg_max(pod IS NOT NULL, ts) AS busy "
            "FROM gpu_samples WHERE ts >= ? AND mig_instance_id IS NULL AND node IS NOT NULL "
            "GROUP BY node, gpu_uuid) "
            "SELECT node, free, total, row_number() OVER (PARTITION BY node "
            "ORDER BY busy, free DESC NULLS LAST, gpu_uuid) - 1 AS rank FROM latest",
            [since],
        )

    def slow_signals(self, now: datetime, settings: ViewSettings) -> SlowSignals:
        """Interference, needs and topology from the store (:class:`ViewSource`)."""
        return slow_signals(
            self.store,
            now,
            window_s=settings.slow_window_s,
            interference=settings.interference,
        )


def state_without_pods(rows: Iterable[Mapping[str, object]]) -> ClusterState:
    """The cluster state of a store with no pod: every node empty (rows ``node``, ``gpus``,
    ``gpu_product``, ``cpu``, Ready nodes only, in node order)."""
    rows = list(rows)
    return ClusterState.empty(
        [str(r["node"]) for r in rows],
        [max(_int(r["cpu"]), 0) for r in rows],
        [max(_int(r["gpus"]), 0) for r in rows],
        [str(r["gpu_product"] or "unknown") for r in rows],
    )


def _int(value: object) -> int:
    return int(value) if isinstance(value, int | float) else 0


@dataclass(frozen=True)
class NodeLabels:
    """The node facts the view reads from labels (see :class:`InventoryReads`)."""

    gpu_memory_bytes: dict[str, int]
    interconnect: dict[str, bool]
    gpus_per_numa: dict[str, int]

    @classmethod
    def of(cls, nodes: Iterable[tuple[str, object, Mapping[str, str]]]) -> NodeLabels:
        """From ``(node, gpu_memory_bytes, labels)`` per node: ``sits.io/gpu-interconnect``
        = ``nvlink`` | ``pcie`` (case-insensitive), ``sits.io/gpus-per-numa`` a positive
        integer; other values are ignored."""
        out = cls({}, {}, {})
        for name, memory, labels in nodes:
            if isinstance(memory, int | float):
                out.gpu_memory_bytes[name] = int(memory)
            kind = labels.get(INTERCONNECT_LABEL, "").lower()
            if kind in ("nvlink", "pcie"):
                out.interconnect[name] = kind == "nvlink"
            raw = labels.get(GPUS_PER_NUMA_LABEL, "")
            if raw.isdigit() and int(raw) > 0:
                out.gpus_per_numa[name] = int(raw)
        return out


def _labels(text: object) -> dict[str, str]:
    if not isinstance(text, str) or (
        INTERCONNECT_LABEL not in text and GPUS_PER_NUMA_LABEL not in text
    ):
        return {}  # most nodes carry neither label: skip the JSON parse
    try:
        parsed = json.loads(text)
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in parsed.items()} if isinstance(parsed, dict) else {}
