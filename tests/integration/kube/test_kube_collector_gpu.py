"""HAMi-annotated pods listed from the emulator and stored with their GPU share columns."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from kubernetes import client as k8s_client

from sits_observe.analytics.fragmentation.fgd_live import live_cluster
from sits_observe.collectors.kube.gpu import hami_allocation
from sits_observe.collectors.kube.inventory import KubeInventoryCollector
from sits_observe.store import Store
from sits_observe.surfaces.service.inventory import InventoryLoop
from tests.integration.kube import bodies
from tests.integration.kube.bodies import container

pytestmark = pytest.mark.k8s

NOW = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
PRODUCT = "NVIDIA-H100-80GB-HBM3"
ALLOCATED = "hami.io/vgpu-devices-allocated"


def hami_limits(gpus: str, percent: str | None = None) -> dict[str, str]:
    limits = {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": gpus}
    if percent is not None:
        limits |= {"nvidia.com/gpucores": percent, "nvidia.com/gpumem-percentage": percent}
    return limits


def create_pods(core: k8s_client.CoreV1Api) -> None:
    """n1: 'share' 30 % of GPU-n1-1 (HAMi assigned it), 'trace' 500 m with a hint only;
    n2: 'pair' both GPUs, 'odd' a share annotation out of range, 'web' CPU only."""
    pods = [
        bodies.pod(
            "share",
            node_name="n1",
            containers=[container("vllm", limits=hami_limits("1", "30"))],
            annotations={
                ALLOCATED: hami_allocation(["GPU-n1-1"], memory_mib=24_467, cores_percent=30)
            },
            node_selector={"nvidia.com/gpu.product": PRODUCT},
        ),
        bodies.pod(
            "trace",
            node_name="n1",
            containers=[container("job", limits=hami_limits("1"))],
            annotations={
                "alibabacloud.com/gpu-milli": "500",
                "nvidia.com/use-gpuuuid": "GPU-n1-0",
            },
        ),
        bodies.pod(
            "pair",
            node_name="n2",
            containers=[container("train", limits=hami_limits("2"))],
            annotations={
                ALLOCATED: hami_allocation(
                    ["GPU-n2-1", "GPU-n2-0"], memory_mib=81_559, cores_percent=100
                )
            },
        ),
        bodies.pod(
            "odd",
            node_name=None,
            phase="Pending",
            containers=[container("c", limits=hami_limits("1"))],
            annotations={"alibabacloud.com/gpu-milli": "2000"},
        ),
        bodies.pod("web", node_name="n2", containers=[container("web", {"cpu": "500m"})]),
    ]
    for body in pods:
        core.create_namespaced_pod("ml", body)


def test_hami_pods_are_stored_with_share_types_and_devices(
    tmp_path: Path, api: k8s_client.ApiClient, core: k8s_client.CoreV1Api
) -> None:
    for name in ("n1", "n2"):
        core.create_node(bodies.node(name, gpus="2", cpu="16"))
    create_pods(core)
    store = Store.open(tmp_path / "inventory.duckdb")
    try:
        loop = InventoryLoop(KubeInventoryCollector(api), store, interval_s=3600, clock=lambda: NOW)
        loop.run_once()
        assert loop.stats.errors == 0, loop.stats.last_error
        rows = store.query(
            "SELECT pod, gpu_request, gpu_milli, gpu_types, gpu_uuids FROM pods ORDER BY pod"
        ).to_pylist()
        assert [tuple(r.values()) for r in rows] == [
            ("odd", 1, 1000, None, None),
            ("pair", 2, 1000, None, "GPU-n2-1,GPU-n2-0"),
            ("share", 1, 300, PRODUCT, "GPU-n1-1"),
            ("trace", 1, 500, None, None),  # a hint is a wish, not an assignment
            ("web", 0, None, None, None),
        ]
        assert store.query(
            "SELECT reason, count FROM collector_drops WHERE collector = 'kube'"
        ).to_pylist() == [{"reason": "pod_bad_gpu_request", "count": 1}]
        # The agents' GPU samples name each device's index: 'share' holds 300 m of n1's
        # GPU 1, 'trace' (no assignment) the least-free GPU that fits it: GPU 1 again.
        seen = NOW.replace(tzinfo=None) - timedelta(seconds=30)
        samples = [
            {"ts": seen, "node": node, "gpu_uuid": f"GPU-{node}-{i}", "gpu_index": i}
            for node in ("n1", "n2")
            for i in range(2)
        ]
        store.append_batch({"gpu_samples": pa.Table.from_pylist(samples)})
        live = live_cluster(store)
        np.testing.assert_array_equal(live.state.gpu_free_milli, [[1000, 200], [0, 0]])
        assert live.warnings == ()
    finally:
        store.close()
