"""The ``sits`` order of candidate nodes, one implementation for the replay policy
(:mod:`sits_observe.lab.replay.engine.sits`) and the extender's ranked scores
(:mod:`sits_observe.control.extender.rank`), so the two cannot drift apart.

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
6. ``cpu_short``, lower first: for a GPU pod, the node left with the least usable idle GPU
   that its free CPU can no longer feed (:func:`cpu_short_steps`);
7. ``gpu_count``, lower first: a node with fewer GPUs before a larger one (keep large nodes
   whole);
8. ``tie_rank``, lower first: a fixed node order, as the ATC'23 authors' scheduler breaks
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
    cpu_short: IntArray | None = None
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
        if self.cpu_short is not None:
            out.append(self.cpu_short[rows])
        if self.gpu_count is not None:
            out.append(self.gpu_count[rows])
        return out


#: Milli-GPU per step of the ``cpu_short`` level (coarse, so equal nodes still tie).
CPU_SHORT_STEP_MILLI = 250


def cpu_short_steps(
    cpu_free_milli: IntArray,
    idle_gpu_milli: IntArray,
    frag_milli: FloatArray,
    cpu_milli: int,
    gpu_milli: int,
) -> IntArray:
    """Per node, the ``cpu_short`` level of a GPU pod asking ``cpu_milli`` CPU and
    ``gpu_milli`` GPU in all: after the pod lands there, the node's usable idle GPU (idle milli
    minus F_n(M), ``frag_milli``: what the typical pods can still use) that its free CPU cannot
    feed at the pod's own CPU per GPU, in steps of :data:`CPU_SHORT_STEP_MILLI`.

    Such GPUs are stranded by CPU, not by their shares, and FGD's score sees it only once a
    typical pod no longer fits. A pod without CPU (or without GPU) strands nothing: 0.
    """
    if cpu_milli <= 0 or gpu_milli <= 0:
        return np.zeros(cpu_free_milli.shape[0], dtype=np.int64)
    gpu_after = idle_gpu_milli - np.rint(frag_milli).astype(np.int64) - gpu_milli
    fed = (cpu_free_milli - cpu_milli) * (gpu_milli / cpu_milli)
    short = np.maximum(gpu_after - fed, 0.0)
    return (short // CPU_SHORT_STEP_MILLI).astype(np.int64)


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
