"""Request bodies in the API's own JSON shape (camelCase keys, ``kind`` / ``apiVersion``)."""

from __future__ import annotations

from typing import Any


def node(
    name: str,
    *,
    gpus: str | None = "8",
    product: str | None = "NVIDIA-H100-80GB-HBM3",
    gpu_memory_mib: str | None = "81559",
    cpu: str = "7910m",
    memory: str = "1000000Ki",
    ready: str = "True",
) -> dict[str, Any]:
    """A Node as kubelet and the GPU operator leave it."""
    labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"}
    if product is not None:
        labels["nvidia.com/gpu.product"] = product
    if gpu_memory_mib is not None:
        labels["nvidia.com/gpu.memory"] = gpu_memory_mib
    allocatable = {"cpu": cpu, "memory": memory, "pods": "110", "ephemeral-storage": "95Gi"}
    if gpus is not None:
        allocatable["nvidia.com/gpu"] = gpus
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {"podCIDR": "10.244.1.0/24"},
        "status": {
            "capacity": dict(allocatable),
            "allocatable": allocatable,
            "conditions": [
                {
                    "type": "Ready",
                    "status": ready,
                    "reason": "KubeletReady",
                    "lastHeartbeatTime": "2024-05-01T10:00:00Z",
                    "lastTransitionTime": "2024-05-01T09:00:00Z",
                }
            ],
        },
    }


def pod(
    name: str,
    *,
    containers: list[dict[str, Any]] | None = None,
    init_containers: list[dict[str, Any]] | None = None,
    owner: tuple[str, str] | None = None,
    labels: dict[str, str] | None = None,
    node_name: str | None = "gpu-node-1",
    phase: str = "Running",
    qos_class: str | None = None,
    priority_class: str | None = None,
    created: str | None = "2024-05-01T10:00:00Z",
    conditions: dict[str, str] | None = None,
    container_ids: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    node_selector: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A Pod body WITHOUT ``metadata.namespace``: the URL's namespace must be used."""
    containers = containers or [container("main")]
    metadata: dict[str, Any] = {"name": name, "labels": labels or {}}
    if annotations is not None:
        metadata["annotations"] = annotations
    if created is not None:
        metadata["creationTimestamp"] = created
    if owner is not None:
        metadata["ownerReferences"] = [
            {
                "apiVersion": "apps/v1" if owner[0] != "Job" else "batch/v1",
                "kind": owner[0],
                "name": owner[1],
                "uid": f"{owner[1]}-uid",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    spec: dict[str, Any] = {"containers": containers, "restartPolicy": "Always"}
    if init_containers:
        spec["initContainers"] = init_containers
    if node_name is not None:
        spec["nodeName"] = node_name
    if priority_class is not None:
        spec["priorityClassName"] = priority_class
    if node_selector is not None:
        spec["nodeSelector"] = node_selector
    status: dict[str, Any] = {"phase": phase}
    if qos_class is not None:
        status["qosClass"] = qos_class
    status["conditions"] = [
        {"type": kind, "status": "True", "lastTransitionTime": at}
        for kind, at in (conditions or {}).items()
    ]
    ids = container_ids or {}
    status["containerStatuses"] = [
        {
            "name": c["name"],
            "containerID": ids[c["name"]],
            "image": c["image"],
            "imageID": f"{c['image']}@sha256:0",
            "ready": True,
            "restartCount": 0,
        }
        for c in containers
        if c["name"] in ids
    ]
    status["initContainerStatuses"] = [
        {
            "name": c["name"],
            "containerID": ids[c["name"]],
            "image": c["image"],
            "imageID": f"{c['image']}@sha256:0",
            "ready": False,
            "restartCount": 0,
        }
        for c in init_containers or []
        if c["name"] in ids
    ]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec, "status": status}


def container(
    name: str,
    requests: dict[str, str] | None = None,
    limits: dict[str, str] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A container with optional ``resources.requests`` / ``resources.limits``."""
    resources: dict[str, Any] = {}
    if requests:
        resources["requests"] = requests
    if limits:
        resources["limits"] = limits
    return {"name": name, "image": "registry.example/app:1", "resources": resources, **extra}
