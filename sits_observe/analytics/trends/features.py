"""Trend features of many series at once, vectorised over long-format arrays.

Per series ``x(t)`` (occupancy ratio, ``t`` in hours), one least-squares fit of

    x(t) = c + slope * (t - mean t) + a cos(w t) + b sin(w t),     w = 2 pi / 24 h

(the harmonic terms only for series covering at least one day; ``t`` for the harmonic is UTC
time of day, so daily cycles of different GPUs line up) gives the features:

- ``level``: mean of ``x``;
- ``slope_per_h``: the fitted slope, ratio per hour (fitted jointly with the daily cycle, so
  a cycle does not pass for a trend);
- ``resid_std``: standard deviation of the residuals, i.e. the variance that neither the
  trend nor the daily cycle explains (saw-teeth and jitter);
- ``daily_amplitude``: ``sqrt(a^2 + b^2)``, the amplitude of the 24 h harmonic (0 for series
  shorter than a day: a cycle cannot be told from a trend there);
- ``drops_per_h``: sharp drops (``x`` falls by at least ``drop_ratio`` from one point to the
  next) per hour of series span.

All sums run per series through ``np.add.reduceat`` on arrays sorted by series then time, so
the cost is a few passes over the points whatever the number of series. Series with fewer
than ``min_points`` finite points (or a zero time span) get no features and are counted, as
are non-finite points.
"""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

#: Feature names, in column order of :attr:`TrendFeatures.matrix`.
FEATURES = ("level", "slope_per_h", "resid_std", "daily_amplitude", "drops_per_h")

DAY_S = 86_400.0
HOUR_S = 3_600.0

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class TrendFeatures:
    """One row of :data:`FEATURES` per kept series.

    ``codes`` are the input series codes of the rows (ascending); ``points`` and ``span_h``
    describe each kept series; ``dropped`` counts what was left out, by reason
    (``non_finite_points``, ``too_few_points`` series, ``zero_span`` series,
    ``non_finite_features`` series) and ``dropped_codes`` names the series left out.
    """

    codes: IntArray
    matrix: FloatArray
    points: IntArray
    span_h: FloatArray
    dropped: Counter[str]
    dropped_codes: IntArray

    @property
    def n_series(self) -> int:
        """Series with features."""
        return int(self.codes.size)

    def column(self, name: str) -> FloatArray:
        """One feature for every kept series."""
        return self.matrix[:, FEATURES.index(name)]


#: Points checked at a time by the input checks (bounds their temporaries).
CHECK_BLOCK = 1 << 20


def _blocks(size: int) -> range:
    return range(0, size, CHECK_BLOCK)


def _all_finite(t_s: FloatArray, values: FloatArray) -> bool:
    return all(
        np.isfinite(values[a : a + CHECK_BLOCK]).all()
        and np.isfinite(t_s[a : a + CHECK_BLOCK]).all()
        for a in _blocks(values.size)
    )


def _sorted_by_code_then_time(codes: IntArray, t_s: FloatArray) -> bool:
    for a in _blocks(max(codes.size - 1, 0)):
        b = min(a + CHECK_BLOCK, codes.size - 1)
        dc = codes[a + 1 : b + 1] - codes[a:b]
        if not (np.all(dc >= 0) and np.all((dc > 0) | (t_s[a + 1 : b + 1] >= t_s[a:b]))):
            return False
    return True


def series_features(
    codes: IntArray,
    t_s: FloatArray,
    values: FloatArray,
    *,
    drop_ratio: float = 0.05,
    min_points: int = 3,
    chunk_points: int = 250_000,
) -> TrendFeatures:
    """Features of every series in the long-format arrays (see module docstring).

    ``codes`` name the series of each point (any non-negative integers), ``t_s`` its time in
    seconds since the Unix epoch (UTC), ``values`` its value. Points need not be sorted.
    Whole series are processed about ``chunk_points`` points at a time: the temporaries
    (about 15 float arrays of one chunk, some 30 MB) stay bounded whatever the input size and
    mostly in cache, which measured 1.3x faster than 4 M-point chunks (bench/bench_dbscan.py).
    """
    codes = np.asarray(codes, dtype=np.int64)
    t_s = np.asarray(t_s, dtype=np.float64)
    values = np.asarray(values, dtype=np.float64)
    dropped: Counter[str] = Counter()
    if not _all_finite(t_s, values):
        finite = np.isfinite(values) & np.isfinite(t_s)
        dropped["non_finite_points"] += int((~finite).sum())
        all_codes = np.unique(codes)
        codes, t_s, values = codes[finite], t_s[finite], values[finite]
    else:
        all_codes = None
    if not _sorted_by_code_then_time(codes, t_s):
        order = np.lexsort((t_s, codes))
        codes, t_s, values = codes[order], t_s[order], values[order]
    if codes.size == 0:
        gone = np.zeros(0, np.int64) if all_codes is None else all_codes
        dropped["too_few_points"] += int(gone.size)
        return _empty(dropped, gone)

    starts = np.r_[0, np.flatnonzero(codes[1:] != codes[:-1]) + 1]
    parts = [
        _chunk_features(codes[a:b], t_s[a:b], values[a:b], drop_ratio)
        for a, b in _chunks(starts, codes.size, chunk_points)
    ]
    series = np.concatenate([p[0] for p in parts])
    counts = np.concatenate([p[1] for p in parts])
    span_h = np.concatenate([p[2] for p in parts])
    matrix = np.concatenate([p[3] for p in parts])

    few = counts < min_points
    flat = ~few & (span_h <= 0)
    bad = ~few & ~flat & ~np.all(np.isfinite(matrix), axis=1)
    dropped["too_few_points"] += int(few.sum())
    dropped["zero_span"] += int(flat.sum())
    dropped["non_finite_features"] += int(bad.sum())
    keep = ~(few | flat | bad)
    gone = series[~keep]
    if all_codes is not None:
        vanished = np.setdiff1d(all_codes, series)  # every point of these was non-finite
        dropped["too_few_points"] += int(vanished.size)
        gone = np.union1d(gone, vanished)
    return TrendFeatures(
        codes=series[keep],
        matrix=matrix[keep],
        points=counts[keep],
        span_h=span_h[keep],
        dropped=+dropped,
        dropped_codes=np.asarray(gone, dtype=np.int64),
    )


def _chunks(starts: IntArray, total: int, chunk_points: int) -> list[tuple[int, int]]:
    """``[a, b)`` point ranges of about ``chunk_points`` each, cut only at series starts."""
    bounds = [0]
    while bounds[-1] < total:
        target = bounds[-1] + chunk_points
        if target >= total:
            bounds.append(total)
            break
        # the last series start at or before target, but at least one series further on
        cut = int(starts[np.searchsorted(starts, target, side="right") - 1])
        if cut <= bounds[-1]:
            following = np.searchsorted(starts, bounds[-1], side="right")
            cut = int(starts[following]) if following < starts.size else total
        bounds.append(cut)
    return list(itertools.pairwise(bounds))


def _chunk_features(
    codes: IntArray, t_s: FloatArray, values: FloatArray, drop_ratio: float
) -> tuple[IntArray, IntArray, FloatArray, FloatArray]:
    """Series codes, point counts, spans (h) and the feature matrix of sorted whole series.

    The fit runs on values centred per series (``xc``) and times centred per series (``tc``),
    so the normal equations' intercept rows are exact zeros, and the residual sum of squares
    comes from them too (``xc.xc - coef.rhs``) instead of a pass over fitted values.
    """
    size = codes.size
    starts = np.r_[0, np.flatnonzero(codes[1:] != codes[:-1]) + 1]
    ends = np.r_[starts[1:], size] - 1
    counts = (ends - starts + 1).astype(np.int64)
    n = counts.astype(np.float64)
    span_h = (t_s[ends] - t_s[starts]) / HOUR_S
    daily = span_h >= 24.0

    def total(a: FloatArray) -> FloatArray:
        return np.add.reduceat(a, starts)

    level = total(values) / n
    xc = values - np.repeat(level, counts)
    tc = (t_s - np.repeat(t_s[starts], counts)) * (1.0 / HOUR_S)
    tc -= np.repeat(total(tc) / n, counts)

    g = starts.size
    gram = np.zeros((g, 4, 4))
    rhs = np.zeros((g, 4))
    gram[:, 0, 0] = n
    gram[:, 1, 1] = total(tc * tc)
    rhs[:, 1] = total(tc * xc)
    sxx = total(xc * xc)
    if daily.any():
        # cos(w t) straight from epoch seconds: t * w is ~1e5 rad, where a float64 is exact
        # to ~1e-11 rad, so no reduction modulo a day is needed.
        angle = t_s * (2.0 * np.pi / DAY_S)
        cos, sin = np.cos(angle), np.sin(angle)
        del angle
        if not daily.all():
            mask = np.repeat(daily.astype(np.float64), counts)
            cos *= mask
            sin *= mask
        for i, a in ((2, cos), (3, sin)):
            gram[:, 0, i] = gram[:, i, 0] = total(a)
            gram[:, 1, i] = gram[:, i, 1] = total(tc * a)
            rhs[:, i] = total(a * xc)
        gram[:, 2, 2] = total(cos * cos)
        gram[:, 3, 3] = total(sin * sin)
        gram[:, 2, 3] = gram[:, 3, 2] = total(cos * sin)
        del cos, sin
    gram[~daily, 2, 2] = 1.0
    gram[~daily, 3, 3] = 1.0
    # The pseudo-inverse keeps a degenerate series (say, every point at the same time of day)
    # finite instead of failing the whole batch.
    coef = np.einsum("gij,gj->gi", np.linalg.pinv(gram), rhs)
    rss = np.maximum(sxx - np.einsum("gi,gi->g", coef, rhs), 0.0)
    resid_std = np.sqrt(rss / n)
    del xc, tc

    sharp = np.zeros(size, dtype=np.bool_)
    np.less_equal(np.diff(values), -drop_ratio, out=sharp[:-1])
    sharp[ends] = False  # a step from one series' last point to the next series' first
    drops = np.add.reduceat(sharp, starts, dtype=np.int64).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        drops_per_h = np.where(span_h > 0, drops / span_h, np.nan)

    amplitude = np.hypot(coef[:, 2], coef[:, 3])
    matrix = np.column_stack([level, coef[:, 1], resid_std, amplitude, drops_per_h])
    return codes[starts], counts, span_h, matrix


def _empty(dropped: Counter[str], gone: IntArray) -> TrendFeatures:
    return TrendFeatures(
        codes=np.zeros(0, np.int64),
        matrix=np.zeros((0, len(FEATURES))),
        points=np.zeros(0, np.int64),
        span_h=np.zeros(0),
        dropped=+dropped,
        dropped_codes=np.asarray(gone, dtype=np.int64),
    )
