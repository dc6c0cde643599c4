"""Reads of the inventory that scale with its versions, not with its snapshots.

Since schema version 6 the views ``pods`` / ``nodes`` expand every version over every
snapshot time it covers (:mod:`sits_observe.store.inventory`): a read over a window of them
touches pods x snapshots rows (2,000 pods at a snapshot every 30 s: 5.8 M rows a day). The
reads here go to ``pod_versions`` / ``node_versions`` and the snapshot times
(``pod_snapshots`` / ``node_snapshots``) instead, and give exactly the rows the views would:

- :func:`rows_at`: the rows of the snapshot at one stored time ``t``, the versions of its
  epoch with ``valid_from <= t < valid_to`` (``valid_to`` NULL: still current);
- :func:`last_seen_sql`: every version that some stored snapshot in a window covers, with
  ``ts`` the latest such snapshot (an ASOF join of the versions on the snapshot times). The
  latest view row of a pod in the window is the latest version row of it here, so "each
  pod's latest row" (the workload M of FGD) reads versions, not snapshots;
- :func:`bucket_snapshots`: per time bucket, the last node snapshot and the latest pod
  snapshot at or before it, from the snapshot times alone.

A version covers the consecutive snapshots in ``[valid_from, valid_to)`` and never outlives
its epoch, so the window reads need not join epochs (:func:`rows_at` filters on one only to
read less). Windows are ``since <= ts < until`` (None = open
at that end), as everywhere in the store.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import pyarrow as pa

from sits_observe.store.duck import Store
from sits_observe.store.inventory import VERSIONS

#: The snapshot times of each inventory view.
SNAPSHOTS = {
    "pods": "pod_snapshots",
    "nodes": "node_snapshots",
    "dra_devices": "dra_device_snapshots",
    "dra_allocations": "dra_allocation_snapshots",
}
_END = "coalesce(v.valid_to, 'infinity'::TIMESTAMP)"


def _columns(columns: Sequence[str]) -> str:
    return ", ".join(f"v.{c}" for c in columns)


def rows_at(store: Store, kind: str, at: datetime, columns: Sequence[str]) -> pa.Table:
    """``columns`` of the ``kind`` (``pods`` / ``nodes``) snapshot stored at ``at``: the rows
    of ``SELECT columns FROM kind WHERE ts = at`` (none when no snapshot is stored at ``at``).
    Only the snapshot's epoch is read: DuckDB skips the other epochs' row groups."""
    epoch_at = store.scalar(f"SELECT epoch_at FROM {SNAPSHOTS[kind]} WHERE ts = ?", [at])
    return store.query(
        f"SELECT {_columns(columns)} FROM {VERSIONS[kind]} AS v "
        f"WHERE v.epoch_at = ? AND v.valid_from <= ? AND {_END} > ?",
        [epoch_at, at, at],
    )


def last_seen_sql(kind: str, columns: Sequence[str]) -> str:
    """A relation of ``ts`` and ``columns``: each ``kind`` version covered by a stored
    snapshot in the window, at the latest one (``ts``). Parameters, in order: ``until``,
    ``since`` twice, ``since`` twice, ``until`` twice (:func:`last_seen_params`)."""
    return f"""
SELECT s.ts, {_columns(columns)}
FROM (
    SELECT * FROM {VERSIONS[kind]} AS v
    WHERE (?::TIMESTAMP IS NULL OR v.valid_from < ?) AND (?::TIMESTAMP IS NULL OR {_END} > ?)
) AS v
ASOF JOIN (
    SELECT ts FROM {SNAPSHOTS[kind]}
    WHERE (?::TIMESTAMP IS NULL OR ts >= ?) AND (?::TIMESTAMP IS NULL OR ts < ?)
) AS s ON {_END} > s.ts
WHERE s.ts >= v.valid_from
"""


def last_seen_params(since: datetime | None, until: datetime | None) -> list[object]:
    """The parameters of :func:`last_seen_sql` for the window ``since <= ts < until``."""
    return [until, until, since, since, since, since, until, until]


def latest_rows(
    store: Store,
    kind: str,
    columns: Sequence[str],
    *,
    key: str,
    since: datetime | None,
    until: datetime | None,
) -> pa.Table:
    """``columns`` of each ``key`` value's latest row of ``kind`` in the window (``key`` a
    SQL expression of the columns, e.g. the pod's uid or name); ties at one snapshot are
    broken arbitrarily, as ``row_number() OVER (... ORDER BY ts DESC)`` on the view does."""
    return store.query(
        f"SELECT {', '.join(columns)} FROM ({last_seen_sql(kind, columns)}) "
        f"QUALIFY row_number() OVER (PARTITION BY {key} ORDER BY ts DESC) = 1",
        last_seen_params(since, until),
    )


_BUCKETS = """
WITH nodes_at AS (
    SELECT time_bucket(to_microseconds(?::BIGINT), ts) AS start_at, max(ts) AS nodes_at
    FROM node_snapshots
    WHERE ts < ? AND (?::TIMESTAMP IS NULL OR ts >= ?)
    GROUP BY start_at
),
pods_at AS (
    SELECT ts AS pods_at FROM pod_snapshots
    WHERE ts < ? AND (?::TIMESTAMP IS NULL OR ts >= ?)
)
SELECT n.start_at, n.nodes_at, p.pods_at
FROM nodes_at AS n ASOF LEFT JOIN pods_at AS p ON n.nodes_at >= p.pods_at
ORDER BY n.start_at
"""


def bucket_snapshots(
    store: Store, bin_micros: int, since: datetime | None, until: datetime
) -> pa.Table:
    """Per ``bin_micros`` bucket (aligned to the Unix epoch) with a node snapshot in the
    window: ``start_at``, ``nodes_at`` (its last node snapshot) and ``pods_at`` (the latest
    pod snapshot in the window at or before ``nodes_at``; None before the first)."""
    window = [until, since, since]
    return store.query(_BUCKETS, [bin_micros, *window, *window])
