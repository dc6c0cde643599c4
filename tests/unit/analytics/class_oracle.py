"""Test oracle: the scalar class rules as they were before the vectorised rules in
:mod:`sits_observe.analytics.classes.rules` replaced them, kept verbatim (only the result types
now come from the package). Tests check that the vectorised rules, the class report and the
controller agree with these on many generated inputs; nothing in the package imports this.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Literal

import numpy as np
import polars as pl

from sits_observe.analytics.classes.scalar import (
    ElasticDecision,
    ElasticSignals,
    GpuSharing,
    PriorityRecommendation,
    Task,
    TimeSlice,
)
from sits_observe.analytics.classes.settings import ClassSettings, TierQuota
from sits_observe.analytics.topology.settings import LinkCapacity

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


def tasks_to_reset(tasks: Sequence[Task], reallocating_priority: int) -> tuple[Task, ...]:
    """SPEC: "On reallocation, only lower-priority tasks that miss their SLA are reset"."""
    return tuple(t for t in tasks if t.priority < reallocating_priority and t.misses_sla)


# -- time slices, Kubernetes QoS, priority ---------------------------------------------------


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
