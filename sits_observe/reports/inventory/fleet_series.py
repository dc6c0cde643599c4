"""The ``fleet`` report's series over its window, bucketed for charts.

Two tables, one row per time bucket (``bin_s`` wide, aligned to multiples of ``bin_s`` since
the Unix epoch, so buckets fall on round times):

- ``over_time``: GPUs sampled, idle GPUs (mean utilisation in the bucket under the idle
  floor), mean utilisation; and, from the last inventory snapshot in the bucket, the GPUs
  allocated, the allocation ratio and the FGD fragmentation ratio (Weng et al., ATC'23;
  :mod:`sits_observe.analytics.fragmentation.fgd.measure`) for the workload M of the whole window,
  so a change along the chart is a change of placement, not of M. A bucket with no snapshot of
  its own shows the latest one before it, up to five minutes back (a state holds until it is
  seen to change, as Prometheus' lookback has it); beyond that, none. The cost grows with the
  buckets (two snapshot reads from the versions each, one FGD evaluation per distinct
  cluster), not with the snapshots in the window.
- ``latency_over_time``: per bucket and model, the requests completed and their exact P95
  latency (``quantile_cont``, as ``sits-observe latency``; failed requests left out).

The bucket width, when not given, is the smallest round width giving at most
:data:`TARGET_BUCKETS` buckets over the span of GPU samples in the window.
"""

from __future__ import annotations

import hashlib
import math
from datetime import datetime, timedelta

import numpy as np
import pyarrow as pa

from sits_observe.analytics.fragmentation.fgd.cluster import ClusterState
from sits_observe.analytics.fragmentation.fgd.measure import fragmentation
from sits_observe.analytics.fragmentation.fgd.workload import TargetWorkload
from sits_observe.analytics.fragmentation.fgd_live import cluster_at
from sits_observe.analytics.serving.latency import RequestSelection
from sits_observe.errors import ConfigError
from sits_observe.reports.window import Window
from sits_observe.store import Store
from sits_observe.store.inventory_reads import bucket_snapshots
from sits_observe.store.rows import IN_WINDOW

#: Buckets an automatic width aims at (a chart of 30 points reads at a glance).
TARGET_BUCKETS = 30
#: Most buckets a given width may make (each bucket with an inventory snapshot reads one
#: live cluster, and evaluates FGD on it unless an earlier bucket had the same cluster).
MAX_BUCKETS = 1000
#: Round bucket widths, seconds.
ROUND_WIDTHS_S = (
    1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400,
)  # fmt: skip

_BUCKET = "time_bucket(to_microseconds(?::BIGINT), ts)"

_GPU_SERIES = f"""
WITH per_gpu AS (
    SELECT {_BUCKET} AS start_at, gpu_uuid, avg(gpu_util_ratio) AS util
    FROM gpu_samples WHERE {IN_WINDOW} AND gpu_uuid IS NOT NULL GROUP BY ALL
)
SELECT start_at, count(*) AS gpus_sampled, count(*) FILTER (WHERE util < ?) AS idle_gpus,
       avg(util) AS gpu_util_ratio
FROM per_gpu GROUP BY start_at ORDER BY start_at
"""


def bucket_width_s(span_s: float) -> float:
    """The smallest round width giving at most :data:`TARGET_BUCKETS` buckets over
    ``span_s`` (a day for anything longer than 30 days)."""
    wanted = span_s / TARGET_BUCKETS
    return float(next((w for w in ROUND_WIDTHS_S if w >= wanted), ROUND_WIDTHS_S[-1]))


def check_width(bin_s: float, span_s: float) -> None:
    """A :class:`ConfigError` when ``bin_s`` cuts ``span_s`` into more than
    :data:`MAX_BUCKETS` buckets."""
    buckets = math.ceil(span_s / bin_s)
    if buckets > MAX_BUCKETS:
        raise ConfigError(
            f"--bin-s {bin_s:g} cuts the {span_s:g} s of samples into {buckets} buckets; "
            f"at most {MAX_BUCKETS}: give --bin-s {math.ceil(span_s / MAX_BUCKETS)} or more"
        )


def _micros(bin_s: float) -> int:
    return max(math.ceil(bin_s * 1e6), 1)


def gpu_series(store: Store, window: Window, bin_s: float, idle_below_ratio: float) -> pa.Table:
    """Per bucket: ``start_at``, ``gpus_sampled``, ``idle_gpus``, ``gpu_util_ratio``."""
    params = [_micros(bin_s), *window.params, idle_below_ratio]
    return store.query(_GPU_SERIES, params)


def inventory_series(
    store: Store, window: Window, bin_s: float, workload: TargetWorkload | None
) -> pa.Table:
    """Per bucket with an inventory snapshot: ``start_at``, ``total_gpus``, ``allocated_gpus``,
    ``alloc_ratio`` and ``frag_ratio`` (None without a workload M).

    One read of the snapshot times gives each bucket's last node snapshot and the pod snapshot
    placed on it; each bucket's cluster is read from the versions at those two times
    (:func:`cluster_at`), and FGD is evaluated once per distinct cluster state (a bucket whose
    cluster equals an earlier one's gives its answer again)."""
    buckets = bucket_snapshots(store, _micros(bin_s), window.since, window.until).to_pylist()
    answers: dict[bytes, dict[str, float | None]] = {}
    rows = []
    for bucket in buckets:
        if bucket["pods_at"] is None:
            continue  # no pod seen yet at this snapshot: no allocation to speak of
        nodes_at = bucket["nodes_at"]
        live = cluster_at(
            store,
            nodes_at,
            bucket["pods_at"],
            since=window.since,
            until=nodes_at + timedelta(microseconds=1),
        )
        key = _state_key(live.state)
        if key not in answers:
            answers[key] = _measures(live.state, workload)
        rows.append({"start_at": bucket["start_at"], **answers[key]})
    schema = pa.schema(
        [
            ("start_at", pa.timestamp("us")),
            ("total_gpus", pa.float64()),
            ("allocated_gpus", pa.float64()),
            ("alloc_ratio", pa.float64()),
            ("frag_ratio", pa.float64()),
        ]
    )
    return pa.Table.from_pylist(rows, schema=schema)


def _measures(state: ClusterState, workload: TargetWorkload | None) -> dict[str, float | None]:
    total = state.total_gpu_milli
    allocated = total - state.idle_gpu_milli
    return {
        "total_gpus": total / 1000,
        "allocated_gpus": allocated / 1000,
        "alloc_ratio": allocated / total if total else None,
        "frag_ratio": None if workload is None else fragmentation(state, workload).frag_ratio,
    }


def _state_key(state: ClusterState) -> bytes:
    """Everything FGD reads of ``state``, as bytes: equal keys, equal measures."""
    digest = hashlib.blake2b(digest_size=16)
    for name in (*state.node_names, "|", *state.gpu_models):
        digest.update(name.encode() + b"\0")
    for array in (
        state.gpu_model_id,
        state.gpu_count,
        state.cpu_capacity_milli,
        state.cpu_free_milli,
        state.gpu_free_milli,
    ):
        digest.update(np.ascontiguousarray(array).tobytes() + str(array.shape).encode())
    return digest.digest()


def over_time(
    store: Store,
    window: Window,
    bin_s: float,
    idle_below_ratio: float,
    workload: TargetWorkload | None,
) -> pa.Table:
    """The ``over_time`` table: the GPU and inventory series joined on the bucket; a bucket
    with no snapshot of its own shows the latest one before it, up to
    :data:`LOOKBACK_S` back (:func:`_carried`)."""
    gpus = gpu_series(store, window, bin_s, idle_below_ratio)
    inventory = inventory_series(store, window, bin_s, workload)
    joined = gpus.join(inventory, keys="start_at", join_type="full outer")
    return _carried(joined.sort_by("start_at"), _INVENTORY_COLUMNS)


#: How far back a bucket without an inventory snapshot takes the latest one (Prometheus'
#: default lookback for an instant query: a state holds until it is seen to change).
LOOKBACK_S = 300.0
_INVENTORY_COLUMNS = ("total_gpus", "allocated_gpus", "alloc_ratio", "frag_ratio")


def _carried(table: pa.Table, columns: tuple[str, ...]) -> pa.Table:
    """``table`` (sorted by ``start_at``) with each row lacking ``columns`` given those of the
    latest row before it that has them, when that row started at most :data:`LOOKBACK_S`
    earlier. Allocation is a state: the last snapshot stands until the next one."""
    rows = table.to_pylist()
    last: dict[str, object] | None = None
    for row in rows:
        if row[columns[0]] is not None:
            last = row
        elif (
            last is not None and (row["start_at"] - last["start_at"]).total_seconds() <= LOOKBACK_S
        ):
            row.update({name: last[name] for name in columns})
    return pa.Table.from_pylist(rows, schema=table.schema)


def latency_series(store: Store, window: Window, bin_s: float) -> pa.Table:
    """The ``latency_over_time`` table: ``start_at``, ``model``, ``requests``, ``p95_s``."""
    where, params = RequestSelection(since=window.since, until=window.until).where()
    sql = (
        f"SELECT {_BUCKET} AS start_at, model, count(*) AS requests, "
        "quantile_cont(latency_s, 0.95) AS p95_s "
        f"FROM requests WHERE {where} GROUP BY ALL ORDER BY start_at, model NULLS LAST"
    )
    return store.query(sql, [_micros(bin_s), *params])


def span_s(first: datetime, last: datetime) -> float:
    """Seconds from ``first`` to ``last`` (at least one, so a single sample has a width)."""
    return max((last - first).total_seconds(), 1.0)
