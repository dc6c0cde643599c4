"""The extender's distance term on measured topology: the topology collector's rows (from an
NVML stand-in and a sysfs tree on disk) in a DuckDB file change the view's NVLink and
GPUs-per-NUMA facts over the product table; node labels still win."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import polars as pl
import pytest

from sits_observe.analytics.topology.gpu_links import NodeTopology, node_topology
from sits_observe.collectors.topology import TopologyCollector
from sits_observe.control.extender.clusterview.view import build_view
from sits_observe.control.extender.clusterview.view_settings import ViewSettings
from sits_observe.store import Store
from tests.unit.collectors.test_topology import two_socket_box
from tests.unit.control.extender_support import H100, NOW, nodes_table
from tests.unit.control.test_extender_view import replace


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path / "view.duckdb") as s:
        yield s


def measure(store: Store, tmp_path: Path, node: str, age_s: float = 30.0) -> None:
    """One topology read of the 4-GPU two-socket box (GPU-0/1 NVLinked, 3 GPUs on socket 0)."""
    fake, sys_root = two_socket_box(tmp_path)
    result = TopologyCollector(node=node, nvml=fake, sys_root=sys_root).collect(
        NOW - timedelta(seconds=age_s)
    )
    store.append_batch(result.tables)


def test_measured_topology_beats_the_product_table(store: Store, tmp_path: Path) -> None:
    store.append("nodes", nodes_table(NOW, {"gpu-y": (4, H100, 80, 64_000)}))
    before = build_view(store, NOW, ViewSettings())
    assert before.nvlink.tolist() == [True]  # H100 has NVLink in the product table
    assert before.gpus_per_numa.tolist() == [2]  # half of 4
    measure(store, tmp_path, "gpu-y")
    after = build_view(store, NOW, ViewSettings())
    assert after.slow.topology["gpu-y"] == NodeTopology(gpus=4, nvlink=False, gpus_per_numa=3)
    assert after.nvlink.tolist() == [False]  # only one pair is NVLinked
    assert after.gpus_per_numa.tolist() == [3]


def test_a_read_older_than_the_slow_window_is_ignored(store: Store, tmp_path: Path) -> None:
    store.append("nodes", nodes_table(NOW, {"gpu-y": (4, H100, 80, 64_000)}))
    measure(store, tmp_path, "gpu-y", age_s=ViewSettings().slow_window_s + 60)
    view = build_view(store, NOW, ViewSettings())
    assert view.slow.topology == {}
    assert view.nvlink.tolist() == [True]


def test_labels_still_override_the_measurement(store: Store, tmp_path: Path) -> None:
    labels = {"sits.io/gpu-interconnect": "nvlink", "sits.io/gpus-per-numa": "4"}
    table = nodes_table(NOW, {"gpu-y": (4, H100, 80, 64_000)})
    store.append("nodes", replace(table, "labels_json", [json.dumps(labels)]))
    measure(store, tmp_path, "gpu-y")
    view = build_view(store, NOW, ViewSettings())
    assert view.nvlink.tolist() == [True]
    assert view.gpus_per_numa.tolist() == [4]


def test_node_topology_rules() -> None:
    gpus = pl.DataFrame(
        {
            "node": ["a", "a", "b", "c", "c"],
            "gpu_uuid": ["G0", "G1", "G2", "G3", "G4"],
            "numa_node": [0, 0, 1, None, None],
        },
        schema={"node": pl.String(), "gpu_uuid": pl.String(), "numa_node": pl.Int16()},
    )
    links = pl.DataFrame(
        {"node": ["a", "a", "c", "c"], "path": ["nvlink", "nvlink", "nvlink", None]},
        schema={"node": pl.String(), "path": pl.String()},
    )
    assert node_topology(gpus, links) == {
        "a": NodeTopology(2, True, 2),  # fully NVLinked
        "b": NodeTopology(1, None, 1),  # one GPU: nothing to link
        "c": NodeTopology(2, False, None),  # an unknown path counts as not NVLink
    }
