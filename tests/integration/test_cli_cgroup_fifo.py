"""A FIFO where a cgroup file should be never blocks the reader (issue 9, item 19).

Opening a FIFO for reading waits for a writer, for good: ``ingest cgroup`` used to hang on a
tree with a FIFO named ``memory.current``, and so would the node agent, which uses the same
reader. The FIFOs here are real (``os.mkfifo`` in tmp_path); the timeouts turn a regression
into a failure instead of a hung suite.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sits_observe.collectors.agent import AgentLoop, AgentMetrics, Shipper, Spool
from sits_observe.collectors.cgroup.collector import (
    CgroupCollector,
    NotRegularFile,
    read_cgroup_file,
)
from sits_observe.lab.cluster.cgroupfs import CgroupTree
from sits_observe.store import Store
from sits_observe.surfaces.cli.main import app

pytestmark = pytest.mark.timeout(30)

UID = "6f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0"
REASON = "not_regular_file:memory.current"


@pytest.fixture
def tree(tmp_path: Path) -> CgroupTree:
    """Two containers; the first one's memory.current is a FIFO nobody writes to."""
    tree = CgroupTree(tmp_path / "cgroup")
    tree.add_container(UID, "a" * 64)
    tree.add_container(UID, "b" * 64)
    fifo = tree.container("a" * 64).path / "memory.current"
    fifo.unlink()
    os.mkfifo(fifo)
    return tree


def test_the_reader_refuses_a_fifo_without_blocking(tree: CgroupTree) -> None:
    fifo = tree.container("a" * 64).path / "memory.current"
    with pytest.raises(NotRegularFile, match="not a regular file"):
        read_cgroup_file(fifo)
    assert read_cgroup_file(tree.container("b" * 64).path / "memory.current").strip().isdigit()


def test_ingest_cgroup_reads_the_rest_and_counts_the_fifo(tree: CgroupTree, tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    result = CliRunner().invoke(
        app, ["ingest", "cgroup", str(tree.root), "--db", str(db), "--node", "n1"]
    )
    assert result.exit_code == 3, result.output  # stored, one file rejected
    assert REASON in result.stdout
    with Store.open(db, read_only=True) as store:
        rows = store.query(
            "SELECT container_id, memory_current_bytes, cpu_usage_s FROM container_samples "
            "ORDER BY container_id"
        ).to_pylist()
        drops = store.query("SELECT reason, count FROM collector_drops").to_pylist()
    assert [r["container_id"][0] for r in rows] == ["a", "b"]
    assert rows[0]["memory_current_bytes"] is None and rows[0]["cpu_usage_s"] is not None
    assert rows[1]["memory_current_bytes"] is not None
    assert drops == [{"reason": REASON, "count": 1}]


def test_the_agent_counts_the_fifo_and_keeps_collecting(tree: CgroupTree, tmp_path: Path) -> None:
    loop = AgentLoop(
        [CgroupCollector(tree.root, node="n1")],
        # Nothing listens on port 9: every batch is spooled, which is not what is tested here.
        Shipper("http://127.0.0.1:9", "t", node="n1", retries=1, backoff_s=0.0),
        Spool(tmp_path / "spool", max_bytes=10_000_000, max_files=100),
        interval_s=1.0,
        node="n1",
        metrics=AgentMetrics(),
        clock=lambda: datetime.now(UTC),
    )
    for _ in range(2):
        loop.tick()
    labels = {"collector": "cgroup", "reason": REASON}
    registry = loop.metrics.registry
    assert registry.get_sample_value("sits_agent_collector_drops_total", labels) == 2
    collected = registry.get_sample_value(
        "sits_agent_samples_collected_total", {"collector": "cgroup"}
    )
    assert collected == 4  # both containers, both ticks
