"""Cluster GPU fragmentation as Weng et al. define it (FGD, USENIX ATC 2023), vectorised.

For node n with idle GPU milli R_n = sum of its GPUs' free milli, and a typical pod m:

- F_n(m) = R_n when m cannot run on n at all: m is CPU-only, n's GPU model is not allowed,
  fewer than ``num_gpu`` of n's GPUs have a free share >= m's per-GPU request, or n's free CPU
  is below m's CPU request;
- otherwise F_n(m) = the free milli of n's GPUs whose free share is *smaller* than m's per-GPU
  request. For a whole-GPU request (1000) that is every partly used GPU; fully used GPUs add 0.

F_n(M) = sum_m p_m F_n(m); F(M) = sum_n F_n(M). ``frag_ratio`` = F / idle GPU milli,
``frag_amount_ratio`` = F / total GPU milli (both 0-1; 0 when the denominator is 0).

Each (m, n) contribution p_m F_n(m) is attributed to exactly one :class:`Cause`, checked in
this order: ``cpu_only`` (m asks for no GPU), ``gpu_type`` (model not allowed), then by what
fits — GPUs and CPU fit: the partial amount above is ``lack_gpu`` (those GPUs' shares are too
small); only GPUs fit: ``lack_cpu``; only CPU fits: ``lack_gpu``; neither: ``lack_both``. The
causes therefore sum to F. This is the authors' simulator's split (its q1-q4 / x / no-access
classes) with its two CPU-only classes merged.

Speed: the work is over (distinct per-GPU shares U) x (nodes) x (GPUs per node) once, then
(typical pods M) x (nodes); no Python loop runs per node. :mod:`.fgd.index` keeps those terms
per node so a scheduler can score every candidate placement incrementally.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from sits_observe.analytics.fragmentation.fgd.cluster import ClusterState
from sits_observe.analytics.fragmentation.fgd.model import CAUSES, Cause, PodShape
from sits_observe.analytics.fragmentation.fgd.workload import TargetWorkload

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

_CODE = {cause: code for code, cause in enumerate(CAUSES)}


@dataclass(frozen=True, eq=False)
class FragmentationReport:
    """The cluster's fragmentation for one workload (milli-GPU; ratios 0-1)."""

    frag_milli: float
    idle_milli: int
    total_milli: int
    frag_ratio: float
    frag_amount_ratio: float
    #: Milli per cause, every :class:`Cause` present; the values sum to ``frag_milli``.
    by_cause: dict[str, float]
    #: Per node row (same order as the state): F_n(M) and R_n.
    node_frag_milli: FloatArray
    node_idle_milli: IntArray

    def cause_share(self, cause: str) -> float:
        """Share (0-1) of F due to ``cause``; 0 when F is 0."""
        return self.by_cause[cause] / self.frag_milli if self.frag_milli > 0 else 0.0


def type_matrix(state: ClusterState, workload: TargetWorkload) -> BoolArray:
    """``[M, N]``: may typical pod m run on node n's GPU model (True for CPU-only shapes)?"""
    if len(workload) == 0:
        return np.zeros((0, len(state)), dtype=np.bool_)
    return np.stack([state.type_allowed(types) for types in workload.gpu_types])


def share_terms(free_milli: IntArray, workload: TargetWorkload) -> tuple[IntArray, IntArray]:
    """For GPU free shares ``[K, G]``: per distinct share s of the workload (``[U, K]`` each)
    the number of GPUs with free >= s, and the free milli of the GPUs with free < s."""
    shares = workload.share_values[:, None, None]
    free = free_milli[None, :, :]
    enough = free >= shares
    count = enough.sum(axis=2, dtype=np.int64)
    partial = np.where(enough, 0, free).sum(axis=2, dtype=np.int64)
    return count, partial


@dataclass(frozen=True, eq=False)
class NodeTerms:
    """What F_n(M) of K nodes is made of (see :func:`share_terms`)."""

    count: IntArray  # [U, K] GPUs with free share >= each distinct share of the workload
    partial: IntArray  # [U, K] free milli of the GPUs below each distinct share
    idle_milli: IntArray  # [K] R_n
    cpu_free_milli: IntArray  # [K]
    type_ok: BoolArray  # [M, K] GPU model allowed for typical pod m


def combine(terms: NodeTerms, workload: TargetWorkload) -> FloatArray:
    """F_n(M) of the K nodes described by ``terms``."""
    return workload.weight @ _per_pod(terms, workload)[0]


def node_fragmentation(
    state: ClusterState,
    workload: TargetWorkload,
    node_indices: Sequence[int] | IntArray | None = None,
) -> FloatArray:
    """F_n(M) in milli-GPU for the given node rows (all nodes when None), in that order."""
    rows = np.arange(len(state)) if node_indices is None else np.asarray(node_indices, np.int64)
    free = state.gpu_free_milli[rows]
    count, partial = share_terms(free, workload)
    type_ok = type_matrix(state, workload)[:, rows]
    terms = NodeTerms(count, partial, free.sum(axis=1), state.cpu_free_milli[rows], type_ok)
    return combine(terms, workload)


def fragmentation(state: ClusterState, workload: TargetWorkload) -> FragmentationReport:
    """The cluster-level measure with its split by cause and the per-node values."""
    free = state.gpu_free_milli
    idle = free.sum(axis=1)
    count, partial = share_terms(free, workload)
    terms = NodeTerms(count, partial, idle, state.cpu_free_milli, type_matrix(state, workload))
    per_pod, fits = _per_pod(terms, workload)
    cause = _causes(terms, fits)
    weighted = workload.weight[:, None] * per_pod
    node_frag = weighted.sum(axis=0)
    sums = np.bincount(cause.ravel(), weights=weighted.ravel(), minlength=len(CAUSES))
    frag = float(node_frag.sum())
    idle_total = int(idle.sum())
    total = state.total_gpu_milli
    return FragmentationReport(
        frag_milli=frag,
        idle_milli=idle_total,
        total_milli=total,
        frag_ratio=frag / idle_total if idle_total else 0.0,
        frag_amount_ratio=frag / total if total else 0.0,
        by_cause={str(c): float(sums[_CODE[c]]) for c in CAUSES},
        node_frag_milli=node_frag,
        node_idle_milli=idle.astype(np.int64),
    )


def delta_if_placed(
    state: ClusterState,
    workload: TargetWorkload,
    pod: PodShape,
    node: int,
    gpu_indices: Sequence[int] | None = None,
) -> float:
    """How much F_n(M) of ``node`` grows (milli; negative = shrinks) if ``pod`` is placed there.

    ``gpu_indices`` as for :meth:`ClusterState.place`; raises ``ValueError`` when the pod
    does not fit. The state is not changed. For scoring every node at once use
    :class:`sits_observe.analytics.fragmentation.fgd.index.FragmentationIndex`.
    """
    before = node_fragmentation(state, workload, [node])[0]
    trial = state.copy()
    trial.place(node, pod, gpu_indices)
    return float(node_fragmentation(trial, workload, [node])[0] - before)


def _per_pod(
    terms: NodeTerms, workload: TargetWorkload
) -> tuple[IntArray, tuple[BoolArray, BoolArray, BoolArray]]:
    """``[M, K]`` F_n(m) (unweighted), and whether m wants a GPU / its GPUs fit / its CPU fits."""
    idle = terms.idle_milli
    shape = (len(workload), idle.shape[0])
    wants_gpu = np.broadcast_to((workload.num_gpu > 0)[:, None], shape)
    if len(workload.share_values) == 0:  # only CPU-only shapes
        gpu_ok = np.zeros(shape, dtype=np.bool_)
        part = np.zeros(shape, dtype=np.int64)
    else:
        index = np.maximum(workload.share_index, 0)
        gpu_ok = terms.count[index] >= workload.num_gpu[:, None]
        part = terms.partial[index]
    cpu_ok = terms.cpu_free_milli[None, :] >= workload.cpu_milli[:, None]
    usable = wants_gpu & terms.type_ok & gpu_ok & cpu_ok
    return np.where(usable, part, idle[None, :]), (wants_gpu, gpu_ok, cpu_ok)


def _causes(terms: NodeTerms, fits: tuple[BoolArray, BoolArray, BoolArray]) -> IntArray:
    """``[M, K]`` cause codes, checked in the order of the module docstring."""
    wants_gpu, gpu_ok, cpu_ok = fits
    conditions = [~wants_gpu, ~terms.type_ok, gpu_ok & cpu_ok, gpu_ok, cpu_ok]
    choices = [
        _CODE[Cause.cpu_only],
        _CODE[Cause.gpu_type],
        _CODE[Cause.lack_gpu],  # fits: the GPUs below m's share
        _CODE[Cause.lack_cpu],
        _CODE[Cause.lack_gpu],
    ]
    return np.select(conditions, choices, default=_CODE[Cause.lack_both]).astype(np.int64)
