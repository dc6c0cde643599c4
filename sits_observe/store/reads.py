"""Plain reads of the stored tables: the rows of one table in a time range, the samples the
collectors dropped since the store began, and whether the inventory has been stored yet.

The service answers ``GET /api/v1/tables/{table}`` with :func:`read_range`, so tools that do
not own the database file read the same rows a local one would. Table and column names come
from the domain's fixed list (:data:`TIME_COLUMNS`), never from a caller's text; every value
travels as a DuckDB parameter.
"""

from __future__ import annotations

from datetime import datetime

import pyarrow as pa

from sits_observe.domain.tables import TABLES
from sits_observe.domain.times import utc_naive
from sits_observe.errors import UnknownNameError
from sits_observe.store.duck import Store

#: The time column of each readable table (rollups are keyed by minute, the ingest ledger by
#: when a batch arrived).
TIME_COLUMNS: dict[str, str] = {
    **{name: spec.time_column for name, spec in TABLES.items()},
    "ingest_batches": "received_at",
    "gpu_samples_1m": "minute",
    "container_samples_1m": "minute",
}


#: Where the times of a table's rows are read cheapest: ``pods`` and ``nodes`` are views that
#: expand versions over snapshot times (schema version 6), whose times are a table of their own
#: (every time there has at least one row in its view).
TIME_SOURCES: dict[str, str] = {"pods": "pod_snapshots", "nodes": "node_snapshots"}


def newest_at(store: Store, table: str) -> datetime | None:
    """The newest time of a row of ``table`` (None when it has none)."""
    source = TIME_SOURCES.get(table, table)
    newest: datetime | None = store.scalar(f"SELECT max({TIME_COLUMNS[table]}) FROM {source}")
    return newest


def rows_between(store: Store, table: str, since: datetime | None, until: datetime) -> bool:
    """True when ``table`` has a row with ``since <= time < until`` (None = no lower bound)."""
    column = TIME_COLUMNS[table]
    sql = f"SELECT EXISTS (SELECT 1 FROM {TIME_SOURCES.get(table, table)} WHERE {column} < ?"
    params: list[object] = [until]
    if since is not None:
        sql += f" AND {column} >= ?"
        params.append(since)
    return bool(store.scalar(sql + ")", params))


def is_empty(store: Store, table: str) -> bool:
    """True when ``table`` has no row at all."""
    source = TIME_SOURCES.get(table, table)
    return not store.scalar(f"SELECT EXISTS (SELECT 1 FROM {source})")


def read_range(
    store: Store,
    table: str,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    node: str | None = None,
    limit: int,
) -> pa.Table:
    """Rows of ``table`` with ``since <= time < until`` (None = no bound) and, when given,
    ``node``; oldest first, at most ``limit``."""
    if table not in TIME_COLUMNS:
        raise UnknownNameError(f"unknown table {table!r}; valid: {', '.join(TIME_COLUMNS)}")
    column = TIME_COLUMNS[table]
    where: list[str] = []
    params: list[object] = []
    if since is not None:
        where.append(f"{column} >= ?")
        params.append(utc_naive(since))
    if until is not None:
        where.append(f"{column} < ?")
        params.append(utc_naive(until))
    if node is not None:
        where.append("node = ?")
        params.append(node)
    sql = f"SELECT * FROM {table}"
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += f" ORDER BY {column} LIMIT ?"
    params.append(limit)
    return store.query(sql, params)


def has_inventory(store: Store) -> bool:
    """True once the inventory stored a node and a pod snapshot."""
    return not is_empty(store, "nodes") and not is_empty(store, "pods")


def collector_drop_totals(store: Store) -> pa.Table:
    """Samples the collectors dropped since the store began (every ``collector_drops`` row,
    whatever its time: a counter's total): columns ``collector``, ``reason``, ``n``, by
    collector and reason."""
    return store.query(
        "SELECT collector, reason, sum(count) AS n FROM collector_drops "
        "GROUP BY collector, reason ORDER BY collector, reason"
    )
