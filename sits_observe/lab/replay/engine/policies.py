"""Placement policies of the what-if scheduling simulator, as the ATC'23 evaluation runs them.

Weng et al. (USENIX ATC 2023) compare six kube-scheduler score plugins in their simulator
(hkust-adsl/kubernetes-scheduler-simulator, ``pkg/simulator/plugin/*_score.go``; the
experiment scripts enable exactly one of them, weight 1000, with every default score plugin
disabled and ``percentageOfNodesToScore: 100``). Each policy here reproduces one plugin:

- the plugin's **integer** score 0-100 (Go ``int64`` truncation), computed for every node
  that passes the filters (CPU, memory, GPU count and share, GPU model);
- the authors' ``selectHost``: a node with the highest score; among ties the first in a
  seeded random node order fixed for the replay (:mod:`.state` explains why; the
  integer scores tie often, so this matters a lot);
- the GPU of a partial-GPU pod: the plugin's ``gpuSelMethod`` (Random: a random GPU that fits;
  FGD: the GPU with the best FGD score, lowest index on ties; all others ``best``: the GPU with
  the least free share that fits, lowest index on ties). Whole-GPU pods take the
  lowest-indexed fully free GPUs, as the simulator's ``AllocateExclusiveGpuId``.

Scores (free = after nothing placed yet, req = the pod's request; 128,000 milli-CPU and
8,000 milli-GPU are the simulator's ``MaxSpecCpu`` / ``MaxSpecGpu``):

- ``random``: uniform among feasible nodes (``RandomScore``);
- ``dotprod``: 100 x (1 - (cpu_free/128k x cpu_req/128k + gpu_free/8k x gpu_req/8k) / 2),
  the smallest dot product wins (``DotProductScore``, ``merge`` dimensions, ``max`` norm);
- ``clustering``: 25 x (8000 - gpu_free) / 8000 plus 75 (node holds only pods of this pod's
  GPU affinity: same share class "share-gpu" or "k-gpu"), 50 (holds it among others), 25
  (holds no GPU pod), 0 (holds only others); CPU-only pods score 0 (``GpuClusteringScore``);
- ``packing``: the GPUs the pod would take, least free first; all of them already shared:
  max(100 - sum(free x 100 / 1000) / 10, 50); needs k fully free GPUs on a node in use:
  max(50 - k, 33); node entirely free: max(33 - free GPUs, free GPUs); CPU-only pods score 0
  (``GpuPackingScore``);
- ``bestfit``: 100 x (1 - (0.5 (cpu_free - cpu_req) / 128k + 0.5 (gpu_free - gpu_req) / 8k))
  (``BestFitScore``; its min-max normalisation keeps the order of 0-100 integers);
- ``fgd``: 100 x sigmoid(-delta / 1000) where delta is the growth of the node's F_n(M) (milli)
  if the pod goes there, with the best GPU for a partial-GPU pod (``FGDScore``);
- ``sits``: ours, see :mod:`sits_observe.lab.replay.engine.sits`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from sits_observe.analytics.fragmentation.fgd.model import MILLI_PER_GPU
from sits_observe.analytics.placement.fgd_score import MAX_NODE_SCORE, fgd_score
from sits_observe.analytics.placement.fgd_score import truncate as _truncate
from sits_observe.lab.replay.engine.state import SimPod, SimState

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

#: The simulator's normalisers (``MaxSpecCpu``, ``MaxSpecGpu``): the largest node.
MAX_SPEC_CPU_MILLI = 128_000
MAX_SPEC_GPU_MILLI = 8_000


@dataclass(frozen=True)
class Choice:
    """Where a pod goes: a node row and, for a partial-GPU pod, the GPU (None = default)."""

    node: int
    gpus: tuple[int, ...] | None = None


class Policy(Protocol):
    """A placement policy: picks a feasible node (and GPU) for a pod, or None when none fits."""

    name: str

    def choose(self, sim: SimState, pod: SimPod, rng: np.random.Generator) -> Choice | None:
        """The placement of ``pod`` now; ``rng`` breaks ties. Never changes ``sim``."""
        ...


# -- shared pieces ---------------------------------------------------------------------------


def pick_max(sim: SimState, rng: np.random.Generator, nodes: IntArray, scores: IntArray) -> int:
    """A node with the highest score; ties go to the lowest ``sim.tie_rank`` (the authors'
    kube-scheduler), or uniformly at random when ``sim.random_ties`` (stock kube-scheduler)."""
    return break_tie(sim, rng, nodes[scores == scores.max()])


def break_tie(sim: SimState, rng: np.random.Generator, tied: IntArray) -> int:
    """One of ``tied`` (node rows, not empty): the lowest ``sim.tie_rank``, or a uniformly
    random one when ``sim.random_ties``."""
    if tied.shape[0] == 1:
        return int(tied[0])
    if sim.random_ties:
        return int(tied[rng.integers(tied.shape[0])])
    return int(tied[np.argmin(sim.tie_rank[tied])])


def best_fit_gpu(free_milli: IntArray, need_milli: int) -> int:
    """The GPU with the least free share that still fits ``need_milli`` (lowest index on ties)."""
    masked = np.where(free_milli >= need_milli, free_milli, np.iinfo(np.int64).max)
    return int(np.argmin(masked))


def random_gpu(free_milli: IntArray, need_milli: int, rng: np.random.Generator) -> int:
    """A GPU chosen uniformly among those with at least ``need_milli`` free."""
    fits = np.flatnonzero(free_milli >= need_milli)
    return int(fits[rng.integers(fits.shape[0])])


def is_partial(pod: SimPod) -> bool:
    """True for a pod asking for a share of one GPU."""
    return pod.shape.num_gpu == 1 and pod.shape.gpu_milli < MILLI_PER_GPU


def with_best_fit_gpu(sim: SimState, pod: SimPod, node: int) -> Choice:
    """``node`` with the ``best`` GPU selection for a partial-GPU pod."""
    if is_partial(pod):
        return Choice(node, (best_fit_gpu(sim.gpu_free_milli[node], pod.shape.gpu_milli),))
    return Choice(node)


class ScoredPolicy:
    """A policy that scores every feasible node with an integer and picks the best."""

    name = "scored"

    def choose(self, sim: SimState, pod: SimPod, rng: np.random.Generator) -> Choice | None:
        """Best-scoring feasible node (random among ties) with ``best`` GPU selection."""
        nodes = sim.feasible(pod)
        if nodes.shape[0] == 0:
            return None
        node = pick_max(sim, rng, nodes, self.scores(sim, pod, nodes))
        return with_best_fit_gpu(sim, pod, node)

    def scores(self, sim: SimState, pod: SimPod, nodes: IntArray) -> IntArray:
        """Integer scores 0-100 of ``nodes`` for ``pod``."""
        raise NotImplementedError


# -- the baselines ---------------------------------------------------------------------------


class RandomPolicy:
    """Uniform among feasible nodes; a random GPU that fits."""

    name = "random"

    def choose(self, sim: SimState, pod: SimPod, rng: np.random.Generator) -> Choice | None:
        """A uniformly random feasible node (and GPU)."""
        nodes = sim.feasible(pod)
        if nodes.shape[0] == 0:
            return None
        node = int(nodes[rng.integers(nodes.shape[0])])
        if is_partial(pod):
            return Choice(node, (random_gpu(sim.gpu_free_milli[node], pod.shape.gpu_milli, rng),))
        return Choice(node)


class DotProductPolicy(ScoredPolicy):
    """Tetris-style alignment: the smallest normalised dot product wins."""

    name = "dotprod"

    def scores(self, sim: SimState, pod: SimPod, nodes: IntArray) -> IntArray:
        """100 x (1 - dot / 2), truncated."""
        cpu = sim.cluster.cpu_free_milli[nodes] / MAX_SPEC_CPU_MILLI
        gpu = sim.idle_gpu_milli[nodes] / MAX_SPEC_GPU_MILLI
        dot = cpu * (pod.shape.cpu_milli / MAX_SPEC_CPU_MILLI) + gpu * (
            pod.gpu_request_milli / MAX_SPEC_GPU_MILLI
        )
        return _truncate(MAX_NODE_SCORE * (1.0 - dot / 2.0))


class ClusteringPolicy(ScoredPolicy):
    """Keep pods of the same GPU affinity together (GpuClustering)."""

    name = "clustering"

    def scores(self, sim: SimState, pod: SimPod, nodes: IntArray) -> IntArray:
        """Tier (0/25/50/75) plus 25 x used share of 8 GPUs."""
        if pod.affinity < 0:
            return np.zeros(nodes.shape[0], dtype=np.int64)
        counts = sim.affinity_count[nodes]
        kinds = (counts > 0).sum(axis=1)
        has = counts[:, pod.affinity] > 0
        tier = np.select([has & (kinds == 1), has, kinds == 0], [75, 50, 25], default=0)
        used = (MAX_NODE_SCORE // 4) * (MAX_SPEC_GPU_MILLI - sim.idle_gpu_milli[nodes])
        return np.asarray(used // MAX_SPEC_GPU_MILLI + tier, dtype=np.int64)


class PackingPolicy(ScoredPolicy):
    """Prefer shared GPUs, then free GPUs on used nodes, then idle nodes (GpuPacking)."""

    name = "packing"

    def scores(self, sim: SimState, pod: SimPod, nodes: IntArray) -> IntArray:
        """The three tiers of ``getPackingScore``."""
        n = nodes.shape[0]
        if pod.affinity < 0:
            return np.zeros(n, dtype=np.int64)
        free = sim.gpu_free_milli[nodes]
        count = sim.cluster.gpu_count[nodes]
        fully = (free == MILLI_PER_GPU).sum(axis=1)
        idle_node = fully == count
        if is_partial(pod):
            chosen = np.where(free >= pod.shape.gpu_milli, free, np.iinfo(np.int64).max).min(1)
            uses_free = (chosen == MILLI_PER_GPU).astype(np.int64)
            shared = np.maximum(MAX_NODE_SCORE - (chosen * 100 // MILLI_PER_GPU) // 10, 50)
        else:
            uses_free = np.full(n, pod.shape.num_gpu, dtype=np.int64)
            shared = np.full(n, MAX_NODE_SCORE, dtype=np.int64)
        on_used = np.maximum(MAX_NODE_SCORE // 2 - uses_free, MAX_NODE_SCORE // 3)
        on_idle = np.maximum(MAX_NODE_SCORE // 3 - fully, fully)
        score = np.where(idle_node, on_idle, np.where(uses_free > 0, on_used, shared))
        return np.asarray(score, dtype=np.int64)


class BestFitPolicy(ScoredPolicy):
    """The least weighted leftover of CPU and GPU wins (BestFit)."""

    name = "bestfit"

    def scores(self, sim: SimState, pod: SimPod, nodes: IntArray) -> IntArray:
        """100 x (1 - 0.5 CPU leftover - 0.5 GPU leftover), each over the largest node."""
        cpu_left = (sim.cluster.cpu_free_milli[nodes] - pod.shape.cpu_milli) / MAX_SPEC_CPU_MILLI
        gpu_left = (sim.idle_gpu_milli[nodes] - pod.gpu_request_milli) / MAX_SPEC_GPU_MILLI
        return _truncate((1.0 - (cpu_left * 0.5 + gpu_left * 0.5)) * MAX_NODE_SCORE)


class FgdPolicy:
    """Fragmentation gradient descent, scored and tie-broken as the authors' plugin."""

    name = "fgd"

    def choose(self, sim: SimState, pod: SimPod, rng: np.random.Generator) -> Choice | None:
        """The node (and GPU) with the best quantised FGD score, random among tied nodes."""
        options = sim.index.options(pod.shape)
        fit = sim.memory_free_mib[options.node] >= pod.memory_mib
        node, gpu, delta = options.node[fit], options.gpu[fit], options.delta_milli[fit]
        if node.shape[0] == 0:
            return None
        score = fgd_score(delta)
        starts = np.flatnonzero(np.r_[True, node[1:] != node[:-1]])
        per_node = np.maximum.reduceat(score, starts)
        chosen = pick_max(sim, rng, node[starts], per_node)
        if not is_partial(pod):
            return Choice(chosen)
        mine = (node == chosen) & (score == per_node.max())
        return Choice(chosen, (int(gpu[mine].min()),))
