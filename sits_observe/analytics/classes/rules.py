"""The spec's workload-class rules, each written once, vectorised (SPEC "Workload classes and
QoS tiers"). Every rule is a Polars expression over the columns it reads, so the class report
(:mod:`.classes`), the elastic view (:mod:`.elastic`) and the controller
(:mod:`sits_observe.control.controller.rules.levels`) evaluate the same code on whole frames.

Rules and their edges (each number is a :class:`ClassSettings` default quoting the spec):

- Memory sensitivity from measured peak GPU memory: L1 < 2 GiB, L2 2-8 GiB (both edges
  inclusive), L3 > 8 GiB.
- Elastic rule: GPU utilisation > 90% *and* link saturation > 75% (both strict) -> memory quota
  max(quota x 0.8, minimum), bandwidth quota min(quota x 1.2, hardware maximum). "On
  reallocation, only lower-priority tasks that miss their SLA are reset": a task is reset when
  its priority is below the reallocating one's and its P99 is above its SLA.
- Time slice: P95 > 10 ms -> 25 ms; else sequence length > 4096 tokens -> 10 ms; else 15 ms.
  When both hold the P95 rule wins: the spec lists it first, read as an if / elif chain.
- Kubernetes QoS: Guaranteed = exclusive GPU, Burstable = shared with 60% of the GPU's memory;
  BestEffort is not in the spec: shared, no memory guarantee.
- Priority: SLA-violation rate > 5% -> the next lower priority class; fragmentation > 70% ->
  preemption of lower priorities allowed (PriorityClass ``preemptionPolicy``).

Conventions: a null input is "not measured" and never passes a threshold; NaN counts as null
(Polars orders NaN above every number, so it would otherwise pass every ``>``). Each strict
threshold test takes a ``band``: the fraction (0-1, a float or a per-row expression) by which
that row's threshold is lowered. 0, the default, is the spec's rule; the controller passes its
hysteresis band for objects already holding the outcome, so it leaves it only once the signal
falls that far below the boundary. A level rule (memory class) is its boundaries
(:func:`memory_class_bounds`), which the controller's hysteresis uses directly.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from sits_observe.analytics.classes.settings import ClassSettings, TierQuota
from sits_observe.errors import UnknownNameError

MEMORY_CLASSES: tuple[str, ...] = ("L1", "L2", "L3")
PREEMPT = "PreemptLowerPriority"
NO_PREEMPT = "Never"
#: Which branch of the time-slice rule chose the slice.
SLICE_P95, SLICE_SEQUENCE, SLICE_DEFAULT = "p95", "sequence", "default"

Band = float | pl.Expr


def measured(value: pl.Expr) -> pl.Expr:
    """``value`` as float64 with NaN turned into null (not measured)."""
    return value.cast(pl.Float64).fill_nan(None)


def above(value: pl.Expr, threshold: float | pl.Expr, band: Band = 0.0) -> pl.Expr:
    """``value > threshold x (1 - band)``; False where the value (or threshold) is missing."""
    limit = threshold if isinstance(threshold, pl.Expr) else pl.lit(threshold, pl.Float64)
    lowered = limit * (1.0 - band) if isinstance(band, pl.Expr) or band else limit
    return (measured(value) > measured(lowered)).fill_null(False)


# -- memory sensitivity and tiers ----------------------------------------------------------


@dataclass(frozen=True)
class LevelBounds:
    """A level rule: value above ``boundaries[i]`` (``>=`` where ``inclusive[i]``) is at least
    level ``i + 1`` of ``names``."""

    names: tuple[str, ...]
    boundaries: tuple[float, ...]
    inclusive: tuple[bool, ...]

    def code(self, value: pl.Expr) -> pl.Expr:
        """Level index (Int64) of each value; null where not measured."""
        v = measured(value)
        pairs = zip(self.boundaries, self.inclusive, strict=True)
        steps = [((v >= b) if incl else (v > b)).cast(pl.Int64) for b, incl in pairs]
        return pl.when(v.is_not_null()).then(pl.sum_horizontal(steps).cast(pl.Int64))

    def level(self, value: pl.Expr) -> pl.Expr:
        """Level name of each value; null where not measured."""
        names = dict(enumerate(self.names))
        return self.code(value).replace_strict(names, default=None, return_dtype=pl.String)


def memory_class_bounds(settings: ClassSettings) -> LevelBounds:
    """L1 below 2 GiB, L3 above 8 GiB, L2 from 2 GiB to 8 GiB inclusive."""
    return LevelBounds(
        MEMORY_CLASSES,
        (float(settings.l1_below_bytes), float(settings.l3_above_bytes)),
        (True, False),
    )


def memory_class(peak_gpu_memory_bytes: pl.Expr, settings: ClassSettings) -> pl.Expr:
    """Memory-sensitivity class (``L1`` / ``L2`` / ``L3``) of peak GPU memory in bytes."""
    return memory_class_bounds(settings).level(peak_gpu_memory_bytes)


def tier_quota(tier: str, settings: ClassSettings) -> TierQuota:
    """The quotas of a QoS tier (case-insensitive); an unknown tier is an
    :class:`UnknownNameError` that lists the tiers."""
    try:
        return settings.tiers[tier.lower()]
    except KeyError:
        raise UnknownNameError(
            f"unknown QoS tier {tier!r}; tiers: {', '.join(settings.tiers)}"
        ) from None


def smallest_fitting_tier(peak_gpu_memory_bytes: pl.Expr, settings: ClassSettings) -> pl.Expr:
    """The tier with the smallest memory quota that still covers the peak (null if none does;
    ties by tier name). The spec does not say how tiers are assigned: a sizing hint."""
    peak = measured(peak_gpu_memory_bytes)
    out = pl.lit(None, pl.String)
    for memory, name in sorted(
        ((q.memory_bytes, n) for n, q in settings.tiers.items()), reverse=True
    ):
        out = pl.when(peak <= float(memory)).then(pl.lit(name)).otherwise(out)
    return out


def gpu_sharing(
    qos_class: pl.Expr, gpu_memory_bytes: pl.Expr, settings: ClassSettings
) -> list[pl.Expr]:
    """``exclusive_gpu``, ``gpu_memory_share_ratio`` and ``gpu_memory_limit_bytes``: Guaranteed
    -> exclusive GPU; Burstable -> shared, 60% of the GPU's memory; other -> shared without a
    memory share."""
    share = settings.burstable_memory_share_ratio
    guaranteed = qos_class.eq("Guaranteed").fill_null(False)
    burstable = qos_class.eq("Burstable").fill_null(False)
    memory = gpu_memory_bytes.cast(pl.Int64)
    return [
        guaranteed.alias("exclusive_gpu"),
        pl.when(guaranteed)
        .then(1.0)
        .when(burstable)
        .then(share)
        .otherwise(pl.lit(None, pl.Float64))
        .alias("gpu_memory_share_ratio"),
        pl.when(guaranteed)
        .then(memory)
        .when(burstable)
        .then((memory * share).floor().cast(pl.Int64))
        .otherwise(pl.lit(None, pl.Int64))
        .alias("gpu_memory_limit_bytes"),
    ]


# -- time slice ----------------------------------------------------------------------------


def time_slice_rule(
    p95_latency_s: pl.Expr,
    sequence_tokens: pl.Expr,
    settings: ClassSettings,
    *,
    p95_band: Band = 0.0,
    sequence_band: Band = 0.0,
) -> pl.Expr:
    """Which branch chooses the slice: ``p95`` (P95 > 10 ms), else ``sequence`` (> 4096
    tokens), else ``default``."""
    return (
        pl.when(above(p95_latency_s, settings.slice_p95_above_s, p95_band))
        .then(pl.lit(SLICE_P95))
        .when(above(sequence_tokens, float(settings.slice_sequence_above_tokens), sequence_band))
        .then(pl.lit(SLICE_SEQUENCE))
        .otherwise(pl.lit(SLICE_DEFAULT))
    )


def time_slice_s(rule: pl.Expr, settings: ClassSettings) -> pl.Expr:
    """The slice (seconds) of each :func:`time_slice_rule` branch: 25 ms, 10 ms, 15 ms."""
    return rule.replace_strict(
        {
            SLICE_P95: settings.slice_long_s,
            SLICE_SEQUENCE: settings.slice_short_s,
            SLICE_DEFAULT: settings.slice_default_s,
        },
        return_dtype=pl.Float64,
    )


# -- SLA, priority and preemption ----------------------------------------------------------


def sla_violation_ratio(slow: pl.Expr, failed: pl.Expr, timed: pl.Expr) -> pl.Expr:
    """Share of requests that failed or took longer than the SLA: ``(slow + failed) / (timed +
    failed)`` with ``timed`` the requests that succeeded with a latency; null with none. A
    request that neither failed nor has a latency cannot be judged and is not counted."""
    total = timed.cast(pl.Float64) + failed.cast(pl.Float64)
    return pl.when(total > 0).then((slow.cast(pl.Float64) + failed) / total)


def sla_violated(rate: pl.Expr, settings: ClassSettings, *, band: Band = 0.0) -> pl.Expr:
    """SLA-violation rate above 5%."""
    return above(rate, settings.sla_violation_above_ratio, band)


def lower_priority_class(priority_class: pl.Expr, settings: ClassSettings) -> pl.Expr:
    """The next lower of the spec's priority classes (the lowest stays); null for a class
    that is not one of them."""
    ranked = [c.name for c in sorted(settings.priority_classes, key=lambda c: -c.value)]
    lower: dict[str, str] = {}
    for i, name in enumerate(ranked):
        lower.setdefault(name, ranked[min(i + 1, len(ranked) - 1)])
    return priority_class.replace_strict(lower, default=None, return_dtype=pl.String)


def proposed_priority_class(
    priority_class: pl.Expr, rate: pl.Expr, settings: ClassSettings
) -> pl.Expr:
    """The next lower class when the SLA is violated, else the class as it is."""
    return (
        pl.when(sla_violated(rate, settings))
        .then(lower_priority_class(priority_class, settings))
        .otherwise(priority_class)
    )


def preemption_policy(fragmentation_ratio: pl.Expr, settings: ClassSettings) -> pl.Expr:
    """``PreemptLowerPriority`` above 70% fragmentation, ``Never`` at or below, null when the
    fragmentation is not known."""
    frag = measured(fragmentation_ratio)
    return (
        pl.when(frag.is_null())
        .then(pl.lit(None, pl.String))
        .when(frag > settings.preemption_fragmentation_above_ratio)
        .then(pl.lit(PREEMPT))
        .otherwise(pl.lit(NO_PREEMPT))
    )


# -- the elastic rule ----------------------------------------------------------------------


def elastic_contended(
    gpu_util_ratio: pl.Expr,
    link_saturation_ratio: pl.Expr,
    settings: ClassSettings,
    *,
    band: Band = 0.0,
) -> pl.Expr:
    """The elastic rule fires: utilisation above 90% and link saturation above 75%."""
    return above(gpu_util_ratio, settings.elastic_util_above_ratio, band) & above(
        link_saturation_ratio, settings.elastic_link_above_ratio, band
    )


def elastic_memory_quota(
    quota_bytes: pl.Expr, minimum_bytes: pl.Expr, settings: ClassSettings
) -> pl.Expr:
    """``max(quota x 0.8, minimum)`` in whole bytes (Int64, rounded down)."""
    scaled = (quota_bytes.cast(pl.Float64) * settings.elastic_memory_factor).floor()
    return pl.max_horizontal(scaled.cast(pl.Int64), minimum_bytes.cast(pl.Int64))


def elastic_bandwidth_quota(
    quota_bytes_per_s: pl.Expr, maximum_bytes_per_s: pl.Expr, settings: ClassSettings
) -> pl.Expr:
    """``min(quota x 1.2, hardware maximum)`` in bytes/s (no maximum known: no cap)."""
    scaled = quota_bytes_per_s.cast(pl.Float64) * settings.elastic_bandwidth_factor
    return pl.min_horizontal(scaled, maximum_bytes_per_s.cast(pl.Float64))


def misses_sla(p99_latency_s: pl.Expr, sla_p99_s: pl.Expr, *, band: Band = 0.0) -> pl.Expr:
    """P99 above the SLA (False where either is unknown)."""
    return above(p99_latency_s, sla_p99_s, band)


def reset_on_reallocation(
    priority: pl.Expr, reallocating_priority: pl.Expr, missing_sla: pl.Expr
) -> pl.Expr:
    """SPEC: "On reallocation, only lower-priority tasks that miss their SLA are reset"."""
    return (priority < reallocating_priority).fill_null(False) & missing_sla.fill_null(False)


def elastic_reason(
    gpu_util_ratio: pl.Expr, link_saturation_ratio: pl.Expr, settings: ClassSettings
) -> pl.Expr:
    """Why the elastic rule did or did not fire, in words."""
    util, link = measured(gpu_util_ratio), measured(link_saturation_ratio)
    u_limit = pl.lit(f"{settings.elastic_util_above_ratio:g}")
    l_limit = pl.lit(f"{settings.elastic_link_above_ratio:g}")
    missing = pl.concat_str(
        pl.when(util.is_null()).then(pl.lit("gpu utilisation")),
        pl.when(link.is_null()).then(pl.lit("link saturation")),
        separator=" and ",
        ignore_nulls=True,
    )
    u_text, l_text = util.round(3).cast(pl.String), link.round(3).cast(pl.String)
    return (
        pl.when(util.is_null() | link.is_null())
        .then(pl.format("not evaluated: {} not measured", missing))
        .when(elastic_contended(util, link, settings))
        .then(
            pl.format(
                "utilisation {} > {} and link saturation {} > {}", u_text, u_limit, l_text, l_limit
            )
        )
        .otherwise(
            pl.format(
                "utilisation {} / link saturation {} not both above {} / {}",
                u_text,
                l_text,
                u_limit,
                l_limit,
            )
        )
    )
