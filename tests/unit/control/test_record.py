"""The decisions table: what is stored, what is counted, and the history read back."""

from __future__ import annotations

from datetime import datetime, timedelta

from prometheus_client import CollectorRegistry

from sits_observe.control.controller.actions import Action
from sits_observe.control.controller.planning.model import (
    Decision,
    ObjectRef,
    Outcome,
    Recommendation,
)
from sits_observe.control.controller.record import ControllerMetrics, StoreRecorder, load_history
from sits_observe.store import Store

T0 = datetime(2026, 11, 1, 12, 0, 0)
NODE = ObjectRef("Node", None, "n1")


def outcome(proposed: str, result: str, at: datetime, mode: str = "act") -> Outcome:
    rec = Recommendation(NODE, Action.FRAGMENTATION, "low", proposed, "why", {"f": 0.8})
    return Outcome(Decision(rec), result, 1, at, mode)


def test_outcomes_are_stored_counted_and_repeated_skips_collapse() -> None:
    store = Store.open(":memory:")
    registry = CollectorRegistry()
    recorder = StoreRecorder(store, ControllerMetrics(registry), "r1")
    recorder.record([outcome("high", "skipped:rate-limited", T0)])
    recorder.record([outcome("high", "skipped:rate-limited", T0 + timedelta(seconds=30))])
    recorder.record([outcome("high", "applied", T0 + timedelta(seconds=60))])
    rows = store.query("SELECT outcome, replica, evidence, dry_run FROM decisions ORDER BY ts")
    assert rows.column("outcome").to_pylist() == ["skipped:rate-limited", "applied"]
    assert set(rows.column("replica").to_pylist()) == {"r1"}
    assert rows.column("evidence").to_pylist()[0] == '{"f": 0.8}'
    labels = {"action": "fragmentation", "outcome": "skipped:rate-limited"}
    assert registry.get_sample_value("sits_controller_decisions_total", labels) == 2
    recorder.count_error("event")
    assert registry.get_sample_value("sits_controller_errors_total", {"where": "event"}) == 1


def test_history_has_the_latest_decision_and_the_last_write() -> None:
    store = Store.open(":memory:")
    recorder = StoreRecorder(store, ControllerMetrics(CollectorRegistry()), "r1")
    recorder.record([outcome("high", "applied", T0)])
    recorder.record([outcome("medium", "recommended", T0 + timedelta(minutes=1), "dry-run")])
    recorder.record([outcome("low", "skipped:cooldown", T0 + timedelta(minutes=2))])
    [row] = load_history(store, T0 - timedelta(days=1)).latest.to_dicts()
    assert (row["proposed"], row["outcome"]) == ("low", "skipped:cooldown")
    assert row["decided_at"] == T0 + timedelta(minutes=2)
    assert row["changed_at"] == T0  # a dry-run recommendation wrote nothing
    assert load_history(store, T0 + timedelta(hours=1)).latest.height == 0


def test_offline_state_reads_applied_node_labels_and_pod_priorities() -> None:
    import pyarrow as pa

    from sits_observe.control.signals.store_state import state_from_store

    store = Store.open(":memory:")
    store.append(
        "nodes",
        pa.table(
            {
                "ts": [T0],
                "node": ["n1"],
                "labels_json": ['{"sits.io/fragmentation": "high", "zone": "a"}'],
            }
        ),
    )
    store.append(
        "pods",
        pa.table(
            {"ts": [T0], "namespace": ["team"], "pod": ["p1"], "priority_class": ["best-effort"]}
        ),
    )
    state = state_from_store(store, T0)
    assert not state.complete
    assert sorted(state.values.select("kind", "name", "action", "current").rows()) == [
        ("Node", "n1", "fragmentation", "high"),
        ("Pod", "p1", "priority-class", "best-effort"),
    ]
