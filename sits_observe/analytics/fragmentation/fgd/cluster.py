"""Cluster state for the FGD measure and the scheduling simulator: numpy arrays per node.

Layout (N nodes, G = the largest GPU count of any node, 8 for the Alibaba trace):

- ``cpu_capacity_milli[N]``, ``cpu_free_milli[N]`` (int64);
- ``gpu_count[N]`` (int64) and ``gpu_free_milli[N, G]`` (int64, 0-1000 per GPU); the slots
  past a node's GPU count hold 0, so they add nothing to idle capacity, are never "free enough"
  for a GPU request (every GPU request is at least 1 milli) and add nothing to fragmentation;
- ``gpu_model_id[N]`` (int64) indexing ``gpu_models``; -1 for a node without GPUs.

The state is deliberately mutable: a replay of thousands of pods updates one node's row per
placement (:meth:`ClusterState.place`) instead of copying 1,213 x 8 arrays; take
:meth:`ClusterState.copy` before a what-if. Node rows never change order or number.

GPU choice on placement: a whole-GPU pod takes fully free GPUs; a partial-GPU pod
(``num_gpu == 1``, ``gpu_milli < 1000``) takes a share of one GPU whose free share is at least
its request, which the caller names (the FGD policy chooses it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from sits_observe.analytics.fragmentation.fgd.model import MILLI_PER_GPU, PodShape
from sits_observe.analytics.traces.cluster_trace import NodeList, Placements, PodList
from sits_observe.errors import ParseError

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(eq=False)
class ClusterState:
    """Free CPU and per-GPU free milli of every node (see the module docstring)."""

    node_names: tuple[str, ...]
    gpu_models: tuple[str, ...]
    gpu_model_id: IntArray
    gpu_count: IntArray
    cpu_capacity_milli: IntArray
    cpu_free_milli: IntArray
    gpu_free_milli: IntArray
    _index: dict[str, int] | None = field(init=False, repr=False)
    _type_masks: dict[tuple[str, ...], BoolArray] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._index = None  # built on first use, shared by copies (names never change)
        self._type_masks = {}

    # -- construction ----------------------------------------------------------------------

    @classmethod
    def empty(
        cls,
        node_names: Sequence[str],
        cpu_milli: Sequence[int] | IntArray,
        gpu_count: Sequence[int] | IntArray,
        gpu_model: Sequence[str],
    ) -> ClusterState:
        """A cluster with nothing placed: every GPU fully free, all CPU free."""
        names = tuple(node_names)
        if len(set(names)) != len(names):
            raise ValueError("node names must be unique")
        cpu = np.asarray(cpu_milli, dtype=np.int64).copy()
        count = np.asarray(gpu_count, dtype=np.int64).copy()
        if not len(names) == len(cpu) == len(count) == len(gpu_model):
            raise ValueError("node_names, cpu_milli, gpu_count and gpu_model differ in length")
        if (cpu < 0).any() or (count < 0).any():
            raise ValueError("cpu_milli and gpu_count must be >= 0")
        models = tuple(sorted({m for m, c in zip(gpu_model, count, strict=True) if c > 0}))
        model_id = np.array(
            [models.index(m) if c > 0 else -1 for m, c in zip(gpu_model, count, strict=True)],
            dtype=np.int64,
        )
        width = max(int(count.max(initial=0)), 1)
        free = np.where(np.arange(width)[None, :] < count[:, None], MILLI_PER_GPU, 0)
        return cls(names, models, model_id, count, cpu, cpu.copy(), free.astype(np.int64))

    @classmethod
    def from_node_list(cls, nodes: NodeList) -> ClusterState:
        """The empty cluster of a trace's node list."""
        return cls.empty(nodes.names, nodes.cpu_milli, nodes.gpu_count, nodes.gpu_model)

    def copy(self) -> ClusterState:
        """An independent copy (free arrays copied; node facts and model masks shared)."""
        twin = ClusterState(
            self.node_names,
            self.gpu_models,
            self.gpu_model_id,
            self.gpu_count,
            self.cpu_capacity_milli,
            self.cpu_free_milli.copy(),
            self.gpu_free_milli.copy(),
        )
        twin._index = self._index
        twin._type_masks = self._type_masks  # depends only on the (fixed) GPU models
        return twin

    # -- reading -----------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.node_names)

    @property
    def total_gpu_milli(self) -> int:
        """GPU capacity of the cluster in milli."""
        return int(self.gpu_count.sum()) * MILLI_PER_GPU

    @property
    def idle_gpu_milli(self) -> int:
        """Unallocated GPU milli of the cluster."""
        return int(self.gpu_free_milli.sum())

    def node_idle_milli(self) -> IntArray:
        """Per node: its unallocated GPU milli."""
        return np.asarray(self.gpu_free_milli.sum(axis=1), dtype=np.int64)

    def nodes_in_use(self) -> BoolArray:
        """Per node: some GPU of it is (partly) allocated."""
        return np.asarray(self.node_idle_milli() < self.gpu_count * MILLI_PER_GPU, dtype=np.bool_)

    def name_rows(self) -> Mapping[str, int]:
        """``{node name: row}``, built once and shared by copies (do not modify)."""
        if self._index is None:
            self._index = {name: i for i, name in enumerate(self.node_names)}
        return self._index

    def node_index(self, name: str) -> int:
        """Row of node ``name``; raises ``KeyError`` naming it."""
        try:
            return self.name_rows()[name]
        except KeyError:
            raise KeyError(f"unknown node {name!r}") from None

    def type_allowed(self, gpu_types: tuple[str, ...]) -> BoolArray:
        """Per node: does its GPU model satisfy ``gpu_types`` (empty = any)? Cached, read-only."""
        mask = self._type_masks.get(gpu_types)
        if mask is None:
            if gpu_types:
                ids = [i for i, m in enumerate(self.gpu_models) if m in gpu_types]
                mask = np.isin(self.gpu_model_id, ids)
            else:
                mask = np.ones(len(self), dtype=np.bool_)
            mask.setflags(write=False)
            self._type_masks[gpu_types] = mask
        return mask

    def fits(self, pod: PodShape) -> BoolArray:
        """Per node: can ``pod`` be placed now (CPU, GPU count and share, GPU model)?"""
        ok = self.cpu_free_milli >= pod.cpu_milli
        if pod.num_gpu:
            enough = (self.gpu_free_milli >= pod.gpu_milli).sum(axis=1) >= pod.num_gpu
            ok &= enough & self.type_allowed(pod.gpu_types)
        return ok

    # -- changing ----------------------------------------------------------------------------

    def choose_gpus(self, node: int, pod: PodShape) -> tuple[int, ...]:
        """Default GPUs for ``pod`` on ``node``: the lowest-indexed ones with enough free share.

        For a partial-GPU pod this is only a default; FGD names the GPU itself.
        """
        free = self.gpu_free_milli[node]
        candidates = np.flatnonzero(free >= pod.gpu_milli)[: pod.num_gpu]
        return tuple(int(g) for g in candidates)

    def place(
        self, node: int, pod: PodShape, gpu_indices: Sequence[int] | None = None
    ) -> tuple[int, ...]:
        """Allocate ``pod`` on row ``node``; returns the GPU indices used.

        ``gpu_indices`` None takes :meth:`choose_gpus`. Raises ``ValueError`` (state
        unchanged) when the pod does not fit there: CPU, GPU model, index range, or a GPU
        with less free share than the pod's per-GPU request.
        """
        problem = self._placement_problem(node, pod, gpu_indices)
        if problem:
            where = repr(self.node_names[node]) if 0 <= node < len(self) else f"row {node}"
            raise ValueError(f"cannot place {pod.label()} on {where}: {problem}")
        gpus = tuple(gpu_indices) if gpu_indices is not None else self.choose_gpus(node, pod)
        self.cpu_free_milli[node] -= pod.cpu_milli
        for g in gpus:
            self.gpu_free_milli[node, g] -= pod.gpu_milli
        return gpus

    def _placement_problem(
        self, node: int, pod: PodShape, gpu_indices: Sequence[int] | None
    ) -> str | None:
        if not 0 <= node < len(self):
            return f"node row {node} out of range 0-{len(self) - 1}"
        free_cpu = int(self.cpu_free_milli[node])
        if pod.cpu_milli > free_cpu:
            return f"needs {pod.cpu_milli} milli-CPU, {free_cpu} free"
        if pod.num_gpu == 0:
            return "a CPU-only pod takes no GPU index" if gpu_indices else None
        if not self.type_allowed(pod.gpu_types)[node]:
            model = self.gpu_models[self.gpu_model_id[node]] if self.gpu_count[node] else "none"
            return f"GPU model {model} not among allowed {'|'.join(pod.gpu_types)}"
        gpus = tuple(gpu_indices) if gpu_indices is not None else self.choose_gpus(node, pod)
        count = int(self.gpu_count[node])
        if len(gpus) != pod.num_gpu or len(set(gpus)) != len(gpus):
            return f"needs {pod.num_gpu} distinct GPU(s), got {len(gpus)}: {list(gpus)}"
        for g in gpus:
            if not 0 <= g < count:
                return f"GPU index {g} out of range 0-{count - 1}"
            free = int(self.gpu_free_milli[node, g])
            if free < pod.gpu_milli:
                return f"GPU {g} has {free} milli free, pod needs {pod.gpu_milli}"
        return None


def apply_placements(state: ClusterState, pods: PodList, placements: Placements) -> int:
    """Place every row of ``placements`` onto ``state`` (in file order); returns the count.

    Raises :class:`ParseError` naming the file line for an unknown pod or node, a pod placed
    twice, a partial-GPU pod without ``gpu_index``, or an over-allocation; rows before the bad
    one stay applied, so callers pass a fresh state.
    """
    by_name = {name: i for i, name in enumerate(pods.names)}
    seen: dict[str, int] = {}
    where = placements.source or "placements"
    for pod_name, node_name, gpus, line in zip(
        placements.pods,
        placements.nodes,
        placements.gpu_indices,
        placements.lines,
        strict=True,
    ):
        at = f"{where}: line {line}"
        if pod_name not in by_name:
            raise ParseError(f"{at}: unknown pod {pod_name!r} (not in {pods.source or 'pods'})")
        if pod_name in seen:
            raise ParseError(f"{at}: pod {pod_name!r} already placed on line {seen[pod_name]}")
        seen[pod_name] = line
        try:
            node = state.node_index(node_name)
        except KeyError:
            raise ParseError(f"{at}: unknown node {node_name!r}") from None
        shape = pods.shape(by_name[pod_name])
        if shape.num_gpu == 1 and shape.gpu_milli < MILLI_PER_GPU and gpus is None:
            raise ParseError(
                f"{at}: pod {pod_name!r} takes a partial GPU ({shape.gpu_milli} milli): "
                "give its gpu_index"
            )
        try:
            state.place(node, shape, gpus)
        except ValueError as exc:
            raise ParseError(f"{at}: {exc}") from None
    return len(placements)
