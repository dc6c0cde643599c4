"""The scheduler extender's cluster view: the store's latest state as per-node numpy arrays.

kube-scheduler gives an extender a few milliseconds per call, so a call never reads the
store: :class:`sits_observe.control.extender.clusterview.cache.ViewCache` rebuilds an immutable
:class:`ClusterView` in a background thread at most every ``refresh_interval_s`` and calls
read whichever view is current (stale while revalidating). Only the very first call waits for
a build.

What a view holds, per node row (rows in the order of the FGD cluster state):

- allocation, from the latest ``nodes`` / ``pods`` snapshots through
  :func:`sits_observe.analytics.fragmentation.fgd_live.live_cluster` (the same state the
  fragmentation analytics use): allocatable and unallocated ``nvidia.com/gpu``, free CPU milli, GPU
  model, and the FGD index (per-node F_n(M) for the workload M of recently seen pods);
- GPU memory, from the latest ``gpu_samples`` row of each whole GPU (MIG instances are
  skipped: they are not ``nvidia.com/gpu``) within ``gpu_sample_window_s``: free bytes per
  GPU, ranked GPUs-without-a-pod first and then by free memory (the GPUs a new pod would get),
  their cumulative sums, and the per-GPU total. A node without samples falls back to its
  ``nvidia.com/gpu.memory`` label for its unallocated GPUs, else its memory is unknown;
- topology: NVLink or PCIe-only (label ``sits.io/gpu-interconnect`` = ``nvlink`` | ``pcie``,
  else the node's measured topology, :mod:`sits_observe.analytics.topology.gpu_links`, else the
  product's NVLink capacity in the interference settings' link table, unknown products count
  as PCIe), and GPUs per NUMA node (label ``sits.io/gpus-per-numa``, else measured, else half
  the GPUs on nodes with 4 or more, else all);
- slow signals, recomputed every ``slow_refresh_s`` over ``slow_window_s``: the node
  interference score (:mod:`sits_observe.analytics.topology.interference`) and each workload's
  measured GPU memory need (the largest per-GPU ``fb_used_bytes`` of its pods).

The reads behind these are a :class:`~sits_observe.control.extender.clusterview.source.ViewSource`:
the DuckDB store's tables (``DuckViewSource``), or, with ``promql_url``, kube-state-metrics and
dcgm-exporter series in a Prometheus-compatible store
(:mod:`sits_observe.control.extender.clusterview.source_promql`), which lacks the measured topology
and NUMA miss ratios (docs/extender.md, "Without the DuckDB file").

Units: bytes, milli-CPU, whole GPUs; times are UTC.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from sits_observe.analytics.fragmentation.fgd.cluster import ClusterState
from sits_observe.analytics.fragmentation.fgd.index import FragmentationIndex
from sits_observe.analytics.fragmentation.fgd.model import MILLI_PER_GPU
from sits_observe.analytics.topology.settings import InterferenceSettings, find_link_capacity
from sits_observe.control.extender.clusterview.slow import SlowSignals
from sits_observe.control.extender.clusterview.source import DuckViewSource, ViewSource
from sits_observe.control.extender.clusterview.view_settings import ViewSettings
from sits_observe.control.extender.nodes import tie_rank
from sits_observe.domain.arrow_numpy import float64_values, int64_values
from sits_observe.domain.times import utc_naive
from sits_observe.store import Store

if TYPE_CHECKING:
    from sits_observe.analytics.topology.gpu_links import NodeTopology

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

#: Columns per node when a node has no GPU samples and advertises many GPU replicas.
_MAX_COLUMNS = 16


@dataclass(frozen=True, eq=False)
class Inventory:
    """The part of a view that changes only with a new ``nodes`` or ``pods`` snapshot.

    ``interconnect`` and ``gpus_per_numa`` hold the topology *label overrides* by node name
    (``interconnect`` True = NVLink); ``gpu_memory_label_bytes`` the per-GPU memory labels.
    ``bound_pods`` are the ``(namespace, pod)`` the pods snapshot shows on a node (an assumed
    pod among them is accounted for by the snapshot); ``gpu_uuids`` the UUID of each GPU
    index per row ("" = not sampled); ``tie_rank`` the order that breaks equal ranked scores.
    """

    nodes_at: datetime | None
    pods_at: datetime | None
    state: ClusterState
    fgd: FragmentationIndex | None
    gpu_memory_label_bytes: Mapping[str, int]
    interconnect: Mapping[str, bool]
    gpus_per_numa: Mapping[str, int]
    warnings: tuple[str, ...] = ()
    bound_pods: frozenset[tuple[str, str]] = frozenset()
    gpu_uuids: tuple[tuple[str, ...], ...] = ()
    tie_rank: IntArray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))


@dataclass(frozen=True, eq=False)
class ClusterView:
    """One immutable snapshot of what the extender scores against (see the module docstring)."""

    built_at: datetime
    inventory: Inventory
    gpu_free: IntArray
    physical_gpus: IntArray
    fb_free_ranked_bytes: FloatArray
    fb_free_topk_bytes: FloatArray
    fb_total_bytes: FloatArray
    memory_known: BoolArray
    nvlink: BoolArray
    gpus_per_numa: IntArray
    interference_ratio: FloatArray
    slow: SlowSignals
    gpu_pods: IntArray = field(default_factory=lambda: np.zeros((0, 1), dtype=np.int64))
    base_inventory: Inventory | None = None
    index: Mapping[str, int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "index", self.state.name_rows())

    def __len__(self) -> int:
        return len(self.state)

    @property
    def state(self) -> ClusterState:
        """Free CPU and GPUs per node (the FGD cluster state)."""
        return self.inventory.state

    @property
    def fgd(self) -> FragmentationIndex | None:
        """Per-node F_n(M) for the recent pods' workload (None without pods)."""
        return self.inventory.fgd

    @property
    def nodes_at(self) -> datetime | None:
        """Time of the node inventory snapshot (UTC, naive)."""
        return self.inventory.nodes_at

    @property
    def warnings(self) -> tuple[str, ...]:
        """What the inventory could not account for."""
        return self.inventory.warnings

    @property
    def node_names(self) -> tuple[str, ...]:
        """Node names, one per row."""
        return self.state.node_names

    @property
    def gpu_uuids(self) -> tuple[tuple[str, ...], ...]:
        """Per row, the UUID of each GPU index ("" where no sample named it)."""
        return self.inventory.gpu_uuids

    @property
    def tie_rank(self) -> IntArray:
        """Per row, the rank that breaks equal scores (lower first): a fixed pseudo-random
        order of the node names, like the ATC'23 authors' renamed nodes."""
        return self.inventory.tie_rank

    @property
    def gpu_allocatable(self) -> IntArray:
        """Allocatable ``nvidia.com/gpu`` per node."""
        return self.state.gpu_count

    @property
    def cpu_free_milli(self) -> IntArray:
        """Unrequested CPU per node (milli)."""
        return self.state.cpu_free_milli

    def rows_of(self, names: Iterable[str]) -> IntArray:
        """Row of each name (-1 for a node the view does not know)."""
        get = self.index.get
        return np.array([get(n, -1) for n in names], dtype=np.int64)

    def age_s(self, now: datetime) -> float | None:
        """Seconds since the inventory snapshot (None without one)."""
        if self.nodes_at is None:
            return None
        return (utc_naive(now) - self.nodes_at).total_seconds()

    def gpu_model_of(self, row: int) -> str:
        """GPU product of the node in ``row`` ("none" without GPUs)."""
        model = int(self.state.gpu_model_id[row])
        return self.state.gpu_models[model] if model >= 0 else "none"

    def preferred(self, pattern: str) -> BoolArray:
        """Per node: does its GPU model match ``pattern`` (case-insensitive regex)?"""
        regex = re.compile(pattern, re.IGNORECASE)
        hits = np.array([bool(regex.search(m)) for m in self.state.gpu_models] + [False])
        return hits[self.state.gpu_model_id]  # id -1 (no GPU) picks the trailing False

    @classmethod
    def empty(cls, built_at: datetime, warning: str) -> ClusterView:
        """A view without nodes (no inventory yet): every call fails open."""
        state = ClusterState.empty([], [], [], [])
        inventory = Inventory(None, None, state, None, {}, {}, {}, (warning,))
        zeros_i, zeros_f = np.zeros(0, np.int64), np.zeros(0, np.float64)
        return cls(
            built_at=built_at,
            inventory=inventory,
            gpu_free=zeros_i,
            physical_gpus=zeros_i,
            fb_free_ranked_bytes=np.zeros((0, 1)),
            fb_free_topk_bytes=np.zeros((0, 2)),
            fb_total_bytes=zeros_f,
            memory_known=np.zeros(0, np.bool_),
            nvlink=np.zeros(0, np.bool_),
            gpus_per_numa=zeros_i,
            interference_ratio=zeros_f,
            slow=SlowSignals(built_at, {}, {}),
        )


def build_view(
    source: ViewSource | Store,
    now: datetime,
    settings: ViewSettings,
    previous: ClusterView | None = None,
) -> ClusterView:
    """Read ``source`` (a :class:`~sits_observe.control.extender.clusterview.source.ViewSource`; a
    :class:`Store` reads through ``DuckViewSource``) into a :class:`ClusterView`; raises
    :class:`StoreError` on store failure.

    ``previous`` lends its inventory while the ``nodes`` and ``pods`` snapshots are the same
    (only GPU memory is re-read then) and its slow signals while younger than
    ``slow_refresh_s``. The view has no assumed pod: the caller applies those
    (:mod:`sits_observe.control.extender.overlay`).
    """
    if isinstance(source, Store):
        source = DuckViewSource(source)
    nodes_at, pods_at = source.snapshot_times(now)
    if nodes_at is None:
        return ClusterView.empty(now, source.no_inventory)
    inventory = None
    if previous is not None:
        inventory = previous.base_inventory or previous.inventory
    if inventory is None or (inventory.nodes_at, inventory.pods_at) != (nodes_at, pods_at):
        inventory = _inventory(source, now, settings, nodes_at, pods_at)
    state = inventory.state
    memory = _memory(source.gpu_memory(now, settings.gpu_sample_window_s), inventory)
    slow = previous.slow if previous is not None else None
    if slow is None or (now - slow.at).total_seconds() >= settings.slow_refresh_s:
        slow = source.slow_signals(now, settings)
    interference = np.array(
        [slow.interference_ratio.get(n, np.nan) for n in state.node_names], dtype=np.float64
    )
    nvlink, per_numa = _topology(inventory, memory.physical, settings.interference, slow.topology)
    return ClusterView(
        built_at=now,
        inventory=inventory,
        gpu_free=gpu_free_counts(state),
        physical_gpus=memory.physical,
        fb_free_ranked_bytes=memory.ranked,
        fb_free_topk_bytes=memory.topk,
        fb_total_bytes=memory.total,
        memory_known=memory.known,
        nvlink=nvlink,
        gpus_per_numa=per_numa,
        interference_ratio=interference,
        slow=slow,
        gpu_pods=shared_pods_estimate(state),
    )


def gpu_free_counts(state: ClusterState) -> IntArray:
    """Fully free GPUs per node (unallocated ``nvidia.com/gpu``)."""
    return np.asarray((state.gpu_free_milli >= MILLI_PER_GPU).sum(axis=1), dtype=np.int64)


def shared_pods_estimate(state: ClusterState) -> IntArray:
    """Pods sharing each GPU, as far as the inventory tells: one on every partly allocated
    GPU (the snapshot does not say how many shares make up the used part). HAMi's slot term
    weighs one pod like 50 milli of use, so the estimate only moves near-ties; assumed pods
    (the overlay) are counted exactly."""
    free = state.gpu_free_milli
    return ((free > 0) & (free < MILLI_PER_GPU)).astype(np.int64)


def _inventory(
    source: ViewSource,
    now: datetime,
    settings: ViewSettings,
    nodes_at: datetime,
    pods_at: datetime | None,
) -> Inventory:
    reads = source.inventory(now, settings, nodes_at, pods_at)
    return Inventory(
        nodes_at,
        pods_at,
        reads.state,
        reads.fgd,
        reads.gpu_memory_label_bytes,
        reads.interconnect,
        reads.gpus_per_numa,
        reads.warnings,
        bound_pods=reads.bound_pods,
        gpu_uuids=reads.gpu_uuids,
        tie_rank=tie_rank(reads.state.node_names),
    )


@dataclass(frozen=True)
class _Memory:
    ranked: FloatArray
    topk: FloatArray
    total: FloatArray
    known: BoolArray
    physical: IntArray


def _memory(rows: pa.Table, inventory: Inventory) -> _Memory:
    """The arrays of the ranked latest GPU rows (``ViewSource.gpu_memory``)."""
    state = inventory.state
    n = len(state)
    index = {name: i for i, name in enumerate(state.node_names)}
    node_col = rows.column("node").to_pylist()
    row = np.array([index.get(str(x), -1) for x in node_col], dtype=np.int64)
    rank = int64_values(rows.column("rank"), null=0)
    free = float64_values(rows.column("free"))
    total = float64_values(rows.column("total"))
    keep = row >= 0
    row, rank, free, total = row[keep], rank[keep], free[keep], total[keep]
    physical = np.bincount(row, minlength=n).astype(np.int64)
    columns = max(
        int(physical.max(initial=0)),
        int(np.minimum(state.gpu_count, _MAX_COLUMNS).max(initial=0)),
        1,
    )
    ranked = np.full((n, columns), np.nan)
    ranked[row, rank] = free
    per_gpu_total = np.full(n, np.nan)
    np.fmax.at(per_gpu_total, row, total)
    unsampled = physical == 0
    physical = np.where(unsampled, state.gpu_count, physical)
    gpu_free = (state.gpu_free_milli >= MILLI_PER_GPU).sum(axis=1)
    for i in np.flatnonzero(unsampled & (state.gpu_count > 0)):
        label = inventory.gpu_memory_label_bytes.get(state.node_names[i])
        if label is None:
            continue
        width = min(int(state.gpu_count[i]), columns)
        ranked[i, :width] = 0.0
        ranked[i, : min(int(gpu_free[i]), width)] = float(label)
        per_gpu_total[i] = float(label)
    known = ~np.isnan(ranked).all(axis=1)
    topk = np.zeros((n, columns + 1))
    topk[:, 1:] = np.cumsum(np.nan_to_num(ranked, nan=0.0), axis=1)
    return _Memory(ranked, topk, per_gpu_total, known, physical)


def _topology(
    inventory: Inventory,
    physical: IntArray,
    interference: InterferenceSettings,
    measured: Mapping[str, NodeTopology],
) -> tuple[BoolArray, IntArray]:
    state = inventory.state
    model_nvlink = []
    for model in state.gpu_models:
        link = find_link_capacity(interference.links, model)
        model_nvlink.append(link is not None and link.nvlink_bytes_per_s > 0)
    nvlink = np.array([*model_nvlink, False], dtype=np.bool_)[state.gpu_model_id]
    per_numa = np.where(physical >= 4, physical // 2, np.maximum(physical, 1)).astype(np.int64)
    for name, topology in measured.items():  # measured beats the product table, labels beat both
        if (i := _state_index(state, name)) is None:
            continue
        if topology.nvlink is not None:
            nvlink[i] = topology.nvlink
        if topology.gpus_per_numa is not None:
            per_numa[i] = topology.gpus_per_numa
    for name, is_nvlink in inventory.interconnect.items():
        if (i := _state_index(state, name)) is not None:
            nvlink[i] = is_nvlink
    for name, count in inventory.gpus_per_numa.items():
        if (i := _state_index(state, name)) is not None:
            per_numa[i] = count
    return nvlink, per_numa


def _state_index(state: ClusterState, name: str) -> int | None:
    try:
        return state.node_index(name)
    except KeyError:
        return None
