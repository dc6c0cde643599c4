"""The embedded DuckDB store: one file, a versioned schema, batched Arrow appends.

Invariants:
- One process owns the database file for writing (DuckDB enforces it with a file lock;
  :class:`StoreLocked` says who to ask instead). Everything else reads through that process.
- Appends are whole Arrow tables checked against :mod:`sits_observe.domain.tables`; nothing
  is ever inserted row by row.
- A batch with an id is stored at most once and is acknowledged only after its transaction
  committed, so an agent that replays after a crash never loses or duplicates samples. The
  ledger keeps the SHA-256 of the body each id came in: the same id with another body is a
  conflict, never silently dropped. An OTLP request span (trace id + span id) is stored once.
- ``pods`` and ``nodes`` are views since schema version 6: a snapshot appended to them is
  stored as its changes (:mod:`sits_observe.store.inventory`), read back unchanged.
- Methods are safe to call from several threads: writes are serialised by a lock, reads use
  their own cursor.
- Every write's store fault (full disk, I/O error, damaged block) is recorded
  (:mod:`sits_observe.store.health`). When DuckDB invalidates the database after a fatal
  error, the next write (or :meth:`Store.check_writable`) opens the file again, at most once
  a second (:mod:`sits_observe.store.connection`): DuckDB replays its write-ahead log, so
  every committed batch is there, and the ledger answers a batch whose commit was in doubt
  as a duplicate when it is sent again.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from sits_observe.domain.tables import TABLES, find_table
from sits_observe.domain.times import utc_naive as utc_naive  # noqa: PLC0414 (re-export)
from sits_observe.errors import BatchConflict, StoreError
from sits_observe.store.connection import Connection, DuckConfig, connect, rollback
from sits_observe.store.health import StoreHealth, is_invalidation
from sits_observe.store.intake import (
    Batch,
    IngestReceipt,
    Prepared,
    conform_batch,
    prepare,
    receipt_of,
)
from sits_observe.store.inventory import (
    VERSIONS,
    InventorySettings,
    store_inventory,
)
from sits_observe.store.migrations import latest_version, migrations

#: Tables that may be exported or queried by name (samples, ledger, rollups).
EXTRA_TABLES = ("ingest_batches", "gpu_samples_1m", "container_samples_1m")

#: A write committed this recently proves the store writable; :meth:`Store.check_writable`
#: then writes nothing.
PROBE_FRESH_S = 5.0


@dataclass(frozen=True)
class BatchReceipt:
    """What the store did with one batch."""

    batch_id: str | None
    rows: int
    duplicate: bool


#: The write-ahead log's size that triggers a checkpoint (DuckDB's default is 16 MiB). A
#: checkpoint compresses again the row group it appends to, and 16 MiB of log holds about
#: 56,000 agent rows, fewer than one 122,880-row group. At 64 MiB a checkpoint spans whole
#: row groups: inserts and commits took 2.0 us a row instead of 3.6, and the file was 10 %
#: smaller (2 M agent rows in groups of 16 batches, bench_service_ingest's shape). The price:
#: up to 64 MiB of log replayed when the file is opened after a crash, and as much more disk
#: between checkpoints.
CHECKPOINT_THRESHOLD = "64MiB"


class Store:
    """A DuckDB file holding every sample. Open with :meth:`open`."""

    def __init__(
        self,
        con: duckdb.DuckDBPyConnection,
        path: str,
        read_only: bool,
        inventory: InventorySettings | None = None,
        *,
        config: DuckConfig | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._link = Connection(con, path, read_only, config or {}, monotonic)
        self._health = self._link.log
        self.path = path
        self.read_only = read_only
        self.inventory = inventory or InventorySettings()
        self._write_lock = threading.Lock()

    @property
    def _con(self) -> duckdb.DuckDBPyConnection:
        """The current connection (a new one after a reopen)."""
        return self._link.current

    # -- life cycle -------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        path: str | Path,
        *,
        read_only: bool = False,
        inventory: InventorySettings | None = None,
        memory_limit: str | None = None,
    ) -> Store:
        """Open (creating and migrating when writable) the database at ``path``.

        ``":memory:"`` gives a private in-memory store, handy for tests and one-shot work.
        ``memory_limit`` is DuckDB's (``"2GiB"``, ``"25%"``; None: DuckDB's default, 80 % of
        the memory): it bounds the cache of the file's blocks, which otherwise grows with
        the file.
        The file's folder must exist: a mistyped ``--db`` folder is refused with a
        :class:`StoreError` rather than created silently somewhere unexpected.
        """
        path_str = str(path)
        if path_str != ":memory:":
            parent = Path(path_str).parent
            if not read_only and not parent.is_dir():
                import shlex

                fix = (
                    "is not a folder; pick another --db"
                    if parent.exists()
                    else f"does not exist; create it first (mkdir -p {shlex.quote(str(parent))})"
                )
                raise StoreError(f"the folder {str(parent)!r} of database {path_str!r} {fix}")
            if read_only and not Path(path_str).exists():
                raise StoreError(f"database {path_str!r} does not exist; ingest something first")
        config: DuckConfig = {}
        if memory_limit is not None:
            config["memory_limit"] = memory_limit
        if not read_only:
            config["checkpoint_threshold"] = CHECKPOINT_THRESHOLD
        con = connect(path_str, read_only, config)
        store = cls(con, path_str, read_only, inventory, config=config)
        if read_only:
            if store.schema_version() != latest_version():
                raise StoreError(
                    f"database {path_str!r} is at schema version {store.schema_version()}, "
                    f"this build expects {latest_version()}; open it once read-write to migrate"
                )
        else:
            store.migrate()
        return store

    def close(self) -> None:
        """Checkpoint (when writable) and close the file; a failed checkpoint is raised
        after the file is closed (the write-ahead log holds what it did not move)."""
        with self._write_lock:
            self._link.close(checkpoint=not self.read_only)

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- schema -----------------------------------------------------------------------

    def schema_version(self) -> int:
        """The applied schema version (0 for an empty file)."""
        cur = self._con.cursor()
        exists = cur.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_name = 'schema_version'"
        ).fetchone()
        if not exists or exists[0] == 0:
            return 0
        row = cur.execute("SELECT max(version) FROM schema_version").fetchone()
        return int(row[0]) if row and row[0] is not None else 0

    def migrate(self) -> int:
        """Apply every migration newer than the file's version; returns the new version."""
        with self._write_lock:
            self._con.execute(
                "CREATE TABLE IF NOT EXISTS schema_version "
                "(version INTEGER PRIMARY KEY, applied_at TIMESTAMP NOT NULL)"
            )
            current = self.schema_version()
            for migration in migrations():
                if migration.version <= current:
                    continue
                try:
                    self._con.execute("BEGIN TRANSACTION")
                    self._con.execute(migration.sql)
                    self._con.execute(
                        "INSERT INTO schema_version VALUES (?, now()::TIMESTAMP)",
                        [migration.version],
                    )
                    self._con.execute("COMMIT")
                except duckdb.Error as exc:
                    rollback(self._con)
                    raise StoreError(
                        f"migration {migration.version} ({migration.name}) failed: {exc}"
                    ) from exc
            return self.schema_version()

    def columns(self, table: str) -> list[str]:
        """Column names of ``table`` as the database has them."""
        self._check_name(table)
        rows = (
            self._con.cursor()
            .execute(
                "SELECT column_name FROM information_schema.columns "
                "WHERE table_name = ? ORDER BY ordinal_position",
                [table],
            )
            .fetchall()
        )
        return [r[0] for r in rows]

    # -- writes -----------------------------------------------------------------------

    def ingest(self, batch: Batch | Prepared) -> IngestReceipt:
        """Conform, screen and append one batch in one transaction (:mod:`.intake`): the way
        every source stores rows. Raises :class:`SchemaError` (nothing stored) when a table
        does not fit, :class:`BatchConflict` and :class:`StoreError` as
        :meth:`append_batch` does."""
        ready = prepare(batch)
        meta = ready.batch
        receipt = self.append_batch(
            ready.tables, batch_id=meta.batch_id, node=meta.node, body_sha256=meta.body_sha256
        )
        return receipt_of(ready, receipt.batch_id, receipt.rows, receipt.duplicate)

    def append(self, table: str, data: pa.Table) -> int:
        """Append an Arrow table to ``table``; returns the number of rows stored."""
        return self.append_batch({table: data}).rows

    def append_batch(
        self,
        tables: Mapping[str, pa.Table],
        *,
        batch_id: str | None = None,
        node: str | None = None,
        body_sha256: str | None = None,
    ) -> BatchReceipt:
        """Append several tables in one transaction; the receipt counts the rows stored.

        With ``batch_id``, a batch already stored is acknowledged as a duplicate and not
        stored again; ``body_sha256`` (hex digest of the body it came in) is kept with the id,
        and the same id with another digest raises :class:`BatchConflict` (ids stored without
        a digest stay plain duplicates). ``requests`` rows with a ``span_id`` are stored once
        per (``trace_id``, ``span_id``), within the batch and against the stored rows.
        Raises :class:`SchemaError` (nothing stored) when any table does not fit its schema.
        Many writers at once: :class:`~.group_commit.GroupCommitter` shares one transaction.
        """
        self._require_writable()
        conformed = conform_batch(tables)
        with self._write_lock:
            con = self._link.for_write()
            try:
                con.execute("BEGIN TRANSACTION")
                if batch_id is not None:
                    seen = con.execute(
                        "SELECT rows, body_sha256 FROM ingest_batches WHERE batch_id = ?",
                        [batch_id],
                    ).fetchone()
                    if seen is not None:
                        con.execute("ROLLBACK")
                        check_same_body(batch_id, seen[1], body_sha256)
                        return BatchReceipt(batch_id, int(seen[0]), duplicate=True)
                rows = sum(
                    insert(con, name, data, self.inventory) for name, data in conformed.items()
                )
                if batch_id is not None:
                    record_batches(con, [(batch_id, node, rows, body_sha256)])
                con.execute("COMMIT")
            except duckdb.Error as exc:
                self._health.failed(exc)
                rollback(con)
                raise StoreError(f"append failed, nothing stored: {exc}") from exc
            self._health.committed()
        return BatchReceipt(batch_id, rows, duplicate=False)

    def execute(self, sql: str, params: Sequence[Any] | None = None) -> None:
        """Run a statement that writes (used by retention, inventory upkeep, later layers)."""
        self._require_writable()
        with self._write_lock:
            try:
                self._link.for_write().execute(sql, params or [])
            except duckdb.Error as exc:
                self._health.failed(exc)
                raise StoreError(f"statement failed: {exc}") from exc
            self._health.committed()

    @contextmanager
    def transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A write transaction: commits on success, rolls back on any error."""
        self._require_writable()
        with self._write_lock:
            con = self._link.for_write()
            try:
                con.execute("BEGIN TRANSACTION")
            except duckdb.Error as exc:
                self._health.failed(exc)
                raise
            try:
                yield con
            except BaseException as exc:
                self._health.failed(exc)
                rollback(con)
                raise
            try:
                con.execute("COMMIT")
            except duckdb.Error as exc:
                self._health.failed(exc)
                raise
            self._health.committed()

    # -- reads ------------------------------------------------------------------------

    def query(self, sql: str, params: Sequence[Any] | None = None) -> pa.Table:
        """Run a read query and return an Arrow table."""
        try:
            result = self._con.cursor().sql(sql, params=params or None).to_arrow_table()
        except duckdb.Error as exc:
            self._read_failed(exc)
            raise StoreError(f"query failed: {exc}") from exc
        return result

    def scalar(self, sql: str, params: Sequence[Any] | None = None) -> Any:
        """First column of the first row of a read query (None when empty)."""
        try:
            row = self._con.cursor().execute(sql, params or []).fetchone()
        except duckdb.Error as exc:
            self._read_failed(exc)
            raise StoreError(f"query failed: {exc}") from exc
        return row[0] if row else None

    def ping(self) -> None:
        """Run a trivial query; :class:`StoreError` when the database does not answer."""
        self.scalar("SELECT 1")

    def count(self, table: str) -> int:
        """Rows in ``table``."""
        self._check_name(table)
        return int(self.scalar(f"SELECT count(*) FROM {table}"))

    def cursor(self) -> duckdb.DuckDBPyConnection:
        """A read cursor for analytics that build their own SQL (with ``?`` parameters)."""
        return self._con.cursor()

    def export_parquet(self, table: str, path: str | Path, *, batch_rows: int = 1_000_000) -> int:
        """Stream ``table`` into a Parquet file; returns the number of rows written."""
        import pyarrow.parquet as pq  # here: every process opens a store, few export one

        self._check_name(table)
        cur = self._con.cursor()
        reader = cur.sql(f"SELECT * FROM {table}").to_arrow_reader(batch_rows)
        written = 0
        with pq.ParquetWriter(str(path), reader.schema) as writer:
            for batch in reader:
                writer.write_batch(batch)
                written += batch.num_rows
        return written

    # -- health -----------------------------------------------------------------------

    def health(self) -> StoreHealth:
        """What the writes so far say (no statement runs)."""
        health = self._health.snapshot()
        if self.read_only:
            return replace(health, writable=False, error=f"database {self.path!r} is read-only")
        return health

    def check_writable(self, *, wait_s: float = 0.5) -> StoreHealth:
        """Prove the store can write, and return its health.

        A write committed in the last ``PROBE_FRESH_S`` proves it. Otherwise the probe takes
        the write lock (waiting at most ``wait_s``; a write holding it longer is left to
        prove it by its own outcome) and commits one small write; while the store is failing
        it also reopens and checkpoints, at most once a second (:meth:`Connection.probe`).
        """
        if self.read_only or self._health.committed_within(PROBE_FRESH_S):
            return self.health()
        if not self._write_lock.acquire(timeout=wait_s):
            return self.health()
        try:
            self._link.probe()
        finally:
            self._write_lock.release()
        return self.health()

    def _read_failed(self, exc: duckdb.Error) -> None:
        """A read records only an invalidation (it needs a reopen); a damaged block it
        hit is the read's answer, and the next write says whether writes fail."""
        if is_invalidation(exc):
            self._health.failed(exc)

    # -- helpers ----------------------------------------------------------------------

    def _require_writable(self) -> None:
        if self.read_only:
            raise StoreError(f"database {self.path!r} was opened read-only")

    @staticmethod
    def _check_name(table: str) -> None:
        if table not in TABLES and table not in EXTRA_TABLES:
            valid = ", ".join([*TABLES, *EXTRA_TABLES])
            raise StoreError(f"unknown table {table!r}; valid tables: {valid}")


#: ``requests`` rows with an OTLP span identity are stored once per (trace_id, span_id). A
#: re-sent span has the same completion time, so only stored rows inside the incoming rows'
#: time range are compared (DuckDB's zone maps skip the rest of the table).
_NEW_SPANS_SQL = """
INSERT INTO requests BY NAME
SELECT * FROM _incoming AS i
WHERE i.span_id IS NULL OR NOT EXISTS (
    SELECT 1 FROM requests AS r
    WHERE r.ts BETWEEN ? AND ? AND r.span_id = i.span_id
      AND r.trace_id IS NOT DISTINCT FROM i.trace_id
)
QUALIFY i.span_id IS NULL
    OR row_number() OVER (PARTITION BY i.trace_id, i.span_id ORDER BY i.ts) = 1
"""


def insert(
    con: duckdb.DuckDBPyConnection,
    name: str,
    data: pa.Table,
    inventory: InventorySettings | None = None,
) -> int:
    """Insert one conformed table inside the open transaction; returns the rows stored (for
    ``pods`` / ``nodes``: the rows their views gained, stored as changes with ``inventory``)."""
    if data.num_rows == 0:
        return 0
    if name in VERSIONS:
        return store_inventory(con, name, data, inventory or InventorySettings())
    if name == "requests" and data.column("span_id").null_count < data.num_rows:
        return _insert_new_spans(con, data)
    # A conformed table has the domain schema's column order, which is the stored one
    # (tests/unit/store/test_column_order.py): the relation's positional insert needs no
    # registered name and no BY NAME projection, two calls into DuckDB instead of four, each
    # a wait for the interpreter lock when the service is busy.
    con.from_arrow(data).insert_into(name)
    return int(data.num_rows)


def _insert_new_spans(con: duckdb.DuckDBPyConnection, data: pa.Table) -> int:
    """Insert the ``requests`` rows whose span is not stored yet; returns how many."""
    with_ids = data.filter(pc.is_valid(data.column("span_id"))).column("ts")
    span = pc.min_max(with_ids)
    con.register("_incoming", data)
    try:
        row = con.execute(_NEW_SPANS_SQL, [span["min"].as_py(), span["max"].as_py()]).fetchone()
    finally:
        con.unregister("_incoming")
    return int(row[0]) if row else 0


#: Ledger rows per ``INSERT ... VALUES`` statement (four parameters each).
LEDGER_ROWS_PER_STATEMENT = 256


def record_batches(
    con: duckdb.DuckDBPyConnection, entries: Sequence[tuple[str, str | None, int, str | None]]
) -> None:
    """``ingest_batches`` rows (batch id, node, rows stored, body SHA-256), received now,
    inside the open transaction: the parameters of one statement per
    :data:`LEDGER_ROWS_PER_STATEMENT` (no Arrow table to build, register and drop: 1.5 ms a
    group of 8 instead of 2.1, 3.3 instead of 5.4 with another thread holding the
    interpreter lock half the time; measured in process)."""
    row = "(?, now()::TIMESTAMP, ?, ?, ?)"
    for start in range(0, len(entries), LEDGER_ROWS_PER_STATEMENT):
        part = entries[start : start + LEDGER_ROWS_PER_STATEMENT]
        con.execute(
            "INSERT INTO ingest_batches (batch_id, received_at, node, rows, body_sha256) "
            f"VALUES {', '.join([row] * len(part))}",
            [value for entry in part for value in entry],
        )


def check_same_body(batch_id: str, stored: str | None, presented: str | None) -> None:
    """Raise :class:`BatchConflict` when ``batch_id`` was stored with another body."""
    if stored is None or presented is None or stored == presented:
        return
    raise BatchConflict(
        f"batch id {batch_id!r} was stored with another body (sha256 {stored[:16]}..., this "
        f"one {presented[:16]}...); nothing stored: a replay resends the same bytes, a new "
        "batch needs a new id"
    )


def time_column(table: str) -> str:
    """The time column of a sample table."""
    return find_table(table).time_column
