"""Whether the store can write: what failed, since when, and the reopens that followed.

DuckDB invalidates a database after a fatal error (a checkpoint that cannot write its blocks
on a full disk is the usual one) and refuses every statement on it until the file is opened
again; :class:`~.duck.Store` then reopens it (at most once per ``REOPEN_INTERVAL_S``). Other
faults leave the database usable but a write fails: a write-ahead-log append on a full disk,
an I/O error, a damaged block. :class:`HealthLog` keeps the record the service's probes
read: a fault starts a failing spell, the next commit ends it. A batch that does not fit
its schema or conflicts with its ledger entry is the batch's fault, not the store's, and
is not recorded.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import duckdb

#: Messages of DuckDB errors that carry no specific type but mean the file is at fault.
_FILE_FAULTS = (
    "database has been invalidated",
    "Failed to commit",
    "Corrupt database file",
    "Could not read enough bytes",
    "Could not write file",
    "No space left on device",
)


def is_invalidation(exc: BaseException) -> bool:
    """True when DuckDB invalidated the database: only a new connection can use the file."""
    if isinstance(exc, (duckdb.FatalException, duckdb.InternalException)):
        return True
    return "database has been invalidated" in str(exc)


def is_store_fault(exc: BaseException) -> bool:
    """True when ``exc`` says the file cannot be written or read (full disk, I/O error,
    damaged block, invalidated database), not that one statement or batch was wrong."""
    if is_invalidation(exc) or isinstance(exc, (duckdb.IOException, duckdb.ConnectionException)):
        return True
    text = str(exc)
    return any(fault in text for fault in _FILE_FAULTS)


@dataclass(frozen=True)
class StoreHealth:
    """The store's write health at one moment."""

    writable: bool
    """no store fault since the last commit (a read-only store is never writable)"""
    error: str | None
    """the last fault's message while failing"""
    failing_for_s: float
    """seconds since the first fault of the current failing spell (0 while writable)"""
    invalidated: bool
    """DuckDB invalidated the database; the next write or probe reopens it"""
    reopens: int
    """successful reopens since the store was opened"""
    reopen_failures: int
    """reopens that failed since the store was opened"""


class HealthLog:
    """The store's record of faults, commits and reopens; safe to use from several threads."""

    def __init__(self, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._failing_since: float | None = None
        self._error: str | None = None
        self._invalidated = False
        self._committed_at: float | None = None
        self._reopens = 0
        self._reopen_failures = 0

    def committed(self) -> None:
        """A write committed: the failing spell, if any, is over."""
        with self._lock:
            self._failing_since = None
            self._error = None
            self._committed_at = self._monotonic()

    def failed(self, exc: BaseException) -> bool:
        """Record ``exc`` if it is a store fault (returns whether it was)."""
        if not is_store_fault(exc):
            return False
        with self._lock:
            if self._failing_since is None:
                self._failing_since = self._monotonic()
            self._error = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            self._invalidated = self._invalidated or is_invalidation(exc)
        return True

    def reopened(self) -> None:
        """A new connection replaced the invalidated one (still failing until a commit)."""
        with self._lock:
            self._invalidated = False
            self._reopens += 1

    def reopen_failed(self, exc: BaseException) -> None:
        """Opening the file again failed; the database stays unusable."""
        with self._lock:
            if self._failing_since is None:
                self._failing_since = self._monotonic()
            self._error = f"cannot reopen the database: {str(exc).splitlines()[0]}"
            self._reopen_failures += 1

    @property
    def invalidated(self) -> bool:
        """Whether the connection must be replaced before the next statement."""
        with self._lock:
            return self._invalidated

    def committed_within(self, seconds: float) -> bool:
        """True when writable and a write committed in the last ``seconds``."""
        with self._lock:
            if self._failing_since is not None or self._committed_at is None:
                return False
            return self._monotonic() - self._committed_at < seconds

    def snapshot(self) -> StoreHealth:
        """The record as it stands."""
        with self._lock:
            since = self._failing_since
            return StoreHealth(
                writable=since is None,
                error=self._error,
                failing_for_s=0.0 if since is None else self._monotonic() - since,
                invalidated=self._invalidated,
                reopens=self._reopens,
                reopen_failures=self._reopen_failures,
            )
