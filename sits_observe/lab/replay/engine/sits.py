"""The ``sits`` placement policy: FGD's fragmentation descent plus the SPEC's topology and
interference terms, with idle nodes kept for last.

Every feasible node gets the keys of the ``sits`` order (:mod:`sits_order`, which the
extender's ranked scores use too), compared level by level:

1. ``points`` = the FGD score (``FGDScore``: int(100 x sigmoid(-delta / 1000)), delta = the
   growth of the node's F_n(M) in milli-GPU, the best GPU for a partial-GPU pod) minus an
   **interference** penalty ``round(interference_penalty_points x I_n)``, where I_n (0-1) is
   the node's interference score (SPEC "Topology and interference": 0.4 GPU-bandwidth
   utilisation + 0.35 NVLink conflict + 0.25 NUMA miss ratio; computed by
   :mod:`sits_observe.analytics.topology.interference`). With the default 10 points, a node at the
   SPEC's 0.65 threshold loses 6-7 points: it wins only when every other node's placement
   grows fragmentation by several hundred milli-GPU more;
2. ``fit`` = the topology factor 1 / (1 + distance) of the GPUs a multi-GPU pod would get on
   the node (SPEC: NVLink 0.1, same PCIe switch 0.4, cross-NUMA 1.0; one GPU or no topology
   data: left out). GPUs inside one NUMA domain count as one PCIe switch, an NVLink node as
   NVLink throughout;
3. the tie levels, each a :class:`SitsSettings` switch: ``idle_gpu`` (CPU-only pods to the
   node with the least idle GPU), ``in_use`` (keep GPU-idle nodes idle for pods that need many
   whole GPUs: multi-GPU pods are rare, so they are not in the typical-pod set M and FGD never
   protects them), ``share_free`` (a share to the node where its GPU is tightest),
   ``cpu_short`` (a GPU pod to the node left with the least usable idle GPU its free CPU
   cannot feed) and ``gpu_count`` (smaller nodes first, off by default);
4. the replay's tie-break, as every policy (the authors' node order by default, or uniformly
   random among the nodes equal on every level).

A partial-GPU pod takes, among the GPUs with FGD's best score on the node, the one with the
least free share (``tightest_share``; without it the lowest-indexed, FGD's). A multi-GPU pod takes,
when the node's topology is known, the lowest-indexed fully free GPUs of the first NUMA
domain that has enough of them; otherwise the lowest-indexed fully free GPUs (as FGD; the
fragmentation measure does not depend on *which* free GPUs are taken).

When the terms matter: FGD's integer score ties a lot (near zero growth one point is about 40
milli-GPU; all idle nodes of a model tie for a whole-GPU pod), so levels 2-4 decide most
placements among the best-scored nodes. Interference (level 1) and topology (level 2) need
node signals (:class:`NodeSignals`); the Alibaba trace has none, so there ``sits`` is FGD with
the tie levels (level 3; docs/analytics/simulator.md has what each is worth).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field

from sits_observe.analytics.fragmentation.fgd.model import MILLI_PER_GPU
from sits_observe.analytics.placement.fgd_score import fgd_score
from sits_observe.analytics.placement.sits_order import RankKeys, cpu_short_steps, leaders
from sits_observe.lab.replay.engine.policies import Choice, break_tie, is_partial
from sits_observe.lab.replay.engine.state import NodeSignals, SimPod, SimState

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
    cpu_for_idle_gpus: bool = Field(
        True,
        description="among equal nodes a GPU pod takes the one left with the least usable idle "
        "GPU that its free CPU cannot feed (at the pod's CPU per GPU)",
    )
    small_nodes_first: bool = Field(
        False,
        description="among equal nodes prefer nodes with fewer GPUs (keep large ones whole); "
        "off: measured to cost 0.2-0.35 points on cpu200 and gain nothing elsewhere",
    )


class SitsPolicy:
    """See the module docstring."""

    name = "sits"

    def __init__(self, settings: SitsSettings | None = None) -> None:
        self.settings = settings or SitsSettings()

    def choose(self, sim: SimState, pod: SimPod, rng: np.random.Generator) -> Choice | None:
        """The best node in the ``sits`` order (:mod:`sits_order`) and its GPUs."""
        options = sim.index.options(pod.shape)
        fit = sim.memory_free_mib[options.node] >= pod.memory_mib
        node, gpu = options.node[fit], options.gpu[fit]
        if node.shape[0] == 0:
            return None
        score = fgd_score(options.delta_milli[fit])
        starts = np.flatnonzero(np.r_[True, node[1:] != node[:-1]])
        nodes = node[starts]
        best_score = np.maximum.reduceat(score, starts)
        partial = is_partial(pod)
        share_gpu = None
        if partial:
            group = np.cumsum(np.r_[False, node[1:] != node[:-1]])
            share_gpu = self._share_gpus(node, gpu, score == best_score[group], nodes)
        keys = self._keys(sim, pod, nodes, best_score, share_gpu)
        chosen = break_tie(sim, rng, nodes[leaders(keys, np.arange(nodes.shape[0]))])
        if share_gpu is not None:
            return Choice(chosen, (int(share_gpu[np.flatnonzero(nodes == chosen)[0]]),))
        if pod.shape.num_gpu > 1 and sim.signals is not None:
            return Choice(chosen, self._numa_gpus(sim, sim.signals, chosen, pod.shape.num_gpu))
        return Choice(chosen)

    def _keys(
        self,
        sim: SimState,
        pod: SimPod,
        nodes: IntArray,
        best_score: IntArray,
        share_gpu: IntArray | None,
    ) -> RankKeys:
        """The order's levels for the candidate ``nodes`` (each the best score of its GPUs)."""
        settings, signals = self.settings, sim.signals
        points = best_score - self._penalty(signals, nodes)
        topology = None
        if pod.shape.num_gpu > 1 and signals is not None:
            # Only the nodes with the top points can lead; the loop runs over those alone.
            top = np.flatnonzero(points == points.max())
            topology = np.zeros(nodes.shape[0], dtype=np.float64)
            topology[top] = self._topology_factor(sim, signals, nodes[top], pod.shape.num_gpu)
        return RankKeys(
            points=points,
            fit=topology,
            in_use=sim.in_use(nodes) if settings.keep_idle_nodes else None,
            tie_rank=sim.tie_rank[nodes],
            idle_gpu=(
                sim.idle_gpu_milli[nodes]
                if pod.shape.num_gpu == 0 and settings.cpu_on_busy_nodes
                else None
            ),
            share_free=(
                sim.gpu_free_milli[nodes, share_gpu]
                if share_gpu is not None and settings.tightest_share
                else None
            ),
            cpu_short=(
                cpu_short_steps(
                    sim.cluster.cpu_free_milli[nodes],
                    sim.idle_gpu_milli[nodes],
                    sim.index.node_frag_milli[nodes],
                    pod.shape.cpu_milli,
                    pod.gpu_request_milli,
                )
                if pod.shape.num_gpu > 0 and settings.cpu_for_idle_gpus
                else None
            ),
            gpu_count=sim.cluster.gpu_count[nodes] if settings.small_nodes_first else None,
        )

    # -- terms -------------------------------------------------------------------------------

    def _share_gpus(
        self, node: IntArray, gpu: IntArray, best: BoolArray, nodes: IntArray
    ) -> IntArray:
        """Per node of ``nodes`` (sorted rows), the GPU a share takes there among the ``best``
        candidates: the first (options are ordered by node, then free share: the tightest) or,
        without ``tightest_share``, the lowest-indexed (FGD's ``gpuSelMethod``)."""
        at = np.flatnonzero(best & np.isin(node, nodes))
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
