"""The controller's topology signals from the store: measured NUMA misses enter the node's
interference score, measured sync delays fire the SPEC's best-effort fallback in the plan."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pyarrow as pa
import pytest

from sits_observe.control.controller.planning.inputs import CurrentState
from sits_observe.control.controller.planning.plan import plan
from sits_observe.control.controller.settings import ControllerSettings
from sits_observe.control.signals.store import StoreSignalSettings, signals_from_store
from sits_observe.store import Store
from tests.unit.control.test_store_signals import AT, at, inventory

S = ControllerSettings()


def numa_rows(miss_after: int) -> pa.Table:
    base = {"node": "n1", "numa_node": 0}
    return pa.Table.from_pylist(
        [
            base | {"ts": at(1), "numa_hit_pages_total": 1_000, "numa_miss_pages_total": 0},
            base
            | {
                "ts": at(20),
                "numa_hit_pages_total": 1_000 + 1_000 - miss_after,
                "numa_miss_pages_total": miss_after,
            },
        ]
    )


def sync_rows(delays_ms: list[float]) -> pa.Table:
    return pa.Table.from_pylist(
        [
            {"ts": at(5 + i), "node": "n1", "metric": "wait_ms", "delay_s": ms / 1000}
            for i, ms in enumerate(delays_ms)
        ]
    )


@pytest.fixture
def store() -> Iterator[Store]:
    with Store.open(":memory:") as s:
        s.append_batch(inventory())
        yield s


def test_measured_numa_miss_enters_the_score(store: Store) -> None:
    [before] = signals_from_store(store, AT, S).nodes.to_dicts()
    assert before["interference_partial"] is True  # no NUMA input yet
    assert before["sync_delay_breached"] is None
    store.append("numa_samples", numa_rows(miss_after=400))  # 400 of 1,000 pages missed
    [after] = signals_from_store(store, AT, S).nodes.to_dicts()
    weight = S.interference.numa_weight
    assert after["interference_score"] == pytest.approx(before["interference_score"] + weight * 0.4)
    assert after["interference_partial"] is False


@pytest.mark.parametrize(
    ("delays_ms", "breached"),
    [([81, 95, 120], True), ([81, 50, 95, 120], False), ([10, 20], False)],
)
def test_measured_sync_delays_fire_the_best_effort_fallback(
    store: Store, delays_ms: list[float], breached: bool
) -> None:
    store.append("sync_delays", sync_rows(delays_ms))
    signals = signals_from_store(store, AT, S)
    [node] = signals.nodes.to_dicts()
    assert node["sync_delay_breached"] is breached
    proposals = {
        r["action"]: r for r in plan(signals, CurrentState.of(), S).frame.iter_rows(named=True)
    }
    topology = proposals.get("topology-policy")
    if breached:
        assert topology is not None and topology["proposed"] == "best-effort"
        assert "3 consecutive sync delays above 80 ms" in topology["reason"]
    else:
        assert topology is None or topology["proposed"] != "best-effort"


def test_delays_outside_the_window_do_not_count(store: Store) -> None:
    old = sync_rows([200, 200, 200])
    shifted = old.set_column(
        0,
        "ts",
        pa.array(
            [
                t - timedelta(seconds=StoreSignalSettings().window_s + 60)
                for t in old.column("ts").to_pylist()
            ]
        ),
    )
    store.append("sync_delays", shifted)
    [node] = signals_from_store(store, AT, S).nodes.to_dicts()
    assert node["sync_delay_breached"] is None
