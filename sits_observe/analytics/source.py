"""Where the analytics read GPU, container and latency series: DuckDB or a PromQL store.

Small Protocols let an analysis run on either store (docs/scaling.md):

- :class:`GpuSeriesSource`: ``gpu_samples(since, until, step_s=, columns=)`` -> an Arrow table
  in the ``gpu_samples`` schema. :class:`DuckGpuSource` reads the store's table;
  ``sits_observe.store.promql.source.PromQLGpuSource`` reads dcgm-exporter series.
- :class:`ContainerSeriesSource`: ``container_samples(...)`` alike, in the
  ``container_samples`` schema. :class:`DuckContainerSource` reads the store's table;
  ``sits_observe.store.promql.source.PromQLContainerSource`` reads the node agent's cgroup
  families (cAdvisor's names).
- :class:`ServerWindowSource`: ``server_windows(since, until)`` -> the ``server_windows``
  schema. :class:`DuckServerWindows` reads the store's table; :class:`SnapshotServerWindows`
  builds the same rows from cumulative histogram snapshots (:class:`HistogramSnapshotSource`,
  e.g. ``PromQLServerSource``) with the collector's maths
  (:mod:`sits_observe.collectors.histogram`): consecutive snapshots give a window, its
  bucket deltas the PromQL-rule quantile estimates,
  the widest bucket they fell in the error bound.

The PromQL implementations live in the store layer (they speak HTTP, which the analytics
may not import); the CLI composes them. Functions here that take a table rather than a store
(:func:`occupancy_from_samples`, :func:`estimate_windows_from`) are how an analysis written
for DuckDB SQL runs on rows from any source.

polars is imported by the functions that use it, not at the top: ``serve`` imports this
module (through the exporter's settings) before its port is up, and polars (about 0.15 s)
would delay the scheduler extender's first answer (docs/extender.md, cold start).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol

import pyarrow as pa

from sits_observe.analytics.serving.latency import (
    ESTIMATE_GROUPS,
    GroupBy,
    RequestSelection,
    check_group,
)
from sits_observe.analytics.trends.series import (
    OccupancySeries,
    TrendLevel,
    auto_bucket_s,
    series_from_arrow,
)
from sits_observe.collectors import histogram as hist
from sits_observe.domain.tables import SERVER_WINDOWS, TABLES, conform
from sits_observe.domain.times import utc_naive
from sits_observe.errors import ConfigError, UnknownNameError
from sits_observe.store.duck import Store


class GpuSeriesSource(Protocol):
    """Anything that yields ``gpu_samples`` rows for a time range."""

    name: str

    def gpu_samples(
        self,
        since: datetime,
        until: datetime,
        *,
        step_s: float | None = None,
        columns: Sequence[str] | None = None,
    ) -> pa.Table:
        """Rows with ``since <= ts < until`` (naive = UTC) in the ``gpu_samples`` schema."""
        ...


class ContainerSeriesSource(Protocol):
    """Anything that yields ``container_samples`` rows for a time range."""

    name: str

    def container_samples(
        self,
        since: datetime,
        until: datetime,
        *,
        step_s: float | None = None,
        columns: Sequence[str] | None = None,
    ) -> pa.Table:
        """Rows with ``since <= ts < until`` (naive = UTC) in the ``container_samples`` schema."""
        ...


class ServerWindowSource(Protocol):
    """Anything that yields ``server_windows`` rows (histogram ESTIMATES) for a time range."""

    name: str

    def server_windows(self, since: datetime, until: datetime) -> pa.Table:
        """Windows ending in ``[since, until)`` in the ``server_windows`` schema."""
        ...


class HistogramSnapshotSource(Protocol):
    """Cumulative latency histograms per scrape (``store.promql_source.SNAPSHOT_SCHEMA``)."""

    def histogram_snapshots(
        self, since: datetime, until: datetime, *, step_s: float | None = None
    ) -> pa.Table:
        """One row per (time, server group, bucket bound ``le``)."""
        ...


def _samples(
    store: Store,
    table: str,
    *,
    identity: Sequence[str],
    order: str,
    window: tuple[datetime, datetime],
    columns: Sequence[str] | None,
) -> pa.Table:
    """Rows of a samples ``table`` in ``[since, until)``: its ``identity`` columns and
    ``columns`` (None = all; the rest come back NULL), ordered by ``order``."""
    schema = TABLES[table].schema
    names = list(schema.names if columns is None else columns)
    bad = [c for c in names if schema.get_field_index(c) < 0]
    if bad:
        raise UnknownNameError(f"unknown {table} column(s) {bad}")
    chosen = list(dict.fromkeys([*identity, *names]))
    sql = f"SELECT {', '.join(chosen)} FROM {table} WHERE ts >= ? AND ts < ? ORDER BY {order}"
    since, until = window
    return conform(table, store.query(sql, [utc_naive(since), utc_naive(until)]))


class DuckGpuSource:
    """``gpu_samples`` from the DuckDB store (raw rows; ``step_s`` is ignored)."""

    name = "duckdb"
    _IDENTITY: tuple[str, ...] = ("ts", "node", "gpu_uuid", "gpu_index", "model_name")
    _IDENTITY += ("mig_profile", "mig_instance_id", "namespace", "pod", "container", "device")

    def __init__(self, store: Store) -> None:
        self._store = store

    def gpu_samples(
        self,
        since: datetime,
        until: datetime,
        *,
        step_s: float | None = None,
        columns: Sequence[str] | None = None,
    ) -> pa.Table:
        """Rows in ``[since, until)``; ``columns`` None = all (the rest come back NULL)."""
        order = "ts, node, gpu_uuid"
        return _samples(
            self._store,
            "gpu_samples",
            identity=self._IDENTITY,
            order=order,
            window=(since, until),
            columns=columns,
        )


class DuckContainerSource:
    """``container_samples`` from the DuckDB store (raw rows; ``step_s`` is ignored)."""

    name = "duckdb"
    _IDENTITY: tuple[str, ...] = ("ts", "node", "pod_uid", "container_id", "runtime")
    _IDENTITY += ("qos_class", "namespace", "pod", "container")

    def __init__(self, store: Store) -> None:
        self._store = store

    def container_samples(
        self,
        since: datetime,
        until: datetime,
        *,
        step_s: float | None = None,
        columns: Sequence[str] | None = None,
    ) -> pa.Table:
        """Rows in ``[since, until)``; ``columns`` None = all (the rest come back NULL)."""
        order = "ts, node, container_id"
        return _samples(
            self._store,
            "container_samples",
            identity=self._IDENTITY,
            order=order,
            window=(since, until),
            columns=columns,
        )


class DuckServerWindows:
    """``server_windows`` from the DuckDB store."""

    name = "duckdb"

    def __init__(self, store: Store) -> None:
        self._store = store

    def server_windows(self, since: datetime, until: datetime) -> pa.Table:
        """Windows ending in ``[since, until)``."""
        sql = "SELECT * FROM server_windows WHERE ts >= ? AND ts < ? ORDER BY model, pod, ts"
        return conform(
            "server_windows", self._store.query(sql, [utc_naive(since), utc_naive(until)])
        )


class SnapshotServerWindows:
    """``server_windows`` built from cumulative histogram snapshots (see module docstring).

    ``step_s`` None reads raw scrapes; a step reads the store's grid (windows of ``step_s``).
    The first snapshot of each group only primes it; a snapshot whose counts went down
    (restart) or whose bucket bounds changed starts a new window series without a row, as in
    the vLLM collector.
    """

    name = "promql"

    def __init__(self, snapshots: HistogramSnapshotSource, *, step_s: float | None = None) -> None:
        self._snapshots = snapshots
        self._step_s = step_s

    def server_windows(self, since: datetime, until: datetime) -> pa.Table:
        """Windows ending in ``[since, until)``; the snapshot before ``since`` is not read, so
        the first window in range ends at the second snapshot."""
        table = self._snapshots.histogram_snapshots(since, until, step_s=self._step_s)
        return windows_from_snapshots(table)


_GROUP = ("server", "model", "namespace", "pod", "node")


def windows_from_snapshots(table: pa.Table) -> pa.Table:
    """``server_windows`` rows from a snapshot table (``SNAPSHOT_SCHEMA`` columns)."""
    import polars as pl  # on first use: the module docstring

    rows: list[dict[str, Any]] = []
    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    if frame.height == 0:
        return SERVER_WINDOWS.schema.empty_table()
    for _key, group in frame.sort(*_GROUP, "ts", "le", nulls_last=True).group_by(
        *_GROUP, maintain_order=True
    ):
        previous: tuple[datetime, hist.Histogram] | None = None
        for (_ts,), snap in group.group_by("ts", maintain_order=True):
            first = snap.row(0, named=True)
            pairs = list(zip(snap["le"].to_list(), snap["cumulative"].to_list(), strict=True))
            count = first["count"] if first["count"] is not None else pairs[-1][1]
            current = hist.build(pairs, first["sum_s"] or 0.0, count)
            at: datetime = first["ts"]
            if previous is not None:
                row = _window_row(first, previous, (at, current))
                if row is not None:
                    rows.append(row)
            previous = (at, current)
    return pa.Table.from_pylist(
        [{n: r.get(n) for n in SERVER_WINDOWS.schema.names} for r in rows],
        schema=SERVER_WINDOWS.schema,
    )


def _window_row(
    first: dict[str, Any],
    previous: tuple[datetime, hist.Histogram],
    current: tuple[datetime, hist.Histogram],
) -> dict[str, Any] | None:
    (t0, before), (t1, after) = previous, current
    window_s = (t1 - t0).total_seconds()
    if window_s <= 0 or not hist.same_layout(before, after) or hist.is_reset(before, after):
        return None
    delta = hist.delta(before, after)
    estimates = [hist.quantile(q, delta) for q in (0.5, 0.95, 0.99)]
    present = [e for e in estimates if e is not None]
    full = len(present) == 3
    return {
        **{k: first[k] for k in _GROUP},
        "ts": t1,
        "window_s": window_s,
        "completed": delta.count,
        "throughput_rps": delta.count / window_s,
        "requests_running": first["requests_running"],
        "requests_waiting": first["requests_waiting"],
        "kv_cache_usage_ratio": first["kv_cache_usage_ratio"],
        "latency_mean_s": hist.mean(delta),
        "latency_p50_s": present[0].value if full else None,
        "latency_p95_s": present[1].value if full else None,
        "latency_p99_s": present[2].value if full else None,
        "latency_error_bound_s": max(e.error_bound for e in present) if full else None,
        "estimate": True,
    }


def estimate_windows_from(
    windows: pa.Table, *, by: GroupBy = "model", selection: RequestSelection | None = None
) -> pa.Table:
    """:func:`sits_observe.analytics.serving.latency.estimate_windows` on a ``server_windows`` table
    instead of the store: same columns, same filter (``completed > 0``), same order."""
    import polars as pl  # on first use: the module docstring

    check_group(by, ESTIMATE_GROUPS)
    chosen = selection or RequestSelection()
    frame = pl.from_arrow(windows)
    assert isinstance(frame, pl.DataFrame)
    frame = frame.filter(pl.col("completed") > 0)
    if chosen.model is not None:
        frame = frame.filter(pl.col("model") == chosen.model)
    if chosen.since is not None:
        frame = frame.filter(pl.col("ts") >= utc_naive(chosen.since))
    if chosen.until is not None:
        frame = frame.filter(pl.col("ts") < utc_naive(chosen.until))
    frame = frame.sort(by, "ts", nulls_last=True).select(
        pl.col(by),
        pl.col("ts").alias("window_end"),
        "window_s",
        pl.col("completed").alias("count"),
        pl.col("latency_p50_s").alias("p50_s"),
        pl.col("latency_p95_s").alias("p95_s"),
        pl.col("latency_p99_s").alias("p99_s"),
        pl.col("latency_error_bound_s").alias("error_bound_s"),
        pl.lit(True).alias("estimate"),
    )
    return _plain_strings(frame.to_arrow())


def _plain_strings(table: pa.Table) -> pa.Table:
    """Polars writes ``large_string``; DuckDB answers ``string``: one type for both sources."""
    fields = [
        pa.field(f.name, pa.string()) if pa.types.is_large_string(f.type) else f
        for f in table.schema
    ]
    return table.cast(pa.schema(fields))


#: gpu_samples columns the occupancy series and the interference report read.
OCCUPANCY_COLUMNS = ("fb_used_bytes", "fb_total_bytes")


def occupancy_from_samples(
    samples: pa.Table, *, level: TrendLevel = TrendLevel.gpu, bucket_s: int | None = None
) -> OccupancySeries:
    """The trend series of :func:`~.trends_series.read_occupancy_series` computed from
    ``gpu_samples`` rows instead of SQL (no minute roll-ups: only the rows given).

    Per (bucket, GPU, MIG instance): mean used over max total; per GPU or node: sums of
    those, used over total. Buckets start at multiples of ``bucket_s`` since the epoch.
    """
    import polars as pl  # on first use: the module docstring

    frame = pl.from_arrow(
        samples.select(
            ["ts", "node", "gpu_uuid", "mig_instance_id", "fb_used_bytes", "fb_total_bytes"]
        )
    )
    assert isinstance(frame, pl.DataFrame)
    frame = frame.filter(
        pl.col("node").is_not_null()
        & pl.col("gpu_uuid").is_not_null()
        & pl.col("fb_used_bytes").is_not_null()
        & (pl.col("fb_total_bytes") > 0)
    )
    if bucket_s is None:
        span = (
            frame.select(pl.col("ts").max() - pl.col("ts").min()).item() if frame.height else None
        )
        bucket_s = auto_bucket_s(0.0 if span is None else span.total_seconds())
    if not 1 <= bucket_s <= 86_400:
        raise ConfigError(f"bucket of {bucket_s} s is out of range; allowed: 1 to 86400 s")
    key = "gpu_uuid" if level is TrendLevel.gpu else "node"
    micros = pl.col("ts").cast(pl.Datetime("us")).dt.epoch("us")
    width = bucket_s * 1_000_000
    series = (
        frame.with_columns(
            bucket=(micros // width) * width,
            mig_key=pl.col("mig_instance_id").fill_null(-1),
        )
        .group_by("bucket", "node", "gpu_uuid", "mig_key")
        .agg(
            pl.col("fb_used_bytes").cast(pl.Float64).mean().alias("used"),
            pl.col("fb_total_bytes").cast(pl.Float64).max().alias("total"),
        )
        .group_by("bucket", "node", "gpu_uuid")
        .agg(pl.col("used").sum(), pl.col("total").sum())
        .group_by(pl.col(key).alias("key"), "bucket")
        .agg(
            pl.col("node").first(),
            (pl.col("used").sum() / pl.col("total").sum()).alias("value"),
        )
        .select(
            "key",
            "node",
            (pl.col("bucket") / 1e6).alias("t_s"),
            "value",
        )
    )
    return series_from_arrow(series.to_arrow(), level=level, bucket_s=bucket_s)
