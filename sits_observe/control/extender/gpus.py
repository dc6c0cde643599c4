"""Which GPU of each candidate node a pod would get, and how much F_n(M) grows with it.

kube-scheduler (and so the extender) picks a node; the GPU inside it is the device plugin's
choice (:mod:`sits_observe.analytics.placement.device_plugin`), unless the extender tells
it with the HAMi hint annotation ``nvidia.com/use-gpuuuid`` (the ``bind`` verb,
docs/extender.md). So the score of a node must be the growth of its fragmentation for the
GPU the pod will really get:

- ``device_plugin``: the GPU the device plugin will pick without a hint. Whole GPUs: the
  lowest-indexed fully free ones (the NVIDIA device plugin; which free GPUs does not change
  F_n). A share: HAMi's choice, predicted with the same rule as
  :func:`sits_observe.analytics.placement.device_plugin.allocate_gpus` (score ``10 x (slot + core +
  memory)``, ``spread`` the lowest, ``binpack`` the highest, lowest index on ties), written
  here in integers over every node at once: ``(pods + 1) x 1000 + 2 x used x split`` is
  HAMi's score x 100 x split, so equal scores stay exactly equal;
- ``fgd``: the GPU with the best FGD score on the node (the authors' ``gpuSelMethod``:
  the highest quantised score, lowest index among equals; with ``tightest``, as the ``sits``
  replay policy, the least free share among equals, then the lowest index), which the bind
  verb then names in the hint.

Vectorised over the view's rows: one call costs a few array passes, not a loop over nodes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from sits_observe.analytics.fragmentation.fgd.index import FragmentationIndex
from sits_observe.analytics.fragmentation.fgd.model import MILLI_PER_GPU, PodShape
from sits_observe.analytics.placement.device_plugin import GpuPolicy
from sits_observe.analytics.placement.fgd_score import fgd_score
from sits_observe.control.extender.clusterview.view import ClusterView

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

GpuChoice = Literal["device_plugin", "fgd"]


def device_plugin_gpu(
    free_milli: IntArray,
    pods_per_gpu: IntArray,
    gpu_count: IntArray,
    gpu_milli: int,
    *,
    policy: GpuPolicy,
    split_count: int,
) -> IntArray:
    """Per node row: the GPU a HAMi-style plugin gives a ``gpu_milli`` share; -1 if none fits.

    ``free_milli[N, G]`` and ``pods_per_gpu[N, G]`` are the nodes' devices, ``gpu_count[N]``
    how many of the columns are real. Same result as ``allocate_gpus`` node by node.
    """
    columns = free_milli.shape[1]
    real = np.arange(columns)[None, :] < gpu_count[:, None]
    ok = real & (free_milli >= gpu_milli) & (pods_per_gpu < split_count)
    used = MILLI_PER_GPU - free_milli + gpu_milli
    score = (pods_per_gpu + 1) * MILLI_PER_GPU + 2 * used * split_count
    if policy == "spread":
        pick = np.argmin(np.where(ok, score, np.iinfo(np.int64).max), axis=1)
    else:
        pick = np.argmax(np.where(ok, score, -1), axis=1)
    return np.where(ok.any(axis=1), pick, -1).astype(np.int64)


@dataclass(frozen=True, eq=False)
class NodeChoice:
    """Per view row: the pod's F_n(M) growth (NaN where it does not fit) and, for a share,
    the GPU it would get there (-1 for whole GPUs, CPU-only pods and rows where it fits not)."""

    delta_milli: FloatArray
    gpu: IntArray


def node_choices(
    index: FragmentationIndex,
    pods_per_gpu: IntArray,
    shape: PodShape,
    *,
    choice: GpuChoice,
    policy: GpuPolicy,
    split_count: int,
    tightest: bool,
) -> NodeChoice:
    """The growth of every node's F_n(M) for the GPU ``choice`` gives ``shape`` there
    (``tightest``: FGD's choice among equal scores is the least free share)."""
    state = index.state
    n = len(state)
    delta = np.full(n, np.nan)
    gpu = np.full(n, -1, dtype=np.int64)
    if n == 0:
        return NodeChoice(delta, gpu)
    options = index.options(shape)
    if len(options) == 0:
        return NodeChoice(delta, gpu)
    shared = shape.num_gpu == 1 and shape.gpu_milli < MILLI_PER_GPU
    if not shared:
        # One candidate per fitting node (which whole GPUs does not change F_n).
        delta[options.node] = options.delta_milli
        return NodeChoice(delta, gpu)
    if choice == "fgd":
        return _best_fgd_gpu(options.node, options.gpu, options.delta_milli, n, tightest)
    picked = device_plugin_gpu(
        state.gpu_free_milli,
        pods_per_gpu,
        state.gpu_count,
        shape.gpu_milli,
        policy=policy,
        split_count=split_count,
    )
    # Options are ordered by node row, then by the GPU's free share: (node, free share) is a
    # sorted key, one candidate per distinct share, and the delta depends only on that share.
    width = MILLI_PER_GPU + 1
    option_key = options.node * width + state.gpu_free_milli[options.node, options.gpu]
    rows = np.flatnonzero(picked >= 0)
    wanted = rows * width + state.gpu_free_milli[rows, picked[rows]]
    at = np.clip(np.searchsorted(option_key, wanted), 0, option_key.shape[0] - 1)
    hit = option_key[at] == wanted  # a node the device plugin fits but the CPU does not: miss
    delta[rows[hit]] = options.delta_milli[at[hit]]
    gpu[rows[hit]] = picked[rows[hit]]
    return NodeChoice(delta, gpu)


def _best_fgd_gpu(
    node: IntArray, gpu: IntArray, delta: FloatArray, n: int, tightest: bool
) -> NodeChoice:
    """Per node: the best quantised FGD score; among its equals the lowest GPU index, or with
    ``tightest`` the first (options are ordered by node, then free share, smallest first)."""
    score = fgd_score(delta)
    starts = np.flatnonzero(np.r_[True, node[1:] != node[:-1]])
    best = np.maximum.reduceat(score, starts)
    group = np.cumsum(np.r_[False, node[1:] != node[:-1]])
    candidate = score == best[group]
    if tightest:
        position = np.arange(node.shape[0])
        masked = np.where(candidate, position, np.iinfo(np.int64).max)
        is_pick = position == np.minimum.reduceat(masked, starts)[group]
    else:
        masked = np.where(candidate, gpu, np.iinfo(np.int64).max)
        lowest = np.minimum.reduceat(masked, starts)
        is_pick = candidate & (gpu == lowest[group])
    out_delta = np.full(n, np.nan)
    out_gpu = np.full(n, -1, dtype=np.int64)
    out_delta[node[is_pick]] = delta[is_pick]
    out_gpu[node[is_pick]] = gpu[is_pick]
    return NodeChoice(out_delta, out_gpu)


@dataclass(frozen=True, eq=False)
class GpuPlacements:
    """Per view row: F_n(M) growth (NaN where it does not fit or without a workload M),
    whether the pod fits, and the GPU a share gets there (-1 otherwise)."""

    delta_milli: FloatArray
    fits: BoolArray
    gpu: IntArray


def view_placements(
    view: ClusterView,
    shape: PodShape,
    *,
    choice: GpuChoice,
    policy: GpuPolicy,
    split_count: int,
    tightest: bool,
) -> GpuPlacements:
    """:func:`node_choices` over a view, and where the pod fits (a share also needs a GPU the
    device plugin would give it); without a workload M only the fit and GPU are known."""
    n = len(view)
    fits = view.state.fits(shape) if n else np.zeros(0, dtype=np.bool_)
    gpu = np.full(n, -1, dtype=np.int64)
    delta = np.full(n, np.nan)
    shared = shape.num_gpu == 1 and shape.gpu_milli < MILLI_PER_GPU
    if view.fgd is not None and n:
        chosen = node_choices(
            view.fgd,
            view.gpu_pods,
            shape,
            choice=choice,
            policy=policy,
            split_count=split_count,
            tightest=tightest,
        )
        delta, gpu = chosen.delta_milli, chosen.gpu
    elif shared and n:
        state = view.state
        gpu = device_plugin_gpu(
            state.gpu_free_milli,
            view.gpu_pods,
            state.gpu_count,
            shape.gpu_milli,
            policy=policy,
            split_count=split_count,
        )
    if shared:
        fits = fits & (gpu >= 0)
    return GpuPlacements(delta, fits, gpu)
