"""The store's write health: what counts as a store fault, the probe, the reopen and its pace.

A real DuckDB file throughout; DuckDB's invalidation itself needs a full disk
(tests/integration/test_store_full_disk.py), so here it is recorded as DuckDB reports it and
the reopen that follows runs for real.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from sits_observe.errors import StoreError
from sits_observe.store import Store
from sits_observe.store.health import HealthLog, is_invalidation, is_store_fault

INVALIDATED = duckdb.FatalException(
    "FATAL Error: Failed: database has been invalidated because of a previous fatal error."
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def open_store(path: Path, clock: Clock) -> Store:
    store = Store(duckdb.connect(str(path)), str(path), False, monotonic=clock)
    store.migrate()
    return store


def probe_writes(store: Store) -> int:
    return int(store.scalar("SELECT writes FROM store_probe"))


@pytest.mark.parametrize(
    ("exc", "fault", "invalidates"),
    [
        (INVALIDATED, True, True),
        (duckdb.IOException('IO Error: Could not write file "x.wal": No space left'), True, False),
        (duckdb.Error("Corrupt database file: computed checksum 1 does not match"), True, False),
        (duckdb.TransactionException("Failed to commit: Could not write file"), True, False),
        (duckdb.ConstraintException("Duplicate key violates primary key"), False, False),
        (duckdb.ConversionException("Could not convert string 'x' to INT64"), False, False),
        (ValueError("not DuckDB's"), False, False),
    ],
)
def test_what_is_a_store_fault(exc: Exception, fault: bool, invalidates: bool) -> None:
    assert is_store_fault(exc) is fault
    assert is_invalidation(exc) is invalidates


def test_a_failing_spell_lasts_from_the_first_fault_to_the_next_commit() -> None:
    clock = Clock()
    log = HealthLog(clock)
    assert log.snapshot().writable
    assert not log.failed(duckdb.ConstraintException("Duplicate key"))  # the batch's fault
    assert log.snapshot().writable
    assert log.failed(duckdb.IOException("IO Error: No space left on device"))
    clock.now += 5
    assert log.failed(duckdb.IOException("IO Error: No space left on device\nmore"))
    health = log.snapshot()
    assert not health.writable and health.failing_for_s == 5
    assert health.error == "IO Error: No space left on device"  # first line only
    log.committed()
    assert log.snapshot().writable and log.snapshot().failing_for_s == 0
    assert log.committed_within(1)
    clock.now += 2
    assert not log.committed_within(1)


def test_the_probe_commits_a_write_unless_one_just_committed(tmp_path: Path) -> None:
    clock = Clock()
    store = open_store(tmp_path / "s.duckdb", clock)
    try:
        before = probe_writes(store)
        assert store.check_writable().writable
        assert probe_writes(store) == before + 1
        assert store.check_writable().writable  # within 5 s of that commit: no probe
        assert probe_writes(store) == before + 1
        clock.now += 6
        assert store.check_writable().writable
        assert probe_writes(store) == before + 2
    finally:
        store.close()


def test_a_read_only_store_is_not_writable(tmp_path: Path) -> None:
    Store.open(tmp_path / "ro.duckdb").close()
    with Store.open(tmp_path / "ro.duckdb", read_only=True) as store:
        health = store.check_writable()
        assert not health.writable and "read-only" in (health.error or "")


def test_an_invalidated_database_is_opened_again_at_most_once_a_second(tmp_path: Path) -> None:
    clock = Clock()
    store = open_store(tmp_path / "s.duckdb", clock)
    try:
        store.execute("CREATE TABLE kept (n INTEGER)")
        store.execute("INSERT INTO kept VALUES (7)")
        store._health.failed(INVALIDATED)  # as a write that met DuckDB's invalidation does
        old = store.cursor()
        assert not store.health().writable and store.health().invalidated

        store.execute("INSERT INTO kept VALUES (8)")  # the write reopens first
        assert store.health().writable and store.health().reopens == 1
        assert store.scalar("SELECT sum(n) FROM kept") == 15  # nothing lost
        with pytest.raises(duckdb.ConnectionException):
            old.execute("SELECT 1")  # the old connection's cursors were closed with it

        store._health.failed(INVALIDATED)  # again, at once: too soon to reopen
        with pytest.raises(StoreError, match=r"opened again in 1\.0 s"):
            store.execute("INSERT INTO kept VALUES (9)")
        assert not store.check_writable().writable  # the probe waits its turn too
        clock.now += 1.0
        health = store.check_writable()  # reopens, writes, checkpoints
        assert health.writable and health.reopens == 2 and health.failing_for_s == 0
        assert store.scalar("SELECT sum(n) FROM kept") == 15
    finally:
        store.close()


def test_a_reopen_that_fails_is_counted_and_retried(tmp_path: Path) -> None:
    clock = Clock()
    path = tmp_path / "s.duckdb"
    store = open_store(path, clock)
    store._health.failed(INVALIDATED)
    moved = tmp_path / "moved.duckdb"
    store._con.close()
    path.rename(moved)
    path.mkdir()  # the path is now a folder: DuckDB cannot open it
    try:
        health = store.check_writable()
        assert not health.writable and health.reopen_failures == 1
        assert "cannot reopen the database" in (health.error or "")
        path.rmdir()
        moved.rename(path)
        clock.now += 1.0
        health = store.check_writable()
        assert health.writable and health.reopens == 1 and health.reopen_failures == 1
    finally:
        store.close()
