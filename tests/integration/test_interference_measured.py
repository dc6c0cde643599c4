"""``interference`` on measured NUMA misses and sync delays: a DuckDB file in ``tmp_path`` with
GPU samples, the NUMA collector's counters read from a sysfs tree on disk, and sync delays
read by the sync-delay collector from an exposition body; the CLI's values still win."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from sits_observe.collectors.cgroup.numa import NumaCollector
from sits_observe.collectors.sync_delay import SyncDelayCollector
from sits_observe.store import Store
from sits_observe.surfaces.cli.main import app
from tests.integration.test_workloads_cli import at, gpu_rows
from tests.unit.collectors.test_numa import CID, container_dir, write

T0 = datetime(2026, 3, 1, 12, 0, 0)


def invoke(*args: str) -> tuple[int, str, str]:
    outcome = CliRunner().invoke(app, list(args))
    return outcome.exit_code, outcome.stdout, outcome.stderr


def numastat(hit: int, miss: int) -> str:
    return (
        f"numa_hit {hit}\nnuma_miss {miss}\nnuma_foreign 0\ninterleave_hit 0\n"
        f"local_node {hit}\nother_node 0\n"
    )


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "obs.duckdb"
    sys_root = tmp_path / "sys"
    node0 = sys_root / "devices" / "system" / "node" / "node0"
    node0.mkdir(parents=True)
    cgroup = tmp_path / "cgroup"
    # One container: 3 GiB on NUMA node 0, 1 GiB on node 1 -> 75 % local.
    write(container_dir(cgroup, CID) / "memory.numa_stat", "anon N0=3221225472 N1=1073741824\n")
    numa = NumaCollector(node="n1", sys_root=sys_root, cgroup_root=cgroup)
    syncs = SyncDelayCollector("http://unused", "allreduce_wait_ms", node="n1", scale_s=0.001)
    with Store.open(path) as store:
        store.append("gpu_samples", pa.Table.from_pylist(gpu_rows()))
        # 30 % of the allocations between the two reads missed their node.
        for i, (hit, miss) in enumerate(((10_000, 0), (17_000, 3_000))):
            (node0 / "numastat").write_text(numastat(hit, miss))
            store.append_batch(numa.collect(at(5 + 10 * i)).tables)
        for i, wait_ms in enumerate((95, 120, 88)):
            body = f'allreduce_wait_ms{{pod="train-0"}} {wait_ms}\n'
            store.append_batch(syncs.collect_text(body, at(10 + i)).tables)
    return path


def test_measured_numa_and_sync_delays_drive_the_report(db: Path) -> None:
    code, stdout, stderr = invoke("interference", "--db", str(db), "-o", "json")
    assert code == 0, stderr
    data = json.loads(stdout)
    (node,) = data["rows"]
    assert node["numa_miss_ratio"] == pytest.approx(0.3)
    assert node["numa_miss_from"] == "measured"
    assert "numa_miss_ratio" not in node["missing_inputs"]
    assert node["score"] == pytest.approx(0.4 * 0.5 + 0.35 * 0.25 + 0.25 * 0.3, abs=1e-4)
    assert node["numa_local_share_ratio"] == pytest.approx(0.75)
    assert node["sync_delays_seen"] == 3
    assert node["sync_delays_from"] == "measured"
    assert node["recommendation"] == "best-effort"  # 95, 120, 88 ms: three above 80 ms
    assert not any("sync delays" in n for n in data["notes"])


def test_given_values_win_over_measured_ones(db: Path) -> None:
    code, stdout, stderr = invoke(
        "interference", "--db", str(db), "-o", "json",
        "--numa-miss", "n1=0.1", "--sync-delays", "n1=10,10,10",
    )  # fmt: skip
    assert code == 0, stderr
    (node,) = json.loads(stdout)["rows"]
    assert node["numa_miss_ratio"] == pytest.approx(0.1)
    assert node["numa_miss_from"] == "given"
    assert node["sync_delays_from"] == "given"
    assert node["recommendation"] is None


def test_a_window_without_two_numa_reads_reports_the_input_missing(db: Path) -> None:
    code, stdout, stderr = invoke(
        "interference", "--db", str(db), "-o", "json",
        "--until", f"{at(30).isoformat()}Z", "--since", "20s",  # the second NUMA read only
    )  # fmt: skip
    assert code == 0, stderr
    data = json.loads(stdout)
    (node,) = data["rows"]
    assert node["numa_miss_ratio"] is None and "numa_miss_ratio" in node["missing_inputs"]
    assert node["numa_miss_from"] is None
    assert any("numa_miss_ratio not measured" in n for n in data["notes"])
