"""The ``sits`` placement policy: FGD's fragmentation descent plus the SPEC's topology and
interference terms, with idle nodes kept for last.

Every feasible node gets a key, compared lexicographically (higher wins at each level):

1. ``score`` = the FGD score (``FGDScore``: int(100 x sigmoid(-delta / 1000)), delta = the
   growth of the node's F_n(M) in milli-GPU, the best GPU for a partial-GPU pod) minus an
   **interference** penalty ``round(interference_penalty_points x I_n)``, where I_n (0-1) is
   the node's interference score (SPEC "Topology and interference": 0.4 GPU-bandwidth
   utilisation + 0.35 NVLink conflict + 0.25 NUMA miss ratio; computed by
   :mod:`sits_observe.analytics.interference`). With the default 10 points, a node at the
   SPEC's 0.65 threshold loses 6-7 points: it wins only when every other node's placement
   grows fragmentation by several hundred milli-GPU more;
2. ``topology`` = 1 / (1 + distance) of the GPUs a multi-GPU pod would get on the node (SPEC:
   NVLink 0.1, same PCIe switch 0.4, cross-NUMA 1.0; one GPU or no topology data: 0). GPUs
   inside one NUMA domain count as one PCIe switch, an NVLink node as NVLink throughout;
3. ``in_use`` = 1 when some GPU of the node is already (partly) allocated: among equally good
   nodes, keep GPU-idle nodes idle for pods that need many whole GPUs (multi-GPU pods are
   rare, so they are not in the typical-pod set M and FGD never protects them);
4. the replay's tie-break, as every policy (the authors' node order by default).

A partial-GPU pod takes FGD's GPU (the best score, lowest index). A multi-GPU pod takes,
when the node's topology is known, the lowest-indexed fully free GPUs of the first NUMA
domain that has enough of them; otherwise the lowest-indexed fully free GPUs (as FGD; the
fragmentation measure does not depend on *which* free GPUs are taken).

When the terms matter: FGD's integer score ties a lot (near zero growth one point is about 40
milli-GPU; all idle nodes of a model tie for a whole-GPU pod), so levels 2-4 decide most
placements among the best-scored nodes. Interference (level 1) and topology (level 2) need
node signals (:class:`NodeSignals`); the Alibaba trace has none, so there ``sits`` is FGD with
idle-node protection (level 3), which on the default workload leaves a few GPUs fewer
unallocated than FGD (docs/analytics/simulator.md has the numbers).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field

from sits_observe.analytics.fgd_model import MILLI_PER_GPU
from sits_observe.analytics.schedsim_policies import Choice, break_tie, fgd_score, is_partial
from sits_observe.analytics.schedsim_state import NodeSignals, SimPod, SimState

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


class SitsSettings(BaseModel):
    """Weights and constants of the ``sits`` simulator policy."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    interference_penalty_points: int = Field(
        10,
        ge=0,
        le=100,
        description="FGD score points (0-100 scale) lost by a node with interference score 1",
    )
    nvlink_distance: float = Field(0.1, ge=0, le=10, description="SPEC topology distance: NVLink")
    pcie_switch_distance: float = Field(
        0.4, ge=0, le=10, description="SPEC topology distance: same PCIe switch / NUMA domain"
    )
    cross_numa_distance: float = Field(
        1.0, ge=0, le=10, description="SPEC topology distance: across NUMA domains"
    )
    keep_idle_nodes: bool = Field(
        True, description="among equal scores prefer nodes already in use (keep idle nodes idle)"
    )
    cpu_on_busy_nodes: bool = Field(
        True,
        description="among equal nodes a CPU-only pod takes the one with the least idle GPU "
        "(its CPU then strands the fewest GPUs)",
    )
    tightest_share: bool = Field(
        True,
        description="a GPU share takes the GPU with the least free share among FGD's best on "
        "the node, and among equal nodes the node where that GPU is tightest",
    )
    small_nodes_first: bool = Field(
        True, description="among equal nodes prefer nodes with fewer GPUs (keep large ones whole)"
    )


class SitsPolicy:
    """See the module docstring."""

    name = "sits"

    def __init__(self, settings: SitsSettings | None = None) -> None:
        self.settings = settings or SitsSettings()

    def choose(self, sim: SimState, pod: SimPod, rng: np.random.Generator) -> Choice | None:
        """The best node by (score, topology, in use, node order) and its GPUs."""
        options = sim.index.options(pod.shape)
        fit = sim.memory_free_mib[options.node] >= pod.memory_mib
        node, gpu = options.node[fit], options.gpu[fit]
        if node.shape[0] == 0:
            return None
        score = fgd_score(options.delta_milli[fit])
        starts = np.flatnonzero(np.r_[True, node[1:] != node[:-1]])
        nodes = node[starts]
        best_score = np.maximum.reduceat(score, starts)
        signals = sim.signals
        key = best_score - self._penalty(signals, nodes)
        tied = nodes[key == key.max()]
        if tied.shape[0] > 1 and pod.shape.num_gpu > 1 and signals is not None:
            factor = self._topology_factor(sim, signals, tied, pod.shape.num_gpu)
            tied = tied[factor == factor.max()]
        if tied.shape[0] > 1 and pod.shape.num_gpu == 0 and self.settings.cpu_on_busy_nodes:
            idle = sim.idle_gpu_milli[tied]
            tied = tied[idle == idle.min()]
        if tied.shape[0] > 1 and self.settings.keep_idle_nodes:
            in_use = sim.in_use(tied)
            if in_use.any():
                tied = tied[in_use]
        partial = is_partial(pod)
        if partial:
            group = np.cumsum(np.r_[False, node[1:] != node[:-1]])
            share_gpu = self._share_gpus(node, gpu, score == best_score[group], tied)
            if tied.shape[0] > 1 and self.settings.tightest_share:
                free = sim.gpu_free_milli[tied, share_gpu]
                keep = free == free.min()
                tied, share_gpu = tied[keep], share_gpu[keep]
        if tied.shape[0] > 1 and self.settings.small_nodes_first:
            count = sim.cluster.gpu_count[tied]
            keep = count == count.min()
            tied = tied[keep]
            if partial:
                share_gpu = share_gpu[keep]
        chosen = break_tie(sim, rng, tied)
        if partial:
            return Choice(chosen, (int(share_gpu[np.flatnonzero(tied == chosen)[0]]),))
        if pod.shape.num_gpu > 1 and signals is not None:
            return Choice(chosen, self._numa_gpus(sim, signals, chosen, pod.shape.num_gpu))
        return Choice(chosen)

    # -- terms -------------------------------------------------------------------------------

    def _share_gpus(
        self, node: IntArray, gpu: IntArray, best: BoolArray, tied: IntArray
    ) -> IntArray:
        """Per node of ``tied`` (sorted rows), the GPU a share takes there among the ``best``
        candidates: the first (options are ordered by node, then free share: the tightest) or,
        without ``tightest_share``, the lowest-indexed (FGD's ``gpuSelMethod``)."""
        at = np.flatnonzero(best & np.isin(node, tied))
        starts = np.flatnonzero(np.r_[True, node[at][1:] != node[at][:-1]])
        if self.settings.tightest_share:
            return gpu[at[starts]]
        return np.minimum.reduceat(gpu[at], starts)

    def _penalty(self, signals: NodeSignals | None, nodes: IntArray) -> IntArray:
        if signals is None or self.settings.interference_penalty_points == 0:
            return np.zeros(nodes.shape[0], dtype=np.int64)
        ratio = np.nan_to_num(signals.interference_ratio[nodes], nan=0.0)
        return np.round(ratio * self.settings.interference_penalty_points).astype(np.int64)

    def _topology_factor(
        self, sim: SimState, signals: NodeSignals, nodes: IntArray, k: int
    ) -> FloatArray:
        """1 / (1 + distance) of the best k free GPUs on each node (1 when unknown)."""
        distance = np.zeros(nodes.shape[0], dtype=np.float64)
        for i, n in enumerate(nodes):
            distance[i] = self._distance(sim, signals, int(n), k)
        return 1.0 / (1.0 + distance)

    def _distance(self, sim: SimState, signals: NodeSignals, node: int, k: int) -> float:
        if signals.nvlink[node]:
            return self.settings.nvlink_distance
        per = int(signals.gpus_per_numa[node])
        if per <= 0:
            return 0.0
        if _numa_domain_with(sim, node, per, k) is not None:
            return self.settings.pcie_switch_distance
        return self.settings.cross_numa_distance

    def _numa_gpus(
        self, sim: SimState, signals: NodeSignals, node: int, k: int
    ) -> tuple[int, ...] | None:
        per = int(signals.gpus_per_numa[node])
        if signals.nvlink[node] or per <= 0:
            return None
        domain = _numa_domain_with(sim, node, per, k)
        if domain is None:
            return None
        free = np.flatnonzero(sim.gpu_free_milli[node, domain * per : (domain + 1) * per] == 1000)
        return tuple(int(domain * per + g) for g in free[:k])


def _numa_domain_with(sim: SimState, node: int, per: int, k: int) -> int | None:
    """The first NUMA domain of ``per`` GPUs on ``node`` with ``k`` fully free GPUs."""
    count = int(sim.cluster.gpu_count[node])
    free = sim.gpu_free_milli[node, :count] == MILLI_PER_GPU
    for domain in range((count + per - 1) // per):
        if int(free[domain * per : (domain + 1) * per].sum()) >= k:
            return domain
    return None
