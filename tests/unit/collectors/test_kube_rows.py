"""Node and pod JSON -> inventory rows: requests, QoS, workloads, containers, drops."""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime
from decimal import Decimal
from typing import Any

import pytest

from sits_observe.collectors.kube.inventory import node_row
from sits_observe.collectors.kube.json_shapes import Malformed
from sits_observe.collectors.kube.pods import derive_qos, pod_requests, pod_row, workload_of


def gpu_node(**status: Any) -> dict[str, Any]:
    """A Node as the API returns it (GPU operator labels, device plugin resources)."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": "gpu-node-1",
            "labels": {
                "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                "nvidia.com/gpu.memory": "81559",
                "kubernetes.io/hostname": "gpu-node-1",
            },
        },
        "status": {
            "allocatable": {
                "cpu": "7910m",
                "memory": "1000000Ki",
                "nvidia.com/gpu": "8",
                "pods": "110",
            },
            "conditions": [
                {"type": "MemoryPressure", "status": "False"},
                {"type": "Ready", "status": "True", "lastTransitionTime": "2024-05-01T10:00:00Z"},
            ],
            **status,
        },
    }


def test_node_row_every_column() -> None:
    dropped: Counter[str] = Counter()
    row = node_row(gpu_node(), dropped)
    assert row == {
        "node": "gpu-node-1",
        "gpu_allocatable": 8,
        "gpu_product": "NVIDIA-H100-80GB-HBM3",
        "gpu_memory_bytes": 81559 * 1024 * 1024,
        "cpu_allocatable_milli": 7910,
        "memory_allocatable_bytes": 1_024_000_000,
        "ready": True,
        "labels_json": json.dumps(gpu_node()["metadata"]["labels"], sort_keys=True),
    }
    assert not dropped


def test_node_without_gpus_and_not_ready() -> None:
    node = {
        "metadata": {"name": "cpu-1"},
        "status": {
            "allocatable": {"cpu": "4", "memory": "1e9"},
            "conditions": [{"type": "Ready", "status": "Unknown"}],
        },
    }
    row = node_row(node, Counter())
    assert row["gpu_allocatable"] == 0
    assert row["gpu_product"] is None
    assert row["gpu_memory_bytes"] is None
    assert row["cpu_allocatable_milli"] == 4000
    assert row["memory_allocatable_bytes"] == 10**9
    assert row["ready"] is False
    assert row["labels_json"] == "{}"


def test_node_without_conditions_has_unknown_readiness() -> None:
    assert node_row({"metadata": {"name": "n"}}, Counter())["ready"] is None


def test_node_bad_fields_become_null_and_are_counted() -> None:
    node = gpu_node(allocatable={"cpu": "lots", "memory": "1Gi", "nvidia.com/gpu": "x"})
    node["metadata"]["labels"]["nvidia.com/gpu.memory"] = "eighty"
    dropped: Counter[str] = Counter()
    row = node_row(node, dropped)
    assert row["cpu_allocatable_milli"] is None
    assert row["gpu_allocatable"] is None
    assert row["memory_allocatable_bytes"] == 1024**3
    assert row["gpu_memory_bytes"] is None
    assert dropped == Counter({"node_bad_quantity": 2, "node_bad_label": 1})


@pytest.mark.parametrize(
    "node",
    [
        None,
        "node",
        {},
        {"metadata": {}},
        {"metadata": {"name": ""}},
        {"metadata": {"name": "n", "labels": ["a"]}},
        {"metadata": {"name": "n"}, "status": {"conditions": "Ready"}},
    ],
)
def test_malformed_node_raises(node: Any) -> None:
    with pytest.raises(Malformed):
        node_row(node, Counter())


# -- pods ----------------------------------------------------------------------------------


def container(
    name: str,
    requests: dict[str, str] | None = None,
    limits: dict[str, str] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return {"name": name, "image": "x", "resources": resources, **extra}


def vllm_pod() -> dict[str, Any]:
    """A Deployment's pod with an init container, a sidecar and two app containers."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "vllm-llama-7d9f8b6c4d-x2x9k",
            "namespace": "serving",
            "uid": "3f1c9a52-6f0e-4c57-9a63-0d8a1fd0b2a1",
            "labels": {"app": "vllm", "pod-template-hash": "7d9f8b6c4d"},
            "creationTimestamp": "2024-05-01T10:00:00Z",
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": "vllm-llama-7d9f8b6c4d",
                    "uid": "rs-uid",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "nodeName": "gpu-node-1",
            "priorityClassName": "inference-high",
            "initContainers": [
                container("fetch-weights", {"cpu": "4", "memory": "16Gi"}),
                container(
                    "log-shipper", {"cpu": "100m", "memory": "128Mi"}, restartPolicy="Always"
                ),
            ],
            "containers": [
                container(
                    "vllm",
                    {"cpu": "2", "memory": "8Gi"},
                    {"cpu": "2", "memory": "8Gi", "nvidia.com/gpu": "2"},
                    command=["python3", "-m", "vllm.entrypoints.openai.api_server"],
                    args=[
                        "--model",
                        "meta-llama/Llama-2-13b-chat-hf",
                        "--tensor-parallel-size",
                        "2",
                        "--gpu-memory-utilization",
                        "0.85",
                        "--max-model-len",
                        "4096",
                    ],
                ),
                container("metrics", {"cpu": "250m", "memory": "64Mi"}),
            ],
        },
        "status": {
            "phase": "Running",
            "qosClass": "Burstable",
            "conditions": [
                {
                    "type": "PodReadyToStartContainers",
                    "status": "True",
                    "lastTransitionTime": "2024-05-01T10:00:02Z",
                },
                {
                    "type": "Initialized",
                    "status": "True",
                    "lastTransitionTime": "2024-05-01T10:03:00Z",
                },
                {
                    "type": "Ready",
                    "status": "True",
                    "lastTransitionTime": "2024-05-01T10:05:30.250Z",
                },
                {
                    "type": "ContainersReady",
                    "status": "True",
                    "lastTransitionTime": "2024-05-01T10:05:30+00:00",
                },
                {
                    "type": "PodScheduled",
                    "status": "True",
                    "lastTransitionTime": "2024-05-01T10:00:01Z",
                },
            ],
            "initContainerStatuses": [
                {"name": "fetch-weights", "containerID": "containerd://aaa111", "ready": False},
                {"name": "log-shipper", "containerID": "containerd://bbb222", "ready": True},
            ],
            "containerStatuses": [
                {"name": "vllm", "containerID": "containerd://ccc333", "ready": True},
                {"name": "metrics", "containerID": "cri-o://ddd444", "ready": True},
            ],
        },
    }


def test_pod_row_every_column() -> None:
    dropped: Counter[str] = Counter()
    row = pod_row(vllm_pod(), dropped)
    # App: cpu 2 + 0.25, memory 8Gi + 64Mi, GPU 2 (request defaulted from the limit);
    # plus the sidecar (0.1 CPU, 128Mi). Init peak: fetch-weights 4 CPU / 16Gi (no sidecar
    # running before it) -> CPU max(2.35, 4) = 4; memory max(8Gi+192Mi, 16Gi) = 16Gi.
    assert row == {
        "pod_uid": "3f1c9a52-6f0e-4c57-9a63-0d8a1fd0b2a1",
        "namespace": "serving",
        "pod": "vllm-llama-7d9f8b6c4d-x2x9k",
        "node": "gpu-node-1",
        "phase": "Running",
        "qos_class": "Burstable",
        "owner_kind": "ReplicaSet",
        "owner_name": "vllm-llama-7d9f8b6c4d",
        "workload": "vllm-llama",
        "gpu_request": 2,
        "cpu_request_milli": 4000,
        "memory_request_bytes": 16 * 1024**3,
        "priority_class": "inference-high",
        "containers_json": json.dumps(
            [
                {"name": "fetch-weights", "container_id": "aaa111"},
                {"name": "log-shipper", "container_id": "bbb222"},
                {"name": "vllm", "container_id": "ccc333"},
                {"name": "metrics", "container_id": "ddd444"},
            ]
        ),
        "created_at": datetime(2024, 5, 1, 10, 0, 0),
        "scheduled_at": datetime(2024, 5, 1, 10, 0, 1),
        "initialized_at": datetime(2024, 5, 1, 10, 3, 0),
        "containers_ready_at": datetime(2024, 5, 1, 10, 5, 30),
        "ready_at": datetime(2024, 5, 1, 10, 5, 30, 250000),
        "gpu_milli": 1000,  # no share annotation or HAMi percentage: whole GPUs
        "gpu_types": None,
        "gpu_uuids": None,
        # The stack's facts only: the GPU limit (no request given) and vLLM's flag.
        "gpu_stack_json": '{"spec":{"containers":[{"args":["--gpu-memory-utilization",'
        '"0.85"],"resources":{"requests":{"nvidia.com/gpu":"2"}}}]}}',
    }
    assert not dropped


def test_pending_pod_has_nulls_not_guesses() -> None:
    pod = {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
        "spec": {"containers": [container("c")]},
        "status": {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "lastTransitionTime": "2024-05-01T10:00:01Z",
                }
            ],
        },
    }
    row = pod_row(pod, Counter())
    assert row["node"] is None
    assert row["scheduled_at"] is None  # the condition is False: not scheduled yet
    assert row["owner_kind"] is None and row["owner_name"] is None
    assert row["workload"] == "p"  # a bare pod is its own workload
    assert row["qos_class"] == "BestEffort"  # derived: no status.qosClass
    assert (row["gpu_request"], row["cpu_request_milli"], row["memory_request_bytes"]) == (0, 0, 0)
    assert json.loads(row["containers_json"]) == [{"name": "c", "container_id": None}]
    assert row["created_at"] is None
    assert row["priority_class"] is None


def test_bad_quantity_nulls_only_that_request() -> None:
    pod = vllm_pod()
    pod["spec"]["containers"][1]["resources"]["requests"]["cpu"] = "a quarter"
    dropped: Counter[str] = Counter()
    row = pod_row(pod, dropped)
    assert row["cpu_request_milli"] is None
    assert row["memory_request_bytes"] == 16 * 1024**3
    assert row["gpu_request"] == 2
    assert dropped == Counter({"pod_bad_quantity": 1})


def test_bad_timestamp_nulls_and_counts() -> None:
    pod = vllm_pod()
    pod["metadata"]["creationTimestamp"] = "yesterday"
    dropped: Counter[str] = Counter()
    assert pod_row(pod, dropped)["created_at"] is None
    assert dropped == Counter({"pod_bad_timestamp": 1})


@pytest.mark.parametrize(
    "mutate",
    [
        lambda p: p.pop("metadata"),
        lambda p: p["metadata"].pop("uid"),
        lambda p: p["metadata"].pop("namespace"),
        lambda p: p["metadata"].__setitem__("name", 7),
        lambda p: p["spec"].__setitem__("containers", {"name": "c"}),
        lambda p: p["spec"]["containers"].append("c"),
        lambda p: p["spec"]["containers"][0].__setitem__("resources", "lots"),
        lambda p: p["status"].__setitem__("containerStatuses", 5),
        lambda p: p["metadata"].__setitem__("ownerReferences", {"kind": "Job"}),
    ],
)
def test_malformed_pod_raises(mutate: Any) -> None:
    pod = vllm_pod()
    mutate(pod)
    with pytest.raises(Malformed):
        pod_row(pod, Counter())


# -- requests rule -------------------------------------------------------------------------


def _req(containers: list[dict[str, Any]], init: list[dict[str, Any]]) -> dict[str, Decimal]:
    total, bad = pod_requests(containers, init)
    assert not bad
    return total


def test_init_container_larger_than_app_sum_wins() -> None:
    total = _req(
        [container("a", {"cpu": "1"}), container("b", {"cpu": "1"})],
        [container("i1", {"cpu": "3"}), container("i2", {"cpu": "500m"})],
    )
    assert total["cpu"] == Decimal(3)


def test_app_sum_wins_over_smaller_init_containers() -> None:
    total = _req(
        [container("a", {"memory": "1Gi"}), container("b", {"memory": "2Gi"})],
        [container("i1", {"memory": "2Gi"})],
    )
    assert total["memory"] == Decimal(3 * 1024**3)


def test_sidecars_add_to_the_app_sum_and_to_later_init_containers() -> None:
    total = _req(
        [container("app", {"cpu": "1"})],
        [
            container("sidecar", {"cpu": "2"}, restartPolicy="Always"),
            container("migrate", {"cpu": "2500m"}),
        ],
    )
    # app + sidecar = 3; migrate runs beside the sidecar: 2.5 + 2 = 4.5
    assert total["cpu"] == Decimal("4.5")


def test_gpu_request_defaults_to_limit() -> None:
    total = _req([container("a", limits={"nvidia.com/gpu": "1"}), container("b")], [])
    assert total["nvidia.com/gpu"] == 1


# -- QoS -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("containers", "qos"),
    [
        ([container("a")], "BestEffort"),
        ([container("a", limits={"nvidia.com/gpu": "1"})], "BestEffort"),  # only CPU/memory
        ([container("a", limits={"cpu": "1", "memory": "1Gi"})], "Guaranteed"),
        (
            [container("a", {"cpu": "1", "memory": "1Gi"}, {"cpu": "1", "memory": "1Gi"})],
            "Guaranteed",
        ),
        (
            [container("a", {"cpu": "500m", "memory": "1Gi"}, {"cpu": "1", "memory": "1Gi"})],
            "Burstable",
        ),
        ([container("a", limits={"cpu": "1"})], "Burstable"),
        ([container("a", limits={"cpu": "1", "memory": "1Gi"}), container("b")], "Burstable"),
        ([container("a", {"memory": "1Gi"})], "Burstable"),
    ],
)
def test_derive_qos(containers: list[dict[str, Any]], qos: str) -> None:
    assert derive_qos(containers) == qos


def test_status_qos_class_wins_over_derivation() -> None:
    pod = vllm_pod()
    pod["status"]["qosClass"] = "Guaranteed"
    assert pod_row(pod, Counter())["qos_class"] == "Guaranteed"
    del pod["status"]["qosClass"]
    assert pod_row(pod, Counter())["qos_class"] == "Burstable"


# -- workloads -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "name", "labels", "workload"),
    [
        ("ReplicaSet", "web-7d9f8b6c4d", {"pod-template-hash": "7d9f8b6c4d"}, "web"),
        ("ReplicaSet", "web-api-5b6c7d8f9", {}, "web-api"),  # hash alphabet, no label
        ("ReplicaSet", "web-api-v2", {}, "web-api-v2"),  # too short to be a hash
        ("ReplicaSet", "web-api-backend", {}, "web-api-backend"),  # 'a', 'e' not in it
        ("ReplicaSet", "standalone", {}, "standalone"),
        ("Job", "train-28573920", {}, "train-28573920"),
        ("StatefulSet", "kv-store", {}, "kv-store"),
        ("DaemonSet", "dcgm-exporter", {}, "dcgm-exporter"),
        (None, None, {}, "bare-pod"),
    ],
)
def test_workload_of(
    kind: str | None, name: str | None, labels: dict[str, str], workload: str
) -> None:
    assert workload_of(kind, name, labels, "bare-pod") == workload


def test_only_the_controller_owner_counts() -> None:
    pod = vllm_pod()
    pod["metadata"]["ownerReferences"] = [
        {"kind": "ConfigMap", "name": "cfg"},
        {"kind": "Job", "name": "train", "controller": True},
    ]
    row = pod_row(pod, Counter())
    assert (row["owner_kind"], row["owner_name"], row["workload"]) == ("Job", "train", "train")
