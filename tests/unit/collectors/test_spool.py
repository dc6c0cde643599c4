"""The agent's on-disk spool: order, durability across reopen, bounds, leftovers."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from sits_observe.collectors.agent.spool import Spool


def ids(spool: Spool) -> list[str]:
    return [e.batch_id for e in spool.entries()]


def test_batches_come_back_oldest_first_with_their_bytes_and_rows(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=10_000, max_files=10)
    for i in range(3):
        assert spool.put(f"b{i}", f"body-{i}".encode(), rows=i + 1) == []
    assert ids(spool) == ["b0", "b1", "b2"]
    assert len(spool) == 3
    assert spool.bytes_used == 3 * len(b"body-0")
    first = spool.peek()
    assert first is not None
    assert (first.batch_id, first.rows, first.read()) == ("b0", 1, b"body-0")
    spool.remove(first)
    assert ids(spool) == ["b1", "b2"]
    assert not first.path.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [e.path.name for e in spool.entries()]


def test_reopening_keeps_order_rows_and_continues_the_sequence(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=10_000, max_files=20)
    for i in range(12):  # past 9 -> 10, so order must be numeric, not by insertion accident
        spool.put(f"b{i}", b"x", rows=7)
    for entry in spool.entries()[:2]:
        spool.remove(entry)
    again = Spool(tmp_path, max_bytes=10_000, max_files=20)
    assert ids(again) == [f"b{i}" for i in range(2, 12)]
    assert {e.rows for e in again.entries()} == {7}
    again.put("late", b"y")
    assert ids(again)[-1] == "late"
    assert ids(Spool(tmp_path, max_bytes=10_000, max_files=20))[-1] == "late"


def test_file_bound_drops_the_oldest_and_counts_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    spool = Spool(tmp_path, max_bytes=10_000, max_files=3)
    dropped = []
    with caplog.at_level(logging.WARNING):
        for i in range(5):
            dropped += spool.put(f"b{i}", b"12345", rows=2)
    assert ids(spool) == ["b2", "b3", "b4"]
    assert [e.batch_id for e in dropped] == ["b0", "b1"]
    assert spool.dropped_batches == 2
    assert spool.dropped_bytes == 10
    assert len(list(tmp_path.glob("*.batch"))) == 3
    assert "dropped batch b0" in caplog.text and "spool is full" in caplog.text


def test_byte_bound_drops_as_many_old_batches_as_needed(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=100, max_files=100)
    for i in range(4):
        spool.put(f"s{i}", b"a" * 25)
    dropped = spool.put("big", b"b" * 60)
    assert [e.batch_id for e in dropped] == ["s0", "s1", "s2"]
    assert ids(spool) == ["s3", "big"]
    assert spool.bytes_used == 85 <= spool.max_bytes


def test_a_batch_larger_than_the_spool_is_dropped_alone(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=100, max_files=10)
    spool.put("keep", b"k" * 10)
    dropped = spool.put("huge", b"h" * 101, rows=3)
    assert [(e.batch_id, e.rows) for e in dropped] == [("huge", 3)]
    assert ids(spool) == ["keep"]
    assert spool.dropped_batches == 1


def test_partial_writes_are_deleted_and_foreign_files_ignored(tmp_path: Path) -> None:
    Spool(tmp_path, max_bytes=1000, max_files=10).put("good", b"g")
    (tmp_path / "0000000000000009_1_torn.batch.tmp").write_bytes(b"half")
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "junk.batch").write_bytes(b"?")
    spool = Spool(tmp_path, max_bytes=1000, max_files=10)
    assert ids(spool) == ["good"]
    assert not list(tmp_path.glob("*.tmp"))
    assert (tmp_path / "notes.txt").exists()


def test_smaller_bounds_on_reopen_drop_the_oldest(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=1000, max_files=10)
    for i in range(5):
        spool.put(f"b{i}", b"z")
    smaller = Spool(tmp_path, max_bytes=1000, max_files=2)
    assert ids(smaller) == ["b3", "b4"]
    assert smaller.dropped_batches == 3
    assert len(list(tmp_path.glob("*.batch"))) == 2


def test_bad_ids_and_bounds_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="positive"):
        Spool(tmp_path, max_bytes=0, max_files=1)
    spool = Spool(tmp_path, max_bytes=10, max_files=1)
    with pytest.raises(ValueError, match="batch id"):
        spool.put("../escape", b"x")
