"""The cluster a scheduling replay mutates: FGD state plus what the baseline policies read.

:class:`SimState` wraps the FGD modules' :class:`ClusterState` (free CPU and per-GPU free
milli) and :class:`FragmentationIndex` (F_n(M) of every node, kept current on each
placement) and adds what the ATC'23 simulator's scheduler also looks at:

- ``memory_free_mib[N]``: kube-scheduler's ``NodeResourcesFit`` filter checks CPU *and*
  memory requests against the node's allocatable (the authors' node YAML declares each node's
  ``memory_mib``), so a pod whose memory does not fit is filtered out too. The FGD measure
  itself ignores memory, as in the paper;
- ``affinity_count[N, 9]``: how many GPU pods of each "GPU affinity" the node holds (the
  simulator's ``GetGpuAffinityFromPodAnnotation``: code 0 = a partial GPU ("share-gpu"),
  code k = k whole GPUs ("k-gpu")); GpuClustering scores from it;
- ``signals``: optional :class:`NodeSignals` (interference, topology) for the ``sits`` policy;
- ``tie_rank[N]``: the order in which equal scores are broken. The authors run a patched
  kube-scheduler (``mental2008/kubernetes v1.20.5-minor``) whose ``selectHost`` picks, among
  the nodes with the highest score, the one with the smallest *name* "for reproducibility",
  and they rename the nodes ``%04d-<name>`` with a seeded random permutation before the
  replay: ties go to a random node order that stays fixed for the whole replay. That makes
  every policy whose scores tie often (GpuPacking, GpuClustering, FGD) fill the same nodes
  first and leave others idle; uniform random tie-breaking (stock kube-scheduler) spreads
  pods instead and costs FGD about 5 points of allocation on the default trace;
- ``idle_gpu_milli[N]`` (R_n) and ``allocated_gpu_milli``: running totals the scores and the
  allocation ratio read.

All mutation goes through :meth:`SimState.place`, which keeps every array consistent.
Units: milli-CPU, milli-GPU (1000 = one GPU), MiB.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from sits_observe.analytics.fragmentation.fgd.cluster import ClusterState
from sits_observe.analytics.fragmentation.fgd.index import FragmentationIndex
from sits_observe.analytics.fragmentation.fgd.model import MILLI_PER_GPU, PodShape
from sits_observe.analytics.fragmentation.fgd.workload import TargetWorkload
from sits_observe.analytics.traces.cluster_trace import NodeList

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

#: Affinity codes: 0 = one partial GPU, k = k whole GPUs (1-8; nodes have at most 8 GPUs in
#: the trace, so larger requests, which could not be placed anyway, share code 8).
AFFINITY_CODES = 9


@dataclass(frozen=True)
class SimPod:
    """One arriving pod: its FGD shape, memory request (MiB) and affinity code (-1 = no GPU)."""

    shape: PodShape
    memory_mib: int

    @property
    def affinity(self) -> int:
        """0 for a partial-GPU pod, k for k whole GPUs, -1 for a CPU-only pod."""
        if self.shape.num_gpu == 0:
            return -1
        if self.shape.gpu_milli < MILLI_PER_GPU:
            return 0
        return min(self.shape.num_gpu, AFFINITY_CODES - 1)

    @property
    def gpu_request_milli(self) -> int:
        """GPU milli the pod takes (``num_gpu * gpu_milli``)."""
        return self.shape.gpu_request_milli

    @property
    def kind(self) -> str:
        """``cpu_only``, ``share`` (part of one GPU) or ``<k>gpu`` (k whole GPUs)."""
        if self.shape.num_gpu == 0:
            return "cpu_only"
        if self.shape.gpu_milli < MILLI_PER_GPU:
            return "share"
        return f"{self.shape.num_gpu}gpu"


def pod_kinds(pods: Sequence[SimPod]) -> list[str]:
    """The kinds of ``pods`` (:attr:`SimPod.kind`), CPU-only first, then by GPUs requested."""
    order = {pod.kind: (pod.affinity, pod.shape.num_gpu) for pod in pods}
    return sorted(order, key=order.__getitem__)


@dataclass(frozen=True, eq=False)
class NodeSignals:
    """Per-node measurements the trace lacks, one entry per node row (used by ``sits``; see
    :mod:`sits_observe.lab.replay.engine.sits`).

    ``interference_ratio``: interference score 0-1 (NaN = unknown, counted as 0);
    ``gpus_per_numa``: GPUs per NUMA domain (0 = unknown); ``nvlink``: GPUs NVLink-connected.
    """

    interference_ratio: FloatArray
    gpus_per_numa: IntArray
    nvlink: BoolArray

    @classmethod
    def unknown(cls, nodes: int) -> NodeSignals:
        """No signal for any of ``nodes`` nodes."""
        return cls(
            np.full(nodes, np.nan),
            np.zeros(nodes, dtype=np.int64),
            np.zeros(nodes, dtype=np.bool_),
        )

    def __post_init__(self) -> None:
        n = self.interference_ratio.shape[0]
        if self.gpus_per_numa.shape != (n,) or self.nvlink.shape != (n,):
            raise ValueError("interference_ratio, gpus_per_numa and nvlink differ in length")
        known = self.interference_ratio[~np.isnan(self.interference_ratio)]
        if ((known < 0) | (known > 1)).any() or (self.gpus_per_numa < 0).any():
            raise ValueError("interference_ratio must be 0-1 (or NaN), gpus_per_numa >= 0")


class SimState:
    """A cluster being filled by a replay (see the module docstring)."""

    def __init__(
        self,
        state: ClusterState,
        workload: TargetWorkload,
        memory_mib: Sequence[int] | IntArray | None = None,
        signals: NodeSignals | None = None,
    ) -> None:
        self.cluster = state
        if signals is not None and signals.gpus_per_numa.shape[0] != len(state):
            raise ValueError(
                f"signals cover {signals.gpus_per_numa.shape[0]} nodes, want {len(state)}"
            )
        #: Measurements the trace lacks (interference, topology); None = none at all.
        self.signals = signals
        self.index = FragmentationIndex(state, workload)
        n = len(state)
        if memory_mib is None:
            # No memory limit: every request fits.
            self.memory_free_mib = np.full(n, np.iinfo(np.int64).max // 2, dtype=np.int64)
        else:
            self.memory_free_mib = np.asarray(memory_mib, dtype=np.int64).copy()
            if self.memory_free_mib.shape != (n,):
                raise ValueError(f"memory_mib has {self.memory_free_mib.shape[0]} rows, want {n}")
        self.affinity_count = np.zeros((n, AFFINITY_CODES), dtype=np.int64)
        self.idle_gpu_milli: IntArray = state.node_idle_milli()
        self.total_gpu_milli = state.total_gpu_milli
        self.allocated_gpu_milli = state.total_gpu_milli - state.idle_gpu_milli
        #: Tie-break rank of every node (lower wins); node row order until :meth:`shuffle_ties`.
        self.tie_rank: IntArray = np.arange(n, dtype=np.int64)
        #: Break ties uniformly at random instead of by ``tie_rank``.
        self.random_ties = False

    @classmethod
    def from_node_list(
        cls,
        nodes: NodeList,
        workload: TargetWorkload,
        *,
        memory_filter: bool = True,
        signals: NodeSignals | None = None,
    ) -> SimState:
        """The empty cluster of a trace's node list (memory checked when ``memory_filter``)."""
        state = ClusterState.from_node_list(nodes)
        return cls(state, workload, nodes.memory_mib if memory_filter else None, signals)

    def __len__(self) -> int:
        return len(self.cluster)

    def shuffle_ties(self, rng: np.random.Generator) -> None:
        """Give the nodes a random tie-break order, fixed for the replay."""
        self.tie_rank = rng.permutation(len(self)).astype(np.int64)

    # -- reading -----------------------------------------------------------------------------

    @property
    def gpu_free_milli(self) -> IntArray:
        """``[N, G]`` free milli of every GPU (read-only use)."""
        return self.cluster.gpu_free_milli

    @property
    def alloc_ratio(self) -> float:
        """Allocated GPU milli / GPU capacity (0-1)."""
        return self.allocated_gpu_milli / self.total_gpu_milli if self.total_gpu_milli else 0.0

    def in_use(self, nodes: IntArray) -> BoolArray:
        """Per node of ``nodes``: some GPU of it is (partly) allocated (the running totals'
        :meth:`ClusterState.nodes_in_use`, for a few rows)."""
        whole = self.cluster.gpu_count[nodes] * MILLI_PER_GPU
        return np.asarray(self.idle_gpu_milli[nodes] < whole, dtype=np.bool_)

    def feasible(self, pod: SimPod) -> IntArray:
        """Rows of the nodes that pass the filters (CPU, memory, GPU count, share, model)."""
        ok = self.cluster.fits(pod.shape) & (self.memory_free_mib >= pod.memory_mib)
        return np.flatnonzero(ok)

    # -- changing ----------------------------------------------------------------------------

    def place(self, node: int, pod: SimPod, gpu_indices: Sequence[int] | None) -> tuple[int, ...]:
        """Allocate ``pod`` on ``node`` (GPUs as :meth:`ClusterState.place`); returns the GPUs."""
        if self.memory_free_mib[node] < pod.memory_mib:
            raise ValueError(
                f"cannot place {pod.shape.label()} on {self.cluster.node_names[node]!r}: needs "
                f"{pod.memory_mib} MiB, {int(self.memory_free_mib[node])} free"
            )
        gpus = self.index.place(node, pod.shape, gpu_indices)
        self.memory_free_mib[node] -= pod.memory_mib
        if pod.affinity >= 0:
            self.affinity_count[node, pod.affinity] += 1
        self.idle_gpu_milli[node] -= pod.gpu_request_milli
        self.allocated_gpu_milli += pod.gpu_request_milli
        return gpus
