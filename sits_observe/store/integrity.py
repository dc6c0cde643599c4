"""The start-up check of a database file: is every block the store uses readable?

DuckDB verifies a block's checksum when it reads the block, and reads a block only when a
statement needs it. A damaged file therefore opens, answers ``SELECT 1`` and fails later: a
file cut short answers reads of its lost blocks with errors while ingests still commit, one
overwritten block of an index makes every ingest fail. :func:`verify_store` reads what the
store uses before the service takes traffic:

1. the file's length against its header's block count (free: a file cut short is refused
   before anything is read);
2. every column of every table in full (an aggregate over each column's hash, which no
   statistics can answer), so every data block's checksum is checked;
3. one key of each table with a primary key looked up through its index, the way an insert
   checks it (inserted in a transaction that is rolled back: nothing is written), so the
   index's upper blocks, which every insert reads, are checked.

What it does not read: free blocks (unused), and the index blocks off the probed key's path
(an insert through one of them fails, and the service's probes see that write fail). On a
1.7 GB file it took about 1 s with the file in the page cache, about 3 s from a cold cache
(docs/api.md).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass

import duckdb

from sits_observe.errors import StoreError
from sits_observe.store.duck import Store


class StoreDamaged(StoreError):
    """The database file is damaged: a block fails its checksum, or the file is cut short."""


@dataclass(frozen=True)
class IntegrityReport:
    """What :func:`verify_store` read."""

    tables: int
    rows: int
    file_bytes: int
    seconds: float


class _RollBack(Exception):
    """Ends the index probe's transaction (rolled back: nothing written)."""


def verify_store(
    store: Store, *, clock: Callable[[], float] = time.perf_counter
) -> IntegrityReport:
    """Read every block ``store`` uses (module docstring); :class:`StoreDamaged`, with one line
    saying what to do, when one cannot be read."""
    started = clock()
    cur = store.cursor()
    try:
        size = _check_length(store, cur)
        tables = cur.execute(
            "SELECT schema_name, table_name, index_count > 0 FROM duckdb_tables() "
            "WHERE database_name = current_database() AND NOT temporary "
            "ORDER BY schema_name, table_name"
        ).fetchall()
        rows = sum(_read_table(cur, schema, table) for schema, table, _ in tables)
        if not store.read_only:
            _probe_indexes(store, [(s, t) for s, t, indexed in tables if indexed])
    except duckdb.Error as exc:
        raise _damaged(store, exc) from exc
    finally:
        cur.close()
    return IntegrityReport(len(tables), rows, size, clock() - started)


def _check_length(store: Store, cur: duckdb.DuckDBPyConnection) -> int:
    """The file's size; :class:`StoreDamaged` when it is shorter than its blocks."""
    if store.path == ":memory:":
        return 0
    size = os.path.getsize(store.path)
    found = cur.execute(
        "SELECT block_size, total_blocks FROM pragma_database_size() "
        "WHERE database_name = current_database()"
    ).fetchone()
    if found is not None:
        block_bytes, blocks = int(found[0]), int(found[1])
        if size < block_bytes * blocks:  # the header (12 KiB) comes on top: never a false alarm
            raise StoreDamaged(
                f"database {store.path!r} is damaged: it is {size} bytes, but its header counts "
                f"{blocks} blocks of {block_bytes} bytes (the file was cut short); "
                f"{_WHAT_TO_DO}"
            )
    return size


def _read_table(cur: duckdb.DuckDBPyConnection, schema: str, table: str) -> int:
    columns = [
        row[0]
        for row in cur.execute(
            "SELECT column_name FROM duckdb_columns() WHERE database_name = current_database() "
            "AND schema_name = ? AND table_name = ? ORDER BY column_index",
            [schema, table],
        ).fetchall()
    ]
    hashes = "".join(f", bit_xor(hash({_quote(c)}))" for c in columns)
    found = cur.execute(f"SELECT count(*){hashes} FROM {_quote(schema)}.{_quote(table)}").fetchone()
    return int(found[0]) if found else 0


def _probe_indexes(store: Store, tables: list[tuple[str, str]]) -> None:
    """Insert a copy of one row of each table, each in a transaction rolled back: its key
    exists, so DuckDB looks it up in the index and refuses it."""
    for schema, table in tables:
        name = f"{_quote(schema)}.{_quote(table)}"
        try:
            with store.transaction() as con:
                con.execute(f"INSERT INTO {name} SELECT * FROM {name} LIMIT 1")
                raise _RollBack  # an empty table: nothing to look up
        except (duckdb.ConstraintException, _RollBack):
            continue  # the key was found: its path through the index was read


_WHAT_TO_DO = (
    "restore it from a backup, or move it aside to start with an empty store "
    "(the agents' spools resend what they still hold)"
)


def _damaged(store: Store, exc: duckdb.Error) -> StoreDamaged:
    first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return StoreDamaged(f"database {store.path!r} is damaged: {first}; {_WHAT_TO_DO}")


def _quote(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'
