"""The ``sits`` node score for live scheduling: filter and prioritize over a :class:`ClusterView`.

Pure functions of (pod request, cluster view, candidate names, settings); vectorised over the
candidates so that one call against 5,000 nodes costs about a millisecond (bench/
bench_extender.py). They never read the store: the view is a cached snapshot.

Filter (GPU pods only; a pod without ``nvidia.com/gpu`` passes every node):

- *unresolvable* (preemption would not help): the node has no allocatable ``nvidia.com/gpu``,
  its GPU product is not one the pod allows (``nvidia.com/gpu.product`` in its node selector
  or required affinity) or not one the device affinity rules allow for the pod's model and
  precision (``affinity_file``, off by default: :mod:`sits_observe.analytics.topology.affinity`), or
  it has fewer GPUs than the pod requests;
- *failed* (preemption could help): fewer unallocated GPUs than requested, or for a share of
  one GPU no GPU with the share free and a free HAMi slot (``filter_free_gpus``), or fewer
  GPUs with at least the pod's memory need free (``filter_gpu_memory``; only when the need is
  known and the node's memory is measured);
- a node the view does not know passes (``unknown_nodes = "pass"``, the default: a node
  newer than the last inventory snapshot must not be blocked) or fails as unresolvable.

Prioritize: every candidate gets an integer 0-10 (kube-scheduler's MaxExtenderPriority). The
pod's request is its real one (:class:`PodRequest`: per-GPU share, allowed products), and the
fragmentation growth of a node is computed for the GPU the pod will get there
(:mod:`sits_observe.control.extender.gpus`): the device plugin's choice, or FGD's best GPU
while the bind verb names it in the pod's hint. By default (``score_mode = "ranked"``) the
candidates are ranked in the ``sits`` order and get 10, 9, ... (:mod:`extender_rank`, which
says why); ``score_mode = "absolute"`` gives each node, whatever the other candidates,

    score = round(10 * (w_f * frag + w_m * fit + w_i * quiet) / (w_f + w_m + w_i))

- ``frag`` (0-1), FGD's fragmentation descent (Weng et al., USENIX ATC 2023): with
  delta = the growth of the node's F_n(M) if the pod is placed there (milli-GPU, from
  :class:`sits_observe.analytics.fragmentation.fgd.index.FragmentationIndex`) and S = the pod's GPU
  milli (its share for a shared pod, 1000 per whole GPU; 1000 for a CPU-only pod),
  ``frag = clip((1 - delta / S) / 2, 0, 1)``. A placement can lower F_n by at most S (the
  pod's own GPUs), so delta = -S (the pod fills fragmented capacity) scores 1, delta = 0
  scores 0.5 and delta >= S scores 0. An absolute scale, not a min-max over the candidates,
  so a negligible difference never spans the range.
- ``fit`` (0-1), the SPEC's node score ("Topology and interference"): base = free GPU memory
  / requested memory, where free memory is that of the k GPUs the pod would get (GPUs without a
  pod first, most free first) and requested memory is k x the per-GPU need (declared in the
  ``sits.io/gpu-memory`` annotation, else the pod's workload's measured peak x (1 + margin),
  else a whole GPU); base is capped at ``headroom_cap_ratio`` (more headroom earns nothing,
  so the term never turns into plain spreading); x ``preferred_boost_ratio`` (1.3) when the
  node's GPU matches ``preferred_gpu_pattern`` (H100) *and* the pod is high priority (a
  uniform x1.3 for high priority alone would not change any ranking, so the SPEC's "H100 and
  high priority" is read as the conjunction); x 1 / (1 + distance) with distance 0 for one
  GPU, NVLink 0.1, same PCIe switch 0.4, cross-NUMA 1.0 for k GPUs (within one NUMA node's
  GPUs counts as the same switch). Divided by its maximum (cap x boost) to land in 0-1.
- ``quiet`` (0-1) = 1 - the node's interference score (SPEC: 0.4 bandwidth + 0.35 NVLink
  conflict + 0.25 NUMA miss); unknown counts as 0 interference.

A candidate on which the view says the pod does not fit (CPU, unallocated GPUs, or too few GPUs
with the known memory need free: the filter's rules) scores 0, so a node that would be filtered
out never wins even with the filter switched off; a node the view does not know scores
``unknown_node_score``. Missing memory measurements make ``base`` 1
(just fits).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from sits_observe.analytics.fragmentation.fgd.model import MILLI_PER_GPU, PodShape
from sits_observe.analytics.placement.fgd_score import fgd_score
from sits_observe.analytics.placement.sits_order import RankKeys, cpu_short_steps
from sits_observe.analytics.topology.affinity import (
    allowed_products,
    generation_of,
)
from sits_observe.control.extender.clusterview.view import ClusterView
from sits_observe.control.extender.gpus import GpuChoice, GpuPlacements, view_placements
from sits_observe.control.extender.rank import ranked_scores
from sits_observe.control.extender.scoring_settings import MAX_SCORE, ScoringSettings

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

GIB = 1024**3
#: The most a :class:`PodRequest` amount holds (GPUs, milli-CPU, bytes): 2**50, beyond any
#: node (a million billion GPUs, a billion billion cores' thousandths, a PiB). The wire holds a
#: larger request at this cap, so it still fits nowhere while the scorer's int64 arithmetic
#: stays in range (``gpus x 1000`` too).
REQUEST_CAP = 2**50


@dataclass(frozen=True)
class PodRequest:
    """What the scorer knows of the pod being scheduled.

    ``gpus`` the ``nvidia.com/gpu`` devices; ``gpu_milli`` the share of each (1000 = whole
    GPUs; a share below 1000 only with one device); ``gpu_types`` the GPU products it may run
    on (empty = any); ``cpu_milli``; ``memory_bytes`` its memory request; ``gpu_memory_bytes``
    the declared need per GPU (None = not declared); ``priority`` the pod's ``spec.priority``;
    ``workload`` its top-level controller (for its measured memory need); ``uid`` its UID;
    ``hint_uuids`` the GPUs its own ``nvidia.com/use-gpuuuid`` annotation allows (empty: any);
    ``model`` and ``precision`` what its ``sits.io/model`` / ``sits.io/precision`` label or
    annotation declares (None: not declared), for the device affinity rules. Read from the
    pod by :func:`sits_observe.control.extender.wire.pod_request`, which holds every amount
    at :data:`REQUEST_CAP` at most.
    """

    namespace: str
    name: str
    gpus: int
    cpu_milli: int
    gpu_memory_bytes: int | None = None
    priority: int | None = None
    workload: str | None = None
    gpu_milli: int = MILLI_PER_GPU
    gpu_types: tuple[str, ...] = ()
    uid: str = ""
    memory_bytes: int = 0
    hint_uuids: tuple[str, ...] = ()
    model: str | None = None
    precision: str | None = None

    @property
    def shared(self) -> bool:
        """A share of one GPU (``gpu_milli`` below 1000) rather than whole GPUs."""
        return self.gpus == 1 and self.gpu_milli < MILLI_PER_GPU

    def shape(self) -> PodShape:
        """The request as the FGD measure sees it: the per-GPU share and allowed products."""
        if not self.gpus:
            return PodShape(self.cpu_milli, 0, 0)
        return PodShape(self.cpu_milli, self.gpus, self.gpu_milli, self.gpu_types)


@dataclass(frozen=True)
class MemoryNeed:
    """The per-GPU memory need used for scoring and where it came from."""

    bytes_per_gpu: float | None
    source: str


def memory_need(request: PodRequest, view: ClusterView, settings: ScoringSettings) -> MemoryNeed:
    """Declared need, else the workload's measured peak plus margin, else unknown."""
    if request.gpu_memory_bytes is not None:
        return MemoryNeed(float(request.gpu_memory_bytes), "declared")
    if request.workload is not None:
        measured = view.slow.workload_need_bytes.get((request.namespace, request.workload))
        if measured is not None and measured > 0:
            need = measured * (1.0 + settings.measured_need_margin_ratio)
            return MemoryNeed(need, f"measured for {request.namespace}/{request.workload}")
    return MemoryNeed(None, "unknown (a whole GPU)")


# -- filter ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class FilterOutcome:
    """Candidates that pass, and why the others do not (node -> message)."""

    passing: tuple[str, ...]
    failed: dict[str, str]
    unresolvable: dict[str, str]


def filter_nodes(
    request: PodRequest,
    view: ClusterView,
    nodes: Sequence[str],
    settings: ScoringSettings,
) -> FilterOutcome:
    """Which of ``nodes`` can take ``request`` (see the module docstring for the rules)."""
    if request.gpus == 0:
        return FilterOutcome(tuple(nodes), {}, {})
    k = request.gpus
    rows = view.rows_of(nodes)
    known = rows >= 0
    r = np.where(known, rows, 0) if len(view) else np.zeros_like(rows)
    alloc = _take(view.gpu_allocatable, r, known, 0)
    free = _take(usable_gpus(view, request, settings), r, known, 0)
    no_gpu = known & (alloc == 0)
    wrong_type = known & (alloc > 0) & ~_take(_type_ok(view, request), r, known, True)
    affinity = _affinity(view, request, settings)
    rule_text = affinity[0] if affinity else ""
    off_rule = known & (alloc > 0) & ~wrong_type
    off_rule &= ~_take(affinity[1], r, known, True) if affinity else np.zeros_like(known)
    wrong_type |= off_rule
    too_small = known & (alloc > 0) & (alloc < k) & ~wrong_type
    busy = known & (alloc >= k) & ~wrong_type & (free < k)
    if not settings.filter_free_gpus:
        busy = np.zeros_like(known)
    need = memory_need(request, view, settings)
    short, enough = _memory_short(view, r, known, k, need)
    if not settings.filter_gpu_memory:
        short = np.zeros_like(known)
    short &= ~(no_gpu | wrong_type | too_small | busy)
    unknown_fails = ~known & (settings.unknown_nodes == "fail")
    failed: dict[str, str] = {}
    unresolvable: dict[str, str] = {}
    at = f" (inventory at {view.nodes_at:%Y-%m-%dT%H:%M:%SZ})" if view.nodes_at else ""
    rejected_rows = no_gpu | wrong_type | too_small | busy | short | unknown_fails
    for i in np.flatnonzero(rejected_rows).tolist():
        name = nodes[i]
        if unknown_fails[i]:
            unresolvable[name] = f"node not in the sits-observe inventory{at}"
        elif no_gpu[i]:
            unresolvable[name] = "node has no allocatable nvidia.com/gpu"
        elif off_rule[i]:
            model = view.gpu_model_of(int(r[i]))
            unresolvable[name] = (
                f"node's GPU product {model} ({generation_of(model)}) is not one the device "
                f"affinity rule {rule_text} allows for model {request.model}"
                + (f" at {request.precision}" if request.precision else "")
            )
        elif wrong_type[i]:
            model = view.gpu_model_of(int(r[i]))
            unresolvable[name] = (
                f"node's GPU product {model} is not one the pod allows "
                f"({', '.join(request.gpu_types)})"
            )
        elif too_small[i]:
            unresolvable[name] = (
                f"node has {alloc[i]} allocatable nvidia.com/gpu, pod requests {_amount(k)}"
            )
        elif busy[i] and request.shared:
            failed[name] = (
                f"no GPU of {alloc[i]} with {request.gpu_milli} milli-GPU free and a "
                f"free share slot{at}, pod requests 1 x {request.gpu_milli} milli-GPU"
            )
        elif busy[i]:
            failed[name] = (
                f"{free[i]} of {alloc[i]} nvidia.com/gpu unallocated{at}, pod requests {_amount(k)}"
            )
        else:
            gib = (need.bytes_per_gpu or 0.0) / GIB
            failed[name] = (
                f"{enough[i]} GPU(s) with >= {gib:.1f} GiB free, pod needs {k} "
                f"(memory need {need.source})"
            )
    rejected = set(failed) | set(unresolvable)
    passing = tuple(n for n in nodes if n not in rejected) if rejected else tuple(nodes)
    return FilterOutcome(passing, failed, unresolvable)


def _amount(value: int) -> str:
    """A requested amount as a message shows it (one held at the cap says so)."""
    return str(value) if value < REQUEST_CAP else f"at least {REQUEST_CAP} (2**50)"


def usable_gpus(view: ClusterView, request: PodRequest, settings: ScoringSettings) -> IntArray:
    """Per view row: GPUs that could take one of the pod's devices (a whole free GPU, or for
    a share enough free milli and a free HAMi slot)."""
    if not request.shared:
        return view.gpu_free
    ok = (view.state.gpu_free_milli >= request.gpu_milli) & (
        view.gpu_pods < settings.device_split_count
    )
    return np.asarray(ok.sum(axis=1), dtype=np.int64)


def _affinity(
    view: ClusterView, request: PodRequest, settings: ScoringSettings
) -> tuple[str, BoolArray] | None:
    """The device affinity rule the pod follows (as text) and, per view row, whether the
    node's GPU product satisfies it; None when no rule applies (or none is configured)."""
    if settings.affinity is None:
        return None
    models = view.state.gpu_models
    allowed = allowed_products(settings.affinity, request.model, request.precision, models)
    if allowed is None:
        return None
    # Row model id -1 (no GPU) picks the trailing True: those rows fail as "no GPU" already.
    by_row = np.append(allowed.mask(models), True)[view.state.gpu_model_id]
    return allowed.rule.describe(), np.asarray(by_row, dtype=np.bool_)


def _type_ok(view: ClusterView, request: PodRequest) -> BoolArray:
    return view.state.type_allowed(request.gpu_types) if request.gpus else np.ones(len(view), bool)


# -- prioritize -----------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Priorities:
    """Scores of the candidates (same order as asked) and the terms behind them."""

    hosts: tuple[str, ...]
    scores: IntArray
    known: BoolArray
    fits: BoolArray
    fragmentation_delta_milli: FloatArray
    fragmentation_term: FloatArray
    memory_fit_term: FloatArray
    quiet_term: FloatArray
    need: MemoryNeed
    gpu: IntArray
    fgd_points: IntArray

    def as_dict(self) -> dict[str, int]:
        """``{node: score}``."""
        return dict(zip(self.hosts, self.scores.tolist(), strict=True))


def gpu_placements(
    view: ClusterView,
    request: PodRequest,
    settings: ScoringSettings | None = None,
    *,
    gpu_choice: GpuChoice = "device_plugin",
) -> GpuPlacements:
    """Where ``request`` fits and how much each node's F_n(M) grows, for the GPU it gets
    there: the device plugin's (``device_plugin``) or FGD's best (``fgd``, named by the bind
    verb's hint); see :mod:`sits_observe.control.extender.gpus`."""
    settings = settings or ScoringSettings()
    return view_placements(
        view,
        request.shape(),
        choice=gpu_choice,
        policy=settings.device_plugin_policy,
        split_count=settings.device_split_count,
        tightest=settings.tightest_share,
    )


def fragmentation_delta(view: ClusterView, request: PodRequest) -> tuple[FloatArray, BoolArray]:
    """Per view row: growth of F_n(M) in milli-GPU if ``request`` lands there (with the GPU the
    device plugin picks), and whether it fits. NaN where the pod does not fit or the view has
    no FGD workload (no pods seen yet)."""
    placements = gpu_placements(view, request)
    return placements.delta_milli, placements.fits


def prioritize(
    request: PodRequest,
    view: ClusterView,
    nodes: Sequence[str],
    settings: ScoringSettings,
    *,
    gpu_choice: GpuChoice = "device_plugin",
) -> Priorities:
    """Scores 0-10 for ``nodes`` (see the module docstring for the formula)."""
    rows = view.rows_of(nodes)
    known = rows >= 0
    r = np.where(known, rows, 0) if len(view) else np.zeros_like(rows)
    placed = gpu_placements(view, request, settings, gpu_choice=gpu_choice)
    delta = _take(placed.delta_milli, r, known, np.nan)
    need = memory_need(request, view, settings)
    short, _ = _memory_short(view, r, known, request.gpus, need)
    fits = known & _take(placed.fits, r, known, False) & ~short
    scale = float(request.gpus * request.gpu_milli if request.gpus else MILLI_PER_GPU)
    frag = np.where(np.isnan(delta), 0.5, np.clip((1.0 - delta / scale) / 2.0, 0.0, 1.0))
    fit = _fit_term(request, view, r=r, known=known, need=need, settings=settings)
    interference = np.nan_to_num(_take(view.interference_ratio, r, known, np.nan), nan=0.0)
    quiet = 1.0 - interference
    points = np.where(np.isnan(delta), 50, fgd_score(np.nan_to_num(delta))).astype(np.int64)
    if settings.score_mode == "ranked":
        # The weights do not blend ranked levels; a weight of 0 leaves its term out (ablation).
        penalty = settings.interference_penalty_points if settings.interference_weight > 0 else 0
        fgd_points = points if settings.fragmentation_weight > 0 else np.zeros_like(points)
        fit_levels = settings.fit_levels if settings.memory_fit_weight > 0 else 0
        keys = RankKeys(
            points=fgd_points - np.rint(penalty * interference).astype(np.int64),
            fit=np.rint(fit * fit_levels).astype(np.int64),
            in_use=_take(view.state.nodes_in_use(), r, known, False)
            if settings.keep_idle_nodes
            else None,
            tie_rank=_take(view.tie_rank, r, known, 0),
            idle_gpu=(
                _take(view.state.node_idle_milli(), r, known, 0)
                if settings.cpu_on_busy_nodes and request.gpus == 0
                else None
            ),
            share_free=_share_free(view, placed.gpu, r, known) if settings.tightest_share else None,
            cpu_short=_cpu_short(view, request, r, known) if settings.cpu_for_idle_gpus else None,
            gpu_count=(
                _take(view.state.gpu_count, r, known, 0) if settings.small_nodes_first else None
            ),
        )
        scores = ranked_scores(keys, fits)
    else:
        w_f, w_m, w_i = (
            settings.fragmentation_weight,
            settings.memory_fit_weight,
            settings.interference_weight,
        )
        combined = (w_f * frag + w_m * fit + w_i * quiet) / (w_f + w_m + w_i)
        scores = np.clip(np.rint(MAX_SCORE * combined), 0, MAX_SCORE).astype(np.int64)
        scores = np.where(fits, scores, 0)
    scores = np.where(known, scores, settings.unknown_node_score).astype(np.int64)
    gpu = _take(placed.gpu, r, known, -1).astype(np.int64)
    return Priorities(tuple(nodes), scores, known, fits, delta, frag, fit, quiet, need, gpu, points)


def _cpu_short(
    view: ClusterView, request: PodRequest, r: IntArray, known: BoolArray
) -> IntArray | None:
    """Per candidate: the ``cpu_short`` level of a GPU pod (None for a CPU-only pod)."""
    if request.gpus == 0:
        return None
    state = view.state
    frag = view.fgd.node_frag_milli if view.fgd is not None else np.zeros(len(view))
    steps = cpu_short_steps(
        state.cpu_free_milli,
        state.node_idle_milli(),
        frag,
        request.cpu_milli,
        request.gpus * request.gpu_milli,
    )
    return np.asarray(_take(steps, r, known, 0), dtype=np.int64)


def _share_free(view: ClusterView, gpu: IntArray, r: IntArray, known: BoolArray) -> IntArray:
    """Per candidate: the free milli of the GPU a share gets there (0 for other pods)."""
    if not len(view):
        return np.zeros(len(r), dtype=np.int64)
    free = view.state.gpu_free_milli[np.arange(len(view)), np.maximum(gpu, 0)]
    return np.asarray(_take(np.where(gpu >= 0, free, 0), r, known, 0), dtype=np.int64)


def _memory_short(
    view: ClusterView, r: IntArray, known: BoolArray, k: int, need: MemoryNeed
) -> tuple[BoolArray, IntArray]:
    """Per candidate: fewer than ``k`` GPUs have ``need`` free (only where memory is measured
    and the need is known), and how many do."""
    if need.bytes_per_gpu is None or k == 0 or not len(view):
        return np.zeros(len(r), dtype=np.bool_), np.zeros(len(r), dtype=np.int64)
    enough = (view.fb_free_ranked_bytes[r] >= need.bytes_per_gpu).sum(axis=1).astype(np.int64)
    short: BoolArray = known & view.memory_known[r] & (enough < k)
    return short, enough


def _fit_term(
    request: PodRequest,
    view: ClusterView,
    *,
    r: IntArray,
    known: BoolArray,
    need: MemoryNeed,
    settings: ScoringSettings,
) -> FloatArray:
    k = request.gpus
    if k == 0 or not len(view):
        return np.ones(len(r))
    columns = view.fb_free_ranked_bytes.shape[1]
    free = view.fb_free_topk_bytes[r, min(k, columns)]
    per_gpu = need.bytes_per_gpu if need.bytes_per_gpu is not None else view.fb_total_bytes[r]
    cap = settings.headroom_cap_ratio if need.bytes_per_gpu is not None else 1.0
    with np.errstate(divide="ignore", invalid="ignore"):
        base = free / (k * np.asarray(per_gpu, dtype=np.float64))
    base = np.where(known & view.memory_known[r] & np.isfinite(base), base, 1.0)
    base = np.minimum(base, cap)
    high = request.priority is not None and request.priority >= settings.high_priority_min
    boost_max = settings.preferred_boost_ratio if high else 1.0
    boost = np.where(view.preferred(settings.preferred_gpu_pattern)[r], boost_max, 1.0)
    if k <= 1:
        distance = np.zeros(len(r))
    else:
        same_numa = np.where(
            k <= view.gpus_per_numa[r], settings.pcie_switch_distance, settings.cross_numa_distance
        )
        distance = np.where(view.nvlink[r], settings.nvlink_distance, same_numa)
    fit: FloatArray = base * boost / (1.0 + distance) / (cap * boost_max)
    return fit


def _take(values: npt.NDArray[Any], r: IntArray, known: BoolArray, missing: float) -> Any:
    """``values[r]`` with ``missing`` where the node is unknown (the view may be empty)."""
    if len(values) == 0:
        return np.full(len(r), missing)
    return np.where(known, values[r], missing)
