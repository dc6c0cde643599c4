"""The extender's cluster view, built from a real DuckDB file filled with Store.append, and
the cache that rebuilds it off the request path."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from sits_observe.control.extender.clusterview.cache import ViewCache
from sits_observe.control.extender.clusterview.view import ClusterView, build_view
from sits_observe.control.extender.clusterview.view_settings import ViewSettings
from sits_observe.errors import StoreError
from sits_observe.store import Store
from tests.unit.control.extender_support import (
    GIB,
    H100,
    NODES,
    NOW,
    gpu_rows,
    nodes_table,
    pods_table,
    write_cluster,
)


def replace(table: pa.Table, column: str, values: list[object]) -> pa.Table:
    """``table`` with ``column`` replaced by ``values`` (same type)."""
    i = table.schema.get_field_index(column)
    return table.set_column(i, column, pa.array(values, table.schema.field(i).type))


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path / "view.duckdb") as s:
        yield s


def test_view_from_the_store(store: Store) -> None:
    write_cluster(store)
    view = build_view(store, NOW, ViewSettings())
    assert view.node_names == ("cpu-1", "gpu-a", "gpu-b", "gpu-c", "gpu-d")
    assert view.nodes_at == (NOW - timedelta(seconds=10)).replace(tzinfo=None)
    assert view.age_s(NOW) == 10.0
    assert view.gpu_allocatable.tolist() == [0, 8, 8, 4, 8]
    assert view.gpu_free.tolist() == [0, 8, 2, 3, 0]
    assert view.cpu_free_milli.tolist() == [12_000, 64_000, 52_000, 30_000, 48_000]
    assert view.physical_gpus.tolist() == [0, 8, 8, 4, 8]
    # Ranked free memory: GPUs without a pod first, then by free bytes.
    ranked = view.fb_free_ranked_bytes / GIB
    assert np.isnan(ranked[0]).all()
    assert ranked[2].tolist() == [79, 79, 20, 20, 20, 20, 20, 20]
    assert ranked[3, :4].tolist() == [47, 47, 47, 8]
    assert np.isnan(ranked[3, 4:]).all()
    assert view.fb_free_topk_bytes[2, 3] == (79 + 79 + 20) * GIB
    assert (view.fb_total_bytes[1:] / GIB).tolist() == [80, 80, 48, 80]
    assert view.memory_known.tolist() == [False, True, True, True, True]
    assert view.nvlink.tolist() == [False, True, True, False, True]  # L40S has no NVLink
    assert view.gpus_per_numa.tolist() == [1, 4, 4, 2, 4]
    np.testing.assert_allclose(view.interference_ratio[1:], [0.2, 0.0, 0.0, 0.0])
    assert np.isnan(view.interference_ratio[0])
    assert view.slow.workload_need_bytes[("serve", "llm")] == 60 * GIB
    assert view.slow.workload_need_bytes[("serve", "embed")] == 40 * GIB
    assert view.fgd is not None
    weights = {p.shape.num_gpu: p.weight for p in view.fgd.workload.pods}
    assert weights == pytest.approx({0: 0.4, 2: 0.3, 4: 0.2, 1: 0.1})
    assert view.rows_of(["gpu-c", "nope"]).tolist() == [3, -1]
    assert view.preferred("H100").tolist() == [False, True, True, False, True]


def test_slow_interference_aggregated_in_the_store_equals_the_report_over_a_frame(
    store: Store,
) -> None:
    """The view's slow signals aggregate ``gpu_samples`` inside the store; the interference
    report over the same rows read into a polars frame gives the same node scores."""
    from sits_observe.analytics.topology.interference import interference_report, load_gpu_samples

    write_cluster(store)
    settings = ViewSettings()
    view = build_view(store, NOW, settings)
    samples = load_gpu_samples(store, NOW - timedelta(seconds=settings.slow_window_s))
    report = interference_report(samples, settings.interference)
    expected = {n.node: n.score.score for n in report.nodes if n.node is not None}
    assert len(expected) == 4  # the four nodes with GPU samples
    assert view.slow.interference_ratio == pytest.approx(expected, rel=1e-12)


def test_no_inventory_gives_an_empty_view(store: Store) -> None:
    view = build_view(store, NOW, ViewSettings())
    assert len(view) == 0
    assert view.age_s(NOW) is None
    assert view.warnings == ("no node inventory in the store yet",)


def test_nodes_without_pods_are_all_free_and_have_no_workload(store: Store) -> None:
    store.append("nodes", nodes_table(NOW, NODES))
    view = build_view(store, NOW, ViewSettings())
    assert view.gpu_free.tolist() == [0, 8, 8, 4, 8]
    assert view.fgd is None
    assert "no FGD target workload" in view.warnings[0]


def test_memory_label_stands_in_for_missing_samples(store: Store) -> None:
    """gpu-x has no samples but an 80 GiB label: its 8 - 3 = 5 free GPUs count 80 GiB free,
    the 3 taken ones 0. gpu-y has neither: memory unknown."""
    nodes = {"gpu-x": (8, H100, 80, 64_000), "gpu-y": (8, H100, None, 64_000)}
    store.append("nodes", nodes_table(NOW, nodes))
    pods = pods_table(NOW).slice(0, 1)  # one pod, moved to gpu-x with 3 GPUs
    pods = replace(replace(pods, "node", ["gpu-x"]), "gpu_request", [3])
    store.append("pods", pods)
    view = build_view(store, NOW, ViewSettings())
    assert (view.fb_free_ranked_bytes[0] / GIB).tolist() == [80] * 5 + [0] * 3
    assert view.fb_total_bytes[0] == 80 * GIB
    assert view.memory_known.tolist() == [True, False]


def test_topology_labels_override_the_product(store: Store) -> None:
    labels = {"sits.io/gpu-interconnect": "pcie", "sits.io/gpus-per-numa": "8"}
    table = nodes_table(NOW, {"gpu-z": (8, H100, 80, 64_000)})
    table = replace(table, "labels_json", [json.dumps(labels)])
    store.append("nodes", table)
    view = build_view(store, NOW, ViewSettings())
    assert view.nvlink.tolist() == [False]
    assert view.gpus_per_numa.tolist() == [8]


def test_old_and_mig_samples_are_ignored(store: Store) -> None:
    write_cluster(store)
    old = gpu_rows(NOW - timedelta(seconds=600))  # outside the 120 s window: GPUs since gone
    old_ids = [f"{u}-old" for u in old.column("gpu_uuid").to_pylist()]
    store.append("gpu_samples", replace(old, "gpu_uuid", old_ids))
    mig = gpu_rows(NOW - timedelta(seconds=1)).slice(0, 8)  # gpu-a's GPUs as MIG instances
    assert set(mig.column("node").to_pylist()) == {"gpu-a"}
    mig = replace(mig.append_column("mig_instance_id", [[1] * 8]), "fb_free_bytes", [0] * 8)
    store.append("gpu_samples", mig)
    view = build_view(store, NOW, ViewSettings())
    assert view.physical_gpus.tolist() == [0, 8, 8, 4, 8]
    assert (view.fb_free_ranked_bytes[1] / GIB).tolist() == [79] * 8


def test_inventory_is_reused_until_a_new_snapshot(store: Store) -> None:
    """Same nodes and pods snapshots: the inventory (FGD index included) is reused and only GPU
    memory is re-read; a new pods snapshot rebuilds it."""
    write_cluster(store)
    first = build_view(store, NOW, ViewSettings())
    later_samples = replace(gpu_rows(NOW), "fb_free_bytes", [0] * 28)
    store.append("gpu_samples", later_samples)
    again = build_view(store, NOW, ViewSettings(), first)
    assert again.inventory is first.inventory
    assert np.nan_to_num(again.fb_free_ranked_bytes).max() == 0  # memory re-read
    store.append("pods", pods_table(NOW).slice(0, 3))  # a newer snapshot with 3 pods
    rebuilt = build_view(store, NOW, ViewSettings(), again)
    assert rebuilt.inventory is not first.inventory
    assert rebuilt.gpu_free.tolist() == [0, 8, 8, 4, 8]


def test_slow_signals_are_reused_until_due(store: Store) -> None:
    write_cluster(store)
    settings = ViewSettings(slow_refresh_s=60)
    first = build_view(store, NOW, settings)
    later = build_view(store, NOW + timedelta(seconds=30), settings, first)
    assert later.slow is first.slow
    due = build_view(store, NOW + timedelta(seconds=60), settings, later)
    assert due.slow is not first.slow
    assert due.slow.at == NOW + timedelta(seconds=60)


# -- cache ---------------------------------------------------------------------------------


class FakeMonotonic:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_cache_is_lazy_then_serves_the_old_view_while_rebuilding() -> None:
    clock = FakeMonotonic()
    gate = threading.Event()
    built: list[ClusterView] = []

    def build(previous: ClusterView | None) -> ClusterView:
        if built:
            gate.wait(10)  # the second build blocks until the test lets it finish
        view = ClusterView.empty(NOW, f"build {len(built)}")
        built.append(view)
        return view

    cache = ViewCache(build, refresh_interval_s=5, monotonic=clock)
    assert built == []  # nothing until the first call
    first = cache.wait(5)
    assert first is built[0]
    assert cache.get() is first  # not due: no rebuild
    clock.now += 5
    assert cache.get() is first  # due: rebuild starts in the background, old view served
    assert cache.get() is first  # a second call does not start a second build
    gate.set()
    for _ in range(200):
        if cache.builds == 2:
            break
        threading.Event().wait(0.01)
    assert cache.builds == 2
    assert cache.get() is built[1]


def test_cache_keeps_the_last_view_when_a_build_fails() -> None:
    clock = FakeMonotonic()
    errors: list[Exception] = []
    fail = [False]

    def build(previous: ClusterView | None) -> ClusterView:
        if fail[0]:
            raise StoreError("database is gone")
        return ClusterView.empty(NOW, "ok")

    cache = ViewCache(build, refresh_interval_s=1, monotonic=clock, on_error=errors.append)
    good = cache.refresh()
    fail[0] = True
    clock.now += 1
    assert cache.refresh() is good
    assert cache.errors == 1
    assert [str(e) for e in errors] == ["database is gone"]


def test_a_promql_url_must_be_http() -> None:
    assert ViewSettings(promql_url="http://vm:8428").promql_url == "http://vm:8428"
    with pytest.raises(ValueError, match="must start with http"):
        ViewSettings(promql_url="vm:8428")
