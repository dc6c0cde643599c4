"""The start-up check of a database file: is every block the store uses readable?

DuckDB verifies a block's checksum when it reads the block, and reads a block only when a
statement needs it. A damaged file therefore opens, answers ``SELECT 1`` and fails later: a
file cut short answers reads of its lost blocks with errors while ingests still commit, one
overwritten block of an index makes every ingest fail. :func:`verify_store` reads what the
store uses before the service takes traffic:

1. the file's length against its header's block count (free: a file cut short is refused
   before anything is read);
2. every column of every table in full (an aggregate over the hash of each row's columns,
   which no statistics can answer; every table in one statement), so every data block's
   checksum is checked;
3. one key of each table with a primary key looked up through its index, the way an insert
   checks it (inserted in a transaction that is rolled back: nothing is written), so the
   index's upper blocks, which every insert reads, are checked.

What it does not read: free blocks and the tail of a block past its last segment (unused,
and DuckDB checks neither), and the index blocks off the probed key's path
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
        rows = _read_tables(cur)
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


def _read_tables(cur: duckdb.DuckDBPyConnection) -> int:
    """Read every column of every table in full; the tables' rows.

    One statement for every table (each table's columns hashed together, the tables' counts
    and hashes one row each, ``UNION ALL``), not two statements a table: the statements' own
    cost was most of the check, which ``serve`` runs at every start (23 tables holding 1,024
    nodes: the whole check took 130-150 ms with two statements a table, 56 ms with these,
    2 cores at load 6; docs/benchmarks.md, extender cold start).
    """
    found = cur.execute(
        "SELECT schema_name, table_name, list(column_name ORDER BY column_index) "
        "FROM duckdb_columns() WHERE table_oid IN (SELECT table_oid FROM duckdb_tables() "
        "WHERE database_name = current_database() AND NOT temporary) "
        "GROUP BY schema_name, table_name ORDER BY schema_name, table_name"
    ).fetchall()
    reads = [
        f"SELECT count(*), bit_xor(hash({', '.join(_quote(c) for c in columns)})) "
        f"FROM {_quote(schema)}.{_quote(table)}"
        for schema, table, columns in found
    ]
    if not reads:
        return 0
    return sum(int(count) for count, _ in cur.execute(" UNION ALL ".join(reads)).fetchall())


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
