"""Report ``fleet``: per-node values known by hand, the series over the window, the window
rule, the generated command, and golden tables at 80 and 160 columns.

The rows are the app's page fixture (``fill_store``) at a fixed time, plus a second
inventory snapshot five minutes in where p1 holds a second GPU on node-b, so allocation and
fragmentation move along the series.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from sits_observe.domain.tables import conform
from sits_observe.errors import ConfigError, NoDataError
from sits_observe.reports.inventory.fleet import SPEC, FleetQuery
from sits_observe.reports.inventory.fleet_series import _carried, bucket_width_s
from sits_observe.reports.result import Report
from sits_observe.reports.spec import run_report
from sits_observe.reports.window import WindowRequest
from sits_observe.store import Store
from sits_observe.surfaces.cli.main import app
from sits_observe.surfaces.cli.reports.output import table_text
from tests.golden_support import assert_golden
from tests.unit.surfaces.test_ui_pages import GIB, fill_store

T0 = datetime(2026, 3, 2, 9, 0)
LATER = T0 + timedelta(minutes=5)
NOW = T0 + timedelta(days=1)


def _second_snapshot(store: Store) -> None:
    nodes = [
        {
            "ts": LATER,
            "node": node,
            "gpu_allocatable": 2,
            "gpu_product": "NVIDIA H100 80GB HBM3",
            "cpu_allocatable_milli": cpu,
            "memory_allocatable_bytes": 64 * GIB,
            "ready": True,
        }
        for node, cpu in (("node-a", 4000), ("node-b", 8000))
    ]
    pods = [
        {
            "ts": LATER,
            "pod_uid": uid,
            "namespace": "ns",
            "pod": name,
            "node": node,
            "phase": "Running",
            "gpu_request": 1,
            "cpu_request_milli": 4000,
            "memory_request_bytes": 8 * GIB,
        }
        for uid, name, node in (("u1", "p1", "node-a"), ("u2", "p2", "node-b"))
    ]
    store.append("nodes", conform("nodes", pa.Table.from_pylist(nodes)))
    store.append("pods", conform("pods", pa.Table.from_pylist(pods)))


@pytest.fixture
def store() -> Store:
    store = Store.open(":memory:")
    fill_store(store, T0)
    _second_snapshot(store)
    return store


def fleet(
    store: Store, since: str | None = "1h", until: str = "newest", **values: object
) -> Report:
    return run_report(
        SPEC, store, WindowRequest.parse(since, until), SPEC.validate(values), now=NOW
    )


def test_nodes_hold_allocation_idle_utilisation_and_power_per_gpu(store: Store) -> None:
    report = fleet(store)
    rows = {r["node"]: r for r in report.main.rows.to_pylist()}
    a, b = rows["node-a"], rows["node-b"]
    # The newest snapshot in the window: p1 on node-a, p2 on node-b, one GPU each.
    assert (a["gpus"], a["allocated_gpus"], b["allocated_gpus"]) == (2, 1.0, 1.0)
    assert a["model"] == b["model"] == "H100 80GB"  # the product's short name
    # Power is the mean per GPU (300 W and 100 W GPUs), not the node's sum of 400 W.
    assert a["power_w"] == pytest.approx(200.0)
    assert a["gpu_util_ratio"] == pytest.approx(0.375)
    # Framebuffer in use: each GPU's newest sample, summed (30 GiB + 10 GiB).
    assert a["fb_used_bytes"] == 40 * GIB
    assert a["memory_allocatable_bytes"] == 64 * GIB
    assert (a["idle_gpus"], b["gpus_sampled"]) == (0, None)
    # A higher idle floor counts GPU-a1 (25% busy) as idle.
    rows = {r["node"]: r for r in fleet(store, idle_below_ratio=0.3).main.rows.to_pylist()}
    assert rows["node-a"]["idle_gpus"] == 1
    facts = report.facts
    assert (facts["nodes"], facts["gpus"], facts["allocated_gpus"]) == (2, 4, 2.0)
    assert facts["alloc_ratio"] == pytest.approx(0.5)
    assert facts["gpu_util_ratio"] == pytest.approx(0.375)


def test_gpus_are_named_by_node_and_index(store: Store) -> None:
    gpus = fleet(store).table("gpus").rows.to_pylist()
    assert [(g["gpu"], g["pod"], g["gpu_uuid"]) for g in gpus] == [
        ("node-a/0", "ns/p1", "GPU-a0"),
        ("node-a/1", None, "GPU-a1"),
    ]


def test_a_newest_sample_without_index_or_model_keeps_the_gpu_s_name(store: Store) -> None:
    """The name reports give a GPU (reports/inventory/names.py): its newest node and its newest
    known index and model, so a sample that lacks them does not rename the GPU."""
    bare = {"ts": T0 + timedelta(minutes=10), "node": "node-a", "gpu_uuid": "GPU-a0"}
    store.append("gpu_samples", conform("gpu_samples", pa.Table.from_pylist([bare])))
    gpus = {g["gpu_uuid"]: g for g in fleet(store).table("gpus").rows.to_pylist()}
    assert gpus["GPU-a0"]["gpu"] == "node-a/0"


def test_series_follow_the_inventory_snapshots(store: Store) -> None:
    report = fleet(store)
    assert report.facts["bin_s"] == 30.0  # 590 s of samples: at most 30 buckets of 30 s
    rows = report.table("over_time").rows.to_pylist()
    assert len(rows) == 20
    at = {r["start_at"]: r for r in rows}
    assert (at[T0]["allocated_gpus"], at[LATER]["allocated_gpus"]) == (1.0, 2.0)
    # FGD for the window's workload (one 1-GPU, 4-core pod): at T0 node-a's free GPU has no
    # CPU left (1 of 3 free GPUs); at LATER node-b's free GPU has 4 cores: still 1 of 2.
    assert at[T0]["frag_ratio"] == pytest.approx(1 / 3)
    assert at[LATER]["frag_ratio"] == pytest.approx(0.5)
    # A bucket without a snapshot shows the latest one before it, up to 300 s back.
    for row in rows:
        since = (row["start_at"] - LATER).total_seconds()
        expected = 1.0 if row["start_at"] < LATER else 2.0 if since <= 300 else None
        assert row["allocated_gpus"] == expected, row["start_at"]
    assert rows[-1]["alloc_ratio"] == 0.5  # 270 s after the last snapshot
    assert report.facts["frag_ratio"] == pytest.approx(0.5)  # the window's end
    assert {r["idle_gpus"] for r in rows} == {0} and {r["gpus_sampled"] for r in rows} == {2}
    latency = report.table("latency_over_time").rows.to_pylist()
    assert [(r["start_at"], r["model"], r["requests"]) for r in latency] == [
        (T0, "llm-a", 525),
        (T0, "llm-b", 5),
    ]
    assert latency[0]["p95_s"] == pytest.approx(1.5)


def test_a_given_bin_and_a_window_that_ends_before_the_second_snapshot(store: Store) -> None:
    report = fleet(store, since=None, until="2026-03-02T09:04:00Z", bin_s=120)
    rows = report.table("over_time").rows.to_pylist()
    assert [r["start_at"] for r in rows] == [T0 + timedelta(minutes=2 * k) for k in range(2)]
    assert report.facts["allocated_gpus"] == 1.0  # the snapshot at LATER is not read
    assert report.facts["bin_s"] == 120.0


def test_a_bin_too_small_for_the_window_is_refused(store: Store) -> None:
    with pytest.raises(ConfigError, match=r"--bin-s 0\.1 cuts the 590 s of samples into 5900"):
        fleet(store, bin_s=0.1)


def test_an_empty_window_says_what_to_try(store: Store) -> None:
    with pytest.raises(NoDataError, match="try --until newest"):
        fleet(store, since="1h", until="now")


def test_bucket_widths_are_round() -> None:
    assert [bucket_width_s(s) for s in (1, 590, 3600, 6 * 3600, 7 * 86400, 400 * 86400)] == [
        1.0, 30.0, 120.0, 900.0, 21600.0, 86400.0,
    ]  # fmt: skip


def test_the_generated_command_prints_the_report(store: Store, tmp_path: Path) -> None:
    db = tmp_path / "fleet.duckdb"
    with Store.open(db) as file:
        fill_store(file, T0)
    result = CliRunner().invoke(
        app, ["fleet", "--db", str(db), "--since", "1h", "--until", "newest", "-o", "json"]
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["report"] == "fleet" and doc["window"]["until_rule"] == "newest"
    assert doc["rows"][0]["power_w"] == pytest.approx(200.0)
    assert set(doc["tables"]) == {"gpus", "freshness", "drops", "over_time", "latency_over_time"}


@pytest.mark.parametrize("width", [80, 160])
def test_golden_tables(store: Store, width: int) -> None:
    assert isinstance(SPEC.validate({}), FleetQuery)
    assert_golden(f"fleet_{width}", table_text(fleet(store, bin_s=120), width))


def test_a_snapshot_is_carried_at_most_the_lookback() -> None:
    """Buckets before the first snapshot, and more than 300 s after the latest, stay empty."""
    starts = [T0 + timedelta(seconds=s) for s in (0, 60, 120, 360, 420, 421)]
    table = pa.table(
        {
            "start_at": pa.array(starts, pa.timestamp("us")),
            "util": [0.1] * 6,
            "alloc": [None, 1.0, None, None, 3.0, None],
        }
    )
    rows = _carried(table, ("alloc",)).to_pylist()
    assert [r["alloc"] for r in rows] == [None, 1.0, 1.0, 1.0, 3.0, 3.0]
    late = pa.table(
        {
            "start_at": pa.array([T0, T0 + timedelta(seconds=301)], pa.timestamp("us")),
            "alloc": [1.0, None],
        }
    )
    assert _carried(late, ("alloc",)).column("alloc").to_pylist() == [1.0, None]
