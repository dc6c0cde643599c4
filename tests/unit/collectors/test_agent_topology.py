"""The agent's topology flags build the NUMA, topology and sync-delay collectors, and those
collect from a sysfs tree on disk in the agent's own collect loop shape."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from sits_observe.errors import ConfigError
from sits_observe.surfaces.cli.agent import TopologyFlags, collector_factories
from tests.unit.collectors.test_numa import NUMASTAT_0, NUMASTAT_1, write

NOW = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


def build(flags: TopologyFlags, cgroup_root: Path | None = None) -> list[object]:
    factories = collector_factories("n1", [], cgroup_root, False, [], topology=flags)
    with httpx.Client() as client:
        return [make(client) for make in factories]


def test_flags_build_each_collector(tmp_path: Path) -> None:
    nodes = tmp_path / "sys" / "devices" / "system" / "node"
    write(nodes / "node0" / "numastat", NUMASTAT_0)
    write(nodes / "node1" / "numastat", NUMASTAT_1)
    collectors = build(
        TopologyFlags(
            sys_root=tmp_path / "sys",
            topology=True,
            sync_delay_url="http://127.0.0.1:9/metrics",
            sync_delay_metric="wait_ms",
            sync_delay_scale_s=0.001,
        )
    )
    assert [c.name for c in collectors] == ["numa", "topology", "sync_delay"]  # type: ignore[attr-defined]
    numa, topology, sync = collectors
    assert numa.collect(NOW).tables["numa_samples"].num_rows == 2  # type: ignore[attr-defined]
    assert topology.sys_root == tmp_path / "sys"  # type: ignore[attr-defined]
    assert (sync.metric, sync.scale_s) == ("wait_ms", 0.001)  # type: ignore[attr-defined]


def test_sync_delay_flags_go_together() -> None:
    with pytest.raises(ConfigError, match="go together"):
        build(TopologyFlags(sync_delay_url="http://127.0.0.1:9/metrics"))


def test_no_flag_builds_nothing() -> None:
    with pytest.raises(ConfigError, match="--sys-root"):
        build(TopologyFlags())
