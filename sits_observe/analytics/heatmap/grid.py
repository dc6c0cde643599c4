"""Latency-throughput heatmap: how latency behaves as a service's throughput grows.

Definitions (see docs/analytics/latency.md for the same with examples):

- Window: requests are grouped by completion time ``ts`` into windows of ``window_s``, aligned
  to whole multiples of ``window_s`` since the Unix epoch (window ``k`` covers
  ``[k * window_s, (k + 1) * window_s)``). A window without requests does not exist: it has
  no latency to show, so throughput 0 never appears.
- Window throughput: its completed requests / ``window_s``, in requests per second.
- Cell: every request adds one count to the cell (its latency bin, its window's throughput
  bin), so the cells' counts sum to the number of requests. Latency bin ``i`` is
  ``[i * latency_bin_ms, (i + 1) * latency_bin_ms)``; throughput bin ``j`` likewise.
- Per window: count, throughput and the EXACT P50 / P95 / P99 (DuckDB ``quantile_cont``,
  linear interpolation between order statistics as in
  :mod:`sits_observe.analytics.serving.latency`).
- Per throughput bin: the exact quantiles of all requests of its windows, the evidence behind
  the knee and the safe maximum (:mod:`sits_observe.analytics.heatmap.knee`).

Arithmetic is exact where it decides a bin: timestamps are integer microseconds, the window
index is ``floor(epoch_us / window_us)``, the throughput bin is
``floor(count * 10^6 * den / (window_us * num))`` in 128-bit integers with the bin width
``num / den`` the exact fraction of its decimal text (``0.01`` is 1/100, not the nearest
double), and the latency bin is ``floor(round(latency_s * 10^6) / bin_us)``: the latency is
rounded to the microsecond for binning only (quantiles use the stored value), so 0.57 s falls
in the 570 ms bin, as a reader expects, not in the 560 ms one. Hence the window length and
the latency bin width must be whole microseconds.

Everything runs inside DuckDB in three scans of ``requests``: windows with their quantiles;
cells counted per window and latency bin, then joined to the small windows table; per-bin
quantiles, each request joined to its window's throughput bin. No Python loop touches a
request.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from fractions import Fraction
from typing import Any, Literal

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import ValidationError

from sits_observe.analytics.heatmap.knee import (
    Knee,
    SafeMax,
    ThroughputBin,
    Verdict,
    find_knee,
    find_safe_max,
)
from sits_observe.analytics.heatmap.settings import US_PER_MS, US_PER_S, HeatmapSettings, exact
from sits_observe.analytics.serving.latency import RequestSelection, check_group
from sits_observe.domain.validation import flag_problems
from sits_observe.errors import ConfigError, StoreError
from sits_observe.store import Store

HeatmapGroup = Literal["model", "pod", "node", "gpu_uuid"]


def heatmap_settings(**values: Any) -> HeatmapSettings:
    """:class:`HeatmapSettings` from flag values; :class:`ConfigError` naming the bad flags."""
    try:
        return HeatmapSettings(**values)
    except ValidationError as exc:
        raise ConfigError(flag_problems(exc)) from exc


@dataclass(frozen=True)
class Heatmap:
    """One heatmap: of one ``by`` group, or of every selected request when not grouped.

    ``cells`` columns: ``latency_bin``, ``throughput_bin`` (bin indices), ``latency_lo_ms``,
    ``throughput_lo_rps``, ``count``; sorted by throughput, then latency. ``windows`` columns:
    ``start`` (UTC), ``throughput_rps``, ``count``, ``throughput_bin``, ``p50_s``, ``p95_s``,
    ``p99_s``; sorted by start. ``bins``: the per-throughput-bin evidence, ascending.
    """

    by: str | None
    group: str | None
    settings: HeatmapSettings
    requests: int
    cells: pa.Table
    windows: pa.Table
    bins: tuple[ThroughputBin, ...]
    knee: Verdict[Knee]
    safe_max: Verdict[SafeMax] | None
    #: Lower edge (ms) of each latency bin when the bins are a histogram's buckets (a PromQL
    #: store's heatmap: bin i spans bucket i, from 0 for the first); None: bins of
    #: ``settings.latency_bin_ms``.
    latency_edges_ms: tuple[float, ...] | None = None

    def latency_lo_ms(self, latency_bin: int) -> float:
        """Lower edge of latency bin ``latency_bin`` in ms, whether or not a cell has it."""
        if self.latency_edges_ms is not None:
            return self.latency_edges_ms[latency_bin]
        return latency_bin * self.settings.latency_bin_ms


def compute_heatmaps(
    store: Store,
    settings: HeatmapSettings,
    *,
    selection: RequestSelection | None = None,
    by: HeatmapGroup | None = None,
    evidence: bool = True,
) -> list[Heatmap]:
    """Heatmaps of the selected requests: one per ``by`` group, or one over all of them.

    An empty list when no request is selected (callers say so). ``selection.since`` is moved
    down to a window boundary, so that the first window is complete. ``evidence=False``
    skips the per-throughput-bin quantiles (a third pass over the requests) and with them the
    knee and the safe maximum, for callers that only draw the map.
    """
    if by is not None:
        check_group(by)
    chosen = selection or RequestSelection()
    if chosen.since is not None:
        since = _window_floor(chosen.since, settings.window_us)
        chosen = replace(chosen, since=since)
    windows, cells, bins = _query(store, settings, chosen, by, evidence=evidence)
    groups = sorted(set(windows.column("g").to_pylist()), key=lambda g: (g is None, g or ""))
    return [
        _assemble(
            settings,
            by=by,
            group=g,
            windows=windows,
            cells=cells,
            bins=bins,
            evidence=evidence,
        )
        for g in groups
    ]


def _window_floor(since: datetime, window_us: int) -> datetime:
    epoch = datetime(1970, 1, 1, tzinfo=since.tzinfo)
    us = (since - epoch) // timedelta(microseconds=1)
    return epoch + timedelta(microseconds=us - us % window_us)


def _query(
    store: Store,
    settings: HeatmapSettings,
    selection: RequestSelection,
    by: str | None,
    *,
    evidence: bool,
) -> tuple[pa.Table, pa.Table, pa.Table]:
    """(windows, cells, bins) of every group, each with a ``g`` column (NULL when pooled)."""
    where, params = selection.where_named("latency_s")
    # Without groups the group column is left out of every scan, join and GROUP BY.
    g_in = f"{by} AS g, " if by is not None else ""
    g_key = "g, " if by is not None else ""
    g_out = "g" if by is not None else "NULL::VARCHAR AS g"
    g_joined = "c.g" if by is not None else "NULL::VARCHAR AS g"
    g_match = "c.g IS NOT DISTINCT FROM x.g AND " if by is not None else ""
    g_sort = "g NULLS LAST, " if by is not None else ""
    # floor(epoch_us / w) for either sign: DuckDB's integer // truncates towards zero.
    # Each query scans ``requests`` again: decoding the stored columns costs less CPU and
    # half the memory of materialising the selection once (measured on 10 M rows).
    requests = (
        f"SELECT {g_in}latency_s, "
        "(epoch_us(ts) - ((epoch_us(ts) % $w) + $w) % $w) // $w AS w "
        f"FROM requests WHERE ts IS NOT NULL AND {where}"
    )
    width = exact(settings.throughput_bin_rps)
    # throughput bin = floor(n / window_s / width) = floor(n * 10^6 * den / (window_us * num))
    scale = Fraction(US_PER_S * width.denominator, settings.window_us * width.numerator)
    windows_sql = (
        f"WITH r AS ({requests}), "
        f"x AS (SELECT {g_key}w, count(*) AS n, "
        "  quantile_cont(latency_s, [0.5, 0.95, 0.99]) AS q FROM r GROUP BY ALL) "
        f"SELECT {g_out}, w, make_timestamp(w * $w) AS start, "
        "  (n * 1000000)::DOUBLE / $w::DOUBLE AS throughput_rps, n AS count, "
        "  (n::HUGEINT * $tb_num::HUGEINT // $tb_den::HUGEINT)::BIGINT AS throughput_bin, "
        "  q[1] AS p50_s, q[2] AS p95_s, q[3] AS p99_s "
        f"FROM x ORDER BY {g_sort}w"
    )
    cells_sql = (
        f"WITH r AS ({requests}), "
        f"c AS (SELECT {g_key}w, round(latency_s * 1e6)::BIGINT // $lb AS lb, count(*) AS n "
        "  FROM r GROUP BY ALL) "
        f"SELECT {g_joined}, c.lb AS latency_bin, x.throughput_bin, sum(c.n)::BIGINT AS count "
        f"FROM c JOIN _hm_windows x ON {g_match}c.w = x.w "
        f"GROUP BY ALL ORDER BY {g_sort}throughput_bin, latency_bin"
    )
    bins_sql = (
        f"WITH r AS ({requests}) "
        f"SELECT {g_joined}, x.throughput_bin, count(*) AS requests, "
        "  quantile_cont(c.latency_s, [0.5, 0.95, 0.99]) AS q "
        f"FROM r AS c JOIN _hm_windows x ON {g_match}c.w = x.w "
        f"GROUP BY ALL ORDER BY {g_sort}x.throughput_bin"
    )
    cur = store.cursor()
    common = {"w": settings.window_us, **params}
    try:
        windows = cur.sql(
            windows_sql,
            params={
                **common,
                "tb_num": str(scale.numerator),
                "tb_den": str(scale.denominator),
            },
        ).to_arrow_table()
        cur.register("_hm_windows", windows.select(["g", "w", "throughput_bin"]))
        cells = cur.sql(
            cells_sql, params={**common, "lb": settings.latency_bin_us}
        ).to_arrow_table()
        bins = cur.sql(bins_sql, params=common).to_arrow_table() if evidence else _NO_BINS
    except duckdb.Error as exc:
        raise StoreError(f"heatmap query failed: {exc}") from exc
    finally:
        cur.close()
    return windows, cells, bins


#: The bins of a heatmap without evidence: a table of no batches, not ``pa.table`` of empty
#: lists, which would make pyarrow import pandas (about 0.15 s; it does on its first conversion
#: of Python or NumPy values) when ``serve`` imports this module for its settings, before its
#: port is up (docs/extender.md, cold start).
_NO_BINS = pa.Table.from_batches(
    [],
    pa.schema(
        [
            ("g", pa.string()),
            ("throughput_bin", pa.int64()),
            ("requests", pa.int64()),
            ("q", pa.list_(pa.float64())),
        ]
    ),
)


def _of_group(table: pa.Table, group: str | None) -> pa.Table:
    column = table.column("g")
    mask = pc.is_null(column) if group is None else pc.fill_null(pc.equal(column, group), False)
    return table.filter(mask)


def _assemble(
    settings: HeatmapSettings,
    *,
    by: str | None,
    group: str | None,
    windows: pa.Table,
    cells: pa.Table,
    bins: pa.Table,
    evidence: bool,
) -> Heatmap:
    width = exact(settings.throughput_bin_rps)
    lat_width = Fraction(settings.latency_bin_us, US_PER_MS)
    mine = _of_group(windows, group).drop_columns(["g", "w"])
    grid = _of_group(cells, group)
    lat_lo = _edges(grid.column("latency_bin"), lat_width)
    thr_lo = _edges(grid.column("throughput_bin"), width)
    grid = pa.table(
        {
            "latency_bin": grid.column("latency_bin"),
            "throughput_bin": grid.column("throughput_bin"),
            "latency_lo_ms": lat_lo,
            "throughput_lo_rps": thr_lo,
            "count": grid.column("count"),
        }
    )
    window_counts = mine.group_by("throughput_bin").aggregate([("count", "count")])
    windows_in = dict(
        zip(
            window_counts.column("throughput_bin").to_pylist(),
            window_counts.column("count_count").to_pylist(),
            strict=True,
        )
    )
    per_bin = tuple(
        ThroughputBin(
            throughput_lo_rps=float(row["throughput_bin"] * width),
            throughput_hi_rps=float((row["throughput_bin"] + 1) * width),
            windows=windows_in[row["throughput_bin"]],
            requests=row["requests"],
            p50_s=row["q"][0],
            p95_s=row["q"][1],
            p99_s=row["q"][2],
        )
        for row in _of_group(bins, group).to_pylist()
    )
    minimum = settings.min_bin_requests
    if evidence:
        knee = find_knee(per_bin, minimum)
    else:
        knee = Verdict(None, "knee not computed: per-bin evidence was not asked for")
    safe = None
    if settings.slo_ms is not None:
        safe = (
            find_safe_max(per_bin, settings.slo_ms / 1000, minimum)
            if evidence
            else Verdict(None, "safe maximum not computed: per-bin evidence was not asked for")
        )
    return Heatmap(
        by=by,
        group=group,
        settings=settings,
        requests=int(pc.sum(mine.column("count")).as_py() or 0),
        cells=grid,
        windows=mine,
        bins=per_bin,
        knee=knee,
        safe_max=safe,
    )


def _edges(index: pa.ChunkedArray, width: Fraction) -> pa.Array:
    """Lower bin edges ``index * width`` as the doubles nearest the exact values.

    One conversion per distinct index (bins are few even when cells are many).
    """
    distinct = pc.unique(index)
    exact_edges = pa.array([float(i * width) for i in distinct.to_pylist()], type=pa.float64())
    return pc.take(exact_edges, pc.index_in(index, value_set=distinct))
