"""The newest row per node and sample table, and the newest sample overall."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta

import pyarrow as pa
import pytest

from sits_observe.domain.tables import GPU_SAMPLES, REQUESTS
from sits_observe.store import Store
from sits_observe.store.freshness import newest_at, newest_by_node

T0 = datetime(2026, 11, 30, 12, 0, 0)


@pytest.fixture
def store() -> Iterator[Store]:
    with Store.open(":memory:") as s:
        yield s


def test_empty_store_has_no_newest_rows(store: Store) -> None:
    assert newest_by_node(store).num_rows == 0
    assert newest_at(store) is None


def test_newest_row_per_node_and_table_with_unnamed_nodes_last(store: Store) -> None:
    gpu = [
        {"ts": T0 + timedelta(seconds=s), "node": n, "gpu_uuid": f"GPU-{n}"}
        for n, s in (("b", 5), ("b", 9), ("a", 3))
    ]
    store.append("gpu_samples", pa.Table.from_pylist(gpu, schema=GPU_SAMPLES.schema))
    reqs = [
        {"ts": T0 + timedelta(seconds=20), "node": None, "model": "m", "latency_s": 1.0},
        {"ts": T0 + timedelta(seconds=7), "node": "a", "model": "m", "latency_s": 1.0},
    ]
    store.append("requests", pa.Table.from_pylist(reqs, schema=REQUESTS.schema))
    rows = [(r["node"], r["source"], r["newest_at"]) for r in newest_by_node(store).to_pylist()]
    assert rows == [
        ("a", "gpu_samples", T0 + timedelta(seconds=3)),
        ("a", "requests", T0 + timedelta(seconds=7)),
        ("b", "gpu_samples", T0 + timedelta(seconds=9)),
        (None, "requests", T0 + timedelta(seconds=20)),
    ]
    assert newest_at(store) == T0 + timedelta(seconds=20)
    assert newest_at(store, ("gpu_samples",)) == T0 + timedelta(seconds=9)
