"""The service's inventory loop: stores snapshots, attributes containers, survives API errors."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from sits_observe.collectors.kube.inventory import KubeInventoryCollector
from sits_observe.lab.cluster.cluster import SimulatedCluster
from sits_observe.lab.kube.emulator import KubeEmulator
from sits_observe.lab.kube.publish import KubePublisher
from sits_observe.store import Store
from sits_observe.surfaces.service.inventory import InventoryLoop

pytestmark = pytest.mark.k8s


def test_snapshots_are_stored_and_api_outages_are_counted(tmp_path: Path) -> None:
    cluster = SimulatedCluster(nodes=2, gpus_per_node=4, seed=1)
    store = Store.open(tmp_path / "s.duckdb")
    emulator = KubeEmulator()
    emulator.start()
    try:
        publisher = KubePublisher(emulator.api_client())
        publisher.register_nodes(cluster)
        for event in cluster.take_events():
            publisher.on_pod_event(event, datetime.now(UTC))
        loop = InventoryLoop(KubeInventoryCollector(emulator.api_client()), store, interval_s=3600)
        loop.run_once()
        assert (loop.stats.snapshots, loop.stats.errors) == (1, 0)
        assert store.count("nodes") == 2
        assert store.count("pods") == 2  # one vLLM server per node
        emulator.inject_error("/api/v1/pods", 503, times=-1)
        loop.run_once()
        loop.run_once()
        assert loop.stats.errors == 2
        assert loop.stats.last_error is not None and "503" in loop.stats.last_error
        emulator.clear_errors()
        loop.run_once()
        assert loop.stats.snapshots == 2 and loop.stats.last_error is None
    finally:
        emulator.stop()
        store.close()
