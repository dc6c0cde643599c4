"""A quota the controller lowers makes the workloads' next pod creation fail, end to end.

Real parts on loopback: the Kubernetes emulator with its ResourceQuota admission, the
inventory collector writing a DuckDB file, the controller's plan and ``--act`` apply, and the
demo's workload controllers creating pods.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from sits_observe.collectors.kube.api import KubeJson
from sits_observe.collectors.kube.inventory import KubeInventoryCollector
from sits_observe.control.controller.quota_settings import Bound, QuotaRuleSettings
from sits_observe.control.controller.settings import ControllerSettings, Mode
from sits_observe.lab.cluster.cluster import SimulatedCluster
from sits_observe.lab.demo.loop import QUOTA_NAME, QUOTA_NAMESPACE, seed_cluster
from sits_observe.lab.kube.emulator import KubeEmulator
from sits_observe.lab.kube.publish import KubePublisher
from sits_observe.lab.kube.workloads import DriverSettings, WorkloadDriver
from sits_observe.store import Store
from sits_observe.surfaces.cli.controller import build_loop
from sits_observe.surfaces.service.inventory import InventoryLoop

pytestmark = pytest.mark.k8s

GIB = 1 << 30


def test_a_quota_the_controller_lowers_refuses_the_next_creation(tmp_path: Path) -> None:
    with KubeEmulator() as emulator, Store.open(tmp_path / "sits.duckdb") as store:
        api = emulator.api_client()
        cluster = SimulatedCluster(nodes=2, gpus_per_node=8, seed=6, standalone=False)
        KubePublisher(api).register_nodes(cluster)
        seed_cluster(api, quota_gpus=8, inference=[])  # the demo's opt-in: 8 GPUs in training
        now = [0.0]
        driver = WorkloadDriver(
            api,
            cluster.workloads,
            sim_now=lambda: now[0],
            settings=DriverSettings(arrivals=False, inference=False),
        )
        jobs = [cluster.workloads.next_pod() for _ in range(200)]
        one_gpu = [j for j in jobs if j.namespace == QUOTA_NAMESPACE and j.num_gpu == 1][:3]
        for job in one_gpu[:2]:
            driver.submit(job)
        driver.sync_once()
        assert driver.counts.outcomes["created"] == 2  # two GPUs in use of 8

        # The inventory sees them; the controller sizes the quota to the measured peak: no
        # margin and no confidence widening, so the peak itself (2 GPUs), in one step, and
        # lowers it on this one snapshot of history (by default it waits 15 minutes).
        InventoryLoop(KubeInventoryCollector(api), store, interval_s=60).run_once()
        quota = QuotaRuleSettings(
            margin_ratio=0.0,
            confidence_multiplier=0.0,
            lower_after_s=0.0,
            bounds={
                "requests.nvidia.com/gpu": Bound(min_value=1, max_value=64),
                "requests.cpu": Bound(min_value=1000, max_value=1_000_000),
                "requests.memory": Bound(min_value=GIB, max_value=4096 * GIB),
            },
        )
        settings = ControllerSettings(
            mode=Mode.ACT,
            quota=quota,
            max_step_ratio=10.0,
            min_change_interval_s=0,
            rules_on=("quota-gpu", "quota-cpu", "quota-memory"),  # off by default
        )
        controller = build_loop(
            store=store,
            kube=KubeJson(api),
            settings=settings,
            registry=CollectorRegistry(),
            leader_election=False,
        )
        report = controller.run_once()
        assert report.error is None, report.error
        (stored,) = emulator.objects("resourcequotas")
        assert stored["metadata"]["name"] == QUOTA_NAME
        assert stored["spec"]["hard"]["requests.nvidia.com/gpu"] == "2"
        applied = store.query(
            "SELECT proposed FROM decisions WHERE action = 'quota-gpu' AND outcome = 'applied'"
        ).column("proposed")
        assert applied.to_pylist() == ["2"]

        # The next one-GPU Job is refused by the API server's quota admission, counted, and
        # retried (it waits in the queue, not dropped).
        driver.submit(one_gpu[2])
        now[0] = 1.0
        driver.sync_once()
    assert driver.counts.outcomes["rejected_quota"] == 1
    # Every key the controller sized to the peak is exceeded; the API server lists each.
    message = driver.counts.last_rejection
    prefix = f'pods "{one_gpu[2].name}" is forbidden: exceeded quota: sits-quota, requested: '
    assert message.startswith(prefix), message
    requested, used, limited = _parts(message.removeprefix(prefix))
    assert "requests.nvidia.com/gpu=1" in requested.split(",")
    assert "requests.nvidia.com/gpu=2" in used.split(",")
    assert "requests.nvidia.com/gpu=2" in limited.split(",")
    assert driver.waiting == 1
    assert stored["status"]["used"]["requests.nvidia.com/gpu"] == "2"


def _parts(rest: str) -> tuple[str, str, str]:
    """``A, used: B, limited: C`` -> (A, B, C)."""
    requested, _, tail = rest.partition(", used: ")
    used, _, limited = tail.partition(", limited: ")
    return requested, used, limited
