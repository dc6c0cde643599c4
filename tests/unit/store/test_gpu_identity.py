"""A GPU's latest identity is read once: every report, the live FGD view and the extender
give the same node, index and model, also when the newest sample lacks the index or model."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from sits_observe.analytics.fragmentation.fgd_live import _Bounds, _device_rows
from sits_observe.control.extender.nodes import gpu_uuids_by_index
from sits_observe.domain.tables import conform
from sits_observe.reports.inventory.fleet_reads import gpu_rows
from sits_observe.reports.inventory.gpu_holders import gpu_instances, gpu_sharing
from sits_observe.reports.inventory.names import gpu_labels, gpu_labels_of
from sits_observe.reports.window import Window
from sits_observe.store import Store
from sits_observe.store.gpu_identity import gpu_identities, gpu_identities_of

T0 = datetime(2026, 11, 30, 12, 0, 0)
WINDOW = Window(T0, T0 + timedelta(minutes=10), "test")


def sample(
    s: int, uuid: str, node: str | None, index: int | None, model: str | None
) -> dict[str, object]:
    return {
        "ts": T0 + timedelta(seconds=s),
        "node": node,
        "gpu_uuid": uuid,
        "gpu_index": index,
        "model_name": model,
        "fb_used_bytes": 1 << 30,
        "fb_free_bytes": 79 << 30,
        "gpu_util_ratio": 0.5,
        "namespace": "ns",
        "pod": f"pod-{uuid}",
    }


#: GPU-a's newest sample lost its index and model (a collector that could not read them);
#: GPU-b moved from node-1 to node-2 and index 3 to 1; GPU-c never had a model.
ROWS = [
    sample(0, "GPU-a", "node-1", 0, "NVIDIA H100 80GB HBM3"),
    sample(30, "GPU-a", "node-1", None, None),
    sample(0, "GPU-b", "node-1", 3, "NVIDIA A100-SXM4-80GB"),
    sample(20, "GPU-b", "node-2", 1, "NVIDIA A100-SXM4-80GB"),
    sample(10, "GPU-c", "node-2", 0, None),
]

EXPECTED = {
    "GPU-a": ("node-1", 0, "NVIDIA H100 80GB HBM3"),
    "GPU-b": ("node-2", 1, "NVIDIA A100-SXM4-80GB"),
    "GPU-c": ("node-2", 0, None),
}


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path / "identity.duckdb") as opened:
        opened.append("gpu_samples", conform("gpu_samples", pa.Table.from_pylist(ROWS)))
        yield opened


def triples(table: pa.Table) -> dict[str, tuple[object, object, object]]:
    return {r["gpu_uuid"]: (r["node"], r["gpu_index"], r["model_name"]) for r in table.to_pylist()}


def test_the_store_and_the_promql_path_give_the_newest_known_identity(store: Store) -> None:
    stored = gpu_identities(store, since=WINDOW.since, until=WINDOW.until)
    assert triples(stored) == EXPECTED
    read = store.query("SELECT * FROM gpu_samples")
    assert triples(gpu_identities_of(read)) == EXPECTED
    assert gpu_labels(store, WINDOW) == gpu_labels_of(read)
    assert gpu_labels(store, WINDOW)["GPU-a"] == "node-1/0 (H100 80GB)"


def test_every_reader_names_each_gpu_the_same_way(store: Store) -> None:
    assert triples(gpu_sharing(store, WINDOW)) == EXPECTED
    assert triples(gpu_instances(store, WINDOW)) == EXPECTED
    per_node = triples(gpu_rows(store, WINDOW))  # one row per (node, GPU) sampled there
    assert {u: (EXPECTED[u][1], EXPECTED[u][2]) for u in per_node} == {
        u: (index, model) for u, (_, index, model) in per_node.items()
    }
    devices = _device_rows(store, _Bounds(WINDOW.since, WINDOW.until))
    assert {r["uuid"]: (r["node"], r["idx"]) for r in devices} == {
        u: (node, index) for u, (node, index, _) in EXPECTED.items()
    }
    uuids = gpu_uuids_by_index(
        store,
        ["node-1", "node-2"],
        np.array([4, 2], dtype=np.int64),
        nodes_at=T0 + timedelta(minutes=1),
        window_s=600,
    )
    # node-1's index 3 no longer holds GPU-b: it moved to node-2, index 1.
    assert uuids == (("GPU-a", "", "", ""), ("GPU-c", "GPU-b"))
