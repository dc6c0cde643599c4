"""Inventory stored as changes (schema version 6): the ``pods`` / ``nodes`` views give exactly
the rows full snapshots would have, however the snapshots arrive.

The reference is what the store did before version 6: a plain table the same rows are
appended to (one DuckDB connection, no sits code). Histories are generated with churn,
changed fields, duplicate rows, NULLs, backfills and more rows for an existing time, and
written one snapshot per append, several per append and through the group committer.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta

import duckdb
import pyarrow as pa
import pytest

from sits_observe.domain.tables import PODS, conform
from sits_observe.errors import SchemaError
from sits_observe.store import RetentionSettings, Store, enforce_retention
from sits_observe.store.group_commit import GroupCommitter
from sits_observe.store.inventory import InventorySettings

T0 = datetime(2026, 11, 2, 8, 0, 0)
STEP = timedelta(seconds=30)


def snapshot(i: int, pods: list[dict[str, object]]) -> pa.Table:
    """The rows of snapshot ``i`` (a copy of each pod with its ts)."""
    rows = [{**p, "ts": T0 + i * STEP} for p in pods]
    return conform("pods", pa.Table.from_pylist(rows, schema=PODS.schema))


def history(seed: int, snapshots: int, size: int = 30) -> list[pa.Table]:
    """A pod inventory over time: pods end and start, change phase, node or request; a few
    rows are exact duplicates; some fields are NULL."""
    rnd = random.Random(seed)
    serial = 0

    def new_pod() -> dict[str, object]:
        nonlocal serial
        serial += 1
        return {
            "pod_uid": f"u{serial}" if rnd.random() > 0.1 else None,
            "namespace": rnd.choice(["ml", "web", None]),
            "pod": f"p{serial}",
            "node": rnd.choice(["n1", "n2", None]),
            "phase": "Pending",
            "gpu_request": rnd.choice([0, 1, 2, None]),
            "containers_json": '[{"name":"c"}]',
        }

    pods = [new_pod() for _ in range(size)]
    out = []
    for i in range(snapshots):
        rows = list(pods)
        if rnd.random() < 0.3:
            rows.append(dict(rnd.choice(pods)))  # the same row twice in one snapshot
        out.append(snapshot(i, rows))
        for k, pod in enumerate(pods):
            roll = rnd.random()
            if roll < 0.05:
                pods[k] = new_pod()
            elif roll < 0.15:
                pods[k] = {**pod, "phase": rnd.choice(["Running", "Failed"])}
            elif roll < 0.18:
                pods[k] = {**pod, "node": rnd.choice(["n1", "n2", "n3"])}
        if rnd.random() < 0.2 and pods:
            pods.pop(rnd.randrange(len(pods)))
        if rnd.random() < 0.2:
            pods.append(new_pod())
    return out


def reference(tables: list[pa.Table]) -> duckdb.DuckDBPyConnection:
    """The rows appended to a plain table, as every version before 6 stored them."""
    con = duckdb.connect()
    con.register("_first", tables[0])
    con.execute("CREATE TABLE pods AS SELECT * FROM _first WHERE false")
    for t in tables:
        con.register("_t", t)
        con.execute("INSERT INTO pods SELECT * FROM _t")
    return con


#: Reads of the kind the analyses make, each compared in full.
READS = (
    "SELECT * FROM pods ORDER BY ALL",
    "SELECT max(ts) FROM pods",
    "SELECT ts, count(*) FROM pods GROUP BY ts ORDER BY ts",
    "SELECT namespace, pod, node FROM pods WHERE ts = (SELECT max(ts) FROM pods) ORDER BY ALL",
    "SELECT pod_uid, min(ts), max(ts), count(*) FROM pods GROUP BY pod_uid ORDER BY ALL",
)


def assert_same(store: Store, ref: duckdb.DuckDBPyConnection) -> None:
    for sql in READS:
        assert store.query(sql).to_pylist() == ref.sql(sql).to_arrow_table().to_pylist(), sql


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("full_every_s", [90, 3600])
def test_one_snapshot_per_append_reads_as_full_snapshots(seed: int, full_every_s: float) -> None:
    tables = history(seed, 40)
    store = Store.open(":memory:", inventory=InventorySettings(full_snapshot_every_s=full_every_s))
    for t in tables:
        store.append("pods", t)
    assert_same(store, reference(tables))
    # Stored as changes: fewer version rows than snapshot rows.
    stored = store.scalar("SELECT count(*) FROM pod_versions")
    assert stored < store.count("pods") / 2


@pytest.mark.parametrize("seed", range(2))
def test_batches_of_snapshots_backfills_and_more_rows_for_a_time(seed: int) -> None:
    rnd = random.Random(100 + seed)
    tables = history(seed, 48)
    store = Store.open(":memory:", inventory=InventorySettings(full_snapshot_every_s=300))
    order = list(range(len(tables)))
    # Mostly in order, several snapshots per append, a few late ones.
    late = set(rnd.sample(order[5:], 5))
    chunks: list[list[int]] = []
    current: list[int] = []
    for i in order:
        if i in late:
            continue
        current.append(i)
        if rnd.random() < 0.3:
            chunks.append(current)
            current = []
    chunks += [current, sorted(late)]
    for chunk in chunks:
        if not chunk:
            continue
        parts = [tables[i] for i in chunk]
        # Split one snapshot in two appends: more rows for a time already stored.
        last = parts[-1]
        half = last.num_rows // 2
        store.append("pods", pa.concat_tables([*parts[:-1], last.slice(0, half)]))
        store.append("pods", last.slice(half))
    assert_same(store, reference(tables))


@pytest.mark.parametrize("full_every_s", [60, 3600])
def test_the_rest_of_the_latest_snapshot_and_the_next_ones_in_one_append(
    full_every_s: float,
) -> None:
    tables = history(5, 12)
    store = Store.open(":memory:", inventory=InventorySettings(full_snapshot_every_s=full_every_s))
    store.append("pods", tables[0])
    for i in range(1, len(tables) - 1, 2):
        half = tables[i].num_rows // 2
        store.append("pods", tables[i].slice(0, half))
        # The rest of snapshot i with snapshot i + 1 (one new time: the live path), and with
        # i + 1 and i + 2 at the end (several new times: the batch path).
        rest = [tables[i].slice(half), tables[i + 1]]
        if i + 2 == len(tables) - 1:
            rest.append(tables[i + 2])
        store.append("pods", pa.concat_tables(rest))
    assert_same(store, reference(tables))


def test_group_commit_stores_concurrent_snapshots_as_one_by_one() -> None:
    tables = history(7, 30)
    store = Store.open(":memory:", inventory=InventorySettings(full_snapshot_every_s=120))
    committer = GroupCommitter(store)
    try:
        futures = [committer.submit({"pods": t}, batch_id=f"b{i}") for i, t in enumerate(tables)]
        receipts = [f.result(timeout=30) for f in futures]
        again = committer.append_batch({"pods": tables[3]}, batch_id="b3")
    finally:
        committer.close()
    assert [r.rows for r in receipts] == [t.num_rows for t in tables]
    assert again.duplicate
    assert_same(store, reference(tables))


def test_nodes_change_only_when_a_node_does() -> None:
    base = [
        {"node": f"n{k}", "gpu_allocatable": 8, "ready": True, "labels_json": "{}"}
        for k in range(20)
    ]
    store = Store.open(":memory:", inventory=InventorySettings(full_snapshot_every_s=3600))
    rows = []
    for i in range(100):
        nodes = [dict(n) for n in base]
        if 40 <= i < 60:
            nodes[3]["ready"] = False  # one node not ready for 20 snapshots
        t = pa.Table.from_pylist([{**n, "ts": T0 + i * STEP} for n in nodes])
        store.append("nodes", t)
        rows += t.to_pylist()
    # 20 versions, plus node 3 closed at 40 and reopened at 60 (two more).
    assert store.scalar("SELECT count(*) FROM node_versions") == 22
    got = store.query("SELECT * FROM nodes ORDER BY ts, node").to_pylist()
    assert [(r["ts"], r["node"], r["ready"]) for r in got] == sorted(
        (r["ts"], r["node"], r["ready"]) for r in rows
    )


def test_a_full_snapshot_starts_every_version_again() -> None:
    pods: list[dict[str, object]] = [{"pod_uid": f"u{k}", "pod": f"p{k}"} for k in range(10)]
    store = Store.open(":memory:", inventory=InventorySettings(full_snapshot_every_s=300))
    for i in range(40):  # 20 minutes at 30 s: epochs begin at 0, 5, 10 and 15 minutes
        store.append("pods", snapshot(i, pods))
    epochs = store.query(
        "SELECT DISTINCT epoch_at FROM inventory_snapshots WHERE kind = 'pods' ORDER BY 1"
    ).column("epoch_at")
    assert epochs.to_pylist() == [T0 + timedelta(minutes=m) for m in (0, 5, 10, 15)]
    assert store.scalar("SELECT count(*) FROM pod_versions") == 40  # 10 pods x 4 epochs
    assert store.scalar("SELECT count(*) FROM pod_versions WHERE valid_to IS NULL") == 10
    assert store.count("pods") == 400


def test_retention_keeps_the_answers_after_the_cutoff() -> None:
    tables = history(11, 60)
    store = Store.open(":memory:", inventory=InventorySettings(full_snapshot_every_s=300))
    for t in tables:
        store.append("pods", t)
    ref = reference(tables)
    now = T0 + 60 * STEP
    cutoff = now - timedelta(seconds=900)
    expected_deleted = ref.execute("SELECT count(*) FROM pods WHERE ts < ?", [cutoff]).fetchall()
    report = enforce_retention(store, now, RetentionSettings(other_retention_s=900))
    ref.execute("DELETE FROM pods WHERE ts < ?", [cutoff])
    assert report.other_rows_deleted == expected_deleted[0][0]
    assert_same(store, ref)
    # Nothing kept that no snapshot reads.
    orphans = store.scalar(
        "SELECT count(*) FROM pod_versions v WHERE NOT EXISTS (SELECT 1 FROM "
        "inventory_snapshots s WHERE s.kind = 'pods' AND s.epoch_at = v.epoch_at "
        "AND v.valid_from <= s.ts AND s.ts < coalesce(v.valid_to, 'infinity'::TIMESTAMP))"
    )
    assert orphans == 0
    # Appending after retention continues the open versions.
    more = history(11, 70)[60:]
    for t in more:
        store.append("pods", t)
        ref.register("_t", t)
        ref.execute("INSERT INTO pods SELECT * FROM _t")
    assert_same(store, ref)


def test_rows_without_a_time_are_refused_and_nothing_is_stored() -> None:
    store = Store.open(":memory:")
    bad = pa.table({"ts": pa.array([T0, None], pa.timestamp("us")), "pod": ["a", "b"]})
    with pytest.raises(SchemaError, match="without ts"):
        store.append_batch({"pods": bad, "nodes": pa.table({"ts": [T0], "node": ["n1"]})})
    assert store.count("pods") == 0
    assert store.count("nodes") == 0
    committer = GroupCommitter(store)
    try:
        with pytest.raises(SchemaError, match="without ts"):
            committer.append_batch({"pods": conform("pods", bad)})
    finally:
        committer.close()
