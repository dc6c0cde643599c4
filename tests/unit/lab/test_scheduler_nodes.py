"""The live scheduler's cache, built from API Node and Pod JSON."""

from __future__ import annotations

from typing import Any

from sits_observe.collectors.kube.gpu import hami_allocation
from sits_observe.lab.scheduler.nodes import cluster_state, node_gpu_uuids


def node(name: str, gpus: int = 4, *, register: bool = True, **spec: Any) -> dict[str, Any]:
    uuids = [f"GPU-{name}-{chr(97 + g)}" for g in range(gpus)]
    annotations = (
        {"hami.io/node-nvidia-register": ":".join(f"{u},10,81920,100,A100,0,true" for u in uuids)}
        if register
        else {}
    )
    capacity = {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": str(gpus)}
    return {
        "metadata": {
            "name": name,
            "labels": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
            "annotations": annotations,
        },
        "spec": spec,
        "status": {"allocatable": capacity, "capacity": capacity},
    }


def pod(
    name: str,
    *,
    gpus: int = 0,
    percent: int = 100,
    node_name: str | None = None,
    phase: str = "Pending",
    created: str = "2026-01-01T00:00:00Z",
    **meta: Any,
) -> dict[str, Any]:
    limits: dict[str, str] = {}
    requests = {"cpu": "2", "memory": "4Gi"}
    if gpus:
        requests["nvidia.com/gpu"] = limits["nvidia.com/gpu"] = str(gpus)
    if percent < 100:
        limits["nvidia.com/gpucores"] = limits["nvidia.com/gpumem-percentage"] = str(percent)
    spec: dict[str, Any] = {
        "containers": [{"name": "main", "resources": {"requests": requests, "limits": limits}}]
    }
    if node_name:
        spec["nodeName"] = node_name
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"uid-{name}",
            "creationTimestamp": created,
            **meta,
        },
        "spec": spec,
        "status": {"phase": phase},
    }


def test_bound_pods_are_assumed_on_the_gpus_their_allocation_names() -> None:
    allocated = hami_allocation(["GPU-n1-c"], memory_mib=40960, cores_percent=50)
    pods = [
        pod(
            "shared",
            gpus=1,
            percent=50,
            node_name="n1",
            phase="Running",
            annotations={"hami.io/vgpu-devices-allocated": allocated},
        ),
        pod("whole", gpus=2, node_name="n1", phase="Running"),
    ]
    state = cluster_state([node("n1")], pods)
    nodes = state.nodes
    # The share sits on GPU c (index 2); the whole pod, not yet allocated, gets what the
    # device plugin would give it: the lowest fully free GPUs, a and b.
    assert nodes.gpu_free_milli[0].tolist() == [0, 0, 500, 1000]
    assert nodes.gpu_pods[0].tolist() == [1, 1, 1, 0]
    assert nodes.cpu_requested_milli[0] == 4000 and nodes.memory_requested_bytes[0] == 8 << 30
    assert state.pending == []


def test_pending_pods_queue_by_priority_then_age_and_finished_pods_are_ignored() -> None:
    pods = [
        pod("old", created="2026-01-01T00:00:01Z"),
        pod("new", created="2026-01-01T00:00:09Z"),
        pod("urgent", created="2026-01-01T00:00:05Z"),
        pod("done", gpus=4, node_name="n1", phase="Succeeded"),
        pod("elsewhere", node_name="n1", phase="Pending"),
        pod("other-scheduler"),
    ]
    pods[2]["spec"]["priority"] = 1000
    pods[5]["spec"]["schedulerName"] = "hami-scheduler"
    state = cluster_state([node("n1")], pods)
    assert [p.name for p in state.pending] == ["urgent", "old", "new"]
    assert state.nodes.gpu_free_milli[0].tolist() == [1000] * 4  # the finished pod freed all
    assert state.pending[0].manifest["metadata"]["name"] == "urgent"


def test_nodes_are_sorted_cordoned_ones_left_out_and_uuids_read() -> None:
    nodes = [node("n2"), node("n1", register=False), node("n3", unschedulable=True)]
    state = cluster_state(nodes, [])
    assert state.nodes.names == ("n1", "n2")
    assert state.nodes.gpu_uuids == (
        ("GPU-n1-0", "GPU-n1-1", "GPU-n1-2", "GPU-n1-3"),
        ("GPU-n2-a", "GPU-n2-b", "GPU-n2-c", "GPU-n2-d"),
    )
    assert state.nodes.gpu_model == ("NVIDIA-A100-SXM4-80GB",) * 2
    as_json = node("n4", 2, register=False)
    as_json["metadata"]["annotations"] = {
        "hami.io/node-nvidia-register": '[{"id": "GPU-x"}, {"id": "GPU-y"}]'
    }
    assert node_gpu_uuids(as_json, 2) == ("GPU-x", "GPU-y")
    assert node_gpu_uuids(as_json, 3) == ("GPU-n4-0", "GPU-n4-1", "GPU-n4-2")


def test_unreadable_pods_and_nodes_are_counted_not_fatal() -> None:
    broken = pod("broken")
    broken["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "two"
    no_status = node("n9")
    del no_status["status"]
    state = cluster_state(
        [node("n1"), no_status], [broken, pod("fine"), pod("lost", node_name="n8")]
    )
    assert [p.name for p in state.pending] == ["fine"]
    assert state.skipped == {"pod": 1, "node": 1, "pod_on_unknown_node": 1}
