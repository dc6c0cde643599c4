"""Quota rules as proposals: QoS-tier quotas with the elastic rule, and namespace
ResourceQuotas sized VPA-style (see :mod:`.rules` for the conventions they share).

- QoS-tier quotas per pod (tier from its priority class, ``tier_by_priority_class``): the
  elastic rule of :mod:`sits_observe.analytics.classes.rules` (contention, the two quota
  formulas, "only lower-priority tasks that miss their SLA are reset" with the node's highest
  priority as the reallocating one). The controller adds the hysteresis band on every test
  for a pod already on a reduced quota, the bounds (``qos_memory_min_bytes``; the link
  capacity, else ``qos_bandwidth_max_bytes_per_s``), and level triggering: the factors apply
  to the tier's quota and never compound from pass to pass; every pod not reset keeps (or
  gets back) its tier's quotas.
- Namespace quota per resource: quantile of daily peaks x (1 + margin) x VPA's confidence
  factor (1 + multiplier / days) ** exponent, never above the largest daily peak x
  ``peak_factor_max`` nor the cluster's allocatable, rounded up to whole GPUs, milli-CPU and
  MiB (the allocatable rounded down to them, so the rounding never passes it). The sizing
  itself (:func:`peak_sizing`, :func:`sizing_reason`, :func:`sizing_evidence`) is shared with
  the Kueue / KAI queue quotas of :mod:`.rules_queues`.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import polars as pl

from sits_observe.analytics.classes import rules as class_rules
from sits_observe.control.controller.actions import Action
from sits_observe.control.controller.planning.model import ACTIONS, ENGINE, QUOTA_ACTIONS
from sits_observe.control.controller.quota_settings import QUOTA_GPU, QUOTA_MEMORY
from sits_observe.control.controller.rules.levels import empty, finish, fmt, hysteresis_band
from sits_observe.control.controller.settings import ControllerSettings
from sits_observe.domain.units import span_text

FloatArray = npt.NDArray[np.float64]

_MIB = 1024.0 * 1024.0


def _priority_values(settings: ControllerSettings) -> dict[str, int]:
    return {p.name: p.value for p in settings.classes.priority_classes}


def qos_quotas(pods: pl.DataFrame, settings: ControllerSettings) -> pl.LazyFrame:
    """QoS-tier memory and bandwidth quotas per pod with the elastic rule.

    ``pods`` carries ``state`` / ``current`` / ``recommended`` of the pod's memory quota
    (bytes) and ``bandwidth_current`` / ``bandwidth_recommended`` of its bandwidth quota
    (bytes/s).
    """
    c = settings.classes
    tiers = {
        pc: (c.tiers[t].memory_bytes, c.tiers[t].bandwidth_bytes_per_s)
        for pc, t in settings.tier_by_priority_class.items()
    }
    if not tiers:
        return empty()
    for column in ("bandwidth_current", "bandwidth_recommended"):
        if column not in pods.columns:
            pods = pods.with_columns(pl.lit(None, pl.String()).alias(column))
    base_mem, base_bw, prio = pl.col("_base_mem"), pl.col("_base_bw"), pl.col("_prio")
    # A pod already below its tier's memory quota holds the elastic outcome: hysteresis.
    band = hysteresis_band(pl.col("state").cast(pl.Float64, strict=False) < base_mem, settings)
    contended = class_rules.elastic_contended(
        pl.col("gpu_util_ratio"), pl.col("link_saturation_ratio"), c, band=band
    )
    misses = class_rules.misses_sla(pl.col("p99_latency_s"), pl.col("sla_p99_s"), band=band)
    hw_max = pl.col("link_capacity_bytes_per_s").fill_null(settings.qos_bandwidth_max_bytes_per_s)
    minimum = pl.lit(settings.qos_memory_min_bytes, pl.Int64)
    lazy = (
        pods.lazy()
        .with_columns(
            pl.col("priority_class")
            .replace_strict(
                {k: v[0] for k, v in tiers.items()}, default=None, return_dtype=pl.Int64
            )
            .alias("_base_mem"),
            pl.col("priority_class")
            .replace_strict(
                {k: v[1] for k, v in tiers.items()}, default=None, return_dtype=pl.Float64
            )
            .alias("_base_bw"),
            pl.col("priority_class")
            .replace_strict(_priority_values(settings), default=0, return_dtype=pl.Int64)
            .fill_null(0)
            .alias("_prio"),
        )
        # The reallocating priority: the highest on the same node, tier or not (a pod without
        # a node is alone).
        .with_columns(prio.max().over(pl.col("node").fill_null(pl.col("pod"))).alias("_top"))
        .filter(base_mem.is_not_null())
        .with_columns(
            (prio < pl.col("_top")).alias("_lower"),
            (contended & class_rules.reset_on_reallocation(prio, pl.col("_top"), misses)).alias(
                "_reset"
            ),
        )
        .with_columns(
            pl.when(pl.col("_reset"))
            .then(class_rules.elastic_memory_quota(base_mem, minimum, c))
            .otherwise(base_mem)
            .alias("_mem"),
            pl.when(pl.col("_reset"))
            .then(class_rules.elastic_bandwidth_quota(base_bw, hw_max, c))
            .otherwise(base_bw)
            .alias("_bw"),
        )
        .collect(engine=ENGINE)
        .lazy()
    )
    reason = (
        pl.when(pl.col("_reset"))
        .then(
            pl.format(
                "GPU contended (utilisation {} > {}, link saturation {} > {}); lower priority "
                "than the node's highest and P99 {} ms above the {} ms SLA: elastic quota",
                fmt(pl.col("gpu_util_ratio")),
                pl.lit(f"{c.elastic_util_above_ratio:g}"),
                fmt(pl.col("link_saturation_ratio")),
                pl.lit(f"{c.elastic_link_above_ratio:g}"),
                fmt(pl.col("p99_latency_s") * 1000, 2),
                fmt(pl.col("sla_p99_s") * 1000, 2),
            )
        )
        .otherwise(
            pl.format(
                "tier quota of {} (elastic rule not applicable: utilisation {}, "
                "link saturation {}, P99 {} ms)",
                pl.col("priority_class"),
                fmt(pl.col("gpu_util_ratio")).fill_null("n/a"),
                fmt(pl.col("link_saturation_ratio")).fill_null("n/a"),
                fmt(pl.col("p99_latency_s") * 1000, 2).fill_null("n/a"),
            )
        )
    )
    evidence = [
        pl.col("priority_class"),
        pl.col("gpu_util_ratio"),
        pl.col("link_saturation_ratio"),
        pl.col("p99_latency_s"),
        pl.col("sla_p99_s"),
        pl.col("_lower").alias("lower_priority_on_node"),
        pl.col("node"),
    ]
    memory = finish(
        lazy,
        kind="Pod",
        action=Action.QOS_MEMORY_QUOTA,
        name="pod",
        namespace="namespace",
        proposed=pl.col("_mem").cast(pl.String),
        value=pl.col("_mem").cast(pl.Float64),
        default_current=pl.col("_base_mem").cast(pl.String),
        reason=reason,
        evidence=[*evidence, pl.col("_base_mem").alias("tier_memory_bytes")],
        in_effect=pl.coalesce("current", pl.col("_base_mem").cast(pl.String)),
    )
    bandwidth = finish(
        lazy,
        kind="Pod",
        action=Action.QOS_BANDWIDTH_QUOTA,
        name="pod",
        namespace="namespace",
        proposed=pl.col("_bw").round(0).cast(pl.Int64).cast(pl.String),
        value=pl.col("_bw"),
        default_current=pl.col("_base_bw").round(0).cast(pl.Int64).cast(pl.String),
        reason=reason,
        evidence=[
            *evidence,
            pl.col("_base_bw").alias("tier_bandwidth_bytes_per_s"),
            hw_max.alias("bandwidth_max_bytes_per_s"),
        ],
        in_effect=pl.coalesce(
            "bandwidth_current", pl.col("_base_bw").round(0).cast(pl.Int64).cast(pl.String)
        ),
        current=pl.col("bandwidth_current"),
        recommended=pl.col("bandwidth_recommended"),
    )
    return pl.concat([memory, bandwidth])


# -- namespace quotas ----------------------------------------------------------------------


#: The least history VPA's confidence counts: one sample a minute (``getConfidence`` in
#: ``vertical-pod-autoscaler/pkg/recommender/logic/estimator.go`` takes min(history days,
#: samples / 1440)), so a single snapshot is 1/1440 of a day, not zero.
MIN_CONFIDENCE_DAYS = 1 / 1440


def confidence_factor(days: float, settings: ControllerSettings) -> float:
    """VPA's upper-bound widening ``(1 + multiplier / days) ** exponent``, the confidence
    ``days`` the history in days (at least :data:`MIN_CONFIDENCE_DAYS`): x2 at one day,
    +7 % at 14 days, and wide open under an hour (the caps then hold the quota)."""
    q = settings.quota
    return float(
        (1.0 + q.confidence_multiplier / max(days, MIN_CONFIDENCE_DAYS)) ** q.confidence_exponent
    )


def peak_sizing(frame: pl.LazyFrame, settings: ControllerSettings, held: pl.Expr) -> pl.LazyFrame:
    """The quota rule on ``frame``'s ``daily_peaks`` (rows without any are dropped), shared
    by the namespace and the queue quotas (:mod:`.rules_queues`).

    Adds ``_quantile`` (the ``percentile_ratio`` quantile of the peaks), ``_days`` (the
    history in days: ``history_s`` when the frame has it, else one per daily peak),
    ``_latest``, ``_confidence`` (:func:`confidence_factor`), ``_raw`` (quantile x (1 +
    margin) x confidence), ``_peak_cap`` (the largest peak x ``peak_factor_max``), ``_held``
    (``held``: what the cluster holds, in the unit the value is written in; null = no limit),
    ``_value`` (the smallest of the three) and ``_capped_by`` (which cap ``_value`` is held
    at; null when none).
    """
    q = settings.quota
    counted = pl.col("daily_peaks").list.len().cast(pl.Float64)
    names = frame.collect_schema().names()
    days = counted if "history_s" not in names else pl.col("history_s") / 86_400.0
    return (
        frame.filter(pl.col("daily_peaks").list.len() > 0)
        .with_columns(
            pl.col("daily_peaks")
            .list.eval(pl.element().quantile(q.percentile_ratio, "linear"))
            .list.first()
            .alias("_quantile"),
            days.fill_null(counted).alias("_days"),
            pl.col("daily_peaks").list.last().alias("_latest"),
        )
        .with_columns(
            (
                (
                    1.0
                    + q.confidence_multiplier
                    / pl.col("_days").clip(lower_bound=MIN_CONFIDENCE_DAYS)
                ).pow(q.confidence_exponent)
            ).alias("_confidence"),
        )
        .with_columns(
            (pl.col("_quantile") * (1.0 + q.margin_ratio) * pl.col("_confidence")).alias("_raw"),
            (pl.col("daily_peaks").list.max() * q.peak_factor_max).alias("_peak_cap"),
            held.alias("_held"),
        )
        # Never above the measured peak x a bounded factor, nor above what the cluster holds
        # (a quota above the allocatable can never be used up); nulls are no limit.
        .with_columns(pl.min_horizontal("_raw", "_peak_cap", "_held").alias("_value"))
        .with_columns(
            pl.when(pl.col("_value") >= pl.col("_raw"))
            .then(pl.lit(None, pl.String()))
            .when(pl.col("_value") == pl.col("_held"))
            .then(pl.lit("the cluster's allocatable"))
            .otherwise(pl.format("the largest daily peak x {}", pl.lit(f"{q.peak_factor_max:g}")))
            .alias("_capped_by"),
        )
    )


def sizing_reason(action: Action, settings: ControllerSettings) -> pl.Expr:
    """The reason of a :func:`peak_sizing` row, in ``action``'s unit."""
    q = settings.quota
    unit = ACTIONS[action].unit
    return pl.concat_str(
        pl.format(
            "p{} of {} daily peaks {} {} x (1 + margin {}) x confidence {} ({} of history)",
            pl.lit(f"{q.percentile_ratio * 100:g}"),
            pl.col("daily_peaks").list.len(),
            fmt(pl.col("_quantile"), 1),
            pl.lit(unit),
            pl.lit(f"{q.margin_ratio:g}"),
            fmt(pl.col("_confidence"), 3),
            _span(pl.col("_days")),
        ),
        # The uncapped product (in the evidence as ``uncapped``) can read thousands of GPUs
        # on minutes of history; the sentence names the cap that holds it instead.
        pl.format("; held at {}", pl.col("_capped_by")).fill_null(""),
    )


def _span(days: pl.Expr) -> pl.Expr:
    """A history's length as ``recommend``'s confidence column prints it (``5m``, ``23h``,
    ``9d``: :func:`~sits_observe.domain.units.span_text`); one row per quota, so per row."""
    return days.map_elements(lambda d: span_text(d * 86_400.0), return_dtype=pl.String)


def sizing_evidence() -> list[pl.Expr]:
    """The evidence of a :func:`peak_sizing` row (``recommend`` reads ``history_days``,
    ``peak_quantile``, ``confidence_factor``, ``uncapped`` and ``capped_by``)."""
    return [
        pl.col("_quantile").alias("peak_quantile"),
        pl.col("_days").alias("history_days"),
        (pl.col("_days") * 86_400.0).alias("history_s"),
        pl.col("_latest").alias("latest_daily_peak"),
        pl.col("_confidence").alias("confidence_factor"),
        pl.col("_raw").alias("uncapped"),
        pl.col("_peak_cap").alias("peak_cap"),
        pl.col("allocatable"),
        pl.col("_capped_by").alias("capped_by"),
    ]


def namespace_quotas(namespaces: pl.DataFrame, settings: ControllerSettings) -> pl.LazyFrame:
    """ResourceQuota proposals per (namespace, resource) from daily peaks.

    ``namespaces`` carries ``quota_kind`` / ``quota_name`` (where the advice goes) and the
    ``current`` / ``recommended`` value of each row's resource there.
    """
    if "allocatable" not in namespaces.columns:
        namespaces = namespaces.with_columns(pl.lit(None, pl.Float64()).alias("allocatable"))
    # The allocatable rounded down to the unit the quota is written in (MiB, whole GPUs,
    # milli-CPU), so rounding the proposal up never passes it.
    held = (
        pl.when(pl.col("resource") == QUOTA_MEMORY)
        .then((pl.col("allocatable") / _MIB).floor() * _MIB)
        .otherwise(pl.col("allocatable").floor())
    )
    for column in ("running", "history_s"):
        if column not in namespaces.columns:
            namespaces = namespaces.with_columns(pl.lit(None, pl.Float64()).alias(column))
    asked = namespaces.lazy().filter(pl.col("resource").is_in(list(QUOTA_ACTIONS)))
    frame = _shared(peak_sizing(_keys_asked_for(asked), settings, held), settings)

    # A Namespace is cluster-scoped: advice annotated on it has no namespace.
    namespace = (
        pl.when(pl.col("quota_kind") == "Namespace")
        .then(pl.lit(None, pl.String()))
        .otherwise(pl.col("namespace"))
    )
    parts = [
        finish(
            frame.filter(pl.col("resource") == resource),
            kind=pl.col("quota_kind"),
            action=action,
            name="quota_name",
            namespace=namespace,
            proposed=pl.col("_value").ceil().cast(pl.Int64).cast(pl.String),
            value=pl.col("_value"),
            reason=sizing_reason(action, settings),
            evidence=[pl.col("resource"), *sizing_evidence()],
        )
        for resource, action in QUOTA_ACTIONS.items()
    ]
    return pl.concat(parts)


def _keys_asked_for(frame: pl.LazyFrame) -> pl.LazyFrame:
    """The rows a quota should have a key for. A CPU or memory key is left out where the
    namespace's pods request none (in any daily peak or now): ResourceQuota then refuses
    every pod that does not state that request (Kubernetes "Resource Quotas": "if the quota
    has a value specified for requests.cpu ... every incoming container must make an
    explicit request"), so a 1-CPU quota would lock out the GPU notebooks it was sized
    from. And it is left out where the managed quota exists and holds a GPU key but not this
    one: a GPU-only quota stays GPU-only."""
    gpu = pl.col("resource") == QUOTA_GPU
    none_asked = (pl.col("daily_peaks").list.max().fill_null(0.0) <= 0) & (
        pl.col("running").fill_null(0.0) <= 0
    )
    has_gpu_key = (
        (gpu & pl.col("current").is_not_null())
        .any()
        .over(["quota_kind", "quota_name", "namespace"])
    )
    gpu_only = (pl.col("quota_kind") == "ResourceQuota") & pl.col("current").is_null() & has_gpu_key
    return frame.filter(gpu | ~(none_asked | gpu_only))


def _in_unit(value: pl.Expr, *, up: bool) -> pl.Expr:
    """``value`` rounded to the unit its quota is written in (MiB of memory; whole GPUs and
    milli-CPU), up or down."""
    memory = pl.col("resource") == QUOTA_MEMORY
    scaled = pl.when(memory).then(value / _MIB).otherwise(value)
    whole = scaled.ceil() if up else scaled.floor()
    return pl.when(memory).then(whole * _MIB).otherwise(whole)


#: ``capped_by`` of a row held by the sharing of :func:`_shared`.
SHARED_ADVICE = "the cluster's allocatable, shared among the namespaces"
SHARED_QUOTA = "the quota reclaimed from idle namespaces and the capacity no quota holds, shared"


def _shared(frame: pl.LazyFrame, settings: ControllerSettings) -> pl.LazyFrame:
    """Proposals a cluster can honour together, per resource (rows without an allocatable are
    left as :func:`peak_sizing` made them).

    - Never under what the namespace's pods request now (``running``, rounded up to the unit):
      a quota below it refuses their next replacement.
    - A managed ResourceQuota (``current`` known) keeps the smaller of its current value and
      the sized one (never under what runs): the rule takes back quota a namespace holds
      beyond its peaks, and never cuts the headroom its peaks use, or a full cluster would
      refuse its next Job only to raise the quota again a pass later. It is lowered only
      once the namespace has ``quota.lower_after_s`` of history: a Job controller that has
      not yet created its Jobs looks idle for its first minutes.
    - A managed quota's raise is paid for by quota taken back from the others and by capacity
      that neither a managed quota nor a running pod holds (KAI's and Kueue's idle-quota
      reclaim: quota lent, not capacity). So the managed quotas together never grow past what
      they held, unless the cluster has room no one holds.
    - Advice for a namespace without a managed quota keeps its running requests and shares
      what the managed quotas and those requests leave of the allocatable.
    - Where the raises ask for more than there is, it is shared max-min fairly
      (:func:`fair_shares`): the smallest asks are met first, as Kueue's and KAI's fair
      sharing divide borrowed quota, so a tenant asking for one GPU is not starved by one
      asking for six.
    """
    held = pl.col("_held")
    managed = (pl.col("quota_kind") == "ResourceQuota") & pl.col("_current").is_not_null()
    floor = _in_unit(pl.col("running").fill_null(0.0), up=True)
    lowered = pl.col("_days") * 86_400.0 >= settings.quota.lower_after_s
    kept = pl.when(lowered).then(pl.min_horizontal("_current", "_sized")).otherwise("_current")
    keep = pl.min_horizontal(pl.max_horizontal("_floor", kept), held)
    rows = (
        frame.with_columns(
            _current=pl.col("current").cast(pl.Float64, strict=False),
            _floor=pl.min_horizontal(floor, held),
        )
        .with_columns(
            _sized=pl.min_horizontal(pl.max_horizontal("_value", "_floor"), held),
            _managed=managed.fill_null(False),
        )
        .with_columns(_keep=pl.when("_managed").then(keep).otherwise("_floor"))
        .with_columns(
            _ask=(pl.col("_sized") - pl.col("_keep")).clip(lower_bound=0.0),
            # What a managed quota held: its current value, or what runs where that is more.
            _holds=pl.when("_managed")
            .then(pl.min_horizontal(pl.max_horizontal("_current", "_keep"), held))
            .otherwise("_floor"),
        )
        .with_row_index("_row")
        .collect(engine=ENGINE)
    )
    value = rows["_value"].to_numpy().astype(np.float64, copy=True)
    capped: list[str | None] = rows["_capped_by"].to_list()
    shareable = rows.filter(pl.col("_held").is_not_null())
    for (resource, cluster), part in shareable.group_by(["resource", "_held"]):
        unit = _MIB if resource == QUOTA_MEMORY else 1.0
        is_managed = part["_managed"].to_numpy()
        keep_, ask, holds = (
            part[c].to_numpy().astype(np.float64) for c in ("_keep", "_ask", "_holds")
        )
        index = part["_row"].to_numpy()
        # Managed quotas first: what was taken back, and room no quota or pod holds.
        budget = float(np.sum((holds - keep_)[is_managed])) + max(
            0.0, float(cluster) - float(np.sum(holds))
        )
        lent = fair_shares(ask[is_managed], budget, unit)
        new = keep_.copy()
        new[is_managed] += lent
        # Then the advice: what the managed quotas and the running pods leave.
        room = max(0.0, float(cluster) - float(np.sum(new)))
        new[~is_managed] += fair_shares(ask[~is_managed], room, unit)
        value[index] = new
        short = (ask > 0) & (new < keep_ + ask)
        for i, row in enumerate(index):
            if short[i]:
                capped[row] = SHARED_QUOTA if is_managed[i] else SHARED_ADVICE
    return (
        rows.with_columns(
            pl.Series("_value", value, dtype=pl.Float64),
            pl.Series("_capped_by", capped, dtype=pl.String),
        )
        .drop("_row", "_current", "_floor", "_sized", "_managed", "_keep", "_ask", "_holds")
        .lazy()
    )


def fair_shares(asks: FloatArray, budget: float, unit: float) -> FloatArray:
    """``asks`` met from ``budget`` max-min fairly in whole units of ``unit``: every ask under the
    water level ``L`` is met, every other gets ``L`` (the level at which the shares sum to the
    budget) rounded down to the unit, and the units that rounding left over go one each to the
    asks still short, the largest first (ties: the first given). The smallest asks are met
    first, the shares of the asks cut differ by at most one unit, and the budget is given out
    to its last whole unit (3 GPUs among three asks of 8 and a budget of 7: 3, 2, 2, not
    2, 2, 2 with one GPU left idle)."""
    asks = np.asarray(asks, dtype=np.float64)
    if asks.size == 0 or float(asks.sum()) <= budget:
        return asks.copy()
    order = np.sort(asks)
    before = np.concatenate([[0.0], np.cumsum(order)[:-1]])
    left = np.arange(order.size, 0, -1, dtype=np.float64)
    levels = (budget - before) / left
    # The level lies where it is at most the next ask (the first such rank).
    rank = int(np.argmax(levels <= order))
    level = float(np.floor(max(levels[rank], 0.0) / unit) * unit)
    shares = np.minimum(asks, level)
    spare = int(np.floor((max(budget, 0.0) - float(shares.sum())) / unit + 1e-9))
    short = [i for i in np.argsort(-asks, kind="stable") if asks[i] - shares[i] >= unit]
    for i in short[:spare]:
        shares[i] += unit
    return shares


def round_values(action: Action, values: FloatArray) -> FloatArray:
    """Values in the unit the action is written in: whole GPUs, milli-CPU, MiB of quota
    memory, whole GPUs of queue quotas, whole bytes and bytes/s (quotas round up, QoS values
    down)."""
    if action is Action.QUOTA_MEMORY:
        return np.asarray(np.ceil(values / _MIB) * _MIB, dtype=np.float64)
    if action in (Action.QUOTA_GPU, Action.QUOTA_CPU) or ACTIONS[action].actuator == "queue":
        return np.asarray(np.ceil(values), dtype=np.float64)
    return np.asarray(np.floor(values), dtype=np.float64)
