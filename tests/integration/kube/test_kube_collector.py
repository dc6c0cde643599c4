"""The inventory collector against the emulator, objects created through the official client."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes import client as k8s_client

from sits_observe.collectors.kube.inventory import KubeInventoryCollector, KubeInventorySettings
from sits_observe.domain.tables import NODES, PODS
from sits_observe.errors import CollectorError
from sits_observe.lab.kube.emulator import KubeEmulator
from tests.integration.kube import bodies
from tests.integration.kube.bodies import container

pytestmark = pytest.mark.k8s

NOW = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
TS = datetime(2024, 5, 1, 12, 0, 0)


def rows(table: Any, key: str) -> dict[str, dict[str, Any]]:
    return {r[key]: r for r in table.to_pylist()}


def test_nodes_every_column(core: k8s_client.CoreV1Api, api: k8s_client.ApiClient) -> None:
    core.create_node(bodies.node("gpu-node-1"))
    core.create_node(
        bodies.node(
            "cpu-node-1",
            gpus=None,
            product=None,
            gpu_memory_mib=None,
            cpu="16",
            memory="64Gi",
            ready="False",
        )
    )
    result = KubeInventoryCollector(api).collect(NOW)
    nodes = result.tables["nodes"]
    assert nodes.schema == NODES.schema
    by_name = rows(nodes, "node")
    gpu_labels = bodies.node("gpu-node-1")["metadata"]["labels"]
    assert by_name["gpu-node-1"] == {
        "ts": TS,
        "node": "gpu-node-1",
        "gpu_allocatable": 8,
        "gpu_product": "NVIDIA-H100-80GB-HBM3",
        "gpu_memory_bytes": 81559 * 1024 * 1024,
        "cpu_allocatable_milli": 7910,
        "memory_allocatable_bytes": 1_024_000_000,
        "ready": True,
        "labels_json": json.dumps(gpu_labels, sort_keys=True),
    }
    assert by_name["cpu-node-1"] == {
        "ts": TS,
        "node": "cpu-node-1",
        "gpu_allocatable": 0,
        "gpu_product": None,
        "gpu_memory_bytes": None,
        "cpu_allocatable_milli": 16_000,
        "memory_allocatable_bytes": 64 * 1024**3,
        "ready": False,
        "labels_json": json.dumps(
            {"kubernetes.io/hostname": "cpu-node-1", "kubernetes.io/os": "linux"}, sort_keys=True
        ),
    }
    assert result.dropped_total == 0


def test_pods_every_column(core: k8s_client.CoreV1Api, api: k8s_client.ApiClient) -> None:
    created = core.create_namespaced_pod(
        "serving",
        bodies.pod(
            "vllm-llama-7d9f8b6c4d-x2x9k",
            labels={"app": "vllm", "pod-template-hash": "7d9f8b6c4d"},
            owner=("ReplicaSet", "vllm-llama-7d9f8b6c4d"),
            init_containers=[
                container("fetch", {"cpu": "1", "memory": "20Gi"}),
                container("proxy", {"cpu": "500m", "memory": "1Gi"}, restartPolicy="Always"),
            ],
            containers=[
                container(
                    "vllm",
                    {"cpu": "4", "memory": "16Gi"},
                    {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "2"},
                    args=["--model", "meta-llama/Llama-2-13b-hf", "--gpu-memory-utilization=0.8"],
                ),
            ],
            qos_class="Burstable",
            priority_class="inference-high",
            conditions={
                "PodScheduled": "2024-05-01T10:00:01Z",
                "Initialized": "2024-05-01T10:02:00Z",
                "ContainersReady": "2024-05-01T10:04:00Z",
                "Ready": "2024-05-01T10:04:00.5Z",
            },
            container_ids={
                "fetch": "containerd://f00",
                "proxy": "containerd://b4r",
                "vllm": "containerd://abc123",
            },
        ),
    )
    core.create_namespaced_pod(
        "train",
        bodies.pod(
            "llm-pretrain-0",
            owner=("Job", "llm-pretrain"),
            containers=[
                container("trainer", limits={"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "8"})
            ],
            node_name="gpu-node-2",
            created="2024-05-01T09:00:00Z",
        ),
    )
    result = KubeInventoryCollector(api).collect(NOW)
    pods = result.tables["pods"]
    assert pods.schema == PODS.schema
    by_name = rows(pods, "pod")
    assert by_name["vllm-llama-7d9f8b6c4d-x2x9k"] == {
        "ts": TS,
        "pod_uid": created.metadata.uid,
        "namespace": "serving",  # from the URL: the body had none
        "pod": "vllm-llama-7d9f8b6c4d-x2x9k",
        "node": "gpu-node-1",
        "phase": "Running",
        "qos_class": "Burstable",
        "owner_kind": "ReplicaSet",
        "owner_name": "vllm-llama-7d9f8b6c4d",
        "workload": "vllm-llama",
        "gpu_request": 2,
        # max(app 4 + sidecar 0.5, fetch 1) CPU; max(16Gi + 1Gi, 20Gi) memory
        "cpu_request_milli": 4500,
        "memory_request_bytes": 20 * 1024**3,
        "priority_class": "inference-high",
        "containers_json": json.dumps(
            [
                {"name": "fetch", "container_id": "f00"},
                {"name": "proxy", "container_id": "b4r"},
                {"name": "vllm", "container_id": "abc123"},
            ]
        ),
        "created_at": datetime(2024, 5, 1, 10, 0, 0),
        "scheduled_at": datetime(2024, 5, 1, 10, 0, 1),
        "initialized_at": datetime(2024, 5, 1, 10, 2, 0),
        "containers_ready_at": datetime(2024, 5, 1, 10, 4, 0),
        "ready_at": datetime(2024, 5, 1, 10, 4, 0, 500000),
        "gpu_milli": 1000,  # the NVIDIA device plugin: whole GPUs, devices not recorded
        "gpu_types": None,
        "gpu_uuids": None,
        "gpu_stack_json": '{"spec":{"containers":[{"args":["--gpu-memory-utilization=0.8"],'
        '"resources":{"requests":{"nvidia.com/gpu":"2"}}}]}}',
    }
    job = by_name["llm-pretrain-0"]
    assert (job["owner_kind"], job["owner_name"], job["workload"]) == (
        "Job",
        "llm-pretrain",
        "llm-pretrain",
    )
    # No status.qosClass: derived from limits (requests default to them) -> Guaranteed.
    assert job["qos_class"] == "Guaranteed"
    assert (job["gpu_request"], job["cpu_request_milli"], job["memory_request_bytes"]) == (
        8,
        8000,
        64 * 1024**3,
    )
    assert job["created_at"] == datetime(2024, 5, 1, 9, 0, 0)
    assert job["ready_at"] is None
    assert json.loads(job["containers_json"]) == [{"name": "trainer", "container_id": None}]
    assert result.dropped_total == 0


def test_pod_created_from_client_models(
    core: k8s_client.CoreV1Api, api: k8s_client.ApiClient
) -> None:
    """The typed models serialise to the same camelCase JSON the collector reads."""
    pod = k8s_client.V1Pod(
        metadata=k8s_client.V1ObjectMeta(name="typed"),
        spec=k8s_client.V1PodSpec(
            node_name="gpu-node-1",
            priority_class_name="batch-low",
            containers=[
                k8s_client.V1Container(
                    name="main",
                    image="x",
                    resources=k8s_client.V1ResourceRequirements(
                        requests={"cpu": "250m", "memory": "512Mi", "nvidia.com/gpu": "1"},
                        limits={"nvidia.com/gpu": "1"},
                    ),
                )
            ],
        ),
        status=k8s_client.V1PodStatus(phase="Running", qos_class="Burstable"),
    )
    core.create_namespaced_pod("ns", pod)
    row = KubeInventoryCollector(api).collect(NOW).tables["pods"].to_pylist()[0]
    assert (row["namespace"], row["node"], row["priority_class"], row["qos_class"]) == (
        "ns",
        "gpu-node-1",
        "batch-low",
        "Burstable",
    )
    assert (row["gpu_request"], row["cpu_request_milli"], row["memory_request_bytes"]) == (
        1,
        250,
        512 * 1024**2,
    )


def test_pagination_reads_every_page(core: k8s_client.CoreV1Api, api: k8s_client.ApiClient) -> None:
    for i in range(23):
        core.create_namespaced_pod(f"ns-{i % 3}", bodies.pod(f"p-{i:02d}"))
    for i in range(7):
        core.create_node(bodies.node(f"node-{i}"))
    collector = KubeInventoryCollector(api, settings=KubeInventorySettings(page_size=5))
    result = collector.collect(NOW)
    assert sorted(result.tables["pods"].column("pod").to_pylist()) == [
        f"p-{i:02d}" for i in range(23)
    ]
    assert result.tables["nodes"].num_rows == 7


def test_expired_continue_token_restarts_the_list_once(
    kube: KubeEmulator, core: k8s_client.CoreV1Api, api: k8s_client.ApiClient
) -> None:
    for i in range(6):
        core.create_namespaced_pod("ns", bodies.pod(f"p-{i}"))
    collector = KubeInventoryCollector(api, settings=KubeInventorySettings(page_size=4))
    kube.inject_error(r"GET /api/v1/pods\?.*continue=", 410, reason="Expired", times=1)
    assert collector.collect(NOW).tables["pods"].num_rows == 6
    kube.inject_error(r"GET /api/v1/pods\?.*continue=", 410, reason="Expired", times=2)
    with pytest.raises(CollectorError, match="410"):
        collector.collect(NOW)


def post_raw(api: k8s_client.ApiClient, path: str, body: dict[str, Any]) -> None:
    """POST a body the typed client would refuse (the emulator validates nothing)."""
    response = api.call_api(
        "POST",
        f"{api.configuration.host}{path}",
        header_params={"Content-Type": "application/json"},
        body=body,
    )
    response.read()
    assert response.status == 201 or response.status == 200, response.data


def test_malformed_objects_are_dropped_and_counted(
    core: k8s_client.CoreV1Api, api: k8s_client.ApiClient
) -> None:
    core.create_namespaced_pod("ns", bodies.pod("good"))
    bad = bodies.pod("bad")
    bad["spec"]["containers"] = {"name": "not-a-list"}
    post_raw(api, "/api/v1/namespaces/ns/pods", bad)
    odd = bodies.pod("odd-quantity", containers=[container("c", {"cpu": "two"})])
    post_raw(api, "/api/v1/namespaces/ns/pods", odd)
    post_raw(api, "/api/v1/nodes", {"metadata": {"name": "n1"}, "status": {"conditions": "Ok"}})
    result = KubeInventoryCollector(api).collect(NOW)
    pods = rows(result.tables["pods"], "pod")
    assert sorted(pods) == ["good", "odd-quantity"]
    assert pods["odd-quantity"]["cpu_request_milli"] is None
    assert result.tables["nodes"].num_rows == 0
    assert result.dropped == {"pod_malformed": 1, "node_malformed": 1, "pod_bad_quantity": 1}


@pytest.mark.parametrize(
    ("status", "reason", "expected"),
    [
        (401, "Unauthorized", "rejected the credentials"),
        (403, "Forbidden", "grant get/list/watch on nodes and pods"),
        (500, "InternalError", "answered 500"),
        (503, "ServiceUnavailable", "answered 503"),
    ],
)
def test_api_errors_become_collector_errors(
    kube: KubeEmulator, api: k8s_client.ApiClient, status: int, reason: str, expected: str
) -> None:
    kube.inject_error(r"GET /api/v1/pods", status, reason=reason, message="from the test")
    with pytest.raises(CollectorError, match=expected) as info:
        KubeInventoryCollector(api).collect(NOW)
    assert "listing pods" in str(info.value)
    assert "from the test" in str(info.value)


def test_stopped_api_server_is_a_collector_error(
    kube: KubeEmulator, api: k8s_client.ApiClient
) -> None:
    collector = KubeInventoryCollector(api, settings=KubeInventorySettings(request_timeout_s=5))
    assert collector.collect(NOW).rows == 0
    kube.stop()
    with pytest.raises(CollectorError, match="cannot reach the Kubernetes API at http://127"):
        collector.collect(NOW)


def test_snapshot_uses_the_injected_clock(
    api: k8s_client.ApiClient, core: k8s_client.CoreV1Api
) -> None:
    core.create_node(bodies.node("n1"))
    collector = KubeInventoryCollector(api, now_fn=lambda: NOW)
    assert collector.name == "kube"
    assert collector.snapshot().tables["nodes"].column("ts").to_pylist() == [TS]
