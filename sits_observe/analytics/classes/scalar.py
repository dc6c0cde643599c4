"""Result types of the class rules, their reasons in words, and one-value front-ends.

The rules exist once, vectorised, in :mod:`.class_rules`. The functions here evaluate them on a
single row for callers that hold single values (the controller benchmark's naive baseline, the
CLI's elastic view until it calls :func:`.elastic.elastic_rows`): each builds a one-row frame
and reads the rule's answer back, so they cannot drift from the vectorised rule. The reason
texts are shared with :func:`.classes.class_report`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal, cast

import polars as pl

from sits_observe.analytics.classes import rules
from sits_observe.analytics.classes.settings import ClassSettings
from sits_observe.analytics.rightsizing import elastic
from sits_observe.analytics.topology.settings import LinkCapacity

MemoryClass = Literal["L1", "L2", "L3"]


@dataclass(frozen=True)
class TimeSlice:
    """A GPU time-slice quota and the rule that chose it."""

    slice_s: float
    rule: str


@dataclass(frozen=True)
class GpuSharing:
    """How a pod of a Kubernetes QoS class shares its GPU."""

    exclusive: bool
    memory_share_ratio: float | None
    memory_limit_bytes: int | None


@dataclass(frozen=True)
class PriorityRecommendation:
    """Priority class advice for one workload."""

    current: str | None
    proposed: str | None
    preemption_policy: str | None
    reason: str


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


@dataclass(frozen=True)
class Task:
    """A workload competing for a GPU when quotas are reallocated."""

    name: str
    priority: int
    misses_sla: bool


# -- reasons -------------------------------------------------------------------------------


def time_slice_text(
    rule: str, p95_latency_s: float | None, sequence_tokens: float | None, settings: ClassSettings
) -> str:
    """Why :func:`~.class_rules.time_slice_rule` chose its branch."""
    if rule == rules.SLICE_P95 and p95_latency_s is not None:
        return f"p95 {p95_latency_s * 1000:g} ms > {settings.slice_p95_above_s * 1000:g} ms"
    if rule == rules.SLICE_SEQUENCE and sequence_tokens is not None:
        return f"sequence {sequence_tokens:g} tokens > {settings.slice_sequence_above_tokens}"
    absent = [
        n for n, v in (("p95", p95_latency_s), ("sequence length", sequence_tokens)) if v is None
    ]
    return "default" + (f" ({', '.join(absent)} not measured)" if absent else "")


def priority_text(
    current: str | None,
    proposed: str | None,
    rate: float | None,
    fragmentation_ratio: float | None,
    settings: ClassSettings,
) -> str:
    """Why the priority rule proposed ``proposed`` (and the preemption policy it implies)."""
    limit = settings.preemption_fragmentation_above_ratio
    if fragmentation_ratio is None:
        frag = "fragmentation not given"
    elif fragmentation_ratio > limit:
        frag = f"fragmentation {fragmentation_ratio:.3f} > {limit:g}: preemption allowed"
    else:
        frag = f"fragmentation {fragmentation_ratio:.3f}: no preemption"
    if rate is None:
        return f"no SLA measured; {frag}"
    text, bound = f"SLA violation {rate:.1%}", f"{settings.sla_violation_above_ratio:.0%}"
    if not rate > settings.sla_violation_above_ratio:
        return f"{text} <= {bound}; {frag}"
    if proposed is None:
        ranked = sorted(settings.priority_classes, key=lambda c: -c.value)
        names = ", ".join(c.name for c in ranked)
        return f"{text} > {bound} but {current!r} is not one of {names}; {frag}"
    what = "lower" if proposed != current else "already lowest"
    return f"{text} > {bound}: {what}; {frag}"


# -- one-value front-ends ------------------------------------------------------------------


def _one_row(columns: dict[str, tuple[object, pl.DataType]], *exprs: pl.Expr) -> dict[str, object]:
    frame = pl.DataFrame({k: pl.Series(k, [v], dtype=t) for k, (v, t) in columns.items()})
    return frame.select(*exprs).row(0, named=True)


def memory_class(peak_gpu_memory_bytes: int, settings: ClassSettings) -> MemoryClass:
    """:func:`~.class_rules.memory_class` of one value."""
    got = _one_row(
        {"peak": (peak_gpu_memory_bytes, pl.Int64())},
        rules.memory_class(pl.col("peak"), settings).alias("c"),
    )
    return cast(MemoryClass, got["c"])


def time_slice(
    p95_latency_s: float | None, sequence_tokens: float | None, settings: ClassSettings
) -> TimeSlice:
    """:func:`~.class_rules.time_slice_rule` of one pair (None = not measured)."""
    rule = rules.time_slice_rule(pl.col("p95"), pl.col("seq"), settings)
    got = _one_row(
        {"p95": (p95_latency_s, pl.Float64()), "seq": (sequence_tokens, pl.Float64())},
        rule.alias("rule"),
        rules.time_slice_s(rule, settings).alias("slice_s"),
    )
    text = time_slice_text(str(got["rule"]), p95_latency_s, sequence_tokens, settings)
    return TimeSlice(cast(float, got["slice_s"]), text)


def recommend_priority(
    current_class: str | None,
    sla_violation_rate: float | None,
    fragmentation_ratio: float | None,
    settings: ClassSettings,
) -> PriorityRecommendation:
    """The priority rule and the preemption policy for one workload."""
    got = _one_row(
        {
            "cls": (current_class, pl.String()),
            "rate": (sla_violation_rate, pl.Float64()),
            "frag": (fragmentation_ratio, pl.Float64()),
        },
        rules.proposed_priority_class(pl.col("cls"), pl.col("rate"), settings).alias("proposed"),
        rules.preemption_policy(pl.col("frag"), settings).alias("preemption"),
    )
    proposed = cast(str | None, got["proposed"])
    reason = priority_text(
        current_class, proposed, sla_violation_rate, fragmentation_ratio, settings
    )
    return PriorityRecommendation(
        current_class, proposed, cast(str | None, got["preemption"]), reason
    )


def elastic_quota(
    memory_quota_bytes: int,
    bandwidth_quota_bytes_per_s: float,
    signals: ElasticSignals,
    settings: ClassSettings,
    *,
    memory_minimum_bytes: int,
    bandwidth_maximum_bytes_per_s: float,
) -> ElasticDecision:
    """The elastic rule applied to one workload's quotas."""
    util, link = pl.col("util"), pl.col("link")
    fires = rules.elastic_contended(util, link, settings)
    got = _one_row(
        {
            "util": (signals.gpu_util_ratio, pl.Float64()),
            "link": (signals.link_saturation_ratio, pl.Float64()),
            "mem": (memory_quota_bytes, pl.Int64()),
            "bw": (bandwidth_quota_bytes_per_s, pl.Float64()),
            "min": (memory_minimum_bytes, pl.Int64()),
            "max": (bandwidth_maximum_bytes_per_s, pl.Float64()),
        },
        fires.alias("fires"),
        rules.elastic_memory_quota(pl.col("mem"), pl.col("min"), settings).alias("new_mem"),
        rules.elastic_bandwidth_quota(pl.col("bw"), pl.col("max"), settings).alias("new_bw"),
        rules.elastic_reason(util, link, settings).alias("reason"),
    )
    if not got["fires"]:
        return ElasticDecision(
            False, memory_quota_bytes, bandwidth_quota_bytes_per_s, str(got["reason"])
        )
    return ElasticDecision(
        True, cast(int, got["new_mem"]), cast(float, got["new_bw"]), str(got["reason"])
    )


def elastic_signals(
    series: pl.DataFrame,
    link: LinkCapacity | None,
    settings: ClassSettings,
    *,
    at: datetime | None = None,
) -> ElasticSignals:
    """:func:`.elastic.elastic_inputs` of one GPU's ``gpu_samples`` rows with a known link
    (None: saturation not measured), over ``(at - window, at]`` (``at``: its last sample)."""
    window = settings.elastic_window_s
    if at is not None:
        series = series.filter(
            (pl.col("ts") > at - timedelta(seconds=window)) & (pl.col("ts") <= at)
        )
    links = () if link is None else (link.model_copy(update={"pattern": ".*"}),)
    text = ("node", "namespace", "pod")
    frame = series.with_columns(
        *[
            pl.lit(None, pl.String if c in text else pl.Float64).alias(c)
            for c in elastic.SAMPLE_COLUMNS
            if c not in (*series.columns, "gpu_uuid", "model_name")
        ],
        pl.lit("gpu").alias("gpu_uuid"),
        pl.lit("gpu" if link is not None else None, pl.String).alias("model_name"),
    )
    got = elastic.elastic_inputs(frame.select(elastic.SAMPLE_COLUMNS), settings, links)
    if got.height == 0:
        return ElasticSignals(window, 0, None, None, None, None)
    row = got.row(0, named=True)
    return ElasticSignals(
        window_s=window,
        samples=int(row["samples"]),
        gpu_util_ratio=row["gpu_util_ratio"],
        link_saturation_ratio=row["link_saturation_ratio"],
        memory_growth_bytes_per_s=row["memory_growth_bytes_per_s"],
        link_bandwidth_variance=row["link_bandwidth_variance"],
    )


def tasks_to_reset(tasks: Sequence[Task], reallocating_priority: int) -> tuple[Task, ...]:
    """SPEC: "On reallocation, only lower-priority tasks that miss their SLA are reset"."""
    if not tasks:
        return ()
    frame = pl.DataFrame(
        {
            "priority": [t.priority for t in tasks],
            "misses": [t.misses_sla for t in tasks],
        },
        schema={"priority": pl.Int64(), "misses": pl.Boolean()},
    )
    reset = frame.select(
        rules.reset_on_reallocation(
            pl.col("priority"), pl.lit(reallocating_priority, pl.Int64), pl.col("misses")
        )
    ).to_series()
    return tuple(t for t, r in zip(tasks, reset.to_list(), strict=True) if r)
