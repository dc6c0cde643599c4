"""Plain reads: one table's rows in a time range, the collectors' drop totals, the inventory's
presence."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta

import pyarrow as pa
import pytest

from sits_observe.domain.tables import COLLECTOR_DROPS, GPU_SAMPLES, NODES, PODS
from sits_observe.errors import UnknownNameError
from sits_observe.store import Store
from sits_observe.store.reads import collector_drop_totals, has_inventory, read_range

T0 = datetime(2026, 11, 30, 12, 0, 0)


@pytest.fixture
def store() -> Iterator[Store]:
    with Store.open(":memory:") as s:
        yield s


def _at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_read_range_keeps_since_until_node_and_limit(store: Store) -> None:
    rows = [
        {"ts": _at(s), "node": n, "gpu_uuid": f"GPU-{s}"}
        for n, s in [("a", 2), ("b", 1), ("a", 0), ("a", 3)]
    ]
    store.append("gpu_samples", pa.Table.from_pylist(rows, schema=GPU_SAMPLES.schema))

    def uuids(
        since: datetime | None = None, until: datetime | None = None, node: str | None = None
    ) -> list[str]:
        table = read_range(store, "gpu_samples", since=since, until=until, node=node, limit=10)
        return [str(u) for u in table.column("gpu_uuid").to_pylist()]

    assert uuids() == ["GPU-0", "GPU-1", "GPU-2", "GPU-3"]  # oldest first
    assert uuids(since=_at(1), until=_at(3)) == ["GPU-1", "GPU-2"]  # since <= ts < until
    assert uuids(node="a", until=_at(3)) == ["GPU-0", "GPU-2"]
    assert read_range(store, "gpu_samples", since=_at(1), limit=1).num_rows == 1


def test_read_range_names_the_valid_tables(store: Store) -> None:
    with pytest.raises(UnknownNameError, match="unknown table 'nope'; valid: gpu_samples"):
        read_range(store, "nope", limit=1)


def test_drop_totals_count_every_row_by_collector_and_reason(store: Store) -> None:
    drops = [
        {"ts": _at(0), "node": "a", "collector": "dcgm", "reason": "nan", "count": 2},
        {"ts": _at(9), "node": "b", "collector": "dcgm", "reason": "nan", "count": 3},
        {"ts": _at(1), "node": "a", "collector": "cgroup", "reason": "gone", "count": 1},
    ]
    store.append("collector_drops", pa.Table.from_pylist(drops, schema=COLLECTOR_DROPS.schema))
    assert collector_drop_totals(store).to_pylist() == [
        {"collector": "cgroup", "reason": "gone", "n": 1},
        {"collector": "dcgm", "reason": "nan", "n": 5},
    ]


def test_inventory_needs_a_node_and_a_pod_snapshot(store: Store) -> None:
    assert not has_inventory(store)
    store.append("nodes", pa.Table.from_pylist([{"ts": T0, "node": "a"}], schema=NODES.schema))
    assert not has_inventory(store)
    pod = {"ts": T0, "pod_uid": "u", "namespace": "ns", "pod": "p"}
    store.append("pods", pa.Table.from_pylist([pod], schema=PODS.schema))
    assert has_inventory(store)
