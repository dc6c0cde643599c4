"""``sits-observe ingest cgroup``: a cgroup tree on disk into a DuckDB file in tmp_path."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sits_observe.lab.cluster.cgroupfs import CgroupDriver, CgroupTree, CgroupValues, Runtime
from sits_observe.store import Store
from sits_observe.surfaces.cli.main import app

UID_A = "6f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0"
UID_B = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"


@pytest.fixture
def tree(tmp_path: Path) -> CgroupTree:
    tree = CgroupTree(tmp_path / "cgroup")
    tree.add_container(UID_A, "a" * 64, values=CgroupValues(memory_current_bytes=1 << 20))
    tree.add_container(UID_A, "b" * 64)  # the pod's pause container
    tree.add_container(UID_B, "c" * 64, runtime=Runtime.CRIO, values=CgroupValues(cpu_usage_s=2))
    (tree.container("c" * 64).path / "memory.pressure").unlink()
    return tree


def test_ingest_stores_samples_and_drops(tree: CgroupTree, tmp_path: Path) -> None:
    db = tmp_path / "store.duckdb"
    args = ["ingest", "cgroup", str(tree.root), "--db", str(db), "--node", "gpu-node-7"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 3, result.output  # stored, but one file was missing
    assert "container_samples" in result.stdout
    assert "missing_file:memory.pressure" in result.stdout
    assert "1 files or entries rejected" in result.stderr

    with Store.open(db, read_only=True) as store:
        samples = store.query(
            "SELECT container_id, node, pod_uid, runtime, memory_current_bytes, cpu_usage_s "
            "FROM container_samples ORDER BY container_id"
        ).to_pylist()
        drops = store.query(
            "SELECT node, collector, reason, count FROM collector_drops"
        ).to_pylist()
    assert [(r["container_id"][0], r["pod_uid"], r["runtime"]) for r in samples] == [
        ("a", UID_A, "containerd"),
        ("b", UID_A, "containerd"),
        ("c", UID_B, "cri-o"),
    ]
    assert {r["node"] for r in samples} == {"gpu-node-7"}
    assert samples[0]["memory_current_bytes"] == 1 << 20
    assert samples[2]["cpu_usage_s"] == pytest.approx(2.0)
    assert drops == [
        {
            "node": "gpu-node-7",
            "collector": "cgroup",
            "reason": "missing_file:memory.pressure",
            "count": 1,
        }
    ]

    again = CliRunner().invoke(app, args)
    assert again.exit_code == 3, again.output
    with Store.open(db, read_only=True) as store:
        assert store.count("container_samples") == 6


def test_node_defaults_to_the_host_name(tmp_path: Path) -> None:
    tree = CgroupTree(tmp_path / "cgroup", driver=CgroupDriver.CGROUPFS)
    tree.add_container(UID_A, "a" * 64)
    db = tmp_path / "store.duckdb"
    result = CliRunner().invoke(app, ["ingest", "cgroup", str(tree.root), "--db", str(db)])
    assert result.exit_code == 0, result.output
    assert "rejected: nothing" in result.stdout
    with Store.open(db, read_only=True) as store:
        assert store.scalar("SELECT node FROM container_samples") == socket.gethostname()
        assert store.count("collector_drops") == 0


def test_unreadable_root_is_an_error_and_stores_nothing(tmp_path: Path) -> None:
    db = tmp_path / "store.duckdb"
    result = CliRunner().invoke(
        app, ["ingest", "cgroup", str(tmp_path / "absent"), "--db", str(db), "--node", "n"]
    )
    assert result.exit_code == 2
    assert "error:" in result.stderr
    assert "absent" in result.stderr
    assert result.stdout == ""
    assert not db.exists()


def test_installed_entry_point(tree: CgroupTree, tmp_path: Path) -> None:
    """The console script as a user runs it, in its own process."""
    exe = Path(sys.executable).parent / "sits-observe"
    if not exe.exists():
        pytest.skip(f"console script not installed at {exe}")
    db = tmp_path / "store.duckdb"
    done = subprocess.run(
        [str(exe), "ingest", "cgroup", str(tree.root), "--db", str(db), "--node", "n1"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 3, done.stderr  # stored; memory.pressure of one was missing
    assert "container_samples" in done.stdout
    with Store.open(db, read_only=True) as store:
        assert store.count("container_samples") == 3
        assert store.count("collector_drops") == 1
