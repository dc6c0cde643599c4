"""Incremental FGD scoring: F_n(M) of every node kept up to date, every placement scored at once.

FGD (Weng et al., USENIX ATC 2023) places a pod where the node's fragmentation F_n(M) grows
least, and for a partial-GPU pod also picks the GPU that way. A replay calls that for every
pod against every node, so :class:`FragmentationIndex` keeps, per node, the terms F_n(M) is
made of (per distinct per-GPU share s of the workload: how many GPUs have free >= s, and the
free milli of those with free < s; plus R_n) and:

- :meth:`FragmentationIndex.options` scores all candidate placements of a pod in one
  vectorised pass: a candidate changes one node's CPU and, for a partial-GPU pod, one GPU's
  free share a -> a - q (GPUs with equal free share on a node give the same result, so one
  candidate per distinct share), or for a whole-GPU pod ``num_gpu`` fully free GPUs 1000 -> 0;
  the terms move by closed-form deltas, so the cost is O(candidates x (U + M)) with no pass
  over the GPUs of every node;
- :meth:`FragmentationIndex.place` applies one placement to the state and recomputes only
  that node's row.

Every value goes through the same :func:`sits_observe.analytics.fragmentation.fgd.measure.combine`,
so a delta of a node whose state does not change is exactly 0.0 and equal states compare equal.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from sits_observe.analytics.fragmentation.fgd.cluster import ClusterState
from sits_observe.analytics.fragmentation.fgd.measure import (
    NodeTerms,
    combine,
    share_terms,
    type_matrix,
)
from sits_observe.analytics.fragmentation.fgd.model import MILLI_PER_GPU, PodShape
from sits_observe.analytics.fragmentation.fgd.workload import TargetWorkload

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, eq=False)
class PlacementOptions:
    """Every feasible placement of one pod with the growth of its node's F_n(M) (milli).

    ``gpu[i]`` is the GPU a partial-GPU pod would share on ``node[i]``; -1 for whole-GPU pods
    (they take the lowest-indexed fully free GPUs, which are interchangeable for the measure)
    and for CPU-only pods. Candidates are ordered by node row, then by the GPU's free share,
    smallest first.
    """

    node: IntArray
    gpu: IntArray
    delta_milli: FloatArray

    def __len__(self) -> int:
        return int(self.node.shape[0])

    def best(self) -> tuple[int, int] | None:
        """``(node, gpu)`` with the smallest delta (first in order on ties); None if none fit."""
        if len(self) == 0:
            return None
        i = int(np.argmin(self.delta_milli))
        return int(self.node[i]), int(self.gpu[i])


class FragmentationIndex:
    """Per-node FGD terms of one (state, workload) pair; mutate the state only through it."""

    def __init__(self, state: ClusterState, workload: TargetWorkload) -> None:
        self.state = state
        self.workload = workload
        self._type_ok = type_matrix(state, workload)
        n, u = len(state), len(workload.share_values)
        self._count = np.zeros((u, n), dtype=np.int64)
        self._partial = np.zeros((u, n), dtype=np.int64)
        self._idle = np.zeros(n, dtype=np.int64)
        self.node_frag_milli: FloatArray = np.zeros(n, dtype=np.float64)
        self.refresh()

    def copy(self) -> FragmentationIndex:
        """An independent index over a copy of the state (a what-if, or a copy-on-write view):
        the per-node terms are copied, not recomputed, so it costs a few array copies."""
        twin = object.__new__(FragmentationIndex)
        twin.state = self.state.copy()
        twin.workload = self.workload
        twin._type_ok = self._type_ok  # depends only on the (fixed) GPU models
        twin._count = self._count.copy()
        twin._partial = self._partial.copy()
        twin._idle = self._idle.copy()
        twin.node_frag_milli = self.node_frag_milli.copy()
        return twin

    @property
    def frag_milli(self) -> float:
        """F(M) of the cluster now."""
        return float(self.node_frag_milli.sum())

    def refresh(self, nodes: Sequence[int] | IntArray | None = None) -> None:
        """Recompute the rows of ``nodes`` (all when None) after the state changed directly."""
        rows = np.arange(len(self.state)) if nodes is None else np.asarray(nodes, np.int64)
        free = self.state.gpu_free_milli[rows]
        count, partial = share_terms(free, self.workload)
        self._count[:, rows] = count
        self._partial[:, rows] = partial
        self._idle[rows] = free.sum(axis=1)
        terms = NodeTerms(
            count,
            partial,
            self._idle[rows],
            self.state.cpu_free_milli[rows],
            self._type_ok[:, rows],
        )
        self.node_frag_milli[rows] = combine(terms, self.workload)

    def place(
        self, node: int, pod: PodShape, gpu_indices: Sequence[int] | None = None
    ) -> tuple[int, ...]:
        """Place ``pod`` (as :meth:`ClusterState.place`) and update that node's row."""
        gpus = self.state.place(node, pod, gpu_indices)
        self.refresh([node])
        return gpus

    def options(self, pod: PodShape) -> PlacementOptions:
        """Every feasible placement of ``pod`` now, with the F_n(M) growth of each."""
        fit = np.flatnonzero(self.state.fits(pod))
        shares = self.workload.share_values[:, None]
        if pod.num_gpu == 0:
            nodes, gpu = fit, np.full(fit.shape[0], -1, dtype=np.int64)
            count, partial = self._count[:, nodes], self._partial[:, nodes]
            idle = self._idle[nodes]
        elif pod.gpu_milli < MILLI_PER_GPU:
            nodes, gpu, before = self._share_candidates(fit, pod.gpu_milli)
            after = before - pod.gpu_milli
            count = (
                self._count[:, nodes]
                + (after[None, :] >= shares).astype(np.int64)
                - (before[None, :] >= shares).astype(np.int64)
            )
            partial = (
                self._partial[:, nodes]
                + np.where(after[None, :] < shares, after[None, :], 0)
                - np.where(before[None, :] < shares, before[None, :], 0)
            )
            idle = self._idle[nodes] - pod.gpu_milli
        else:
            # num_gpu fully free GPUs go 1000 -> 0: each was >= every share and is now below
            # all of them (shares are >= 1), and adds 0 to the partial sums before and after.
            nodes, gpu = fit, np.full(fit.shape[0], -1, dtype=np.int64)
            count = self._count[:, nodes] - pod.num_gpu
            partial = self._partial[:, nodes]
            idle = self._idle[nodes] - pod.gpu_request_milli
        cpu = self.state.cpu_free_milli[nodes] - pod.cpu_milli
        terms = NodeTerms(count, partial, idle, cpu, self._type_ok[:, nodes])
        after_frag = combine(terms, self.workload)
        return PlacementOptions(nodes, gpu, after_frag - self.node_frag_milli[nodes])

    def _share_candidates(self, fit: IntArray, need: int) -> tuple[IntArray, IntArray, IntArray]:
        """(node, gpu, free share) per distinct free share >= ``need`` on each fitting node."""
        free = self.state.gpu_free_milli[fit]
        order = np.argsort(free, axis=1, kind="stable")
        ranked = np.take_along_axis(free, order, axis=1)
        first = np.ones_like(ranked, dtype=np.bool_)
        first[:, 1:] = ranked[:, 1:] != ranked[:, :-1]
        rows, cols = np.nonzero(first & (ranked >= need))
        return fit[rows], order[rows, cols].astype(np.int64), ranked[rows, cols]
