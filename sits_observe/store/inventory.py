"""Inventory stored as changes: pod and node versions over snapshot times.

The kube collector observes every pod and node every 30 s; stored as full snapshots that was
about 29 M pod rows a day at 10,000 pods. Since schema version 6 a snapshot is
stored as one ``inventory_snapshots`` row (kind, ts, epoch_at) plus the rows that changed:
``pod_versions`` / ``node_versions`` hold each distinct row once per run of consecutive
snapshots it appears in, valid over ``valid_from <= ts < valid_to`` (``valid_to`` NULL: still
current). The views ``pods`` and ``nodes`` expand versions over snapshot times, so
``SELECT ... FROM pods WHERE ts = ?`` gives exactly the rows a full snapshot would have.

Invariants (each kept by :func:`store_inventory`, inside the caller's transaction):

- A row is the same version at two snapshots when every column but ``ts`` is equal (NULLs
  equal); identical rows within one snapshot are kept as that many versions. No key is
  assumed, so a pod whose phase, node or requests changed gets a new version and the old one
  is closed at the snapshot where it stopped being true.
- Every snapshot belongs to an *epoch*: the time of the last *full* snapshot at or before it.
  A snapshot is full when ``full_snapshot_every_s`` passed since its epoch began; there every
  open version is closed and reopened, so no version outlives its epoch and a read of one
  snapshot joins only that epoch's versions (the view joins on ``epoch_at``; DuckDB prunes the
  versions table's row groups by it). Epochs only label storage: answers do not depend on them.
- The open versions are exactly the rows of the latest snapshot. The next snapshot (the live
  case) is matched against them (:func:`_append_one`); several new snapshots in one append
  are folded into runs at once (gaps and islands, :func:`_runs_sql`); more rows at the latest
  time are added as open versions (as plain appends would have added them); a snapshot
  earlier than the latest (a backfill) rebuilds the epochs from the one holding it onwards.
- Everything happens in the caller's transaction, so a crash or an error stores nothing of
  the batch, and the ledger (``ingest_batches``) still makes a replayed batch a duplicate.
- Rows without a ``ts`` are refused before any transaction (:func:`check_snapshot_times`): a
  row that belongs to no snapshot time was never visible to a time-bounded read.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel, ConfigDict, Field

from sits_observe.domain.tables import TABLES
from sits_observe.errors import SchemaError

#: The inventory tables (views since schema version 6; the DRA ones since 9) and the tables
#: holding their versions.
VERSIONS = {
    "pods": "pod_versions",
    "nodes": "node_versions",
    "dra_devices": "dra_device_versions",
    "dra_allocations": "dra_allocation_versions",
}


class InventorySettings(BaseModel):
    """How inventory snapshots are stored."""

    model_config = ConfigDict(frozen=True)

    full_snapshot_every_s: float = Field(
        3600,
        gt=0,
        le=7 * 86400,
        description="seconds between full inventory snapshots (every pod and node stored "
        "again); in between only the rows that changed are stored",
    )


def _fetch(
    con: duckdb.DuckDBPyConnection, sql: str, params: list[object] | None = None
) -> list[tuple[Any, ...]]:
    """Run one statement to completion (DuckDB refuses the next one while a result is
    unread); its rows."""
    return con.execute(sql, params or []).fetchall()


def _latest(con: duckdb.DuckDBPyConnection, name: str) -> tuple[datetime, datetime] | None:
    """The latest stored snapshot of ``name`` and its epoch, None before the first."""
    rows = _fetch(
        con,
        "SELECT ts, epoch_at FROM inventory_snapshots WHERE kind = ? ORDER BY ts DESC LIMIT 1",
        [name],
    )
    return (rows[0][0], rows[0][1]) if rows else None


def check_snapshot_times(name: str, data: pa.Table) -> None:
    """Raise :class:`SchemaError` when an inventory table has rows without ``ts``."""
    if name in VERSIONS and data.num_rows and data.column("ts").null_count:
        raise SchemaError(
            f"batch for table {name!r} has {data.column('ts').null_count} row(s) without ts; "
            "every inventory row needs the time of the snapshot it belongs to"
        )


def content_columns(name: str) -> list[str]:
    """The columns that make a row a version: every column of the table but ``ts``."""
    return [c for c in TABLES[name].schema.names if c != "ts"]


def store_inventory(
    con: duckdb.DuckDBPyConnection,
    name: str,
    data: pa.Table,
    settings: InventorySettings,
) -> int:
    """Store the snapshots in ``data`` (conformed rows of ``pods`` or ``nodes``, one snapshot
    per distinct ``ts``) inside the open transaction; returns the rows the view gained."""
    if data.num_rows == 0:
        return 0
    times = pc.unique(data.column("ts")).to_pylist()
    first = min(times)
    latest = _latest(con, name)
    con.register("_inventory_in", data)
    try:
        if latest is not None and first < latest[0]:
            _rebuild_from(con, name, first, settings)
        else:
            if latest is not None and first == latest[0]:
                _add_to_latest(con, name, latest[0], latest[1])
                times = [t for t in times if t != first]
            if len(times) == 1 and latest is not None:
                at = times[0]
                rows = data.filter(pc.equal(data.column("ts"), pa.scalar(at, data["ts"].type)))
                _append_one(
                    con, name, at, latest, full_every_s=settings.full_snapshot_every_s, rows=rows
                )
            elif times:
                _append_snapshots(
                    con,
                    name,
                    "_inventory_in",
                    sorted(times),
                    latest,
                    full_every_s=settings.full_snapshot_every_s,
                )
    finally:
        con.unregister("_inventory_in")
    return int(data.num_rows)


def _add_to_latest(
    con: duckdb.DuckDBPyConnection, name: str, latest_at: datetime, epoch_at: datetime
) -> None:
    """More rows of the latest snapshot: each becomes an open version there."""
    cols = ", ".join(content_columns(name))
    _fetch(
        con,
        f"INSERT INTO {VERSIONS[name]} (epoch_at, valid_from, valid_to, {cols}) "
        f"SELECT ?, ?, NULL, {cols} FROM _inventory_in WHERE ts = ?",
        [epoch_at, latest_at, latest_at],
    )


def _epochs(
    times: list[datetime], last_epoch_at: datetime | None, full_every_s: float
) -> list[datetime]:
    """The epoch of each new snapshot time (sorted): a time starts a new epoch when the
    previous epoch began ``full_every_s`` or more before it."""
    every = timedelta(seconds=full_every_s)
    epochs = []
    for t in times:
        if last_epoch_at is None or t - last_epoch_at >= every:
            last_epoch_at = t
        epochs.append(last_epoch_at)
    return epochs


def _append_one(
    con: duckdb.DuckDBPyConnection,
    name: str,
    at: datetime,
    latest: tuple[datetime, datetime],
    *,
    full_every_s: float,
    rows: pa.Table,
) -> None:
    """The next snapshot (the live case, one per append; ``rows`` are its rows): each open
    version equal to an incoming row continues, the others are closed at ``at`` and the
    unmatched rows opened. Rows and open versions are paired by their content, column by
    column (NULLs equal), each open version at most once, so identical rows stay as many
    versions. Paired in Python over the two small tables: one statement joining every column
    with window functions cost more to plan than the rows cost to compare."""
    [epoch_at] = _epochs([at], latest[1], full_every_s)
    versions = VERSIONS[name]
    columns = content_columns(name)
    cols = ", ".join(columns)
    _fetch(con, "INSERT INTO inventory_snapshots VALUES (?, ?, ?)", [name, at, epoch_at])
    if epoch_at == at:  # a full snapshot: every version starts again
        _fetch(con, f"UPDATE {versions} SET valid_to = ? WHERE valid_to IS NULL", [at])
        _fetch(
            con,
            f"INSERT INTO {versions} (epoch_at, valid_from, valid_to, {cols}) "
            f"SELECT ?, ?, NULL, {cols} FROM _inventory_in WHERE ts = ?",
            [epoch_at, at, at],
        )
        return
    current = con.sql(f"SELECT rowid AS rid, {cols} FROM {versions} WHERE valid_to IS NULL")
    open_versions = current.to_arrow_table()
    by_content: dict[tuple[Any, ...], list[int]] = {}
    for rid, content in zip(
        open_versions.column("rid").to_pylist(), _contents(open_versions, columns), strict=True
    ):
        by_content.setdefault(content, []).append(rid)
    opened: list[int] = []
    for index, content in enumerate(_contents(rows, columns)):
        rids = by_content.get(content)
        if rids:
            rids.pop()  # continues
        else:
            opened.append(index)
    closed = [rid for rids in by_content.values() for rid in rids]
    if closed:
        con.register("_inventory_closed", pa.table({"rid": pa.array(closed, pa.int64())}))
        try:
            _fetch(
                con,
                f"UPDATE {versions} SET valid_to = ? "
                "WHERE rowid IN (SELECT rid FROM _inventory_closed)",
                [at],
            )
        finally:
            con.unregister("_inventory_closed")
    if opened:
        con.register("_inventory_opened", rows.take(pa.array(opened, pa.int64())))
        try:
            _fetch(
                con,
                f"INSERT INTO {versions} (epoch_at, valid_from, valid_to, {cols}) "
                f"SELECT ?, ?, NULL, {cols} FROM _inventory_opened",
                [epoch_at, at],
            )
        finally:
            con.unregister("_inventory_opened")


def _contents(table: pa.Table, columns: list[str]) -> list[tuple[Any, ...]]:
    """Each row of ``table`` as a tuple of its ``columns`` (Python values: equal when the
    stored values are, NULL as None)."""
    return list(zip(*(table.column(c).to_pylist() for c in columns), strict=True))


def _append_snapshots(
    con: duckdb.DuckDBPyConnection,
    name: str,
    source: str,
    times: list[datetime],
    latest: tuple[datetime, datetime] | None,
    *,
    full_every_s: float,
) -> None:
    """Snapshots later than the latest stored one: runs of equal rows over consecutive
    snapshots (per epoch) become versions; the open versions continue or are closed."""
    epochs = _epochs(times, latest[1] if latest else None, full_every_s)
    snaps = pa.table(
        {
            "k": pa.array(range(1, len(times) + 1), pa.int64()),
            "ts": pa.array(times, pa.timestamp("us")),
            "epoch_at": pa.array(epochs, pa.timestamp("us")),
        }
    )
    if latest is not None:
        head = pa.table(
            {
                "k": pa.array([0], pa.int64()),
                "ts": pa.array([latest[0]], pa.timestamp("us")),
                "epoch_at": pa.array([latest[1]], pa.timestamp("us")),
            }
        )
        snaps = pa.concat_tables([head, snaps])
    con.register("_inventory_snaps", snaps)
    try:
        _fetch(
            con,
            "INSERT INTO inventory_snapshots (kind, ts, epoch_at) "
            "SELECT ?, ts, epoch_at FROM _inventory_snaps WHERE k > 0",
            [name],
        )
        _fetch(con, _runs_sql(name, source))
        versions = VERSIONS[name]
        cols = ", ".join(content_columns(name))
        _fetch(
            con,
            f"UPDATE {versions} SET valid_to = r.valid_to FROM _inventory_runs AS r "
            f"WHERE r.first_k = 0 AND r.valid_to IS NOT NULL AND {versions}.rowid = r.rid",
        )
        _fetch(
            con,
            f"INSERT INTO {versions} (epoch_at, valid_from, valid_to, {cols}) "
            f"SELECT epoch_at, valid_from, valid_to, {cols} FROM _inventory_runs "
            "WHERE first_k > 0",
        )
        _fetch(con, "DROP TABLE _inventory_runs")
    finally:
        con.unregister("_inventory_snaps")


def _runs_sql(name: str, source: str) -> str:
    """Gaps and islands: the open versions (at k = 0) and the new rows (k >= 1), numbered
    among identical rows of one snapshot (``copy``); a run is consecutive k of one row, copy
    and epoch. Column names come from the domain schema, never from input."""
    columns = content_columns(name)
    cols = ", ".join(columns)
    src_cols = ", ".join(f"i.{c}" for c in columns)
    return f"""
CREATE OR REPLACE TEMP TABLE _inventory_runs AS
WITH present AS (
    SELECT 0::BIGINT AS k, v.rowid AS rid, v.valid_from AS open_from, {cols}
    FROM {VERSIONS[name]} AS v WHERE v.valid_to IS NULL
    UNION ALL
    SELECT s.k, NULL, NULL, {src_cols} FROM {source} AS i JOIN _inventory_snaps AS s
        ON s.ts = i.ts AND s.k > 0
),
copies AS (
    SELECT *, row_number() OVER (PARTITION BY k, {cols}) AS copy FROM present
),
islands AS (
    SELECT c.*, s.epoch_at,
           c.k - row_number() OVER (PARTITION BY {cols}, c.copy, s.epoch_at ORDER BY c.k)
               AS island
    FROM copies AS c JOIN _inventory_snaps AS s ON s.k = c.k
),
runs AS (
    SELECT {cols}, copy, epoch_at, island, min(k) AS first_k, max(k) AS last_k,
           max(rid) AS rid, max(open_from) AS open_from
    FROM islands GROUP BY {cols}, copy, epoch_at, island
)
SELECT r.*, coalesce(r.open_from, f.ts) AS valid_from, n.ts AS valid_to
FROM runs AS r
JOIN _inventory_snaps AS f ON f.k = r.first_k
LEFT JOIN _inventory_snaps AS n ON n.k = r.last_k + 1
"""


def _rebuild_from(
    con: duckdb.DuckDBPyConnection, name: str, first: datetime, settings: InventorySettings
) -> None:
    """A backfill: the stored snapshots from the epoch holding ``first`` onwards are read
    back, merged with the new rows, deleted and stored again in time order."""
    rows = _fetch(
        con,
        "SELECT coalesce(max_by(epoch_at, ts) FILTER (WHERE ts <= ?), min(ts)) "
        "FROM inventory_snapshots WHERE kind = ?",
        [first, name],
    )
    start_at = rows[0][0]
    _fetch(
        con,
        f"CREATE OR REPLACE TEMP TABLE _inventory_rebuild AS "
        f"SELECT * FROM {name} WHERE ts >= ? UNION ALL BY NAME SELECT * FROM _inventory_in",
        [start_at],
    )
    _fetch(con, f"DELETE FROM {VERSIONS[name]} WHERE epoch_at >= ?", [start_at])
    _fetch(con, "DELETE FROM inventory_snapshots WHERE kind = ? AND ts >= ?", [name, start_at])
    latest = _latest(con, name)
    # The epoch before start_at was closed when start_at began a new one: no version is open.
    times = [r[0] for r in _fetch(con, "SELECT DISTINCT ts FROM _inventory_rebuild")]
    _append_snapshots(
        con,
        name,
        "_inventory_rebuild",
        sorted(times),
        latest,
        full_every_s=settings.full_snapshot_every_s,
    )
    _fetch(con, "DROP TABLE _inventory_rebuild")
