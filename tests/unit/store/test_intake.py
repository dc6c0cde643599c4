"""``Store.ingest``: the one way rows come in (conform, screen, append), on a real DuckDB file,
and the group committer's ``ingest`` storing exactly what ``Store.ingest`` stores."""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest

from sits_observe.errors import SchemaError
from sits_observe.store import Batch, GroupCommitSettings, GroupCommitter, Store, prepare

NOW = datetime(2026, 11, 1, 12, 0, 0, tzinfo=UTC)
T0 = NOW.replace(tzinfo=None) - timedelta(minutes=5)


def gpu_rows(power_w: list[float], *, start: datetime = T0, node: str = "n1") -> pa.Table:
    """Rows in a client's own column order and types (int index, no other columns)."""
    n = len(power_w)
    return pa.table(
        {
            "power_w": power_w,
            "gpu_uuid": [f"GPU-{i}" for i in range(n)],
            "ts": [start + timedelta(seconds=i) for i in range(n)],
            "node": [node] * n,
            "gpu_index": pa.array(range(n), pa.int64()),
        }
    )


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path / "intake.duckdb") as opened:
        yield opened


def drop_rows(store: Store) -> list[tuple[str, str, str, int]]:
    rows = store.query(
        "SELECT collector, node, reason, count FROM collector_drops ORDER BY reason"
    ).to_pylist()
    return [(r["collector"], r["node"], r["reason"], r["count"]) for r in rows]


def test_ingest_conforms_screens_and_records_what_it_dropped(store: Store) -> None:
    batch = Batch({"gpu_samples": gpu_rows([250.0, math.nan, 300.0])}, NOW, node="n1")
    receipt = store.ingest(batch)
    # The NaN power is an optional value: NULLed, the row kept; the drop row says so.
    assert receipt.rows == 3 + 1 and not receipt.duplicate
    assert dict(receipt.dropped) == {"gpu_samples.power_w:non_finite": 1}
    assert receipt.rows_by_table == {"gpu_samples": 3, "collector_drops": 1}
    stored = store.query("SELECT power_w FROM gpu_samples ORDER BY ts").column(0).to_pylist()
    assert stored == [250.0, None, 300.0]
    assert drop_rows(store) == [("ingest", "n1", "gpu_samples.power_w:non_finite", 1)]


def test_rows_from_the_future_are_dropped_by_the_batch_clock(store: Store) -> None:
    ahead = NOW.replace(tzinfo=None) + timedelta(minutes=10)
    tables = {"gpu_samples": pa.concat_tables([gpu_rows([100.0]), gpu_rows([1.0], start=ahead)])}
    tight = store.ingest(Batch(tables, NOW, node="n1", max_future_skew_s=60))
    assert tight.rows_by_table["gpu_samples"] == 1
    assert dict(tight.dropped) == {"gpu_samples.ts:future": 1}
    loose = store.ingest(Batch(tables, NOW, node="n2", max_future_skew_s=3600))
    assert loose.rows_by_table == {"gpu_samples": 2} and not loose.dropped


def test_a_replayed_batch_is_stored_once_and_drops_nothing_twice(store: Store) -> None:
    batch = Batch({"gpu_samples": gpu_rows([-5.0, 10.0])}, NOW, node="n1", batch_id="b-1")
    first = store.ingest(batch)
    again = store.ingest(batch)
    assert again.duplicate and again.rows == first.rows
    assert not again.dropped and not again.rows_by_table
    assert store.count("gpu_samples") == 2 and len(drop_rows(store)) == 1


def test_a_table_that_does_not_fit_stores_nothing(store: Store) -> None:
    good = gpu_rows([1.0])
    with pytest.raises(SchemaError, match="unknown table"):
        store.ingest(Batch({"gpu_samples": good, "gpu_sampels": good}, NOW))
    wrong = good.set_column(1, "gpu_uuid", pa.array([[1]], pa.list_(pa.int64())))
    with pytest.raises(SchemaError):
        store.ingest(Batch({"gpu_samples": wrong}, NOW))
    assert store.count("gpu_samples") == 0 and drop_rows(store) == []


def test_a_prepared_batch_is_stored_as_prepared(store: Store) -> None:
    ready = prepare(Batch({"gpu_samples": gpu_rows([1.0, -1.0])}, NOW, node="n1"))
    assert ready.rows_by_table == {"gpu_samples": 2, "collector_drops": 1}
    assert prepare(ready) is ready  # screening twice would count the drops twice
    assert store.ingest(ready).rows == 3


def test_the_group_committer_stores_what_store_ingest_stores(tmp_path: Path) -> None:
    batches = [
        Batch({"gpu_samples": gpu_rows([float(i), math.inf], node=f"n{i}")}, NOW, f"n{i}", f"b{i}")
        for i in range(4)
    ]
    with Store.open(tmp_path / "one.duckdb") as one:
        receipts = [one.ingest(b) for b in batches]
        expected = one.query("SELECT * FROM gpu_samples ORDER BY node, ts").to_pylist()
        expected_drops = drop_rows(one)
    with Store.open(tmp_path / "group.duckdb") as grouped:
        writer = GroupCommitter(grouped, GroupCommitSettings(max_wait_s=0.05))
        futures = [writer.ingest(b) for b in batches]
        got = [f.result(timeout=10) for f in futures]
        assert writer.close(10)
        assert writer.stats.groups < len(batches)  # they did share a transaction
        assert grouped.query("SELECT * FROM gpu_samples ORDER BY node, ts").to_pylist() == expected
        assert drop_rows(grouped) == expected_drops
    assert got == receipts


def test_the_group_committer_refuses_a_misfit_before_queueing(store: Store) -> None:
    writer = GroupCommitter(store)
    try:
        with pytest.raises(SchemaError):
            writer.ingest(Batch({"not_a_table": gpu_rows([1.0])}, NOW))
        assert writer.stats.batches == 0
    finally:
        writer.close(10)
