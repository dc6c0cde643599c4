"""GPU memory right-sizing per workload: the VPA recommender's method on framebuffer peaks.

The Kubernetes Vertical Pod Autoscaler sizes container memory from a decaying histogram of
usage peaks (kubernetes/autoscaler, ``vertical-pod-autoscaler/pkg/recommender``); VPA handles
no extended resource, so the same method is applied here to the GPU framebuffer a workload's
pods use (``gpu_samples.fb_used_bytes``). Formulas and their sources (docs/analytics/
rightsizing.md has the worked example):

- **Peaks** (``model/container.go``, ``addMemorySample``): each series (one pod on one GPU)
  contributes one sample per ``peak_interval_s``: its largest value in that interval, each
  peak stamped with its interval's end. VPA anchors a container's intervals at its first
  sample; here they are whole multiples of the interval since the epoch, so one pass over the
  samples finds every peak. VPA's interval is 24 h; GPU memory of serving pods moves within
  the hour, so the default here is 15 min (chosen on the real backtest,
  docs/analytics/rightsizing.md).
- **Decaying histogram** (``util/decaying_histogram.go``): a peak at time t weighs
  2^((t - t_ref) / half_life_s); only relative weights matter, so t_ref is the workload's
  newest peak (weights <= 1, no overflow). Half-life 24 h (``DefaultMemoryHistogramDecay
  HalfLife``). All peaks of a workload's pods go into one histogram, as VPA aggregates the
  containers of one owner.
- **Buckets** (``util/histogram_options.go``): exponential, the first ``[0, first_bucket_
  bytes)``, bucket n >= 1 starting at first * (r^n - 1) / (r - 1) with r = 1 + bucket
  growth (5 %, ``DefaultHistogramBucketSizeGrowth``; 10 MB first bucket and 1 TB maximum as
  VPA's memory histogram).
- **Percentile** (``util/histogram.go``): walk the buckets upwards to the first whose
  cumulative weight reaches p x total; answer that bucket's END (the start of the next; the
  last bucket answers its start). So an answer is at most one bucket (5 %) above the sample.
- **Target, bounds, margin, confidence** (``logic/recommender.go``, ``logic/estimator.go``):
  target = P(target) x (1 + margin); lower = P(lower) x (1 + margin) x (1 + 0.001/c)^-2;
  upper = P(upper) x (1 + margin) x (1 + 1/c)^1, with the confidence c = min(history in days,
  samples / 1440) (``getConfidence``: days of history at one sample a minute). Short history
  therefore widens the bounds (12 h: upper x 3), never the target.
- **Caps**: no value exceeds the GPU's framebuffer (``max_allowed_bytes``, VPA's
  ``maxAllowed``); a capped value says so.
- **Not enough data**: fewer than ``min_points`` samples (20; krr's ``points_required`` is
  100) or less than ``min_history_s`` of history (60 s) gives no proposal, only the reason.
  VPA has no such floor and answers from the first sample, its confidence widening the
  bounds; these floors only keep a pod's first seconds (its model loading) from being sized,
  and the ``recommend`` report shows the history behind every proposal beside its confidence
  (low under 2 days).

Everything is vectorised over workloads (polars group-bys, numpy bucket maths), so a week of
one-minute samples of 10,000 pods is one pass (bench/bench_recommend_scale.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import polars as pl
from pydantic import BaseModel, ConfigDict, Field, model_validator

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

#: VPA's ``getConfidence`` counts samples against one a minute: 1,440 samples = one day.
SAMPLES_PER_DAY = 60 * 24
DAY_S = 86_400.0


class RightsizingSettings(BaseModel):
    """The VPA recommender's knobs, for GPU memory (defaults: VPA's unless the field says)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    half_life_s: float = Field(
        7_200.0,
        gt=0,
        le=90 * 86_400,
        description="decay half-life of a peak's weight, s (VPA: 86400; 2 h chosen on half of "
        "76 real serving containers, checked on the other half: docs/analytics/rightsizing.md)",
    )
    bucket_growth_ratio: float = Field(
        0.05, gt=0, le=1, description="each histogram bucket is this much wider than the last"
    )
    first_bucket_bytes: float = Field(
        1e7, gt=0, le=1e12, description="width of the first histogram bucket, bytes"
    )
    max_bytes: float = Field(
        1e12, gt=0, le=1e15, description="the last bucket starts at or above this, bytes"
    )
    peak_interval_s: float = Field(
        900.0,
        gt=0,
        le=7 * 86_400,
        description="one peak per series per interval of this many seconds (VPA: 86400)",
    )
    target_percentile_ratio: float = Field(
        0.95, gt=0, le=1, description="percentile of the peaks behind the target (VPA: 0.9)"
    )
    lower_percentile_ratio: float = Field(
        0.5, gt=0, le=1, description="percentile of the peaks behind the lower bound"
    )
    upper_percentile_ratio: float = Field(
        0.99, gt=0, le=1, description="percentile of the peaks behind the upper bound (VPA: 0.95)"
    )
    margin_ratio: float = Field(
        0.15, ge=0, le=10, description="safety margin added to each percentile (0.15 = 15 %)"
    )
    upper_confidence_multiplier: float = Field(
        1.0, ge=0, le=100, description="upper bound x (1 + this / confidence days) ^ exponent"
    )
    upper_confidence_exponent: float = Field(
        1.0, ge=-10, le=10, description="exponent of the upper bound's confidence factor"
    )
    lower_confidence_multiplier: float = Field(
        0.001, ge=0, le=100, description="lower bound x (1 + this / confidence days) ^ exponent"
    )
    lower_confidence_exponent: float = Field(
        -2.0, ge=-10, le=10, description="exponent of the lower bound's confidence factor"
    )
    # Floors that a short history clears (VPA has none; its confidence widens the bounds and
    # the report shows the history behind each row): a P95 of fewer than 20 samples is their
    # maximum, and the first minute of a pod is its model loading, not its working set.
    min_points: int = Field(
        20, ge=1, le=10_000_000, description="fewest samples before a proposal (krr: 100)"
    )
    min_history_s: float = Field(
        60.0, ge=0, le=90 * 86_400, description="shortest history before a proposal, s"
    )

    @model_validator(mode="after")
    def _ordered(self) -> RightsizingSettings:
        if not self.lower_percentile_ratio <= self.target_percentile_ratio:
            raise ValueError("lower_percentile_ratio must not exceed target_percentile_ratio")
        if not self.target_percentile_ratio <= self.upper_percentile_ratio:
            raise ValueError("target_percentile_ratio must not exceed upper_percentile_ratio")
        if self.first_bucket_bytes >= self.max_bytes:
            raise ValueError("first_bucket_bytes must be below max_bytes")
        return self


@dataclass(frozen=True)
class BucketScheme:
    """VPA's exponential bucketing (``NewExponentialHistogramOptions``)."""

    first_bucket_bytes: float
    ratio: float
    count: int

    @classmethod
    def of(cls, settings: RightsizingSettings) -> BucketScheme:
        """The scheme of ``settings``: enough buckets that the last starts at ``max_bytes``."""
        r, first = 1.0 + settings.bucket_growth_ratio, settings.first_bucket_bytes
        count = math.ceil(math.log(settings.max_bytes * (r - 1) / first + 1) / math.log(r)) + 1
        return cls(first, r, count)

    def find(self, values: FloatArray) -> IntArray:
        """Bucket index of each value (below the first bucket's end: 0; past the end: last)."""
        r, first = self.ratio, self.first_bucket_bytes
        safe = np.maximum(values, first)
        index = np.floor(np.log(safe * (r - 1) / first + 1) / math.log(r)).astype(np.int64)
        index = np.where(values < first, 0, index)
        return np.clip(index, 0, self.count - 1)

    def start(self, index: IntArray) -> FloatArray:
        """Start of each bucket, bytes (bucket 0 starts at 0)."""
        r = self.ratio
        starts = self.first_bucket_bytes * (np.power(r, index.astype(np.float64)) - 1) / (r - 1)
        return np.where(index == 0, 0.0, starts)

    def answer(self, index: IntArray) -> FloatArray:
        """What VPA's ``Percentile`` answers for a bucket: its end, or the last bucket's start."""
        return self.start(np.where(index < self.count - 1, index + 1, index))


@dataclass(frozen=True)
class MemoryRecommendation:
    """One workload's GPU memory proposal (bytes), its bounds and the evidence behind it."""

    key: tuple[str | None, ...]
    points: int
    series: int
    peaks: int
    history_s: float
    confidence_days: float
    target_bytes: int | None
    lower_bytes: int | None
    upper_bytes: int | None
    peak_bytes: int
    max_allowed_bytes: int | None
    capped: bool
    reason: str

    @property
    def enough_data(self) -> bool:
        """False when the history or the samples are under the settings' minimum."""
        return self.target_bytes is not None


#: Input columns of :func:`recommend_frame` besides the key columns.
SERIES, TS_S, USED, CAPACITY = "series", "ts_s", "fb_used_bytes", "max_allowed_bytes"


def interval_peaks(
    frame: pl.DataFrame, by: Sequence[str], interval_s: float, *, series: str = SERIES
) -> pl.DataFrame:
    """One row per (key, series, interval): ``peak_bytes``, ``at_s`` (the interval's end) and
    the interval's ``points``, ``first_s``, ``last_s`` and largest ``max_allowed_bytes``.

    Intervals are whole multiples of ``interval_s`` since the epoch (one pass over the
    samples, and the pods of one workload share interval boundaries); VPA anchors each
    container's intervals at its first sample instead, which moves the first interval's end.
    """
    keys = list(dict.fromkeys([*by, series]))
    cap = pl.col(CAPACITY).cast(pl.Float64).max() if CAPACITY in frame.columns else None
    # The streaming engine runs this group-by in morsels: a third of the in-memory engine's
    # time on a week of 10,000 pods (bench/bench_recommend_scale.py), and less memory.
    return (
        frame.lazy()
        .group_by([*keys, (pl.col(TS_S) / interval_s).floor().alias("_k")])
        .agg(
            pl.col(USED).cast(pl.Float64).max().alias("peak_bytes"),
            pl.len().alias("points"),
            pl.col(TS_S).min().alias("first_s"),
            pl.col(TS_S).max().alias("last_s"),
            *([cap.alias(CAPACITY)] if cap is not None else []),
        )
        .with_columns(at_s=(pl.col("_k") + 1) * interval_s)
        .drop("_k")
        .collect(engine="streaming")
    )


def weighted_percentiles(
    peaks: pl.DataFrame,
    by: Sequence[str],
    quantiles: Sequence[float],
    settings: RightsizingSettings,
) -> pl.DataFrame:
    """Per key, the decaying histogram's answer for each quantile (columns ``q0``, ``q1`` ...).

    ``peaks``: the key columns ``by`` (at least one), ``peak_bytes``, ``at_s``
    (:func:`interval_peaks`).
    """
    keys = list(by)
    scheme = BucketScheme.of(settings)
    values = peaks.get_column("peak_bytes").to_numpy().astype(np.float64)
    age = pl.col("at_s") - pl.col("at_s").max().over(keys)
    buckets = (
        peaks.select(*keys, "at_s")
        .with_columns(
            _bucket=pl.Series(scheme.find(values)),
            _weight=pl.lit(2.0).pow(age / settings.half_life_s),
        )
        .group_by([*keys, "_bucket"])
        .agg(pl.col("_weight").sum())
        .sort([*keys, "_bucket"])
        .with_columns(
            _cum=pl.col("_weight").cum_sum().over(keys), _total=pl.col("_weight").sum().over(keys)
        )
    )
    # VPA: the first bucket whose cumulative weight reaches q x total (the last if none does;
    # the relative slack keeps a sum that lands on q x total from missing by a rounding error).
    chosen = buckets.group_by(keys).agg(
        pl.col("_bucket")
        .filter(pl.col("_cum") >= q * pl.col("_total") * (1 - 1e-12))
        .first()
        .fill_null(pl.col("_bucket").last())
        .alias(f"b{i}")
        for i, q in enumerate(quantiles)
    )
    return chosen.with_columns(
        pl.Series(f"q{i}", scheme.answer(chosen.get_column(f"b{i}").to_numpy().astype(np.int64)))
        for i in range(len(quantiles))
    ).drop([f"b{i}" for i in range(len(quantiles))])


_ALL = "__all__"
_SERIES_ID = "__series__"


def recommend_frame(
    frame: pl.DataFrame, settings: RightsizingSettings, *, by: Sequence[str]
) -> pl.DataFrame:
    """Target, bounds and evidence per key of ``frame`` (see the module docstring).

    ``frame``: the key columns ``by`` (none: one workload), ``series`` (one pod on one GPU),
    ``ts_s`` (Unix s), ``fb_used_bytes`` and optionally ``max_allowed_bytes`` (the GPU
    framebuffer; the largest per key caps its values). One row per key with ``points``,
    ``series_count``, ``peaks``, ``history_s``, ``confidence_days``, ``peak_bytes``,
    ``target_bytes``, ``lower_bytes``, ``upper_bytes`` (float; NaN when not enough data),
    ``max_allowed_bytes``, ``capped`` and ``enough_data``.
    """
    keys = list(by) or [_ALL]
    data = frame if by else frame.with_columns(pl.lit(0).alias(_ALL))
    if data.get_column(USED).null_count() or data.get_column(TS_S).null_count():
        data = data.filter(pl.col(USED).is_not_null() & pl.col(TS_S).is_not_null())
    series = SERIES
    if SERIES in keys:  # per container: the series is the key itself
        data, series = data.with_columns(pl.col(SERIES).alias(_SERIES_ID)), _SERIES_ID
    peaks = interval_peaks(data, keys, settings.peak_interval_s, series=series)
    if CAPACITY not in peaks.columns:
        peaks = peaks.with_columns(pl.lit(None, pl.Float64).alias(CAPACITY))
    # Everything else reads the peaks (one row per series and interval), not the samples.
    stats = peaks.group_by(keys).agg(
        pl.col("points").sum(),
        pl.col(series).n_unique().alias("series_count"),
        pl.len().alias("peaks"),
        (pl.col("last_s").max() - pl.col("first_s").min()).cast(pl.Float64).alias("history_s"),
        pl.col("peak_bytes").max(),
        pl.col(CAPACITY).max(),
    )
    quantiles = (
        settings.lower_percentile_ratio,
        settings.target_percentile_ratio,
        settings.upper_percentile_ratio,
    )
    pct = weighted_percentiles(peaks, keys, quantiles, settings)
    out = _bounds(stats.join(pct, on=keys), settings)
    return out if by else out.drop(_ALL)


def _bounds(joined: pl.DataFrame, settings: RightsizingSettings) -> pl.DataFrame:
    s = settings
    confidence = pl.min_horizontal(
        pl.col("history_s") / DAY_S, pl.col("points") / SAMPLES_PER_DAY
    ).alias("confidence_days")
    enough = (pl.col("points") >= s.min_points) & (pl.col("history_s") >= s.min_history_s)

    def factor(multiplier: float, exponent: float) -> pl.Expr:
        # (1 + m / c)^e; c = 0 gives inf (upper) or 0 (lower), as VPA's division by zero.
        return (1 + multiplier / pl.col("confidence_days")).pow(exponent)

    margin = 1 + s.margin_ratio
    raw = joined.with_columns(confidence).with_columns(
        target=pl.col("q1") * margin,
        lower=pl.col("q0")
        * margin
        * factor(s.lower_confidence_multiplier, s.lower_confidence_exponent),
        upper=pl.col("q2")
        * margin
        * factor(s.upper_confidence_multiplier, s.upper_confidence_exponent),
    )
    capped = raw.with_columns(
        capped=pl.col(CAPACITY).is_not_null() & (pl.col("target") > pl.col(CAPACITY)),
        target_bytes=pl.min_horizontal("target", CAPACITY),
        lower_bytes=pl.min_horizontal("lower", CAPACITY),
        upper_bytes=pl.min_horizontal("upper", CAPACITY),
    )
    nan = pl.lit(float("nan"))
    return capped.with_columns(
        enough_data=enough,
        target_bytes=pl.when(enough).then("target_bytes").otherwise(nan),
        lower_bytes=pl.when(enough).then("lower_bytes").otherwise(nan),
        upper_bytes=pl.when(enough).then("upper_bytes").otherwise(nan),
    ).drop("q0", "q1", "q2", "target", "lower", "upper")


def recommendations(
    frame: pl.DataFrame, settings: RightsizingSettings, *, by: Sequence[str]
) -> tuple[MemoryRecommendation, ...]:
    """:func:`recommend_frame` as typed values, sorted by key, each with its reason."""
    table = recommend_frame(frame, settings, by=by).sort(list(by), nulls_last=True)
    return tuple(_typed(row, by, settings) for row in table.iter_rows(named=True))


def recommend_series(
    ts_s: Sequence[float] | FloatArray,
    used_bytes: Sequence[float] | FloatArray,
    settings: RightsizingSettings,
    *,
    max_allowed_bytes: float | None = None,
) -> MemoryRecommendation:
    """The recommendation of one series (one pod on one GPU)."""
    frame = pl.DataFrame(
        {
            SERIES: ["series"] * len(ts_s),
            TS_S: np.asarray(ts_s, dtype=np.float64),
            USED: np.asarray(used_bytes, dtype=np.float64),
            CAPACITY: [max_allowed_bytes] * len(ts_s),
        },
        schema={SERIES: pl.String, TS_S: pl.Float64, USED: pl.Float64, CAPACITY: pl.Float64},
    )
    if frame.height == 0:
        return MemoryRecommendation(
            key=(),
            points=0,
            series=0,
            peaks=0,
            history_s=0.0,
            confidence_days=0.0,
            target_bytes=None,
            lower_bytes=None,
            upper_bytes=None,
            peak_bytes=0,
            max_allowed_bytes=_int(max_allowed_bytes),
            capped=False,
            reason=f"not enough data: no samples; needs >= {settings.min_points}",
        )
    return recommendations(frame, settings, by=())[0]


def _int(value: object) -> int | None:
    """A byte count rounded up; None for NULL / NaN (not enough data, no cap)."""
    if not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return math.ceil(value)


def _num(value: object) -> float:
    if not isinstance(value, int | float):
        raise TypeError(f"expected a number, got {value!r}")
    return float(value)


def _typed(
    row: dict[str, object], by: Sequence[str], settings: RightsizingSettings
) -> MemoryRecommendation:
    points, history_s = int(_num(row["points"])), _num(row["history_s"])
    cap, target = _int(row[CAPACITY]), _int(row["target_bytes"])
    confidence = _num(row["confidence_days"])
    if target is None:
        reason = (
            f"not enough data: {points} samples over {history_s:g} s; needs >= "
            f"{settings.min_points} samples and >= {settings.min_history_s:g} s"
        )
    else:
        reason = (
            f"P{settings.target_percentile_ratio * 100:g} of {row['peaks']} peaks "
            f"({settings.peak_interval_s:g} s each, half-life {settings.half_life_s:g} s) + "
            f"{settings.margin_ratio:.0%} margin; {points} samples over {history_s / 3600:.1f} h, "
            f"confidence {confidence:.2f} day(s)"
        )
        if row["capped"]:
            reason += f"; capped at the GPU's {cap} bytes"
    return MemoryRecommendation(
        key=tuple(None if row[k] is None else str(row[k]) for k in by),
        points=points,
        series=int(_num(row["series_count"])),
        peaks=int(_num(row["peaks"])),
        history_s=history_s,
        confidence_days=confidence,
        target_bytes=target,
        lower_bytes=_int(row["lower_bytes"]),
        upper_bytes=_int(row["upper_bytes"]),
        peak_bytes=int(_num(row["peak_bytes"])),
        max_allowed_bytes=cap,
        capped=bool(row["capped"]),
        reason=reason,
    )
