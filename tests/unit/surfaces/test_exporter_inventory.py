"""The inventory signals (FGD, pod start) declare the rows they read by content: an
unchanged inventory, or a new snapshot that repeats every row, keeps their text, and every
change of the rows they read (rows added to the latest snapshot, a version closed, a node
changed, a pod leaving pod start's creation window or FGD's workload window as time moves)
rebuilds them to the text a collector with no past computes on the same DuckDB file at the
same time.

``pods`` / ``nodes`` are views over versions and snapshot times (store/inventory.py); the
store runs with hourly full snapshots and with a full snapshot every minute, so epochs
begin inside the sequence too.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from sits_observe.domain.tables import conform
from sits_observe.store import Store
from sits_observe.store.inventory import InventorySettings
from sits_observe.surfaces.service.exporter.exporter import DerivedSignals, ExporterSettings
from sits_observe.surfaces.service.exporter.registry import REGISTRY

T0 = datetime(2026, 11, 1, 12, 0)
INVENTORY = ("fragmentation", "pod_start")


class Clock:
    def __init__(self) -> None:
        self.at = T0
        self.mono_s = 1000.0

    def now(self) -> datetime:
        return self.at

    def monotonic(self) -> float:
        return self.mono_s

    def advance(self, seconds: float) -> None:
        self.at += timedelta(seconds=seconds)


@pytest.fixture(params=[3600.0, 60.0], ids=["hourly-epochs", "minute-epochs"])
def store(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Store]:
    settings = InventorySettings(full_snapshot_every_s=request.param)
    with Store.open(tmp_path / "inventory.duckdb", inventory=settings) as s:
        yield s


def collector(store: Store, clock: Clock) -> DerivedSignals:
    return DerivedSignals(
        store,
        ExporterSettings(cache_s=15, pod_start_window_s=600),
        clock=clock.now,
        monotonic=clock.monotonic,
        spawn=lambda job: job(),
        signals=[s for s in REGISTRY if s.name in INVENTORY],
    )


def nodes(store: Store, at: datetime, names: list[str], gpus: int = 8) -> None:
    rows = [
        {"ts": at, "node": n, "gpu_allocatable": gpus, "cpu_allocatable_milli": 64_000}
        for n in names
    ]
    store.append("nodes", conform("nodes", pa.Table.from_pylist(rows)))


def pod(i: int, created_s: float, **kw: Any) -> dict[str, Any]:
    created = T0 + timedelta(seconds=created_s)
    return {
        "pod_uid": f"u{i}",
        "namespace": f"ns-{i % 2}",
        "pod": f"p{i}",
        "workload": f"w{i % 3}",
        "node": f"node-{i % 3}",
        "phase": "Running",
        "gpu_request": 1 + i % 2,
        "cpu_request_milli": 2000,
        "created_at": created,
        "scheduled_at": created + timedelta(seconds=1),
        "initialized_at": created + timedelta(seconds=2 + i % 4),
        "containers_ready_at": created + timedelta(seconds=9 + i),
        "ready_at": created + timedelta(seconds=10 + 2 * i),
    } | kw


def pods(store: Store, at: datetime, rows: list[dict[str, Any]]) -> None:
    table = pa.Table.from_pylist([{"ts": at} | r for r in rows])
    store.append("pods", conform("pods", table))


def step(derived: DerivedSignals, store: Store, clock: Clock) -> tuple[bytes, set[str]]:
    """A due pass: its text (checked equal to a pass from scratch) and the signals it
    rebuilt."""
    before = {name: built(derived, name) for name in INVENTORY}
    clock.mono_s += 15  # due, whatever the wall clock did
    text = derived.exposition()
    assert text == collector(store, clock).exposition()
    return text, {name for name in INVENTORY if built(derived, name) is not before[name]}


def built(derived: DerivedSignals, name: str) -> object:
    """The families of the signal's latest build (a kept build keeps the same tuple)."""
    last = derived.cache.last(name)
    return None if last is None else last.families


def test_an_unchanged_inventory_keeps_both_signals_and_every_change_rebuilds_them(
    store: Store,
) -> None:
    clock = Clock()
    derived = collector(store, clock)
    assert step(derived, store, clock)[1] == set(INVENTORY)  # nothing yet: no samples

    names = ["node-0", "node-1", "node-2"]
    base = [pod(i, -100.0 * i) for i in range(6)]
    nodes(store, T0, names)
    pods(store, T0, base)
    first, rebuilt = step(derived, store, clock)
    assert rebuilt == set(INVENTORY)
    assert b'sits_pod_start_seconds{namespace="ns-0"}' in first
    assert b"sits_fgd_fragmentation_ratio " in first

    clock.advance(15)  # nothing changed and no pod left the 600 s window
    text, rebuilt = step(derived, store, clock)
    assert (text, rebuilt) == (first, set())

    # The next snapshot repeats every row (each version continues): a new snapshot time.
    # Both signals read the rows, not their snapshot's time, and keep their text.
    clock.advance(30)
    nodes(store, clock.at, names)
    pods(store, clock.at, base)
    assert step(derived, store, clock) == (first, set())
    clock.advance(15)
    assert step(derived, store, clock)[1] == set()
    clock.advance(15)  # a node snapshot alone, the same rows
    nodes(store, clock.at, names)
    assert step(derived, store, clock)[1] == set()

    # More rows of the latest snapshot: versions added, no new snapshot time.
    latest = clock.at - timedelta(seconds=15)
    pods(store, latest, [pod(6, -30.0, gpu_request=4, node="node-1")])
    text, rebuilt = step(derived, store, clock)
    assert rebuilt == set(INVENTORY) and text != first

    # A pod's phase changes in the next snapshot (a version closed, one opened).
    clock.advance(30)
    nodes(store, clock.at, names)
    pods(store, clock.at, [pod(0, 0.0, phase="Succeeded"), *base[1:]])
    assert step(derived, store, clock)[1] == set(INVENTORY)

    # A node snapshot alone changes FGD's rows; pod start reads no node.
    clock.advance(30)
    nodes(store, clock.at, names, gpus=4)
    text, rebuilt = step(derived, store, clock)
    assert rebuilt == {"fragmentation"}

    # The clock alone moves pods out of the pod start window: only pod start is rebuilt.
    clock.advance(250)
    moved, rebuilt = step(derived, store, clock)
    assert rebuilt == {"pod_start"} and moved != text


def test_fgd_with_assigned_gpus_is_rebuilt_on_every_pass(store: Store) -> None:
    """A pod naming its GPUs makes FGD read the GPU samples of the last hour: FGD declares
    nothing then, while pod start still keeps its text."""
    clock = Clock()
    nodes(store, T0, ["node-0", "node-1", "node-2"])
    pods(store, T0, [pod(0, -10.0, gpu_uuids="GPU-0"), pod(1, -20.0)])
    samples: list[dict[str, Any]] = [
        {"ts": T0 - timedelta(seconds=5), "node": "node-0", "gpu_uuid": f"GPU-{g}", "gpu_index": g}
        for g in range(8)
    ]
    store.append("gpu_samples", conform("gpu_samples", pa.Table.from_pylist(samples)))
    derived = collector(store, clock)
    assert step(derived, store, clock)[1] == set(INVENTORY)
    clock.advance(15)
    assert step(derived, store, clock)[1] == {"fragmentation"}
    # The GPU's index moves: FGD's answer follows it, as a pass from scratch does.
    moved = [
        s | {"ts": T0 + timedelta(seconds=1), "gpu_index": 7 - s["gpu_index"]} for s in samples
    ]
    store.append("gpu_samples", conform("gpu_samples", pa.Table.from_pylist(moved)))
    clock.advance(15)
    assert step(derived, store, clock)[1] == {"fragmentation"}


def test_a_pod_leaving_the_fgd_workload_window_rebuilds_fgd(tmp_path: Path) -> None:
    """FGD's workload M holds the pods seen within ``fgd_since_s`` before the latest pod
    snapshot: a pod seen only in an older snapshot leaves it as snapshots that repeat every
    other row arrive, and FGD follows (as a pass from scratch does), though no row changed."""
    clock = Clock()
    settings = ExporterSettings(cache_s=15, fgd_since_s=60)
    with Store.open(tmp_path / "window.duckdb") as store:

        def fgd() -> DerivedSignals:
            return DerivedSignals(
                store,
                settings,
                clock=clock.now,
                monotonic=clock.monotonic,
                spawn=lambda job: job(),
                signals=[s for s in REGISTRY if s.name == "fragmentation"],
            )

        derived = fgd()
        names = ["node-0", "node-1", "node-2"]
        base = [pod(i, -100.0, gpu_request=1, node=f"node-{i % 3}") for i in range(6)]
        odd = pod(9, -50.0, gpu_request=8, phase="Succeeded")  # fits no node now
        nodes(store, T0, names)
        pods(store, T0, [*base, odd])  # the odd pod is done: only M holds it
        texts = []
        for _ in range(4):  # snapshots at 30, 60, 90, 120 s: the odd pod leaves M at 90 s
            clock.advance(30)
            nodes(store, clock.at, names)
            pods(store, clock.at, base)
            before = built(derived, "fragmentation")
            clock.mono_s += 15
            text = derived.exposition()
            assert text == fgd().exposition()
            texts.append((text, built(derived, "fragmentation") is not before))
        assert [rebuilt for _, rebuilt in texts] == [True, False, True, False]
        assert texts[2][0] != texts[1][0]  # M lost a shape: the answer moved
