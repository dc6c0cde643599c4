"""The ``sits`` order of candidate nodes, one implementation for the replay policy
(:mod:`sits_observe.analytics.schedsim_sits`) and the extender's ranked scores
(:mod:`sits_observe.control.extender_rank`), so the two cannot drift apart.

Levels, compared in turn (the first that differs decides):

1. ``points``, higher first: FGD's integer score (``FGDScore``: 100 x sigmoid(-delta / 1000),
   delta the growth of the node's F_n(M) for the GPU the pod will get) minus the interference
   penalty;
2. ``fit``, higher first: the extender's memory-fit / topology term in ``fit_levels`` steps, or
   the replay's topology factor 1 / (1 + distance) of a multi-GPU pod's GPUs;
3. ``idle_gpu``, lower first: for a CPU-only pod, the node with the least idle GPU milli (its
   CPU then strands the fewest GPUs);
4. ``in_use``, True first: a node with a GPU already allocated before an idle one (keep idle
   nodes whole for multi-GPU pods, which FGD's typical-pod set rarely protects);
5. ``share_free``, lower first: for a share, the node whose GPU for it has the least free
   share (best fit of the share, so complementary shares pair up on one GPU);
6. ``gpu_count``, lower first: a node with fewer GPUs before a larger one (keep large nodes
   whole);
7. ``tie_rank``, lower first: a fixed node order, as the ATC'23 authors' scheduler breaks
   ties, so equal nodes keep filling in the same order.

A level that is None is left out (its switch is off, or it does not apply to the pod).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True, eq=False)
class RankKeys:
    """Per candidate, the levels of the order (see the module docstring)."""

    points: IntArray
    fit: IntArray | FloatArray | None
    in_use: BoolArray | None
    tie_rank: IntArray
    idle_gpu: IntArray | None = None
    share_free: IntArray | None = None
    gpu_count: IntArray | None = None

    def levels(self, rows: IntArray) -> list[npt.NDArray[np.generic]]:
        """The levels before ``tie_rank`` for ``rows``, most important first, each negated
        where higher wins (so lower is better throughout)."""
        out: list[npt.NDArray[np.generic]] = [-self.points[rows]]
        if self.fit is not None:
            out.append(-self.fit[rows])
        if self.idle_gpu is not None:
            out.append(self.idle_gpu[rows])
        if self.in_use is not None:
            out.append(-self.in_use[rows].astype(np.int64))
        if self.share_free is not None:
            out.append(self.share_free[rows])
        if self.gpu_count is not None:
            out.append(self.gpu_count[rows])
        return out


def rank_order(keys: RankKeys, rows: IntArray) -> IntArray:
    """Positions into ``rows``, best candidate first."""
    # lexsort sorts by the last key first.
    return np.lexsort((keys.tie_rank[rows], *reversed(keys.levels(rows))))


def leaders(keys: RankKeys, rows: IntArray) -> IntArray:
    """The candidates of ``rows`` equal to the best on every level but ``tie_rank``, in the
    order given (the set a tie-break, by ``tie_rank`` or at random, chooses from)."""
    tied = np.arange(rows.shape[0])
    for level in keys.levels(rows):
        if tied.shape[0] <= 1:
            break
        values = level[tied]
        tied = tied[values == values.min()]
    return rows[tied]
