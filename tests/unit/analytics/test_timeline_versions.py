"""``load_pods`` reads each pod's latest row from the versions: the same rows as the ``pods``
view's "latest row before ``until``, created in ``[since, until)``" over the expanded history.

Random inventory histories are stored through ``Store.append`` (pods stored as versions, with
several epoch lengths): pods appear, change phase and condition times, disappear and come
back, some with a NULL creation time or one that changes between their rows, some with no
UID; a snapshot arrives late (a backfill), more rows join the latest snapshot, and retention
deletes the oldest snapshots and versions. Each window (open at either end, ending between
snapshots, at one, before the first, after the last) must give the view's rows exactly.

``ready_start_s`` (the exporter's pod start per pod, vectorised) gives the values of the
``pod_timelines`` loop on the same rows: missing and negative gaps included. And the
fingerprint of FGD's workload M, read from the versions as well, is that of the view's rows.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pytest

from sits_observe.analytics.fragmentation.fgd_live import POD_COLUMNS as FGD_POD_COLUMNS
from sits_observe.analytics.inventory_spans import workload_fingerprint
from sits_observe.analytics.row_changes import Fingerprint, query_fingerprint
from sits_observe.analytics.timeline import POD_COLUMNS, load_pods, pod_timelines, ready_start_s
from sits_observe.domain.tables import conform
from sits_observe.store import Store
from sits_observe.store.inventory import InventorySettings
from sits_observe.store.retention import RetentionSettings, enforce_retention

T0 = datetime(2026, 11, 3, 6, 0)

#: The view's answer, as ``load_pods`` read it before it read the versions.
VIEW_SQL = (
    f"SELECT ts, {', '.join(POD_COLUMNS)} FROM pods WHERE pod_uid IS NOT NULL "
    "AND (?::TIMESTAMP IS NULL OR ts < ?) "
    "QUALIFY row_number() OVER (PARTITION BY pod_uid ORDER BY ts DESC) = 1 "
    "AND (?::TIMESTAMP IS NULL OR created_at >= ?) "
    "AND (?::TIMESTAMP IS NULL OR created_at < ?)"
)


def from_view(store: Store, since: datetime | None, until: datetime | None) -> pl.DataFrame:
    return pl.DataFrame(store.query(VIEW_SQL, [until, until, since, since, until, until]))


def rows_of(frame: pl.DataFrame) -> list[tuple[Any, ...]]:
    return sorted(frame.select("ts", *POD_COLUMNS).rows(), key=repr)


def _pod(rng: random.Random, uid: int, at: datetime, state: dict[int, dict[str, Any]]) -> Any:
    """The row of pod ``uid`` at ``at``: it keeps its row for a while, then a field changes."""
    row = state.get(uid)
    if row is None or rng.random() < 0.15:
        created = at - timedelta(seconds=rng.randrange(0, 3000))
        if row is not None and rng.random() < 0.5:
            created = row["created_at"] or created  # mostly the same pod, a condition moved
        row = {
            "pod_uid": None if uid % 17 == 16 else f"u{uid}",
            "namespace": f"ns-{uid % 4}",
            "pod": f"p{uid}",
            "workload": f"w{uid % 3}",
            "node": f"node-{uid % 5}",
            "phase": rng.choice(["Pending", "Running", "Running", "Succeeded"]),
            "created_at": None if uid % 11 == 10 else created,
            "scheduled_at": created + timedelta(seconds=rng.randrange(0, 5)),
            "initialized_at": created + timedelta(seconds=rng.randrange(2, 9)),
            "containers_ready_at": created + timedelta(seconds=rng.randrange(5, 60)),
            "ready_at": None if rng.random() < 0.1 else created + timedelta(seconds=70),
        }
        state[uid] = row
    return {"ts": at} | row


def _append(store: Store, rows: list[dict[str, Any]]) -> None:
    store.append("pods", conform("pods", pa.Table.from_pylist(rows)))


def history(store: Store, seed: int) -> list[datetime]:
    """A random history; returns its snapshot times."""
    rng = random.Random(seed)
    state: dict[int, dict[str, Any]] = {}
    times: list[datetime] = []
    at = T0
    for k in range(40):
        at += timedelta(seconds=rng.choice([30, 30, 30, 45, 600]))
        alive = [u for u in range(30) if rng.random() < (0.9 if u < 12 else 0.4)]
        if k == 25:  # a snapshot that arrives late, between two stored ones
            late = times[-3] + timedelta(seconds=7)
            _append(store, [_pod(rng, u, late, state) for u in alive])
            times.append(late)
        _append(store, [_pod(rng, u, at, state) for u in alive])
        times.append(at)
        if k == 30:  # more rows of the latest snapshot
            _append(store, [_pod(rng, u, at, state) for u in range(30, 33)])
    return sorted(times)


@pytest.mark.parametrize("epoch_s", [3600.0, 120.0])
@pytest.mark.parametrize("seed", range(4))
def test_load_pods_gives_the_views_latest_rows(tmp_path: Path, seed: int, epoch_s: float) -> None:
    settings = InventorySettings(full_snapshot_every_s=epoch_s)
    with Store.open(tmp_path / "p.duckdb", inventory=settings) as store:
        times = history(store, seed)
        rng = random.Random(seed)
        windows: list[tuple[datetime | None, datetime | None]] = [(None, None)]
        for _ in range(12):
            end = rng.choice(times) + timedelta(seconds=rng.choice([-1, 0, 1, 20]))
            start = end - timedelta(seconds=rng.choice([60, 600, 3600]))
            windows += [(start, end), (None, end), (start, None)]
        windows += [(None, times[0]), (None, times[-1] + timedelta(days=1))]
        checked = 0
        for since, until in windows:
            expected = rows_of(from_view(store, since, until))
            assert rows_of(load_pods(store, since=since, until=until)) == expected, (since, until)
            checked += len(expected) > 0
        assert checked > len(windows) // 2  # most windows hold pods

        # Retention deletes the oldest snapshots; versions that outlive them stay readable.
        enforce_retention(
            store,
            times[20] + timedelta(days=3),
            RetentionSettings(other_retention_s=3 * 86400),
        )
        assert store.scalar("SELECT min(ts) FROM pod_snapshots") == times[20]
        for since, until in windows:
            expected = rows_of(from_view(store, since, until))
            assert rows_of(load_pods(store, since=since, until=until)) == expected, (since, until)


def from_timelines(frame: pl.DataFrame) -> list[tuple[str | None, float]]:
    """What the exporter computed before: the loop over ``pod_timelines``."""
    out = []
    for t in pod_timelines(frame):
        gaps = (t.init_s, t.containers_s, t.readiness_s)
        if t.anomaly is None and all(g is not None for g in gaps):
            out.append((t.namespace, sum(g for g in gaps if g is not None)))
    return sorted(out, key=repr)


def _stamps(rng: random.Random, created: datetime) -> list[datetime | None]:
    """Scheduled, initialised, containers ready, ready: each after the one before, a few
    before it (a restart's negative gap), a few missing."""
    out: list[datetime | None] = []
    at = created
    for _ in range(4):
        at += timedelta(microseconds=rng.randrange(-300_000, 30_000_000))
        out.append(None if rng.random() < 0.07 else at)
    return out


@pytest.mark.parametrize("seed", range(5))
def test_ready_start_s_gives_the_timelines_values(seed: int) -> None:
    rng = random.Random(seed)
    rows = []
    for i in range(400):
        created = T0 + timedelta(seconds=rng.randrange(0, 3600))
        scheduled, initialized, containers_ready, ready = _stamps(rng, created)
        rows.append(
            {
                "ts": created + timedelta(minutes=5),
                "pod_uid": f"u{i}",
                "namespace": rng.choice(["a", "b", "", None]),
                "pod": f"p{i}",
                "workload": "w",
                "node": "n",
                "phase": "Running",
                "created_at": None if rng.random() < 0.1 else created,
                "scheduled_at": scheduled,
                "initialized_at": initialized,
                "containers_ready_at": containers_ready,
                "ready_at": ready,
            }
        )
    frame = pl.DataFrame(rows, schema_overrides={"namespace": pl.String})
    expected = from_timelines(frame)
    assert 100 < len(expected) < 400  # some pods ready, some not, some with an anomaly
    assert sorted(ready_start_s(frame).rows(), key=repr) == expected
    assert ready_start_s(frame.head(0)).rows() == []


def test_ready_start_s_of_stored_pods(tmp_path: Path) -> None:
    with Store.open(tmp_path / "p.duckdb") as store:
        times = history(store, 9)
        frame = load_pods(store, since=times[10], until=times[-1])
        assert frame.height > 0
        assert sorted(ready_start_s(frame).rows(), key=repr) == from_timelines(frame)


#: FGD's workload M as the view gives it (``fgd_live`` before it read versions).
WORKLOAD_SQL = (
    f"SELECT {', '.join(FGD_POD_COLUMNS)} FROM pods WHERE (?::TIMESTAMP IS NULL OR ts >= ?) "
    "AND ts <= ? QUALIFY row_number() OVER ("
    "PARTITION BY coalesce(pod_uid, namespace || '/' || pod) ORDER BY ts DESC) = 1"
)


@pytest.mark.parametrize("seed", range(3))
def test_the_workload_fingerprint_is_that_of_the_views_rows(tmp_path: Path, seed: int) -> None:
    """The exporter declares FGD's workload M by the fingerprint of its rows, read from the
    versions: equal to the fingerprint of the view's rows for every window, and different
    whenever those rows differ."""
    settings = InventorySettings(full_snapshot_every_s=300.0)
    with Store.open(tmp_path / "w.duckdb", inventory=settings) as store:
        times = history(store, seed)
        rng = random.Random(seed)
        seen: dict[Fingerprint, list[tuple[Any, ...]]] = {}
        for retained in (False, True):
            if retained:
                enforce_retention(
                    store,
                    times[15] + timedelta(days=3),
                    RetentionSettings(other_retention_s=3 * 86400),
                )
            for _ in range(15):
                at = rng.choice(times[16:])
                since = rng.choice([None, at - timedelta(seconds=rng.choice([30, 90, 900]))])
                params = [since, since, at]
                expected = query_fingerprint(store, WORKLOAD_SQL, params)
                got = workload_fingerprint(store, at, since, FGD_POD_COLUMNS)
                assert got == expected, (at, since)
                rows = sorted(store.query(WORKLOAD_SQL, params).to_pylist(), key=repr)
                assert seen.setdefault(got, rows) == rows  # one fingerprint, one row set
        assert len(seen) > 5
