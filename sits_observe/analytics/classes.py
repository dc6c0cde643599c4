"""Workload classes: memory sensitivity, QoS tiers and the elastic rule, GPU time slices, the
Kubernetes QoS mapping and priority classes by SLA violation (SPEC "Workload classes and QoS
tiers"). The rules are pure functions of measured signals so the controller can act on them;
:func:`class_report` applies them to pods or workloads read from the store.

Rules and their edges (each number is a :class:`ClassSettings` default quoting the spec):

- Memory sensitivity from measured peak GPU memory: L1 < 2 GiB, L2 2-8 GiB (both edges
  inclusive), L3 > 8 GiB.
- Elastic rule: GPU utilisation > 90% *and* link saturation > 75% (both strict) -> memory quota
  max(quota x 0.8, minimum), bandwidth quota min(quota x 1.2, hardware maximum); inputs are
  means over a 5 s window, with the memory growth slope and link-bandwidth variance as evidence.
- Time slice: P95 > 10 ms -> 25 ms; else sequence length > 4096 tokens -> 10 ms; else 15 ms.
  When both hold the P95 rule wins: the spec lists it first, read as an if / elif chain.
- Kubernetes QoS: Guaranteed = exclusive GPU, Burstable = shared with 60% of the GPU's memory;
  BestEffort is not in the spec: shared, no memory guarantee.
- Priority: SLA-violation rate > 5% -> the next lower priority class; fragmentation > 70% ->
  preemption of lower priorities allowed (PriorityClass ``preemptionPolicy``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

import numpy as np
import polars as pl

from sits_observe.analytics.settings import ClassSettings, LinkCapacity, TierQuota
from sits_observe.store.duck import Store, utc_naive

MemoryClass = Literal["L1", "L2", "L3"]
PREEMPT = "PreemptLowerPriority"
NO_PREEMPT = "Never"


def memory_class(peak_gpu_memory_bytes: int, settings: ClassSettings) -> MemoryClass:
    """L1 below 2 GiB, L3 above 8 GiB, L2 from 2 GiB to 8 GiB inclusive."""
    if peak_gpu_memory_bytes < settings.l1_below_bytes:
        return "L1"
    if peak_gpu_memory_bytes > settings.l3_above_bytes:
        return "L3"
    return "L2"


def tier_quota(tier: str, settings: ClassSettings) -> TierQuota:
    """The quotas of a QoS tier (case-insensitive); ``KeyError`` lists the tiers on a miss."""
    try:
        return settings.tiers[tier.lower()]
    except KeyError:
        raise KeyError(f"unknown QoS tier {tier!r}; tiers: {', '.join(settings.tiers)}") from None


def smallest_fitting_tier(peak_gpu_memory_bytes: int, settings: ClassSettings) -> str | None:
    """The tier with the smallest memory quota that still covers the peak (None if none does).

    The spec does not say how tiers are assigned; this is a sizing hint, not a policy.
    """
    fitting = [(q.memory_bytes, name) for name, q in settings.tiers.items()]
    fitting = sorted(f for f in fitting if f[0] >= peak_gpu_memory_bytes)
    return fitting[0][1] if fitting else None


# -- the elastic rule --------------------------------------------------------------------------


@dataclass(frozen=True)
class ElasticSignals:
    """The elastic rule's inputs over one sliding window (None = not measured)."""

    window_s: float
    samples: int
    gpu_util_ratio: float | None
    link_saturation_ratio: float | None
    memory_growth_bytes_per_s: float | None
    link_bandwidth_variance: float | None  # (bytes/s)^2 of NVLink + PCIe traffic


@dataclass(frozen=True)
class ElasticDecision:
    """New quotas (equal to the old ones when the rule did not fire) and why."""

    triggered: bool
    memory_quota_bytes: int
    bandwidth_quota_bytes_per_s: float
    reason: str


def elastic_quota(
    memory_quota_bytes: int,
    bandwidth_quota_bytes_per_s: float,
    signals: ElasticSignals,
    settings: ClassSettings,
    *,
    memory_minimum_bytes: int,
    bandwidth_maximum_bytes_per_s: float,
) -> ElasticDecision:
    """Apply the elastic rule to one workload's quotas."""
    util, link = signals.gpu_util_ratio, signals.link_saturation_ratio
    if util is None or link is None:
        missing = [
            n for n, v in (("gpu utilisation", util), ("link saturation", link)) if v is None
        ]
        return ElasticDecision(
            False,
            memory_quota_bytes,
            bandwidth_quota_bytes_per_s,
            f"not evaluated: {' and '.join(missing)} not measured",
        )
    if util > settings.elastic_util_above_ratio and link > settings.elastic_link_above_ratio:
        memory = max(int(memory_quota_bytes * settings.elastic_memory_factor), memory_minimum_bytes)
        bandwidth = min(
            bandwidth_quota_bytes_per_s * settings.elastic_bandwidth_factor,
            bandwidth_maximum_bytes_per_s,
        )
        return ElasticDecision(
            True,
            memory,
            bandwidth,
            f"utilisation {util:.3f} > {settings.elastic_util_above_ratio:g} and link "
            f"saturation {link:.3f} > {settings.elastic_link_above_ratio:g}",
        )
    return ElasticDecision(
        False,
        memory_quota_bytes,
        bandwidth_quota_bytes_per_s,
        f"utilisation {util:.3f} / link saturation {link:.3f} not both above "
        f"{settings.elastic_util_above_ratio:g} / {settings.elastic_link_above_ratio:g}",
    )


def elastic_signals(
    series: pl.DataFrame,
    link: LinkCapacity | None,
    settings: ClassSettings,
    *,
    at: datetime | None = None,
) -> ElasticSignals:
    """The elastic inputs of one GPU over ``(at - window, at]`` (``at`` = its last sample).

    ``series`` holds ``gpu_samples`` rows of one GPU: ``ts``, ``gpu_util_ratio``,
    ``fb_used_bytes``, ``nvlink_tx/rx_bytes_per_s``, ``pcie_tx/rx_bytes_per_s``. Link
    saturation is the larger of NVLink and PCIe traffic over the product's bidirectional
    capacity (NVLink only where the product has it), mean over the window.
    """
    window = settings.elastic_window_s
    if series.height == 0:
        return ElasticSignals(window, 0, None, None, None, None)
    end = at if at is not None else series.get_column("ts").max()
    assert isinstance(end, datetime)
    part = series.filter(
        (pl.col("ts") > end - timedelta(seconds=window)) & (pl.col("ts") <= end)
    ).sort("ts")
    util = part.get_column("gpu_util_ratio").mean()
    nvlink = pl.col("nvlink_tx_bytes_per_s").fill_null(0) + pl.col(
        "nvlink_rx_bytes_per_s"
    ).fill_null(0)
    pcie = pl.col("pcie_tx_bytes_per_s").fill_null(0) + pl.col("pcie_rx_bytes_per_s").fill_null(0)
    has_nv = (
        pl.col("nvlink_tx_bytes_per_s").is_not_null()
        | pl.col("nvlink_rx_bytes_per_s").is_not_null()
    )
    has_pcie = (
        pl.col("pcie_tx_bytes_per_s").is_not_null() | pl.col("pcie_rx_bytes_per_s").is_not_null()
    )
    saturation: float | None = None
    variance: float | None = None
    if link is not None:
        ratios = [pl.when(has_pcie).then(pcie / link.pcie_bytes_per_s)]
        if link.nvlink_bytes_per_s > 0:
            ratios.append(pl.when(has_nv).then(nvlink / link.nvlink_bytes_per_s))
        sat = part.select(pl.max_horizontal(ratios).clip(0.0, 1.0).mean()).item()
        saturation = None if sat is None else float(sat)
    traffic = part.filter(has_nv | has_pcie).select((nvlink + pcie).alias("t")).get_column("t")
    if traffic.len() >= 2:
        variance = float(np.var(traffic.to_numpy(), ddof=1))
    return ElasticSignals(
        window_s=window,
        samples=part.height,
        gpu_util_ratio=None if util is None else float(util),  # type: ignore[arg-type]
        link_saturation_ratio=saturation,
        memory_growth_bytes_per_s=_slope(part, "fb_used_bytes"),
        link_bandwidth_variance=variance,
    )


def _slope(part: pl.DataFrame, column: str) -> float | None:
    """Least-squares slope of ``column`` against time, per second (None with < 2 points)."""
    data = part.filter(pl.col(column).is_not_null())
    if data.height < 2:
        return None
    t = (data.get_column("ts") - data.get_column("ts").min()).dt.total_microseconds().to_numpy()
    t = t.astype(np.float64) / 1e6
    if np.ptp(t) == 0:
        return None
    y = data.get_column(column).cast(pl.Float64).to_numpy()
    return float(np.polyfit(t, y, 1)[0])


@dataclass(frozen=True)
class Task:
    """A workload competing for a GPU when quotas are reallocated."""

    name: str
    priority: int
    misses_sla: bool


def tasks_to_reset(tasks: Sequence[Task], reallocating_priority: int) -> tuple[Task, ...]:
    """SPEC: "On reallocation, only lower-priority tasks that miss their SLA are reset"."""
    return tuple(t for t in tasks if t.priority < reallocating_priority and t.misses_sla)


# -- time slices, Kubernetes QoS, priority ---------------------------------------------------


@dataclass(frozen=True)
class TimeSlice:
    """A GPU time-slice quota and the rule that chose it."""

    slice_s: float
    rule: str


def time_slice(
    p95_latency_s: float | None, sequence_tokens: float | None, settings: ClassSettings
) -> TimeSlice:
    """P95 > 10 ms -> 25 ms; else sequence > 4096 tokens -> 10 ms; else 15 ms (None = absent)."""
    if p95_latency_s is not None and p95_latency_s > settings.slice_p95_above_s:
        return TimeSlice(
            settings.slice_long_s,
            f"p95 {p95_latency_s * 1000:g} ms > {settings.slice_p95_above_s * 1000:g} ms",
        )
    if sequence_tokens is not None and sequence_tokens > settings.slice_sequence_above_tokens:
        return TimeSlice(
            settings.slice_short_s,
            f"sequence {sequence_tokens:g} tokens > {settings.slice_sequence_above_tokens}",
        )
    absent = [
        n for n, v in (("p95", p95_latency_s), ("sequence length", sequence_tokens)) if v is None
    ]
    note = f" ({', '.join(absent)} not measured)" if absent else ""
    return TimeSlice(settings.slice_default_s, f"default{note}")


@dataclass(frozen=True)
class GpuSharing:
    """How a pod of a Kubernetes QoS class shares its GPU."""

    exclusive: bool
    memory_share_ratio: float | None
    memory_limit_bytes: int | None


def gpu_sharing(
    qos_class: str | None, gpu_memory_bytes: int | None, settings: ClassSettings
) -> GpuSharing:
    """Guaranteed -> exclusive GPU; Burstable -> shared, 60% of the GPU's memory; other -> shared
    without a memory share (BestEffort is not in the spec)."""
    if qos_class == "Guaranteed":
        return GpuSharing(True, 1.0, gpu_memory_bytes)
    if qos_class == "Burstable":
        share = settings.burstable_memory_share_ratio
        limit = int(gpu_memory_bytes * share) if gpu_memory_bytes is not None else None
        return GpuSharing(False, share, limit)
    return GpuSharing(False, None, None)


@dataclass(frozen=True)
class PriorityRecommendation:
    """Priority class advice for one workload."""

    current: str | None
    proposed: str | None
    preemption_policy: str | None
    reason: str


def recommend_priority(
    current_class: str | None,
    sla_violation_rate: float | None,
    fragmentation_ratio: float | None,
    settings: ClassSettings,
) -> PriorityRecommendation:
    """Violation rate > 5% -> next lower class; fragmentation > 70% -> allow preemption."""
    if fragmentation_ratio is None:
        preemption, frag_note = None, "fragmentation not given"
    elif fragmentation_ratio > settings.preemption_fragmentation_above_ratio:
        preemption = PREEMPT
        frag_note = (
            f"fragmentation {fragmentation_ratio:.3f} > "
            f"{settings.preemption_fragmentation_above_ratio:g}: preemption allowed"
        )
    else:
        preemption = NO_PREEMPT
        frag_note = f"fragmentation {fragmentation_ratio:.3f}: no preemption"
    ranked = sorted(settings.priority_classes, key=lambda c: c.value, reverse=True)
    names = [c.name for c in ranked]
    if sla_violation_rate is None:
        return PriorityRecommendation(
            current_class, current_class, preemption, f"no SLA measured; {frag_note}"
        )
    rate = f"SLA violation {sla_violation_rate:.1%}"
    if sla_violation_rate <= settings.sla_violation_above_ratio:
        return PriorityRecommendation(
            current_class,
            current_class,
            preemption,
            f"{rate} <= {settings.sla_violation_above_ratio:.0%}; {frag_note}",
        )
    if current_class not in names:
        return PriorityRecommendation(
            current_class,
            None,
            preemption,
            f"{rate} > {settings.sla_violation_above_ratio:.0%} but {current_class!r} is not one "
            f"of {', '.join(names)}; {frag_note}",
        )
    index = names.index(current_class)
    proposed = names[min(index + 1, len(names) - 1)]
    what = "lower" if proposed != current_class else "already lowest"
    return PriorityRecommendation(
        current_class,
        proposed,
        preemption,
        f"{rate} > {settings.sla_violation_above_ratio:.0%}: {what}; {frag_note}",
    )


def sla_violation_rate(
    latencies_s: Sequence[float] | np.ndarray, failed: int, sla_s: float
) -> float | None:
    """Share of requests that failed or took longer than ``sla_s`` (None with no requests)."""
    values = np.asarray(latencies_s, dtype=np.float64)
    total = values.size + failed
    if total == 0:
        return None
    return float((np.count_nonzero(values > sla_s) + failed) / total)


# -- applying the rules to pods and workloads -----------------------------------------------


@dataclass(frozen=True)
class WorkloadClass:
    """Every class rule applied to one pod or workload (None = not measured)."""

    namespace: str | None
    name: str | None
    level: Literal["pod", "workload"]
    pods: int
    qos_class: str | None
    priority_class: str | None
    gpu_request: int | None
    peak_gpu_memory_bytes: int | None
    peak_total_gpu_memory_bytes: int | None
    memory_source: str | None
    shared_gpu: bool
    memory_class: MemoryClass | None
    fitting_tier: str | None
    sharing: GpuSharing
    requests: int
    p95_latency_s: float | None
    sequence_p95_tokens: float | None
    time_slice: TimeSlice
    sla_p99_s: float | None
    sla_violation_rate: float | None
    priority: PriorityRecommendation


def pod_memory_peaks(
    processes: pl.DataFrame, samples: pl.DataFrame, pods: pl.DataFrame
) -> pl.DataFrame:
    """Peak GPU memory per pod: ``namespace``, ``pod``, ``peak_gpu_memory_bytes`` (largest on
    one GPU), ``peak_total_gpu_memory_bytes`` (largest sum over its GPUs at one time),
    ``memory_source`` and ``shared_gpu``.

    Per-process memory (``gpu_processes``, summed per pod, GPU and time) is preferred: it counts
    only the pod's own processes. Otherwise the device's ``fb_used_bytes`` from ``gpu_samples``
    rows labelled with the pod; on a GPU shared with another pod (``shared_gpu``) that includes
    the other pod's memory, so it overstates.
    """
    empty = pl.DataFrame(
        schema={
            "namespace": pl.String,
            "pod": pl.String,
            "peak_gpu_memory_bytes": pl.Int64,
            "peak_total_gpu_memory_bytes": pl.Int64,
            "memory_source": pl.String,
            "shared_gpu": pl.Boolean,
        }
    )
    parts = [empty]
    if processes.height and pods.height:
        named = processes.join(
            pods.select("pod_uid", "namespace", "pod").unique("pod_uid"), on="pod_uid"
        )
        per = named.group_by("namespace", "pod", "gpu_uuid", "ts").agg(
            pl.col("used_memory_bytes").sum().alias("mem")
        )
        parts.append(_peaks(per, "gpu_processes", shared=pl.lit(False)))
    if samples.height:
        labelled = samples.filter(pl.col("pod").is_not_null() & pl.col("gpu_uuid").is_not_null())
        sharers = labelled.group_by("gpu_uuid", "ts").agg(pl.col("pod").n_unique().alias("sharers"))
        per = (
            labelled.group_by("namespace", "pod", "gpu_uuid", "ts")
            .agg(pl.col("fb_used_bytes").max().alias("mem"))
            .join(sharers, on=["gpu_uuid", "ts"])
        )
        parts.append(_peaks(per, "gpu_samples", shared=(pl.col("sharers") >= 2).any()))
    merged = pl.concat(parts, how="vertical_relaxed")
    # One row per pod: the process source wins where both exist.
    return merged.sort(pl.col("memory_source") != "gpu_processes", maintain_order=True).unique(
        ["namespace", "pod"], keep="first", maintain_order=True
    )


def _peaks(per: pl.DataFrame, source: str, *, shared: pl.Expr) -> pl.DataFrame:
    per = per.filter(pl.col("mem").is_not_null())
    totals = per.group_by("namespace", "pod", "ts").agg(pl.col("mem").sum().alias("total"))
    peaks = per.group_by("namespace", "pod").agg(
        pl.col("mem").max().cast(pl.Int64).alias("peak_gpu_memory_bytes"),
        shared.alias("shared_gpu"),
    )
    total_peaks = totals.group_by("namespace", "pod").agg(
        pl.col("total").max().cast(pl.Int64).alias("peak_total_gpu_memory_bytes")
    )
    return peaks.join(total_peaks, on=["namespace", "pod"]).select(
        "namespace",
        "pod",
        "peak_gpu_memory_bytes",
        "peak_total_gpu_memory_bytes",
        pl.lit(source).alias("memory_source"),
        "shared_gpu",
    )


def _one(column: pl.Series) -> str | None:
    """The column's single non-NULL value, ``mixed`` when it has several, None when none."""
    distinct = column.drop_nulls().unique().to_list()
    if not distinct:
        return None
    return str(distinct[0]) if len(distinct) == 1 else "mixed"


def _int_max(column: pl.Series) -> int | None:
    value = column.drop_nulls().max()
    return None if value is None else int(value)  # type: ignore[arg-type]


def class_report(
    pods: pl.DataFrame,
    memory: pl.DataFrame,
    requests: pl.DataFrame,
    settings: ClassSettings,
    *,
    by: Literal["pod", "workload"] = "pod",
    fragmentation_ratio: float | None = None,
    gpu_memory_bytes: dict[str, int] | None = None,
) -> tuple[WorkloadClass, ...]:
    """Apply every class rule to each GPU pod (or workload) in ``pods``.

    ``pods``: one row per pod (``namespace``, ``pod``, ``workload``, ``node``, ``qos_class``,
    ``priority_class``, ``gpu_request``); ``memory``: :func:`pod_memory_peaks`; ``requests``:
    ``namespace``, ``pod``, ``latency_s``, ``ok``, ``prompt_tokens``, ``output_tokens``.
    ``gpu_memory_bytes`` (node -> bytes per GPU) sizes the Burstable memory share. Pods with
    no GPU request and no GPU memory measured are left out. ``fragmentation_ratio`` (0-1, the
    cluster's) decides preemption; None leaves it undecided.
    """
    node_mem = gpu_memory_bytes or {}
    table = (
        pods.join(memory, on=["namespace", "pod"], how="left")
        .filter(
            (pl.col("gpu_request").fill_null(0) > 0) | pl.col("peak_gpu_memory_bytes").is_not_null()
        )
        .with_columns(
            name=pl.coalesce("workload", "pod") if by == "workload" else pl.col("pod"),
            gpu_memory_bytes=pl.col("node").replace_strict(
                node_mem, default=None, return_dtype=pl.Int64
            ),
        )
    )
    reqs = requests.join(
        table.select("namespace", "pod", "name").unique(["namespace", "pod"]),
        on=["namespace", "pod"],
    )
    out: list[WorkloadClass] = []
    for key, group in table.partition_by(["namespace", "name"], as_dict=True).items():
        namespace, name = (None if k is None else str(k) for k in key)
        mine = reqs.filter(
            pl.col("namespace").eq_missing(namespace) & pl.col("name").eq_missing(name)
        )
        out.append(
            _classify(
                group,
                mine,
                settings,
                namespace=namespace,
                name=name,
                level=by,
                fragmentation_ratio=fragmentation_ratio,
            )
        )
    return tuple(sorted(out, key=lambda w: (w.namespace or "", w.name or "")))


def _classify(
    group: pl.DataFrame,
    reqs: pl.DataFrame,
    settings: ClassSettings,
    *,
    namespace: str | None,
    name: str | None,
    level: Literal["pod", "workload"],
    fragmentation_ratio: float | None,
) -> WorkloadClass:
    peak = _int_max(group.get_column("peak_gpu_memory_bytes"))
    qos = _one(group.get_column("qos_class"))
    priority_class = _one(group.get_column("priority_class"))
    gpu_mem = group.get_column("gpu_memory_bytes").drop_nulls().unique()
    ok = reqs.filter(pl.col("ok").fill_null(True))
    latencies = ok.get_column("latency_s").drop_nulls().to_numpy()
    seq = (
        ok.select(pl.col("prompt_tokens") + pl.col("output_tokens").fill_null(0))
        .to_series()
        .drop_nulls()
        .to_numpy()
    )
    p95 = float(np.quantile(latencies, 0.95)) if latencies.size else None
    seq95 = float(np.quantile(seq, 0.95)) if seq.size else None
    sla = settings.namespace_sla_p99_s.get(namespace or "")
    failed = reqs.height - ok.height
    violation = sla_violation_rate(latencies, failed, sla) if sla is not None else None
    return WorkloadClass(
        namespace=namespace,
        name=name,
        level=level,
        pods=group.height,
        qos_class=qos,
        priority_class=priority_class,
        gpu_request=_int_max(group.get_column("gpu_request")),
        peak_gpu_memory_bytes=peak,
        peak_total_gpu_memory_bytes=_int_max(group.get_column("peak_total_gpu_memory_bytes")),
        memory_source=_one(group.get_column("memory_source")),
        shared_gpu=bool(group.get_column("shared_gpu").fill_null(False).any()),
        memory_class=None if peak is None else memory_class(peak, settings),
        fitting_tier=None if peak is None else smallest_fitting_tier(peak, settings),
        sharing=gpu_sharing(qos, int(gpu_mem[0]) if gpu_mem.len() == 1 else None, settings),
        requests=reqs.height,
        p95_latency_s=p95,
        sequence_p95_tokens=seq95,
        time_slice=time_slice(p95, seq95, settings),
        sla_p99_s=sla,
        sla_violation_rate=violation,
        priority=recommend_priority(priority_class, violation, fragmentation_ratio, settings),
    )


# -- reading the store -------------------------------------------------------------------------

_RANGE = "(?::TIMESTAMP IS NULL OR ts >= ?) AND (?::TIMESTAMP IS NULL OR ts < ?)"


def _range(since: datetime | None, until: datetime | None) -> list[object]:
    lo = utc_naive(since) if since is not None else None
    hi = utc_naive(until) if until is not None else None
    return [lo, lo, hi, hi]


def load_latest_pods(store: Store, until: datetime | None = None) -> pl.DataFrame:
    """The latest ``pods`` row of every pod UID (as of ``until``, default: all)."""
    hi = utc_naive(until) if until is not None else None
    sql = (
        "SELECT * FROM pods WHERE pod_uid IS NOT NULL AND (?::TIMESTAMP IS NULL OR ts < ?) "
        "QUALIFY row_number() OVER (PARTITION BY pod_uid ORDER BY ts DESC) = 1"
    )
    return pl.DataFrame(store.query(sql, [hi, hi]))


def load_class_inputs(
    store: Store, since: datetime | None = None, until: datetime | None = None
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, dict[str, int]]:
    """``(pods, memory peaks, requests, node -> GPU memory bytes)`` for :func:`class_report`."""
    pods = load_latest_pods(store, until)
    processes = pl.DataFrame(
        store.query(
            "SELECT ts, gpu_uuid, pod_uid, used_memory_bytes FROM gpu_processes "
            f"WHERE pod_uid IS NOT NULL AND {_RANGE}",
            _range(since, until),
        )
    )
    samples = pl.DataFrame(
        store.query(
            "SELECT ts, gpu_uuid, namespace, pod, fb_used_bytes FROM gpu_samples "
            f"WHERE pod IS NOT NULL AND {_RANGE}",
            _range(since, until),
        )
    )
    requests = pl.DataFrame(
        store.query(
            "SELECT namespace, pod, latency_s, ok, prompt_tokens, output_tokens FROM requests "
            f"WHERE {_RANGE}",
            _range(since, until),
        )
    )
    nodes = store.query(
        "SELECT node, gpu_memory_bytes FROM nodes WHERE gpu_memory_bytes IS NOT NULL "
        "QUALIFY row_number() OVER (PARTITION BY node ORDER BY ts DESC) = 1"
    ).to_pylist()
    memory = {str(n["node"]): int(n["gpu_memory_bytes"]) for n in nodes}
    return pods, pod_memory_peaks(processes, samples, pods), requests, memory
