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
    return bool(store.scalar("SELECT EXISTS (SELECT 1 FROM nodes) AND EXISTS (SELECT 1 FROM pods)"))


def collector_drop_totals(store: Store) -> pa.Table:
    """Samples the collectors dropped since the store began (every ``collector_drops`` row,
    whatever its time: a counter's total): columns ``collector``, ``reason``, ``n``, by
    collector and reason."""
    return store.query(
        "SELECT collector, reason, sum(count) AS n FROM collector_drops "
        "GROUP BY collector, reason ORDER BY collector, reason"
    )
