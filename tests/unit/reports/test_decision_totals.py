"""The decision log's totals since the store began, the latest quota values, and who holds
each GPU (the exporter's, the demo's and the experiment's reads)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta

import pyarrow as pa
import pytest

from sits_observe.domain.tables import DECISIONS, GPU_SAMPLES
from sits_observe.reports.actions.decision_totals import (
    applied_decisions,
    decision_totals,
    failure_totals,
    latest_quotas,
    newest_decision_at,
)
from sits_observe.reports.inventory.gpu_holders import gpu_instances, gpu_sharing
from sits_observe.reports.inventory.names import gpu_identities
from sits_observe.reports.window import Window
from sits_observe.store import Store

T0 = datetime(2026, 11, 30, 12, 0, 0)


@pytest.fixture
def store() -> Iterator[Store]:
    with Store.open(":memory:") as s:
        yield s


def _at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def _decide(store: Store, *rows: tuple[float, str, str, str | None, str | None]) -> None:
    data = [
        {
            "ts": _at(s),
            "kind": "ResourceQuota",
            "namespace": "ns",
            "name": "q",
            "action": a,
            "outcome": o,
            "current": c,
            "proposed": p,
        }
        for s, a, o, c, p in rows
    ]
    store.append("decisions", pa.Table.from_pylist(data, schema=DECISIONS.schema))


def test_totals_count_every_decision_with_its_full_outcome(store: Store) -> None:
    assert decision_totals(store).num_rows == 0 and newest_decision_at(store) is None
    assert applied_decisions(store) == {}
    _decide(
        store,
        (0, "time-slice", "applied", None, None),
        (5, "memory-class", "applied", None, None),
        (6, "time-slice", "applied", None, None),
        (7, "time-slice", "failed:unreachable", None, None),
        (9, "fragmentation", "skipped:cooldown", None, None),
    )
    assert [(r["action"], r["outcome"], r["n"]) for r in decision_totals(store).to_pylist()] == [
        ("fragmentation", "skipped:cooldown", 1),
        ("memory-class", "applied", 1),
        ("time-slice", "applied", 2),
        ("time-slice", "failed:unreachable", 1),
    ]
    assert failure_totals(store).to_pylist() == [{"failure": "unreachable", "n": 1}]
    assert applied_decisions(store) == {"memory-class": 1, "time-slice": 2}
    assert newest_decision_at(store) == _at(9)


def test_latest_quotas_are_the_newest_decision_per_namespace_and_action(store: Store) -> None:
    _decide(
        store,
        (0, "quota-gpu", "recommended", "4", "6"),
        (5, "quota-gpu", "applied", "6", "8"),
        (3, "quota-cpu", "recommended", "1000", "2000"),
        (9, "memory-class", "recommended", "L1", "L2"),
    )
    rows = latest_quotas(store, ["quota-gpu", "quota-cpu"]).to_pylist()
    assert rows == [
        {"namespace": "ns", "action": "quota-cpu", "current": "1000", "proposed": "2000"},
        {"namespace": "ns", "action": "quota-gpu", "current": "6", "proposed": "8"},
    ]


def _sample(s: float, uuid: str, **values: object) -> dict[str, object]:
    return {"ts": _at(s), "node": "n1", "gpu_uuid": uuid, **values}


def test_gpu_holders_and_identities_over_the_window(store: Store) -> None:
    rows = [
        _sample(
            0, "GPU-a", gpu_index=0, model_name="H100", fb_used_bytes=1, pod="old", namespace="ns"
        ),
        # Time-slicing: the newest values twice, once per pod; one row is kept, attributed first.
        _sample(
            5, "GPU-a", gpu_index=None, model_name=None, fb_used_bytes=7, pod="p2", namespace="ns"
        ),
        _sample(5, "GPU-a", gpu_index=None, model_name=None, fb_used_bytes=7),
        _sample(9, "GPU-b", gpu_index=1, model_name="H100", fb_used_bytes=3),
        _sample(20, "GPU-b", gpu_index=1, model_name="H100", fb_used_bytes=4),  # after the window
    ]
    store.append("gpu_samples", pa.Table.from_pylist(rows, schema=GPU_SAMPLES.schema))
    window = Window(_at(0), _at(10), "given")
    instances = sorted(gpu_instances(store, window).to_pylist(), key=lambda r: r["gpu_uuid"])
    assert [(r["gpu_uuid"], r["pod"], r["fb_used_bytes"]) for r in instances] == [
        ("GPU-a", "p2", 7),
        ("GPU-b", None, 3),
    ]
    sharing = {r["gpu_uuid"]: r for r in gpu_sharing(store, window).to_pylist()}
    assert {u: r["pods"] for u, r in sharing.items()} == {"GPU-a": 2, "GPU-b": 0}
    # The newest KNOWN index and model: a newer sample without them hides nothing.
    assert (sharing["GPU-a"]["gpu_index"], sharing["GPU-a"]["model_name"]) == (0, "H100")
    names = {r["gpu_uuid"]: r for r in gpu_identities(store, window).to_pylist()}
    assert (names["GPU-a"]["gpu_index"], names["GPU-a"]["model_name"]) == (0, "H100")
