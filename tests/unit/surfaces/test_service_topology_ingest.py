"""The service takes the topology and NUMA collectors' tables from agents: a batch built by
the real collectors (sysfs tree on disk, an NVML stand-in, an exposition body) is stored."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from sits_observe.collectors.agent.wire import encode_batch
from sits_observe.collectors.cgroup.numa import NumaCollector
from sits_observe.collectors.sync_delay import SyncDelayCollector
from sits_observe.collectors.topology import TopologyCollector
from sits_observe.store import Store
from tests.unit.collectors.test_numa import CID, NUMA_STAT, container_dir, sysfs, write
from tests.unit.collectors.test_topology import two_socket_box
from tests.unit.surfaces.test_service import T0, headers, make_client


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path / "s.duckdb") as s:
        yield s


@pytest.fixture
def client(store: Store) -> Iterator[TestClient]:
    with make_client(store) as c:
        yield c


def test_an_agent_batch_of_every_topology_table_is_stored(
    client: TestClient, store: Store, tmp_path: Path
) -> None:
    root = sysfs(tmp_path / "sys")
    cgroup = tmp_path / "cgroup"
    write(container_dir(cgroup, CID) / "memory.numa_stat", NUMA_STAT)
    fake, pci_root = two_socket_box(tmp_path)
    tables = {
        **NumaCollector(node="n1", sys_root=root, cgroup_root=cgroup).collect(T0).tables,
        **TopologyCollector(node="n1", nvml=fake, sys_root=pci_root).collect(T0).tables,
        **SyncDelayCollector("http://unused", "wait_s", node="n1")
        .collect_text('wait_s{pod="p"} 0.09\n', T0)
        .tables,
    }
    answer = client.post("/api/v1/ingest", content=encode_batch(tables), headers=headers())
    assert answer.status_code == 200, answer.text
    assert {name: store.count(name) for name in tables} == {
        "numa_samples": 2,
        "container_numa_samples": 2,
        "gpu_topology": 4,
        "gpu_links": 12,
        "sync_delays": 1,
    }
