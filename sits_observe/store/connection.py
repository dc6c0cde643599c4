"""The store's DuckDB connection: opened, reopened after DuckDB invalidates it, probed.

DuckDB invalidates a database after a fatal error (a checkpoint that could not write its
blocks on a full disk is the usual one) and refuses every statement on it until the file is
opened again. :meth:`Connection.for_write` then closes the connection (and with it every
cursor, so DuckDB lets the instance go) and opens the file again, at most once per
``REOPEN_INTERVAL_S``: DuckDB replays its write-ahead log, so every committed transaction is
there. :meth:`Connection.probe` proves the connection can commit. What happened is kept in a
:class:`~.health.HealthLog`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import suppress

import duckdb

from sits_observe.errors import StoreError, StoreLocked
from sits_observe.store.health import HealthLog

#: Seconds between two tries to bring a failing store back (a reopen, a checkpoint probe):
#: a reopen replays the write-ahead log, which on a full disk may be most of
#: ``duck.CHECKPOINT_THRESHOLD`` (64 MiB).
REOPEN_INTERVAL_S = 1.0

#: The write probe: one write-ahead-log record and its sync (migration 8's one row).
PROBE_SQL = "UPDATE store_probe SET writes = writes + 1, written_at = now()::TIMESTAMP WHERE id = 1"

DuckConfig = dict[str, str | bool | int | float | list[str]]


def connect(path: str, read_only: bool, config: DuckConfig) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection to ``path`` whose sessions run in UTC; :class:`StoreLocked` when
    another process owns it, :class:`StoreError` when DuckDB cannot open it (a damaged
    header, say)."""
    try:
        con = duckdb.connect(path, read_only=read_only, config=config)
    except duckdb.IOException as exc:
        if "lock" in str(exc).lower():
            raise StoreLocked(
                f"database {path!r} is owned by another process ({exc}); "
                "stop it, or read through its HTTP API: --service URL --token-file FILE "
                "(`sits-observe demo` prints both when it starts)"
            ) from exc
        raise StoreError(f"cannot open database {path!r}: {exc}") from exc
    except duckdb.Error as exc:
        raise StoreError(f"cannot open database {path!r}: {exc}") from exc
    # The store's times are naive UTC. DuckDB's session time zone is the host's, so on a
    # host not on UTC ``now()::TIMESTAMP`` (the ledger's ``received_at``, the schema
    # version's and the probe's times) was local wall time. Every cursor inherits this.
    con.execute("SET GLOBAL TimeZone = 'UTC'")
    return con


def rollback(con: duckdb.DuckDBPyConnection) -> None:
    """Roll back whatever is open; a failed commit already ended its transaction, and an
    invalidated database refuses the rollback too (the error that led here is the one
    raised)."""
    with suppress(duckdb.Error):
        con.execute("ROLLBACK")


class Connection:
    """One open database file. Writes and probes run under the store's write lock; reads
    take cursors from :attr:`current` without it."""

    def __init__(
        self,
        con: duckdb.DuckDBPyConnection,
        path: str,
        read_only: bool,
        config: DuckConfig,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.current = con
        self.path = path
        self.read_only = read_only
        self.log = HealthLog(monotonic)
        self._config = dict(config)
        self._monotonic = monotonic
        self._retry_at = 0.0  # while failing: no reopen or checkpoint probe before this

    def for_write(self) -> duckdb.DuckDBPyConnection:
        """The connection, opened again first when DuckDB invalidated it; :class:`StoreError`
        when that cannot happen now (tried less than ``REOPEN_INTERVAL_S`` ago, or failed)."""
        if self.log.invalidated:
            self._reopen()
        return self.current

    def probe(self) -> None:
        """Commit one small write (``store_probe``); while failing, reopen first if needed
        and checkpoint after it (the write-ahead log moved into the file: what a full disk
        refuses, where one small record may still fit), at most once per
        ``REOPEN_INTERVAL_S``. The outcome goes to :attr:`log`."""
        failing = not self.log.snapshot().writable
        now = self._monotonic()
        if failing and now < self._retry_at:
            return  # tried a moment ago; the record stands
        try:
            con = self.for_write()
            con.execute(PROBE_SQL)
            if failing:  # after the probe's write: with nothing written it may do nothing
                con.execute("CHECKPOINT")
        except StoreError:
            return  # a failed reopen, recorded
        except duckdb.Error as exc:
            self.log.failed(exc)
            return
        finally:
            if failing:
                self._retry_at = max(self._retry_at, now + REOPEN_INTERVAL_S)
        self.log.committed()

    def close(self, *, checkpoint: bool) -> None:
        """Checkpoint (if asked) and close; a failed checkpoint is raised after the close (the
        write-ahead log holds what it did not move)."""
        try:
            if checkpoint:
                self.current.execute("CHECKPOINT")
        finally:
            with suppress(duckdb.Error):
                self.current.close()

    def _reopen(self) -> None:
        now = self._monotonic()
        if now < self._retry_at:
            raise StoreError(
                f"database {self.path!r} is unusable ({self.log.snapshot().error}); "
                f"it is opened again in {self._retry_at - now:.1f} s: send it again later"
            )
        self._retry_at = now + REOPEN_INTERVAL_S
        with suppress(duckdb.Error):
            self.current.close()  # closes every cursor too, so DuckDB lets the instance go
        con = None
        try:
            con = connect(self.path, self.read_only, self._config)
            con.execute("SELECT count(*) FROM schema_version").fetchone()
        except (duckdb.Error, StoreError) as exc:
            if con is not None:
                with suppress(duckdb.Error):
                    con.close()
            self.log.reopen_failed(exc)
            raise StoreError(
                f"database {self.path!r} was invalidated and cannot be opened again: {exc}"
            ) from exc
        self.current = con
        self.log.reopened()
