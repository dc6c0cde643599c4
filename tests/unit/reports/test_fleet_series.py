"""The ``fleet`` report's inventory series read from the versions equals the series read the
way it was before: one live cluster per bucket from the expanded ``pods`` / ``nodes`` views.

One seeded 50-minute history stored as changes (a full snapshot every 10 minutes): three
nodes of four GPUs (one NotReady for a while), pods that start, move and end, some naming
their assigned GPUs (HAMi's UUIDs, mapped to indices by GPU samples up to each bucket's
snapshot: node n0 is sampled only from minute 30, so its assigned GPUs are unknown before
and placed by the default rules; node n1's indices swap half-way, as after a reboot), and
a quiet stretch where nothing changes, then a change, then the earlier cluster again (so a
state seen before is answered from the cache). The reference is the old per-bucket loop,
written here against the views.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from functools import partial
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from sits_observe.analytics.fragmentation.fgd.cluster import ClusterState
from sits_observe.analytics.fragmentation.fgd.measure import fragmentation
from sits_observe.analytics.fragmentation.fgd.workload import TypicalPodSettings, typical_pods
from sits_observe.analytics.fragmentation.fgd_live import (
    DEVICES_SINCE_S,
    NODE_COLUMNS,
    POD_COLUMNS,
    InventoryTables,
    live_cluster,
    live_cluster_of,
)
from sits_observe.domain.tables import conform
from sits_observe.reports.inventory.fleet_series import _state_key, inventory_series
from sits_observe.reports.window import Window
from sits_observe.store import Store
from sits_observe.store.inventory import InventorySettings

T0 = datetime(2026, 11, 2, 8, 0, 0)
SNAPSHOTS = 100  # 30 s apart
QUIET = range(40, 70)  # snapshots where the inventory does not change
GPUS = 4


def _pods_at(rnd: random.Random, pods: dict[str, dict[str, Any]], k: int) -> None:
    if k in QUIET and k != QUIET.start:
        return
    if k == QUIET.stop:  # one change, undone at the next snapshot
        pods["blip"] = {**pods[next(iter(pods))], "pod_uid": "blip", "pod": "blip"}
        return
    pods.pop("blip", None)
    if k == QUIET.stop + 1:
        return
    for name in list(pods):
        if rnd.random() < 0.1:
            del pods[name]
        elif rnd.random() < 0.1:
            pods[name]["phase"] = "Running"
    for _ in range(rnd.randrange(3)):
        j = k * 10 + rnd.randrange(10)
        node = f"n{rnd.randrange(3)}"
        gpus = rnd.choice([0, 1, 1, 2])
        share = 1000 if gpus != 1 else rnd.choice([250, 500, 1000])
        assigned = rnd.sample(range(GPUS), gpus) if rnd.random() < 0.5 else []
        pods[f"p{j}"] = {
            "pod_uid": f"uid-{j}",
            "namespace": "ml",
            "pod": f"p{j}",
            "node": node,
            "phase": "Pending",
            "gpu_request": gpus,
            "gpu_milli": share,
            "gpu_uuids": ",".join(f"GPU-{node}-{u}" for u in assigned) or None,
            "cpu_request_milli": rnd.choice([1000, 4000]),
        }


def _index(node: str, uuid: int, k: int) -> int:
    return GPUS - 1 - uuid if node == "n1" and k >= SNAPSHOTS // 2 else uuid


def _history(rnd: random.Random) -> dict[str, list[dict[str, Any]]]:
    pods: dict[str, dict[str, Any]] = {}
    rows: dict[str, list[dict[str, Any]]] = {"pods": [], "nodes": [], "gpu_samples": []}
    for k in range(SNAPSHOTS):
        t = T0 + timedelta(seconds=30 * k)
        _pods_at(rnd, pods, k)
        rows["pods"] += [{"ts": t, **p} for p in pods.values()]
        for i in range(3):
            node = f"n{i}"
            ready = not (node == "n2" and 20 <= k < 30)
            rows["nodes"].append(
                {"ts": t, "node": node, "gpu_allocatable": GPUS, "gpu_product": "H100",
                 "cpu_allocatable_milli": 16000, "ready": ready}
            )  # fmt: skip
            if k % 4 == 0 and not (node == "n0" and k < 60):  # n0: sampled late
                rows["gpu_samples"] += [
                    {"ts": t, "node": node, "gpu_uuid": f"GPU-{node}-{u}",
                     "gpu_index": _index(node, u, k), "gpu_util_ratio": 0.5}
                    for u in range(GPUS)
                ]  # fmt: skip
    return rows


@pytest.fixture(scope="module")
def store() -> Store:
    rows = _history(random.Random(7))
    store = Store.open(":memory:", inventory=InventorySettings(full_snapshot_every_s=600))
    store.append("gpu_samples", conform("gpu_samples", pa.Table.from_pylist(rows["gpu_samples"])))
    for k in range(0, SNAPSHOTS, 5):  # five snapshots per batch
        t = [T0 + timedelta(seconds=30 * i) for i in range(k, k + 5)]
        batch = {
            name: conform(name, pa.Table.from_pylist([r for r in rows[name] if r["ts"] in t]))
            for name in ("pods", "nodes")
        }
        store.append_batch(batch)
    assert store.scalar("SELECT count(*) FROM pod_versions") < store.count("pods") / 4
    return store


def _device_rows(store: Store, since: datetime, until: datetime) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = store.query(
        "SELECT node, gpu_uuid AS uuid, arg_max(gpu_index, ts) AS idx, max(ts) AS seen_at "
        "FROM gpu_samples WHERE ts >= ? AND ts < ? AND mig_instance_id IS NULL "
        "AND node IS NOT NULL AND gpu_uuid IS NOT NULL AND gpu_index IS NOT NULL "
        "GROUP BY node, gpu_uuid ORDER BY node, seen_at DESC, uuid",
        [since, until],
    ).to_pylist()
    return rows


def _reference(store: Store, window: Window, bin_s: int, workload: Any) -> list[dict[str, Any]]:
    """The series as it was computed before: per bucket of the ``nodes`` view, the live
    cluster at its last snapshot from the views, and FGD on it."""
    since = window.since or datetime(1970, 1, 1)
    buckets = store.query(
        "SELECT time_bucket(to_microseconds(?::BIGINT), ts) AS start_at, max(ts) AS at "
        "FROM nodes WHERE ts < ? AND ts >= ? GROUP BY start_at ORDER BY start_at",
        [bin_s * 1_000_000, window.until, since],
    ).to_pylist()
    out = []
    for b in buckets:
        at = b["at"]
        pods_at = store.scalar("SELECT max(ts) FROM pods WHERE ts <= ? AND ts >= ?", [at, since])
        if pods_at is None:
            continue
        cols = ", ".join(NODE_COLUMNS)
        nodes = store.query(f"SELECT {cols} FROM nodes WHERE ts = ?", [at])
        pods = store.query(f"SELECT {', '.join(POD_COLUMNS)} FROM pods WHERE ts = ?", [pods_at])
        lo = max(since, at - timedelta(seconds=DEVICES_SINCE_S))
        hi = at + timedelta(microseconds=1)
        live = live_cluster_of(
            InventoryTables(nodes, at, pods, pods_at),
            devices=partial(_device_rows, store, lo, hi),
        )
        total = live.state.total_gpu_milli
        allocated = total - live.state.idle_gpu_milli
        out.append(
            {
                "start_at": b["start_at"],
                "total_gpus": total / 1000,
                "allocated_gpus": allocated / 1000,
                "alloc_ratio": allocated / total if total else None,
                "frag_ratio": fragmentation(live.state, workload).frag_ratio,
            }
        )
    return out


END = T0 + timedelta(seconds=30 * SNAPSHOTS)
WINDOWS = {
    "whole": Window(None, END, "given"),
    "ending mid-way": Window(None, T0 + timedelta(minutes=22, seconds=10), "given"),
    "starting mid-way": Window(T0 + timedelta(minutes=17, seconds=45), END, "given"),
}


@pytest.mark.parametrize("bin_s", [30, 60, 300])
@pytest.mark.parametrize("window_name", list(WINDOWS))
def test_series_from_versions_equals_the_per_bucket_views(
    store: Store, window_name: str, bin_s: int
) -> None:
    window = WINDOWS[window_name]
    live = live_cluster(store, since_s=None, since=window.since, until=window.until)
    workload = typical_pods(live.shapes, TypicalPodSettings())
    expected = _reference(store, window, bin_s, workload)
    got = inventory_series(store, window, bin_s, workload).to_pylist()
    assert got == expected
    assert len({r["frag_ratio"] for r in got}) > 3  # the placement moves along the chart


def test_series_without_a_workload_has_allocation_and_no_fragmentation(store: Store) -> None:
    got = inventory_series(store, WINDOWS["whole"], 300, None).to_pylist()
    assert got and all(r["frag_ratio"] is None for r in got)
    assert all(0 < r["allocated_gpus"] <= r["total_gpus"] for r in got)


def _state() -> ClusterState:
    state = ClusterState.empty(["a", "b"], [8000, 8000], [2, 2], ["H100", "A10"])
    state.gpu_free_milli[0, 1] = 500
    return state


def test_state_key_changes_with_anything_fgd_reads() -> None:
    base = _state()
    assert _state_key(base) == _state_key(_state())
    changed = []
    for name in ("gpu_free_milli", "cpu_free_milli"):
        other = _state()
        array = getattr(other, name)
        array.flat[0] = np.int64(array.flat[0]) - 1
        changed.append(other)
    renamed = ClusterState.empty(["a", "c"], [8000, 8000], [2, 2], ["H100", "A10"])
    renamed.gpu_free_milli[0, 1] = 500
    models = ClusterState.empty(["a", "b"], [8000, 8000], [2, 2], ["A10", "H100"])
    models.gpu_free_milli[0, 1] = 500
    keys = {_state_key(s) for s in (base, *changed, renamed, models)}
    assert len(keys) == 5
