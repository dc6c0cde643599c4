"""Ranked extender scores: the candidates in the ``sits`` order get 10, 9, 8, ... (1 at least).

kube-scheduler adds an extender's 0-10 score x ``weight`` x 10 to its own plugins' scores
(NodeResourcesFit LeastAllocated and BalancedAllocation, up to 100 each at weight 1) and breaks
equal totals uniformly at random (``selectHost``). An absolute score (the same for a node
whatever the other candidates) has only eleven values, so hundreds of candidates tie on the
best one, and kube-scheduler's own plugins, which spread pods, or its random choice then pick
among them: measured on the Alibaba trace that undoes most of FGD's packing
(docs/extender.md, "Measured"). Ranked scores leave one candidate with the top score, so
with a weight whose one step (weight x 10) is above the plugins' 200 points the extender's
choice is kube-scheduler's choice.

The order, highest first (the ``sits`` replay policy's, :mod:`sits_observe.analytics.
schedsim_sits`, with the SPEC's memory fit added as a level):

1. ``points``: FGD's integer score (``FGDScore``: 100 x sigmoid(-delta / 1000), delta the
   growth of the node's F_n(M) for the GPU the pod will get) minus the interference penalty;
2. ``fit``: the memory-fit / topology term rounded to ``fit_levels`` steps;
3. ``idle_gpu``: for a CPU-only pod, the node with the least idle GPU milli (its CPU then
   strands the fewest GPUs);
4. ``in_use``: a node with a GPU already allocated before an idle one (keep idle nodes whole
   for multi-GPU pods, which FGD's typical-pod set rarely protects);
5. ``share_free``: for a share, the node whose GPU for it has the least free share (best
   fit of the share, so complementary shares pair up on one GPU);
6. ``gpu_count``: a node with fewer GPUs before a larger one (keep large nodes whole);
7. ``tie_rank``: a fixed pseudo-random node order (:mod:`extender_nodes`), as the ATC'23
   authors' scheduler breaks ties, so equal nodes keep filling in the same order.

Candidates where the pod does not fit score 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

#: k8s.io/kube-scheduler/extender/v1 MaxExtenderPriority.
MAX_SCORE = 10


@dataclass(frozen=True, eq=False)
class RankKeys:
    """Per candidate, the levels of the order (see the module docstring); a level that is
    None is left out."""

    points: IntArray
    fit: IntArray
    in_use: BoolArray | None
    tie_rank: IntArray
    idle_gpu: IntArray | None = None
    share_free: IntArray | None = None
    gpu_count: IntArray | None = None


def ranked_scores(keys: RankKeys, fits: BoolArray) -> IntArray:
    """10 for the first fitting candidate in the order, 9 for the second, ..., 1 for the tenth
    and after; 0 where the pod does not fit."""
    n = fits.shape[0]
    scores = np.zeros(n, dtype=np.int64)
    rows = np.flatnonzero(fits)
    if rows.shape[0] == 0:
        return scores
    none = np.zeros(rows.shape[0], dtype=np.int64)
    in_use = keys.in_use[rows].astype(np.int64) if keys.in_use is not None else none
    idle_gpu = keys.idle_gpu[rows] if keys.idle_gpu is not None else none
    share_free = keys.share_free[rows] if keys.share_free is not None else none
    gpu_count = keys.gpu_count[rows] if keys.gpu_count is not None else none
    # lexsort sorts by the last key first; negate the "higher wins" levels.
    order = np.lexsort(
        (
            keys.tie_rank[rows],
            gpu_count,
            share_free,
            -in_use,
            idle_gpu,
            -keys.fit[rows],
            -keys.points[rows],
        )
    )
    position = np.empty(rows.shape[0], dtype=np.int64)
    position[order] = np.arange(rows.shape[0])
    scores[rows] = np.maximum(MAX_SCORE - position, 1)
    return scores
