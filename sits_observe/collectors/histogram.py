"""Pure maths on cumulative Prometheus histograms: deltas, resets and quantile estimates.

A Prometheus histogram is a list of cumulative bucket counts ``count(x <= le)`` for ascending
upper bounds ``le``, the last being ``+Inf``, plus ``_sum`` and ``_count``. Between two scrapes
the difference of the counts is itself a histogram of the observations made in that window.

Quantiles are ESTIMATED the way PromQL's ``histogram_quantile`` does it
(https://prometheus.io/docs/prometheus/latest/querying/functions/#histogram_quantile):
the rank ``q * total`` is located in the first bucket whose cumulative count reaches it, and
the value is interpolated linearly between that bucket's lower and upper bound (the lower
bound of the first bucket is 0, as observations here are non-negative durations).

Error bound: the true sample quantile (the ``ceil(q * n)``-th smallest observation, numpy's
``inverted_cdf`` method) lies in the same bucket ``(lower, upper]`` as the estimate, so the
estimate is wrong by at most ``upper - lower``, the width of that bucket. When the rank falls in
the ``+Inf`` bucket the estimate is the highest finite bound (as in PromQL) and the error bound
is infinite: the true value is only known to be larger.

Values are in whatever unit the histogram observes (seconds for vLLM); nothing here converts.
No function raises for odd input that a scrape can produce: callers check :func:`is_reset` and
:func:`same_layout` before taking a :func:`delta`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Histogram:
    """One cumulative histogram: ascending upper bounds (last ``+Inf``) and counts."""

    bounds: tuple[float, ...]
    counts: tuple[float, ...]
    sum: float
    count: float

    @property
    def total(self) -> float:
        """Observations in the histogram (the ``+Inf`` bucket's count)."""
        return self.counts[-1] if self.counts else 0.0


@dataclass(frozen=True, slots=True)
class QuantileEstimate:
    """A quantile estimated from buckets, with the bucket it fell in."""

    value: float
    lower: float
    upper: float

    @property
    def error_bound(self) -> float:
        """Largest possible distance to the true sample quantile (``inf`` in the +Inf bucket)."""
        return self.upper - self.lower

    @property
    def in_overflow(self) -> bool:
        """True when the rank fell in the ``+Inf`` bucket (value is a lower limit only)."""
        return math.isinf(self.upper)


def build(buckets: Iterable[tuple[float, float]], sum_: float, count: float) -> Histogram:
    """A :class:`Histogram` from ``(le, cumulative_count)`` pairs in any order.

    A missing ``+Inf`` bucket is added with ``count`` (the exposition format requires it, but a
    truncated body can lose it). Cumulative counts that dip (a torn read of a live histogram)
    are raised to the running maximum, as PromQL does, so the result is always monotone.
    """
    pairs = sorted(buckets)
    if not pairs or not math.isinf(pairs[-1][0]):
        pairs.append((math.inf, max(count, pairs[-1][1] if pairs else 0.0)))
    bounds: list[float] = []
    counts: list[float] = []
    running = 0.0
    for le, cumulative in pairs:
        running = max(running, cumulative)
        bounds.append(le)
        counts.append(running)
    return Histogram(tuple(bounds), tuple(counts), sum_, count)


def same_layout(a: Histogram, b: Histogram) -> bool:
    """True when both histograms have exactly the same bucket bounds."""
    return a.bounds == b.bounds


def is_reset(previous: Histogram, current: Histogram) -> bool:
    """True when ``current`` cannot follow ``previous`` without a restart: a count went down.

    The sum of non-negative observations never decreases either, so a falling ``_sum`` is a
    reset too (it catches a restarted server that already served more requests than before).
    """
    if current.count < previous.count or current.sum < previous.sum:
        return True
    return any(c < p for p, c in zip(previous.counts, current.counts, strict=False))


def delta(previous: Histogram, current: Histogram) -> Histogram:
    """The observations made between two scrapes of the same histogram.

    Requires :func:`same_layout` and not :func:`is_reset`; raises ``ValueError`` otherwise
    (a programming error: the collector checks both first).
    """
    if not same_layout(previous, current):
        raise ValueError("histograms have different bucket bounds")
    if is_reset(previous, current):
        raise ValueError("counter reset: the current histogram is below the previous one")
    counts = tuple(c - p for p, c in zip(previous.counts, current.counts, strict=True))
    return build(
        zip(current.bounds, counts, strict=True),
        current.sum - previous.sum,
        current.count - previous.count,
    )


def quantile(q: float, hist: Histogram) -> QuantileEstimate | None:
    """Estimate the ``q`` quantile (0 <= q <= 1); None when the histogram is empty.

    See the module docstring for the interpolation and the error bound.
    """
    if not 0.0 <= q <= 1.0 or math.isnan(q):
        raise ValueError(f"quantile {q} is outside [0, 1]")
    total = hist.total
    if total <= 0 or len(hist.bounds) < 2:
        return None
    rank = q * total
    index = _first_reaching(hist.counts, rank)
    upper = hist.bounds[index]
    if math.isinf(upper):
        highest = hist.bounds[-2]
        return QuantileEstimate(highest, highest, math.inf)
    if index == 0:
        lower = min(0.0, upper)
        below = 0.0
    else:
        lower = hist.bounds[index - 1]
        below = hist.counts[index - 1]
    in_bucket = hist.counts[index] - below
    if in_bucket <= 0:
        return QuantileEstimate(upper, lower, upper)
    value = lower + (upper - lower) * (rank - below) / in_bucket
    return QuantileEstimate(value, lower, upper)


def _first_reaching(counts: Sequence[float], rank: float) -> int:
    """Index of the first bucket whose cumulative count is >= ``rank`` (and > 0)."""
    lo, hi = 0, len(counts) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if counts[mid] >= rank and counts[mid] > 0:
            hi = mid
        else:
            lo = mid + 1
    return lo


def mean(hist: Histogram) -> float | None:
    """Exact mean of the observations (``sum / count``); None when there are none."""
    if hist.count <= 0:
        return None
    return hist.sum / hist.count
