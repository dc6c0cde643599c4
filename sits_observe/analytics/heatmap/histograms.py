"""The latency-throughput heatmap from cumulative latency histograms (a PromQL store).

:mod:`sits_observe.analytics.heatmap.grid` bins each request by its exact latency. A Prometheus-
compatible store keeps no requests, only the inference server's cumulative histogram
(``vllm:e2e_request_latency_seconds``) per scrape. Read on a grid of one point per time bin
(``bin_s``), the difference of two consecutive points is a histogram of the requests that
completed in that bin; this module builds the same three tables from those differences:

- ``windows``: one row per time bin with requests: its throughput (the bin's requests /
  ``bin_s``, the same exact throughput bin as the request path), its requests and its P50 /
  P95 / P99 ESTIMATES (:func:`sits_observe.collectors.histogram.quantile`, PromQL's
  ``histogram_quantile``);
- ``cells``: requests per (latency bucket, throughput bin): the latency axis is the
  histogram's own buckets, not ``latency_bin_ms`` (a bucket cannot be split); the heatmap's
  ``latency_edges_ms`` holds every bucket's lower edge, so a drawing labels the buckets
  between two non-empty ones by their bounds too;
- ``bins``: per throughput bin, the time bins' histograms summed and the quantiles estimated
  on the sum: the estimate of the P95 over every request of the bin, the evidence the knee and
  the safe maximum rest on (the rules of :mod:`sits_observe.analytics.heatmap.knee`).

Accuracy. Request counts, throughputs and throughput bins are exact (a histogram counts every
request). Each quantile lies in the bucket the estimate names, so it is wrong by at most that
bucket's width (``error_s`` of each bin; infinite when the rank fell in the ``+Inf`` bucket,
where the estimate is the highest finite bound, as in PromQL). With a P95 SLO on a bucket
bound the safe maximum's verdict per bin is exact: the P95 is above the bound exactly when the
estimate is. A bin whose P95 fell in the ``+Inf`` bucket breaks any SLO (its P95 is only known
to be above the highest bound).

Several series of one heatmap (the pods of a model, the engines of a server) are summed per
time bin when their buckets match; a series whose buckets differ from the heatmap's first
one, a counter reset and a gap in the grid (two points more than one bin apart) leave that
time bin of that series out, counted in :attr:`HistogramHeatmaps.skipped`.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from fractions import Fraction

import numpy as np
import polars as pl
import pyarrow as pa

from sits_observe.analytics.heatmap.grid import Heatmap
from sits_observe.analytics.heatmap.knee import (
    SafeMax,
    ThroughputBin,
    Verdict,
    find_knee,
    find_safe_max,
)
from sits_observe.analytics.heatmap.settings import US_PER_S, HeatmapSettings, exact
from sits_observe.analytics.serving.latency import ESTIMATE_GROUPS, GroupBy, check_group
from sits_observe.collectors import histogram as hist

#: The columns that tell one histogram series from another in a snapshot table.
SERIES_COLUMNS = ("server", "model", "namespace", "pod", "node")

#: Quantiles of every row (the request path's).
QUANTILES = (0.5, 0.95, 0.99)


@dataclass(frozen=True)
class BinError:
    """How far each estimated quantile of a throughput bin can be from the true one, s."""

    throughput_lo_rps: float
    p50_error_s: float
    p95_error_s: float
    p99_error_s: float


@dataclass(frozen=True)
class HistogramHeatmaps:
    """The heatmaps, each bin's error bounds (by heatmap, in bin order) and what was left out."""

    maps: tuple[Heatmap, ...]
    errors: tuple[tuple[BinError, ...], ...]
    skipped: Counter[str] = field(default_factory=Counter)


def histogram_heatmaps(
    snapshots: pa.Table, settings: HeatmapSettings, *, by: GroupBy | None = None
) -> HistogramHeatmaps:
    """Heatmaps of the snapshot table (``store.promql_source.SNAPSHOT_SCHEMA`` columns: one
    row per time, series and bucket, read one point per ``settings.window_s``).

    One heatmap per ``by`` group (model, pod or node; histograms do not know the GPU) or one
    over every series. No heatmap for a group without a request.
    """
    if by is not None:
        check_group(by, ESTIMATE_GROUPS)
    frame = pl.from_arrow(snapshots)
    assert isinstance(frame, pl.DataFrame)
    skipped: Counter[str] = Counter()
    deltas = _series_deltas(frame, settings.window_us, skipped)
    grouped: dict[str | None, dict[datetime, _Bin]] = {}
    for key, start, delta in deltas:
        g = None if by is None else key[SERIES_COLUMNS.index(by)]
        per_start = grouped.setdefault(g, {})
        current = per_start.get(start)
        if current is None:
            per_start[start] = _Bin(delta)
        elif not current.add(delta):
            skipped["bucket layout differs from the heatmap's first series"] += 1
    maps: list[Heatmap] = []
    errors: list[tuple[BinError, ...]] = []
    for g in sorted(grouped, key=lambda v: (v is None, v or "")):
        built = _assemble(settings, by, g, grouped[g])
        if built is not None:
            maps.append(built[0])
            errors.append(built[1])
    return HistogramHeatmaps(tuple(maps), tuple(errors), skipped)


class _Bin:
    """A histogram being summed (all parts with one bucket layout)."""

    def __init__(self, first: hist.Histogram) -> None:
        self.bounds = first.bounds
        self.counts = np.asarray(first.counts, dtype=np.float64)
        self.sum = first.sum
        self.count = first.count

    def add(self, other: hist.Histogram) -> bool:
        if other.bounds != self.bounds:
            return False
        self.counts = self.counts + np.asarray(other.counts, dtype=np.float64)
        self.sum += other.sum
        self.count += other.count
        return True

    def histogram(self) -> hist.Histogram:
        return hist.Histogram(self.bounds, tuple(self.counts.tolist()), self.sum, self.count)


def _series_deltas(
    frame: pl.DataFrame, window_us: int, skipped: Counter[str]
) -> list[tuple[tuple[str | None, ...], datetime, hist.Histogram]]:
    """Per series, the histogram of each time bin: (series key, bin start, delta)."""
    out: list[tuple[tuple[str | None, ...], datetime, hist.Histogram]] = []
    if frame.height == 0:
        return out
    width = timedelta(microseconds=window_us)
    ordered = frame.sort(*SERIES_COLUMNS, "ts", "le", nulls_last=True)
    for key, series in ordered.group_by(*SERIES_COLUMNS, maintain_order=True):
        previous: tuple[datetime, hist.Histogram] | None = None
        for (_ts,), snap in series.group_by("ts", maintain_order=True):
            first = snap.row(0, named=True)
            pairs = list(zip(snap["le"].to_list(), snap["cumulative"].to_list(), strict=True))
            count = first["count"] if first["count"] is not None else pairs[-1][1]
            current = (first["ts"], hist.build(pairs, first["sum_s"] or 0.0, count))
            if previous is not None:
                reason = _why_not(previous, current, width)
                if reason is None:
                    delta = hist.delta(previous[1], current[1])
                    out.append((tuple(key), previous[0], delta))
                else:
                    skipped[reason] += 1
            previous = current
    return out


def _why_not(
    previous: tuple[datetime, hist.Histogram],
    current: tuple[datetime, hist.Histogram],
    width: timedelta,
) -> str | None:
    """Why the two points do not give one time bin's histogram (None: they do)."""
    if current[0] - previous[0] != width:
        return "gap in the series (points more than one time bin apart)"
    if not hist.same_layout(previous[1], current[1]):
        return "bucket bounds changed between two points"
    if hist.is_reset(previous[1], current[1]):
        return "counter reset (the server restarted)"
    return None


def _assemble(
    settings: HeatmapSettings, by: str | None, group: str | None, per_start: dict[datetime, _Bin]
) -> tuple[Heatmap, tuple[BinError, ...]] | None:
    width = exact(settings.throughput_bin_rps)
    bin_s = Fraction(settings.window_us, US_PER_S)
    windows: list[dict[str, object]] = []
    by_bin: dict[int, _Bin] = {}
    windows_in: Counter[int] = Counter()
    requests = 0
    for start in sorted(per_start):
        summed = per_start[start].histogram()
        n = round(summed.total)
        if n <= 0:
            continue
        tbin = math.floor(Fraction(n) / bin_s / width)
        q = _quantiles(summed)
        windows.append(
            {
                "start": start,
                "throughput_rps": n / float(bin_s),
                "count": n,
                "throughput_bin": tbin,
                "p50_s": q[0].value,
                "p95_s": q[1].value,
                "p99_s": q[2].value,
            }
        )
        windows_in[tbin] += 1
        requests += n
        target = by_bin.get(tbin)
        if target is None:
            by_bin[tbin] = _Bin(summed)
        else:
            target.add(summed)
    if not windows:
        return None
    bins: list[ThroughputBin] = []
    errors: list[BinError] = []
    cells: list[dict[str, object]] = []
    edges: tuple[float, ...] | None = None
    for tbin in sorted(by_bin):
        merged = by_bin[tbin].histogram()
        q = _quantiles(merged)
        lo = float(tbin * width)
        bins.append(
            ThroughputBin(
                throughput_lo_rps=lo,
                throughput_hi_rps=float((tbin + 1) * width),
                windows=windows_in[tbin],
                requests=round(merged.total),
                p50_s=q[0].value,
                p95_s=q[1].value,
                p99_s=q[2].value,
            )
        )
        errors.append(BinError(lo, *(e.error_bound for e in q)))
        cells.extend(_cells(merged, tbin, lo))
        edges = edges or _edges_ms(merged)
    knee = find_knee(bins, settings.min_bin_requests)
    safe: Verdict[SafeMax] | None = None
    if settings.slo_ms is not None:
        # a P95 in the +Inf bucket is only known to be above the highest bound: a breach
        judged = [
            b if math.isfinite(e.p95_error_s) else _above(b)
            for b, e in zip(bins, errors, strict=True)
        ]
        safe = find_safe_max(judged, settings.slo_ms / 1000, settings.min_bin_requests)
    heatmap = Heatmap(
        by=by,
        group=group,
        settings=settings,
        requests=requests,
        cells=pa.Table.from_pylist(cells, schema=CELLS_SCHEMA),
        windows=pa.Table.from_pylist(windows, schema=WINDOWS_SCHEMA),
        bins=tuple(bins),
        knee=knee,
        safe_max=safe,
        latency_edges_ms=edges,
    )
    return heatmap, tuple(errors)


def _above(b: ThroughputBin) -> ThroughputBin:
    return ThroughputBin(
        b.throughput_lo_rps, b.throughput_hi_rps, b.windows, b.requests, b.p50_s, math.inf, b.p99_s
    )


def _quantiles(h: hist.Histogram) -> Sequence[hist.QuantileEstimate]:
    found = [hist.quantile(q, h) for q in QUANTILES]
    assert all(e is not None for e in found)  # callers pass histograms with requests
    return [e for e in found if e is not None]


def _edges_ms(merged: hist.Histogram) -> tuple[float, ...]:
    """Lower edge (ms) of each bucket of ``merged``, as :func:`_cells` labels them: 0, then
    each finite upper bound (the last bucket is ``+Inf``)."""
    return tuple(0.0 if i == 0 else merged.bounds[i - 1] * 1000 for i in range(len(merged.counts)))


def _cells(merged: hist.Histogram, tbin: int, lo_rps: float) -> list[dict[str, object]]:
    """Requests per latency bucket of one throughput bin (empty buckets left out)."""
    per_bucket = np.diff(np.asarray(merged.counts), prepend=0.0)
    rows: list[dict[str, object]] = []
    for index, n in enumerate(per_bucket.tolist()):
        if round(n) <= 0:
            continue
        lower = 0.0 if index == 0 else merged.bounds[index - 1]
        rows.append(
            {
                "latency_bin": index,
                "throughput_bin": tbin,
                "latency_lo_ms": lower * 1000,
                "throughput_lo_rps": lo_rps,
                "count": round(n),
            }
        )
    return rows


#: Columns of a heatmap's ``cells`` and ``windows`` tables.
CELLS_SCHEMA = pa.schema(
    [
        ("latency_bin", pa.int64()),
        ("throughput_bin", pa.int64()),
        ("latency_lo_ms", pa.float64()),
        ("throughput_lo_rps", pa.float64()),
        ("count", pa.int64()),
    ]
)
WINDOWS_SCHEMA = pa.schema(
    [
        ("start", pa.timestamp("us")),
        ("throughput_rps", pa.float64()),
        ("count", pa.int64()),
        ("throughput_bin", pa.int64()),
        ("p50_s", pa.float64()),
        ("p95_s", pa.float64()),
        ("p99_s", pa.float64()),
    ]
)
