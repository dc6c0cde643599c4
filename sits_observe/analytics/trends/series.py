"""The per-GPU and per-node framebuffer occupancy series that trend clustering reads.

Signal (one for every GPU, so every GPU can be clustered on the same footing):
``fb_used_ratio = fb_used_bytes / fb_total_bytes``, the framebuffer occupancy, averaged over
fixed time buckets of ``bucket_s`` seconds. Its complement (less the few hundred MiB the
driver reserves) is the GPU's free framebuffer, the memory that fragments; the clusters are
the same for either (a feature's sign flip changes no DBSCAN distance), and occupancy makes
the words natural: "leaking" = rising, "saw-tooth" = sharp drops. The SMF rate is not used
because it exists only for GPUs linked to a container (see docs/analytics/trends.md).

Per GPU, each bucket's value is ``sum over MIG instances of mean fb_used_bytes`` over ``sum of
max fb_total_bytes`` (a whole GPU is one instance). Per node it is the same sum over the node's
GPUs: capacity-weighted occupancy. Raw ``gpu_samples`` are used; when ``bucket_s`` is a
multiple of 60, minutes that retention already folded into ``gpu_samples_1m`` are used too
(``fb_used_bytes_sum / samples``), for minutes with no raw sample of that GPU.

:func:`read_newest_occupancy` gives only each series' newest point, from that bucket's rows
alone (the exporter's ``sits_gpu_framebuffer_used_ratio``): the same bucket and value as the
last point of :func:`read_occupancy_series`, checked equal in the tests.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

import duckdb
import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from sits_observe.domain.times import utc_naive
from sits_observe.errors import ConfigError, StoreError
from sits_observe.store.duck import Store

#: Bucket widths the automatic choice picks from, seconds.
AUTO_BUCKETS_S = (1, 2, 5, 10, 15, 30, 60)
#: The automatic bucket aims at this many points per series (and never exceeds 60 s).
AUTO_POINTS = 240
#: Rows per record batch read from DuckDB.
READ_BATCH_ROWS = 1_000_000


class TrendLevel(StrEnum):
    """What one series stands for."""

    gpu = "gpu"
    node = "node"


@dataclass(frozen=True)
class OccupancySeries:
    """Long-format series: one entry per (series, bucket), sorted by series then time.

    ``codes[i]`` indexes ``keys`` / ``nodes`` (the series of point ``i``); ``t_s`` is the
    bucket start in seconds since the Unix epoch (UTC); ``values`` the occupancy ratio (0-1).
    A GPU series' key is its UUID; a node series' key is the node name.
    """

    level: TrendLevel
    bucket_s: int
    keys: tuple[str, ...]
    nodes: tuple[str, ...]
    codes: npt.NDArray[np.int64]
    t_s: npt.NDArray[np.float64]
    values: npt.NDArray[np.float64]

    @property
    def points(self) -> int:
        """Number of (series, bucket) values."""
        return int(self.values.size)


def auto_bucket_s(span_s: float) -> int:
    """The bucket for a window of ``span_s`` seconds: about :data:`AUTO_POINTS` points,
    rounded down to one of :data:`AUTO_BUCKETS_S` (1 s at least, 60 s at most)."""
    target = span_s / AUTO_POINTS
    fitting = [b for b in AUTO_BUCKETS_S if b <= target]
    return fitting[-1] if fitting else AUTO_BUCKETS_S[0]


_SPAN = """
SELECT min(t), max(t) FROM (
    SELECT ts AS t FROM gpu_samples WHERE (? IS NULL OR ts >= ?) AND (? IS NULL OR ts < ?)
    UNION ALL
    SELECT minute AS t FROM gpu_samples_1m
    WHERE (? IS NULL OR minute >= ?) AND (? IS NULL OR minute < ?)
)
"""

#: The rows behind the series: raw samples, and roll-up minutes (when the bucket is a whole
#: number of minutes). Named parameters: ``bucket_s``, ``since``, ``until``, ``use_rollups``.
_ROWS = """
raw AS (
    SELECT date_trunc('minute', ts) AS minute,
           time_bucket(to_seconds($bucket_s), ts) AS bucket,
           node, gpu_uuid, coalesce(mig_instance_id, -1) AS mig_key,
           fb_used_bytes, fb_total_bytes
    FROM gpu_samples
    WHERE ($since IS NULL OR ts >= $since) AND ($until IS NULL OR ts < $until)
      AND node IS NOT NULL AND gpu_uuid IS NOT NULL
      AND fb_used_bytes IS NOT NULL AND fb_total_bytes > 0
), roll AS (
    SELECT r.minute, time_bucket(to_seconds($bucket_s), r.minute) AS bucket, r.node,
           r.gpu_uuid, r.mig_instance_id AS mig_key, r.fb_used_bytes_sum, r.samples,
           r.fb_total_bytes_max
    FROM gpu_samples_1m AS r
    WHERE $use_rollups AND ($since IS NULL OR r.minute >= $since)
      AND ($until IS NULL OR r.minute < $until)
      AND r.samples > 0 AND r.fb_total_bytes_max > 0 AND r.fb_used_bytes_sum IS NOT NULL
)"""

#: Bucket means from the rows of ``{raw}`` and ``{roll}`` (a roll-up minute counts only where
#: no raw sample of that instance is left in it), summed per GPU, then per ``{key}``.
_MEANS = """
raw_b AS (
    SELECT bucket, node, gpu_uuid, mig_key, sum(fb_used_bytes)::DOUBLE AS used_sum,
           count(*)::DOUBLE AS n, max(fb_total_bytes)::DOUBLE AS total
    FROM {raw} GROUP BY ALL
), roll_b AS (
    SELECT r.bucket, r.node, r.gpu_uuid, r.mig_key, sum(r.fb_used_bytes_sum)::DOUBLE AS used_sum,
           sum(r.samples)::DOUBLE AS n, max(r.fb_total_bytes_max)::DOUBLE AS total
    FROM {roll} AS r
    WHERE NOT EXISTS (SELECT 1 FROM {raw} AS w WHERE w.minute = r.minute AND w.node = r.node
                      AND w.gpu_uuid = r.gpu_uuid AND w.mig_key = r.mig_key)
    GROUP BY ALL
), inst AS (
    SELECT bucket, node, gpu_uuid, mig_key, sum(used_sum) / sum(n) AS used, max(total) AS total
    FROM (SELECT * FROM raw_b UNION ALL SELECT * FROM roll_b) GROUP BY ALL
), gpu AS (
    SELECT bucket, node, gpu_uuid, sum(used) AS used, sum(total) AS total
    FROM inst GROUP BY ALL
)
SELECT {key} AS key, any_value(node) AS node, epoch_us(bucket) / 1e6 AS t_s,
       sum(used) / sum(total) AS value
FROM gpu GROUP BY {key}, bucket
ORDER BY key, t_s
"""

_SERIES = "WITH " + _ROWS + "," + _MEANS.format(raw="raw", roll="roll", key="{key}")

#: Only each series' newest bucket: its bucket is the latest of its raw and roll-up rows (a
#: roll-up minute a raw sample overrides lies in the bucket of that sample), and only the rows
#: in it are summed. A raw sample that overrides a roll-up minute of the newest bucket is in
#: that bucket too, so the override reads the same rows as in :data:`_SERIES`.
_NEWEST = (
    "WITH "
    + _ROWS
    + """, newest AS (
    SELECT key, max(bucket) AS bucket FROM (
        SELECT {key} AS key, bucket FROM raw UNION ALL SELECT {key} AS key, bucket FROM roll
    ) GROUP BY key
), raw_n AS (
    SELECT raw.* FROM raw JOIN newest AS x ON raw.{key} = x.key AND raw.bucket = x.bucket
), roll_n AS (
    SELECT roll.* FROM roll JOIN newest AS x ON roll.{key} = x.key AND roll.bucket = x.bucket
),"""
    + _MEANS.format(raw="raw_n", roll="roll_n", key="{key}")
)


def read_occupancy_series(
    store: Store,
    *,
    since: datetime | None = None,
    level: TrendLevel = TrendLevel.gpu,
    bucket_s: int | None = None,
    until: datetime | None = None,
) -> OccupancySeries:
    """Occupancy series from ``store`` in ``since <= ts < until`` (UTC, None = open),
    bucketed by ``bucket_s``.

    ``bucket_s`` None picks :func:`auto_bucket_s` of the data's time span. Raises
    :class:`ConfigError` for a bucket outside 1 s - 1 day.
    """
    bound = None if since is None else utc_naive(since)
    end = None if until is None else utc_naive(until)
    if bucket_s is None:
        span = store.query(_SPAN, [bound, bound, end, end] * 2).to_pylist()[0]
        first, last = span["min(t)"], span["max(t)"]
        span_s = 0.0 if first is None else (last - first).total_seconds()
        bucket_s = auto_bucket_s(span_s)
    if not 1 <= bucket_s <= 86_400:
        raise ConfigError(f"bucket of {bucket_s} s is out of range; allowed: 1 to 86400 s")
    key = "gpu_uuid" if level is TrendLevel.gpu else "node"
    params = {
        "bucket_s": float(bucket_s),
        "since": bound,
        "until": end,
        "use_rollups": bucket_s % 60 == 0,
    }
    try:
        # Batches keep the key strings of one batch in memory at a time, not one per point.
        reader = (
            store.cursor()
            .sql(_SERIES.format(key=key), params=params)
            .to_arrow_reader(READ_BATCH_ROWS)
        )
        return series_from_batches(reader, level=level, bucket_s=bucket_s)
    except duckdb.Error as exc:
        raise StoreError(f"reading occupancy series failed: {exc}") from exc


def read_newest_occupancy(
    store: Store,
    *,
    bucket_s: int,
    since: datetime | None = None,
    level: TrendLevel = TrendLevel.gpu,
    until: datetime | None = None,
) -> OccupancySeries:
    """The newest point of each series of :func:`read_occupancy_series` with the same
    arguments (one point per series, sorted by key): the same bucket and value, read from that
    bucket's rows only. A series' ``nodes`` entry is a node of its newest bucket (the full
    read names a node of its first one: they differ only for a GPU seen on two nodes).

    Raises :class:`ConfigError` for a bucket outside 1 s - 1 day."""
    if not 1 <= bucket_s <= 86_400:
        raise ConfigError(f"bucket of {bucket_s} s is out of range; allowed: 1 to 86400 s")
    key = "gpu_uuid" if level is TrendLevel.gpu else "node"
    params = {
        "bucket_s": float(bucket_s),
        "since": None if since is None else utc_naive(since),
        "until": None if until is None else utc_naive(until),
        "use_rollups": bucket_s % 60 == 0,
    }
    try:
        table = store.cursor().sql(_NEWEST.format(key=key), params=params).to_arrow_table()
    except duckdb.Error as exc:
        raise StoreError(f"reading the newest occupancy failed: {exc}") from exc
    return series_from_batches(table.to_batches(), level=level, bucket_s=bucket_s)


def series_from_arrow(
    table: pa.Table, *, level: TrendLevel = TrendLevel.gpu, bucket_s: int = 60
) -> OccupancySeries:
    """Build :class:`OccupancySeries` from a long table with ``key``, ``node``, ``t_s`` and
    ``value`` columns (``t_s`` seconds since the epoch, or a timestamp column).

    Rows are sorted by key and time here; NULL keys are dropped. The values are kept as
    they are (NaN included): feature extraction drops and counts non-finite points.
    """
    table = table.filter(pc.is_valid(table.column("key")))
    table = table.set_column(
        table.schema.get_field_index("t_s"), "t_s", _seconds(table.column("t_s"))
    )
    table = table.sort_by([("key", "ascending"), ("t_s", "ascending")])
    return series_from_batches(table.to_batches(), level=level, bucket_s=bucket_s)


def series_from_batches(
    batches: Iterable[pa.RecordBatch], *, level: TrendLevel = TrendLevel.gpu, bucket_s: int = 60
) -> OccupancySeries:
    """Build :class:`OccupancySeries` from record batches already sorted by key, then time.

    Each batch's keys are numbered against the keys seen so far, so only one batch's strings
    are held at a time. NULL keys are dropped.
    """
    keys: list[str] = []
    nodes: list[str] = []
    codes: list[npt.NDArray[np.int64]] = []
    times: list[npt.NDArray[np.float64]] = []
    values: list[npt.NDArray[np.float64]] = []
    for raw in batches:
        batch = raw.filter(pc.is_valid(raw.column("key")))
        if batch.num_rows == 0:
            continue
        encoded = pc.dictionary_encode(batch.column("key"))
        local = [str(k) for k in encoded.dictionary.to_pylist()]
        local_codes = np.asarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
        # Keys are sorted, so this batch continues the last key seen or starts new ones, and
        # its runs' codes are 0, 1, 2 ... in order: the runs after the continued one are new.
        offset = len(keys) - 1 if keys and local[0] == keys[-1] else len(keys)
        starts = np.flatnonzero(np.r_[True, local_codes[1:] != local_codes[:-1]])
        fresh = starts[offset + local_codes[starts] >= len(keys)]
        keys.extend(local[int(code)] for code in local_codes[fresh])
        first_nodes = batch.column("node").take(pa.array(fresh, pa.int64())).to_pylist()
        nodes.extend(str(node or "") for node in first_nodes)
        codes.append(local_codes + offset)
        times.append(np.asarray(_seconds(batch.column("t_s")).to_numpy(), dtype=np.float64))
        value = batch.column("value").cast(pa.float64()).fill_null(float("nan"))
        values.append(np.asarray(value.to_numpy(zero_copy_only=False), dtype=np.float64))
    return OccupancySeries(
        level=level,
        bucket_s=bucket_s,
        keys=tuple(keys),
        nodes=tuple(nodes),
        codes=np.concatenate(codes) if codes else np.zeros(0, np.int64),
        t_s=np.concatenate(times) if times else np.zeros(0),
        values=np.concatenate(values) if values else np.zeros(0),
    )


def _seconds(column: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """A time column as float seconds since the epoch (timestamps converted, numbers cast)."""
    if pa.types.is_timestamp(column.type):
        micros = column.cast(pa.timestamp("us")).cast(pa.int64()).cast(pa.float64())
        return pc.divide(micros, 1e6)
    return column.cast(pa.float64())
