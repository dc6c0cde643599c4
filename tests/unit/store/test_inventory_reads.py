"""The version reads of :mod:`sits_observe.store.inventory_reads` give the rows the ``pods`` /
``nodes`` views give, on histories written through the store's own write path.

Each history (seeded): 60 snapshots 30 s apart of a churning cluster (pods start, change
phase or node, end; some without a UID; two identical rows of one pod in some snapshots;
nodes going NotReady), appended one to four snapshots at a time, a full snapshot every
5 minutes, some snapshots written late (a backfill) and, in one history, retention that
deletes the first quarter. Every stored snapshot time, and windows cut at random, are then
read both ways.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from typing import Any

import pyarrow as pa
import pytest

from sits_observe.domain.tables import conform
from sits_observe.store import RetentionSettings, Store, enforce_retention
from sits_observe.store.inventory import InventorySettings
from sits_observe.store.inventory_reads import bucket_snapshots, latest_rows, rows_at

T0 = datetime(2026, 11, 2, 8, 0, 0)
SNAPSHOTS = 60
POD_COLUMNS = ("pod_uid", "namespace", "pod", "node", "phase", "gpu_request", "gpu_milli")
NODE_COLUMNS = ("node", "gpu_allocatable", "ready")
POD_KEY = "coalesce(pod_uid, namespace || '/' || pod)"


def _history(rnd: random.Random) -> list[dict[str, list[dict[str, Any]]]]:
    pods: dict[str, dict[str, Any]] = {}
    out: list[dict[str, list[dict[str, Any]]]] = []
    for k in range(SNAPSHOTS):
        t = T0 + timedelta(seconds=30 * k)
        for name in list(pods):
            if rnd.random() < 0.08:
                del pods[name]
            elif rnd.random() < 0.15:
                pods[name]["phase"] = rnd.choice(["Running", "Succeeded", "Failed"])
            elif rnd.random() < 0.05:
                pods[name]["node"] = f"n{rnd.randrange(3)}"
        for _ in range(rnd.randrange(3)):
            j = len(out) * 10 + rnd.randrange(10)
            pods[f"p{j}"] = {
                "pod_uid": None if rnd.random() < 0.2 else f"uid-{j}",
                "namespace": "ml",
                "pod": f"p{j}",
                "node": None if rnd.random() < 0.2 else f"n{rnd.randrange(3)}",
                "phase": "Pending",
                "gpu_request": rnd.randrange(3),
                "gpu_milli": rnd.choice([None, 500, 1000]),
            }
        rows = [{"ts": t, **p} for p in pods.values()]
        if rows and rnd.random() < 0.2:
            rows.append(dict(rows[0]))  # an identical copy in one snapshot
        nodes = [
            {"ts": t, "node": f"n{i}", "gpu_allocatable": 8, "ready": rnd.random() > 0.1}
            for i in range(3)
        ]
        out.append({"pods": rows or [{"ts": t, "pod": "idle", "namespace": "ml"}], "nodes": nodes})
    return out


def _store(seed: int, *, retention: bool) -> Store:
    rnd = random.Random(seed)
    history = _history(rnd)
    late = set(rnd.sample(range(5, SNAPSHOTS - 1), 3))  # written after the next ones
    store = Store.open(":memory:", inventory=InventorySettings(full_snapshot_every_s=300))
    k = 0
    while k < SNAPSHOTS:
        n = rnd.randint(1, 4)
        batch = [history[i] for i in range(k, min(k + n, SNAPSHOTS)) if i not in late]
        if batch:
            store.append_batch({name: _table(name, batch) for name in ("pods", "nodes")})
        k += n
    for i in sorted(late):
        store.append_batch({name: _table(name, [history[i]]) for name in ("pods", "nodes")})
    if retention:
        now = T0 + timedelta(seconds=30 * SNAPSHOTS * 1.25)
        enforce_retention(store, now, RetentionSettings(other_retention_s=30 * SNAPSHOTS))
    return store


def _table(name: str, snapshots: list[dict[str, list[dict[str, Any]]]]) -> pa.Table:
    return conform(name, pa.Table.from_pylist([r for s in snapshots for r in s[name]]))


def _rows(table: pa.Table) -> list[tuple[Any, ...]]:
    return sorted((tuple(r.values()) for r in table.to_pylist()), key=repr)


CASES = [(seed, False) for seed in (1, 2, 3)] + [(4, True)]


@pytest.fixture(scope="module", params=CASES, ids=lambda c: f"seed{c[0]}{'-retention' * c[1]}")
def store(request: pytest.FixtureRequest) -> Store:
    seed, retention = request.param
    return _store(seed, retention=retention)


def _times(store: Store, kind: str) -> list[datetime]:
    view = "pod_snapshots" if kind == "pods" else "node_snapshots"
    return [r["ts"] for r in store.query(f"SELECT ts FROM {view} ORDER BY ts").to_pylist()]


def test_the_histories_are_stored_as_changes(store: Store) -> None:
    # Otherwise the comparisons below would compare full snapshots with themselves.
    assert store.scalar("SELECT count(*) FROM pod_versions") < store.count("pods") / 2
    assert len(_times(store, "pods")) >= SNAPSHOTS * 0.7


@pytest.mark.parametrize(("kind", "columns"), [("pods", POD_COLUMNS), ("nodes", NODE_COLUMNS)])
def test_rows_at_each_snapshot_are_the_views_rows(
    store: Store, kind: str, columns: tuple[str, ...]
) -> None:
    for at in _times(store, kind):
        expected = store.query(f"SELECT {', '.join(columns)} FROM {kind} WHERE ts = ?", [at])
        assert _rows(rows_at(store, kind, at, columns)) == _rows(expected), at


def test_rows_at_a_time_with_no_snapshot_is_empty(store: Store) -> None:
    at = _times(store, "pods")[-1] - timedelta(seconds=1)
    assert rows_at(store, "pods", at, POD_COLUMNS).num_rows == 0


def _windows(store: Store) -> list[tuple[datetime | None, datetime | None]]:
    times = _times(store, "pods")
    rnd = random.Random(len(times))
    cuts = [(None, None), (None, times[len(times) // 2]), (times[3], None)]
    for _ in range(8):
        a, b = sorted(rnd.sample(times, 2))
        cuts.append((a + timedelta(seconds=rnd.choice([-1, 0, 1])), b))
    return cuts


def test_latest_rows_are_each_pods_latest_view_row(store: Store) -> None:
    cols = ", ".join(POD_COLUMNS)
    for since, until in _windows(store):
        # Ties (two rows of one pod in one snapshot) are identical copies here, so the
        # latest row of each pod is one row whichever copy is kept.
        expected = store.query(
            f"SELECT {cols} FROM pods WHERE (?::TIMESTAMP IS NULL OR ts >= ?) "
            "AND (?::TIMESTAMP IS NULL OR ts < ?) "
            f"QUALIFY row_number() OVER (PARTITION BY {POD_KEY} ORDER BY ts DESC) = 1",
            [since, since, until, until],
        )
        got = latest_rows(store, "pods", POD_COLUMNS, key=POD_KEY, since=since, until=until)
        assert _rows(got) == _rows(expected), (since, until)
        assert got.num_rows > 0 or expected.num_rows == 0


@pytest.mark.parametrize("bin_s", [30, 90, 300])
def test_bucket_snapshots_are_the_views_last_snapshots(store: Store, bin_s: int) -> None:
    micros = bin_s * 1_000_000
    for since, until in _windows(store):
        end = until or datetime(2100, 1, 1)
        expected = store.query(
            "WITH n AS (SELECT time_bucket(to_microseconds(?::BIGINT), ts) AS start_at, "
            "max(ts) AS nodes_at FROM nodes WHERE ts < ? AND (?::TIMESTAMP IS NULL OR ts >= ?) "
            "GROUP BY start_at) "
            "SELECT start_at, nodes_at, (SELECT max(ts) FROM pods WHERE ts <= n.nodes_at "
            "AND (?::TIMESTAMP IS NULL OR ts >= ?)) AS pods_at FROM n ORDER BY start_at",
            [micros, end, since, since, since, since],
        )
        got = bucket_snapshots(store, micros, since, end)
        assert got.to_pylist() == expected.to_pylist(), (since, until)
