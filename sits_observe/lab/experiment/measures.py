"""The experiment's measures: pure functions over one run's timeline, and their spread over
seeds.

A run of ``sits-observe experiment`` (:mod:`sits_observe.lab.experiment.run`) records a
:class:`RunTimeline`: the cluster's allocation sampled on a fixed simulated interval (free
milli-GPU of every GPU and free milli-CPU of every node, the ground truth of the simulated
devices), every Job and notebook that arrived with its request and when it was bound, and what
the production path stored (request latencies, GPU utilisation samples, pod start times, the
controller's applied decisions). :func:`run_measures` turns it into :class:`RunMeasures`:

- **time-weighted** means of a sampled quantity: each sample's value holds until the next
  sample, the last one until the end of the run (:func:`time_weighted_mean`);
- **GPU allocation**: allocated milli-GPU over the cluster's (0-1), from the samples;
- **GPU utilisation**: the mean of ``gpu_util_ratio`` (DCGM ``GPU_UTIL`` / 100) over all GPUs at
  each stored sample instant, time-weighted (the samples travelled dcgm-exporter's format, the
  agents and the store);
- **FGD fragmentation** (Weng et al., USENIX ATC 2023,
  :func:`sits_observe.analytics.fragmentation.fgd.measure.fragmentation`) of each sample for one
  target workload M: the typical-pod set of every pod that arrived in the run (the same pods, so the
  same M, in every arm of a seed). ``frag_ratio`` is F(M) over
  the idle GPU milli (0-1), ``frag_gpus`` F(M) in GPUs;
- **waiting GPU pods**: a GPU pod *waited* when it was bound later than the scheduling pass of
  its arrival (quota refusals and unschedulable passes both count), and is *unscheduled* when
  the run ended before it was bound. The P95 wait is over every GPU pod that arrived, a
  never-bound one counting its wait until the end (a lower bound), so leaving pods unscheduled
  never improves it;
- **latency** P50 / P95 / P99 of the inference servers' completed requests, and **pod start**
  P95: creation to running (``metadata.creationTimestamp`` to the ``Initialized`` condition, as
  the inventory stored them; Kubernetes' pod start-up SLI);
- **queued GPU-hours** per tenant (namespace) and over all: each GPU pod's GPUs (a share
  counts its part: 0.25 for a quarter) times the time from its arrival to its binding (the end
  of the run when never bound), summed, in GPU-hours. Quota refusals count: a Job refused at
  creation has arrived and waits, as a workload Kueue or KAI holds for quota is queued. The
  tenants reported are :data:`TENANTS`;
- quota rejections (refused creation attempts, each retry counted) and the controller's applied
  decisions by action.

Quantiles are numpy's linear interpolation; a quantity with no data is NaN. Times are
simulated seconds.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields

import numpy as np
import numpy.typing as npt

from sits_observe.analytics.fragmentation.fgd.cluster import ClusterState
from sits_observe.analytics.fragmentation.fgd.measure import fragmentation
from sits_observe.analytics.fragmentation.fgd.model import MILLI_PER_GPU, PodShape
from sits_observe.analytics.fragmentation.fgd.workload import TargetWorkload, typical_pods
from sits_observe.lab.cluster.pods.tenants import TENANT_BURST, TENANT_IDLE

#: The namespaces whose queued GPU-hours are measures of their own (the workload's GPU
#: tenants; inference replicas are kept by their Deployment, not arrivals, so never queue here).
TENANTS = ("training", "research", TENANT_IDLE, TENANT_BURST)

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
NAN = float("nan")


@dataclass(frozen=True)
class PodTimes:
    """One arrived pod: ``namespace/name``, its request, when it arrived and was bound
    (None: never), simulated seconds."""

    name: str
    shape: PodShape
    arrived_s: float
    bound_s: float | None


@dataclass(frozen=True, eq=False)
class ClusterSamples:
    """The allocation at ``t_s[i]``: ``gpu_free_milli[i, node, gpu]`` and
    ``cpu_free_milli[i, node]``."""

    t_s: FloatArray
    gpu_free_milli: IntArray
    cpu_free_milli: IntArray


@dataclass(frozen=True, eq=False)
class RunTimeline:
    """Everything one run recorded (see the module docstring)."""

    arm: str
    seed: int
    end_s: float
    node_names: tuple[str, ...]
    gpu_models: tuple[str, ...]
    gpu_count: IntArray
    cpu_capacity_milli: IntArray
    samples: ClusterSamples
    pods: tuple[PodTimes, ...]
    util_t_s: FloatArray
    util_ratio: FloatArray
    latencies_s: FloatArray
    pod_start_s: FloatArray
    quota_rejections: int
    controller_applied: tuple[tuple[str, int], ...] = ()
    #: Pods bound by path (``extender_bind``, ``extender``, ``default``) and extender calls by
    #: ``<verb>_<outcome>``: the evidence that the arm's pods went through the extender.
    scheduled_by_path: tuple[tuple[str, int], ...] = ()
    extender_calls: tuple[tuple[str, int], ...] = ()
    #: Time to first token of every successful request, s (empty: not read).
    ttfts_s: FloatArray = field(default_factory=lambda: np.zeros(0))


@dataclass(frozen=True)
class RunMeasures:
    """The measures of one run (ratios 0-1, seconds, counts)."""

    gpu_allocation_ratio: float
    gpu_utilisation_ratio: float
    frag_ratio: float
    frag_gpus: float
    gpu_pods: int
    gpu_pods_waited: int
    gpu_pods_unscheduled: int
    wait_p95_s: float
    latency_p50_s: float
    latency_p95_s: float
    latency_p99_s: float
    requests: int
    ttft_p50_s: float
    ttft_p95_s: float
    quota_rejections: int
    pod_start_p95_s: float
    controller_applied: int
    #: GPU-hours GPU pods spent queued (see the module docstring): all, then per tenant.
    queued_gpu_hours: float = 0.0
    queued_gpu_hours_training: float = 0.0
    queued_gpu_hours_research: float = 0.0
    queued_gpu_hours_team_a: float = 0.0
    queued_gpu_hours_team_b: float = 0.0

    def values(self) -> dict[str, float]:
        """Every measure by name, as floats."""
        return {k: float(v) for k, v in asdict(self).items()}


#: The measures' names, in table order.
MEASURES = tuple(f.name for f in fields(RunMeasures))


@dataclass(frozen=True)
class Spread:
    """A measure over seeds: mean and range (NaN when no seed has a value)."""

    mean: float
    low: float
    high: float


@dataclass(frozen=True)
class TargetCheck:
    """Issue 10's target on one seed: the sits arm against the default one."""

    seed: int
    frag_lower: bool
    waiting_lower: bool
    p95_no_worse: bool

    @property
    def met(self) -> bool:
        """All three."""
        return self.frag_lower and self.waiting_lower and self.p95_no_worse


# -- building blocks ---------------------------------------------------------------------------


def time_weighted_mean(t_s: FloatArray, values: FloatArray, end_s: float) -> float:
    """Mean of a step function: ``values[i]`` from ``t_s[i]`` to ``t_s[i + 1]`` (the last one
    until ``end_s``); NaN values and zero-length spans carry no weight. NaN when empty."""
    t = np.asarray(t_s, dtype=np.float64)
    v = np.asarray(values, dtype=np.float64)
    if t.shape != v.shape:
        raise ValueError(f"t_s and values differ in shape: {t.shape} vs {v.shape}")
    if t.size == 0:
        return NAN
    if np.any(np.diff(t) < 0):
        raise ValueError("sample times must not decrease")
    spans = np.clip(np.diff(np.append(t, max(end_s, float(t[-1])))), 0.0, None)
    keep = ~np.isnan(v) & (spans > 0)
    if not keep.any():
        finite = v[~np.isnan(v)]
        return float(finite[-1]) if finite.size else NAN
    return float(np.sum(v[keep] * spans[keep]) / np.sum(spans[keep]))


def quantile(values: FloatArray, q: float) -> float:
    """The ``q`` quantile (0-1, linear interpolation); NaN for no values."""
    v = np.asarray(values, dtype=np.float64)
    v = v[~np.isnan(v)]
    return float(np.quantile(v, q)) if v.size else NAN


@dataclass(frozen=True)
class WaitStats:
    """GPU pods that arrived, waited, were never bound, and the P95 wait (seconds)."""

    gpu_pods: int
    waited: int
    unscheduled: int
    p95_s: float


def wait_stats(pods: Iterable[PodTimes], end_s: float) -> WaitStats:
    """Waiting and unscheduled GPU pods (see the module docstring); CPU-only pods are left out."""
    gpu = [p for p in pods if not p.shape.cpu_only]
    waits = np.array(
        [(p.bound_s if p.bound_s is not None else end_s) - p.arrived_s for p in gpu],
        dtype=np.float64,
    )
    unscheduled = sum(1 for p in gpu if p.bound_s is None)
    waited = sum(1 for p in gpu if p.bound_s is not None and p.bound_s > p.arrived_s)
    return WaitStats(len(gpu), waited, unscheduled, quantile(waits, 0.95))


def queued_gpu_hours(pods: Iterable[PodTimes], end_s: float) -> dict[str, float]:
    """GPU-hours queued per namespace (the part of ``name`` before ``/``): GPUs x (bound, or
    ``end_s`` when never bound, minus arrival), summed; CPU-only pods are left out."""
    out: dict[str, float] = {}
    for p in pods:
        if p.shape.cpu_only:
            continue
        bound = p.bound_s if p.bound_s is not None else end_s
        gpus = p.shape.num_gpu * p.shape.gpu_milli / MILLI_PER_GPU
        namespace = p.name.split("/", 1)[0]
        waited_h = max(bound - p.arrived_s, 0.0) / 3600.0
        out[namespace] = out.get(namespace, 0.0) + gpus * waited_h
    return out


def target_workload(pods: Iterable[PodTimes]) -> TargetWorkload | None:
    """The FGD target workload M of the arrived pods (None when none arrived)."""
    shapes = [p.shape for p in pods]
    return typical_pods(shapes) if shapes else None


@dataclass(frozen=True, eq=False)
class Series:
    """Per-sample allocation (0-1), FGD fragmentation ratio (0-1) and amount (GPUs)."""

    t_s: FloatArray
    allocation_ratio: FloatArray
    frag_ratio: FloatArray
    frag_gpus: FloatArray


def series(timeline: RunTimeline, workload: TargetWorkload | None) -> Series:
    """Allocation and fragmentation at every sample of ``timeline`` for ``workload``."""
    samples = timeline.samples
    n = samples.t_s.shape[0]
    state = ClusterState.empty(
        timeline.node_names, timeline.cpu_capacity_milli, timeline.gpu_count, timeline.gpu_models
    )
    total = float(state.total_gpu_milli)
    allocation = np.full(n, NAN)
    ratio = np.full(n, NAN)
    amount = np.full(n, NAN)
    width = state.gpu_free_milli.shape[1]
    for i in range(n):
        state.gpu_free_milli[:, :] = samples.gpu_free_milli[i][:, :width]
        state.cpu_free_milli[:] = samples.cpu_free_milli[i]
        allocation[i] = 1.0 - state.idle_gpu_milli / total if total else NAN
        if workload is not None:
            report = fragmentation(state, workload)
            ratio[i] = report.frag_ratio
            amount[i] = report.frag_milli / MILLI_PER_GPU
    return Series(samples.t_s.astype(np.float64), allocation, ratio, amount)


# -- one run, many seeds ---------------------------------------------------------------------


def run_measures(timeline: RunTimeline, workload: TargetWorkload | None = None) -> RunMeasures:
    """The measures of one run; ``workload`` defaults to the run's own arrivals' M."""
    m = workload if workload is not None else target_workload(timeline.pods)
    s = series(timeline, m)
    end = timeline.end_s
    waits = wait_stats(timeline.pods, end)
    lat = timeline.latencies_s
    queued = queued_gpu_hours(timeline.pods, end)
    return RunMeasures(
        queued_gpu_hours=sum(queued.values()),
        queued_gpu_hours_training=queued.get("training", 0.0),
        queued_gpu_hours_research=queued.get("research", 0.0),
        queued_gpu_hours_team_a=queued.get(TENANT_IDLE, 0.0),
        queued_gpu_hours_team_b=queued.get(TENANT_BURST, 0.0),
        gpu_allocation_ratio=time_weighted_mean(s.t_s, s.allocation_ratio, end),
        gpu_utilisation_ratio=time_weighted_mean(timeline.util_t_s, timeline.util_ratio, end),
        frag_ratio=time_weighted_mean(s.t_s, s.frag_ratio, end),
        frag_gpus=time_weighted_mean(s.t_s, s.frag_gpus, end),
        gpu_pods=waits.gpu_pods,
        gpu_pods_waited=waits.waited,
        gpu_pods_unscheduled=waits.unscheduled,
        wait_p95_s=waits.p95_s,
        latency_p50_s=quantile(lat, 0.50),
        latency_p95_s=quantile(lat, 0.95),
        latency_p99_s=quantile(lat, 0.99),
        requests=int(np.count_nonzero(~np.isnan(lat))),
        ttft_p50_s=quantile(timeline.ttfts_s, 0.50),
        ttft_p95_s=quantile(timeline.ttfts_s, 0.95),
        quota_rejections=timeline.quota_rejections,
        pod_start_p95_s=quantile(timeline.pod_start_s, 0.95),
        controller_applied=sum(n for _, n in timeline.controller_applied),
    )


def spread(runs: Sequence[RunMeasures]) -> dict[str, Spread]:
    """Mean and min-max of every measure over ``runs`` (one per seed), NaNs left out."""
    out: dict[str, Spread] = {}
    for name in MEASURES:
        v = np.array([r.values()[name] for r in runs], dtype=np.float64)
        v = v[~np.isnan(v)]
        out[name] = (
            Spread(float(v.mean()), float(v.min()), float(v.max()))
            if v.size
            else Spread(NAN, NAN, NAN)
        )
    return out


def differences(full: Sequence[RunMeasures], without: Sequence[RunMeasures]) -> dict[str, Spread]:
    """What a module is worth, per measure: ``full`` minus ``without`` seed by seed (the two
    lists in the same seed order), then the mean and min-max of those differences (a seed
    where either side has no value is left out). Positive: the module raises the measure."""
    if len(full) != len(without):
        raise ValueError("differences need one run per seed on both sides")
    out: dict[str, Spread] = {}
    for name in MEASURES:
        d = np.array(
            [f.values()[name] - w.values()[name] for f, w in zip(full, without, strict=True)],
            dtype=np.float64,
        )
        d = d[~np.isnan(d)]
        out[name] = (
            Spread(float(d.mean()), float(d.min()), float(d.max()))
            if d.size
            else Spread(NAN, NAN, NAN)
        )
    return out


def check_target(seed: int, default: RunMeasures, sits: RunMeasures) -> TargetCheck:
    """Does ``sits`` lower time-weighted fragmentation and waiting plus unscheduled GPU pods
    against ``default``, with a P95 latency no worse (NaN compares as not met)?"""
    return TargetCheck(
        seed=seed,
        frag_lower=sits.frag_ratio < default.frag_ratio,
        waiting_lower=(sits.gpu_pods_waited + sits.gpu_pods_unscheduled)
        < (default.gpu_pods_waited + default.gpu_pods_unscheduled),
        p95_no_worse=sits.latency_p95_s <= default.latency_p95_s,
    )


def finite_or_none(value: float) -> float | None:
    """``value``, or None for NaN / infinity (JSON has no NaN)."""
    return value if math.isfinite(value) else None


def applied_by_action(rows: Mapping[str, int]) -> tuple[tuple[str, int], ...]:
    """Counts by name (applied decisions by action, pods by path, ...), sorted by name."""
    return tuple(sorted((str(k), int(v)) for k, v in rows.items()))
