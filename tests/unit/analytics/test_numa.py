"""Measured NUMA miss ratio, sync delays and container placement: the formulas on frames, and
the whole path from sysfs / cgroup trees on disk through the collector into a DuckDB file."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sits_observe.analytics.topology.numa import (
    container_placement,
    mean_local_share,
    measured_inputs,
    numa_miss_ratios,
    sync_delays_by_node,
)
from sits_observe.collectors.cgroup.numa import NumaCollector
from sits_observe.store import Store

T0 = datetime(2026, 11, 1, 12, 0)
UID = "6f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0"
CID = "a" * 64


def counters(rows: list[tuple[int, str, int, int, int]]) -> pl.DataFrame:
    """(seconds, node, numa node, hit, miss) -> a numa_samples frame."""
    return pl.DataFrame(
        {
            "ts": [T0 + timedelta(seconds=r[0]) for r in rows],
            "node": [r[1] for r in rows],
            "numa_node": [r[2] for r in rows],
            "numa_hit_pages_total": [r[3] for r in rows],
            "numa_miss_pages_total": [r[4] for r in rows],
        }
    )


def test_miss_ratio_is_the_share_of_misses_in_the_increases() -> None:
    frame = counters(
        [
            (0, "n1", 0, 1_000, 100),
            (10, "n1", 0, 1_900, 200),  # +900 hit, +100 miss
            (0, "n1", 1, 5_000, 0),
            (10, "n1", 1, 5_800, 200),  # +800 hit, +200 miss
            (0, "n2", 0, 10, 10),  # one read only: no rate
        ]
    )
    ratios = numa_miss_ratios(frame)
    assert ratios == {"n1": pytest.approx(300 / 2_000)}
    assert "n2" not in ratios


def test_a_counter_reset_leaves_its_step_out() -> None:
    frame = counters(
        [
            (0, "n1", 0, 1_000, 100),
            (10, "n1", 0, 2_000, 100),  # +1000 hit
            (20, "n1", 0, 50, 5),  # rebooted: counters restart
            (30, "n1", 0, 150, 55),  # +100 hit, +50 miss
        ]
    )
    assert numa_miss_ratios(frame) == {"n1": pytest.approx(50 / 1_150)}


def test_no_allocation_between_reads_has_no_ratio() -> None:
    frame = counters([(0, "n1", 0, 7, 1), (10, "n1", 0, 7, 1)])
    assert numa_miss_ratios(frame) == {}
    assert numa_miss_ratios(frame.clear()) == {}


@given(st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 10**6)), min_size=2, max_size=20))
def test_ratio_stays_in_0_1_and_matches_the_total_on_monotonic_counters(
    steps: list[tuple[int, int]],
) -> None:
    hit = miss = 0
    rows = []
    for i, (d_hit, d_miss) in enumerate(steps):
        hit, miss = hit + d_hit, miss + d_miss
        rows.append((i, "n1", 0, hit, miss))
    ratios = numa_miss_ratios(counters(rows))
    d_hit = sum(h for h, _ in steps[1:])
    d_miss = sum(m for _, m in steps[1:])
    if d_hit + d_miss == 0:
        assert ratios == {}
    else:
        assert 0.0 <= ratios["n1"] <= 1.0
        assert ratios["n1"] == pytest.approx(d_miss / (d_hit + d_miss))


def test_sync_delays_come_in_time_order_per_node() -> None:
    frame = pl.DataFrame(
        {
            "ts": [T0 + timedelta(seconds=s) for s in (3, 1, 2, 1)],
            "node": ["n1", "n1", "n1", "n2"],
            "delay_s": [0.3, 0.1, 0.2, 0.9],
        }
    )
    assert sync_delays_by_node(frame) == {"n1": [0.1, 0.2, 0.3], "n2": [0.9]}


def test_container_placement_uses_the_latest_read() -> None:
    frame = pl.DataFrame(
        {
            "ts": [T0, T0, T0 + timedelta(seconds=10), T0 + timedelta(seconds=10)],
            "node": ["n1"] * 4,
            "pod_uid": [UID] * 4,
            "container_id": [CID] * 4,
            "numa_node": [0, 1, 0, 1],
            "anon_bytes": [100, 0, 300, 100],
            "file_bytes": [0, 0, None, 0],
        }
    )
    (placed,) = container_placement(frame)
    assert placed.bytes_by_numa_node == {0: 300, 1: 100}
    assert placed.local_share_ratio == pytest.approx(0.75)
    assert placed.numa_nodes_used == 2
    other = frame.with_columns(
        container_id=pl.lit("b" * 64),
        anon_bytes=pl.lit(50, pl.Int64),
        file_bytes=pl.lit(0, pl.Int64),
    )
    empty = frame.with_columns(
        container_id=pl.lit("c" * 64),
        anon_bytes=pl.lit(0, pl.Int64),
        file_bytes=pl.lit(0, pl.Int64),
    )
    placements = container_placement(pl.concat([frame, other, empty]))
    assert [p.local_share_ratio for p in placements] == [pytest.approx(0.75), 0.5, None]
    assert mean_local_share(placements) == {"n1": pytest.approx(0.625)}  # (0.75 + 0.5) / 2


def _numastat(hit: int, miss: int) -> str:
    return (
        f"numa_hit {hit}\nnuma_miss {miss}\nnuma_foreign 0\ninterleave_hit 0\n"
        f"local_node {hit}\nother_node {miss}\n"
    )


def test_from_disk_trees_through_the_store(tmp_path: Path) -> None:
    """The collector reads sysfs twice, the store keeps the counters, analytics gets the ratio."""
    node0 = tmp_path / "sys" / "devices" / "system" / "node" / "node0"
    node0.mkdir(parents=True)
    collector = NumaCollector(node="n1", sys_root=tmp_path / "sys", cgroup_root=None)
    with Store.open(tmp_path / "s.duckdb") as store:
        for i, (hit, miss) in enumerate(((1_000, 0), (1_600, 400))):
            (node0 / "numastat").write_text(_numastat(hit, miss))
            result = collector.collect(T0 + timedelta(seconds=10 * i))
            store.append_batch(result.tables)
        store.append_batch(
            {
                "sync_delays": pl.DataFrame(
                    {
                        "ts": [T0 + timedelta(seconds=s) for s in (1, 2, 30)],
                        "node": ["n1"] * 3,
                        "delay_s": [0.09, 0.1, 5.0],
                    }
                ).to_arrow()
            }
        )
        measured = measured_inputs(store, T0, T0 + timedelta(seconds=20))
    assert measured.numa_miss_ratio == {"n1": pytest.approx(400 / 1_000)}
    assert measured.sync_delays_s == {"n1": [0.09, 0.1]}  # the 30 s one is outside the window
