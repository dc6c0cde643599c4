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

The order is the ``sits`` replay policy's (:mod:`sits_observe.analytics.placement.sits_order`, one
implementation for both), with the SPEC's memory fit in ``fit_levels`` steps as its second
level.

Candidates where the pod does not fit score 0.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from sits_observe.analytics.placement.sits_order import RankKeys, rank_order

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

#: k8s.io/kube-scheduler/extender/v1 MaxExtenderPriority.
MAX_SCORE = 10


def ranked_scores(keys: RankKeys, fits: BoolArray) -> IntArray:
    """10 for the first fitting candidate in the order, 9 for the second, ..., 1 for the tenth
    and after; 0 where the pod does not fit."""
    n = fits.shape[0]
    scores = np.zeros(n, dtype=np.int64)
    rows = np.flatnonzero(fits)
    if rows.shape[0] == 0:
        return scores
    order = rank_order(keys, rows)
    position = np.empty(rows.shape[0], dtype=np.int64)
    position[order] = np.arange(rows.shape[0])
    scores[rows] = np.maximum(MAX_SCORE - position, 1)
    return scores
