"""Group commit on a real DuckDB file: one transaction for many batches, each acknowledged
after it, duplicates and conflicts resolved batch by batch, a bad batch failing alone."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import Future
from datetime import datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest

from sits_observe.errors import BatchConflict, SchemaError, StoreError
from sits_observe.store import BatchReceipt, GroupCommitSettings, GroupCommitter, Store

T0 = datetime(2026, 11, 1, 12, 0, 0)


def gpu_rows(n: int, node: str = "n1", start: datetime = T0) -> pa.Table:
    return pa.table(
        {
            "ts": [start + timedelta(seconds=i) for i in range(n)],
            "node": [node] * n,
            "gpu_uuid": ["GPU-a"] * n,
            "fb_used_bytes": list(range(n)),
        }
    )


def container_rows(n: int, node: str = "n1") -> pa.Table:
    return pa.table(
        {
            "ts": [T0 + timedelta(seconds=i) for i in range(n)],
            "node": [node] * n,
            "pod_uid": [f"pod-{i}" for i in range(n)],
            "container_id": [f"c-{i}" for i in range(n)],
        }
    )


def bad_utf8_rows() -> pa.Table:
    """Rows that fit the Arrow schema but that DuckDB refuses at insert (invalid UTF-8)."""
    offsets = pa.py_buffer(pa.array([0, 2], pa.int32()).buffers()[1])
    node = pa.Array.from_buffers(pa.string(), 1, [None, offsets, pa.py_buffer(b"\xff\xfe")])
    return pa.table({"ts": [T0], "node": node, "gpu_uuid": ["GPU-x"]})


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path / "g.duckdb") as opened:
        yield opened


def committer(store: Store, **limits: object) -> GroupCommitter:
    return GroupCommitter(store, GroupCommitSettings.model_validate(limits))


def ledger(store: Store) -> dict[str, tuple[int, datetime]]:
    rows = store.query("SELECT batch_id, rows, received_at FROM ingest_batches").to_pylist()
    return {r["batch_id"]: (r["rows"], r["received_at"]) for r in rows}


def test_batches_from_many_threads_share_one_commit(store: Store) -> None:
    """Eight threads submit at once; the group fills at eight and is one transaction, and
    every submitter gets its own receipt."""
    writer = committer(store, max_batches=8, max_wait_s=1.0)
    receipts: dict[int, BatchReceipt] = {}
    start = threading.Barrier(8)

    def agent(i: int) -> None:
        start.wait()
        tables = {"gpu_samples": gpu_rows(8, f"n{i}"), "container_samples": container_rows(i + 1)}
        receipts[i] = writer.append_batch(tables, batch_id=f"b{i}", node=f"n{i}", body_sha256="d")

    threads = [threading.Thread(target=agent, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert writer.close(5)
    assert writer.stats.groups == 1 and writer.stats.batches == 8
    assert {i: (r.batch_id, r.rows, r.duplicate) for i, r in receipts.items()} == {
        i: (f"b{i}", 8 + i + 1, False) for i in range(8)
    }
    stored = ledger(store)
    assert {b: n for b, (n, _) in stored.items()} == {f"b{i}": 8 + i + 1 for i in range(8)}
    assert len({at for _, at in stored.values()}) == 1  # one commit, one receive time
    assert store.count("gpu_samples") == 64
    assert store.count("container_samples") == sum(range(1, 9))
    per_node = store.query("SELECT node, count(*) AS n FROM gpu_samples GROUP BY node")
    assert sorted(per_node.column("node").to_pylist()) == [f"n{i}" for i in range(8)]


def test_a_future_is_resolved_only_after_the_commit_that_holds_it(store: Store) -> None:
    """While the group waits for company the batch is not acknowledged, and once it is the
    rows are readable from another cursor."""
    writer = committer(store, max_batches=2, max_wait_s=0.3)
    first = writer.submit({"gpu_samples": gpu_rows(3)}, batch_id="first")
    assert not first.done()
    assert store.count("gpu_samples") == 0
    receipt = first.result(5)
    assert receipt == BatchReceipt("first", 3, duplicate=False)
    assert store.count("gpu_samples") == 3
    assert writer.close(5)


def test_duplicates_and_conflicts_within_a_group_and_against_stored(store: Store) -> None:
    store.append_batch({"gpu_samples": gpu_rows(2)}, batch_id="old", body_sha256="o")
    writer = committer(store, max_batches=7, max_wait_s=1.0)
    futures = {
        "old again": writer.submit({"gpu_samples": gpu_rows(2)}, batch_id="old", body_sha256="o"),
        "old changed": writer.submit({"gpu_samples": gpu_rows(5)}, batch_id="old", body_sha256="x"),
        "new": writer.submit({"gpu_samples": gpu_rows(4)}, batch_id="new", body_sha256="n"),
        "new again": writer.submit({"gpu_samples": gpu_rows(4)}, batch_id="new", body_sha256="n"),
        "new changed": writer.submit({"gpu_samples": gpu_rows(9)}, batch_id="new", body_sha256="m"),
        "other": writer.submit({"gpu_samples": gpu_rows(1)}, batch_id="other", body_sha256="t"),
        "no id": writer.submit({"gpu_samples": gpu_rows(6)}),
    }
    assert writer.close(5)
    assert writer.stats.groups == 1
    assert futures["old again"].result() == BatchReceipt("old", 2, duplicate=True)
    assert futures["new"].result() == BatchReceipt("new", 4, duplicate=False)
    assert futures["new again"].result() == BatchReceipt("new", 4, duplicate=True)
    assert futures["other"].result() == BatchReceipt("other", 1, duplicate=False)
    assert futures["no id"].result() == BatchReceipt(None, 6, duplicate=False)
    for name in ("old changed", "new changed"):
        with pytest.raises(BatchConflict, match="another body"):
            futures[name].result()
    assert store.count("gpu_samples") == 2 + 4 + 1 + 6
    assert {b: n for b, (n, _) in ledger(store).items()} == {"old": 2, "new": 4, "other": 1}


def test_a_batch_duckdb_refuses_fails_alone(store: Store) -> None:
    """The group's insert fails; its batches are retried one by one, so only the bad one
    fails and the others are stored exactly once."""
    writer = committer(store, max_batches=3, max_wait_s=1.0)
    good1 = writer.submit({"gpu_samples": gpu_rows(3)}, batch_id="good1")
    bad = writer.submit({"gpu_samples": bad_utf8_rows()}, batch_id="bad")
    good2 = writer.submit({"container_samples": container_rows(4)}, batch_id="good2")
    assert writer.close(5)
    assert good1.result() == BatchReceipt("good1", 3, duplicate=False)
    assert good2.result() == BatchReceipt("good2", 4, duplicate=False)
    with pytest.raises(StoreError, match="nothing stored"):
        bad.result()
    assert writer.stats.fallbacks == 1
    assert set(ledger(store)) == {"good1", "good2"}
    assert store.count("gpu_samples") == 3 and store.count("container_samples") == 4


def test_a_batch_that_does_not_fit_its_schema_fails_alone(store: Store) -> None:
    writer = committer(store, max_batches=2, max_wait_s=1.0)
    typo = gpu_rows(1).append_column("fb_usd_bytes", pa.array([1]))
    bad = writer.submit({"gpu_samples": typo}, batch_id="typo")
    good = writer.submit({"gpu_samples": gpu_rows(2)}, batch_id="fine")
    assert writer.close(5)
    with pytest.raises(SchemaError, match="fb_usd_bytes"):
        bad.result()
    assert good.result().rows == 2
    assert writer.stats.fallbacks == 0 and writer.stats.groups == 1
    assert set(ledger(store)) == {"fine"}


def test_request_spans_are_stored_once_across_the_group(store: Store) -> None:
    def spans(*ids: str) -> pa.Table:
        n = len(ids)
        return pa.table(
            {
                "ts": [T0 + timedelta(seconds=i) for i in range(n)],
                "model": ["m"] * n,
                "trace_id": ["t"] * n,
                "span_id": list(ids),
            }
        )

    writer = committer(store, max_batches=2, max_wait_s=1.0)
    first = writer.submit({"requests": spans("s1", "s2")}, batch_id="r1")
    second = writer.submit({"requests": spans("s1", "s3")}, batch_id="r2")  # s1 sent again
    assert writer.close(5)
    assert writer.stats.groups == 1
    assert (first.result().rows, second.result().rows) == (2, 1)
    assert sorted(store.query("SELECT span_id FROM requests").column(0).to_pylist()) == [
        "s1",
        "s2",
        "s3",
    ]


def test_close_stores_what_is_queued_then_refuses(store: Store) -> None:
    writer = committer(store, max_wait_s=1.0)
    queued = writer.submit({"gpu_samples": gpu_rows(2)}, batch_id="q")
    assert writer.close(5)
    assert queued.result().rows == 2
    late = writer.submit({"gpu_samples": gpu_rows(2)}, batch_id="late")
    with pytest.raises(StoreError, match="closing"):
        late.result()
    assert set(ledger(store)) == {"q"}


def test_limits_split_the_queue_into_groups(store: Store) -> None:
    """max_rows bounds a group: 5 batches of 10 rows with max_rows 20 take three commits."""
    writer = committer(store, max_rows=20, max_wait_s=0.5)
    futures = [writer.submit({"gpu_samples": gpu_rows(10)}, batch_id=f"b{i}") for i in range(5)]
    assert writer.close(5)
    assert [f.result().rows for f in futures] == [10] * 5
    assert writer.stats.groups == 3
    assert len({at for _, at in ledger(store).values()}) == 3


def test_many_agents_replaying_lose_and_double_nothing(store: Store) -> None:
    """Eight threads send 40 batches each and resend every fifth one (an agent that timed
    out); every batch is stored exactly once and every resend is a duplicate."""
    writer = committer(store, max_batches=16, max_wait_s=0.002)
    results: list[tuple[str, Future[BatchReceipt]]] = []
    lock = threading.Lock()

    def agent(a: int) -> None:
        for b in range(40):
            tables = {"gpu_samples": gpu_rows(3, f"n{a}"), "container_samples": container_rows(5)}
            sends = 2 if b % 5 == 0 else 1
            for _ in range(sends):
                future = writer.submit(tables, batch_id=f"a{a}-{b}", body_sha256=f"{a}-{b}")
                with lock:
                    results.append((f"a{a}-{b}", future))
                future.result(10)

    threads = [threading.Thread(target=agent, args=(a,)) for a in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert writer.close(5)
    fresh = [f.result() for _, f in results if not f.result().duplicate]
    assert len(fresh) == 8 * 40
    assert sum(f.result().duplicate for _, f in results) == 8 * 8
    assert store.count("gpu_samples") == 8 * 40 * 3
    assert store.count("container_samples") == 8 * 40 * 5
    assert len(ledger(store)) == 8 * 40
    assert writer.stats.groups < 8 * 40  # batches did share commits


def test_a_batch_whose_request_went_away_is_not_stored_and_spoils_nothing(store: Store) -> None:
    """The route's await is cancelled when its client disconnects, which cancels the queued
    future: that batch was never answered, so it is dropped; its group commits as usual."""
    writer = committer(store, max_batches=2, max_wait_s=1.0)
    gone = writer.submit({"gpu_samples": gpu_rows(5)}, batch_id="gone")
    assert gone.cancel()
    kept = writer.submit({"gpu_samples": gpu_rows(2)}, batch_id="kept")
    assert kept.result(5) == BatchReceipt("kept", 2, duplicate=False)
    assert writer.close(5)
    assert set(ledger(store)) == {"kept"} and store.count("gpu_samples") == 2
