"""kube-scheduler extender payloads, as kube-scheduler's Go ``encoding/json`` writes them.

``ExtenderArgs`` has no json tags (k8s.io/kube-scheduler/extender/v1/types.go), so its keys are
the Go field names ``Pod``, ``Nodes``, ``NodeNames``, and the unset one of ``Nodes`` /
``NodeNames`` is ``null``. The Pod and Node objects are v1 API JSON (camelCase), trimmed of
fields the extender ignores but otherwise as the API server returns them.
"""

from __future__ import annotations

import json
from typing import Any

POD_1GPU_JSON = """
{
  "metadata": {
    "name": "llm-5d8f7c9b4-z2v9r",
    "generateName": "llm-5d8f7c9b4-",
    "namespace": "serve",
    "uid": "6f1c2a8e-0d3b-4b8f-9a51-2c7e9d4f1a10",
    "resourceVersion": "918273",
    "creationTimestamp": "2026-11-30T11:59:58Z",
    "labels": {"app": "llm", "pod-template-hash": "5d8f7c9b4"},
    "ownerReferences": [
      {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "llm-5d8f7c9b4",
       "uid": "0a7b6c5d-1111-2222-3333-444455556666", "controller": true,
       "blockOwnerDeletion": true}
    ]
  },
  "spec": {
    "volumes": [{"name": "kube-api-access-x1", "projected": {"sources": []}}],
    "containers": [
      {
        "name": "vllm",
        "image": "vllm/vllm-openai:v0.6.3",
        "args": ["--model", "meta-llama/Llama-3.1-8B-Instruct"],
        "ports": [{"containerPort": 8000, "protocol": "TCP"}],
        "resources": {
          "limits": {"nvidia.com/gpu": "1", "memory": "32Gi"},
          "requests": {"cpu": "1", "memory": "16Gi"}
        },
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "imagePullPolicy": "IfNotPresent"
      }
    ],
    "restartPolicy": "Always",
    "terminationGracePeriodSeconds": 30,
    "dnsPolicy": "ClusterFirst",
    "serviceAccountName": "default",
    "serviceAccount": "default",
    "securityContext": {},
    "schedulerName": "default-scheduler",
    "tolerations": [
      {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
       "tolerationSeconds": 300},
      {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ],
    "priority": 0,
    "enableServiceLinks": true,
    "preemptionPolicy": "PreemptLowerPriority"
  },
  "status": {"phase": "Pending", "qosClass": "Burstable"}
}
"""

POD_4GPU_JSON = """
{
  "metadata": {
    "name": "finetune-7b-0",
    "namespace": "train",
    "uid": "c2d9e0f1-aaaa-bbbb-cccc-ddddeeeeffff",
    "creationTimestamp": "2026-11-30T11:59:59Z",
    "annotations": {"sits.io/gpu-memory": "60Gi"},
    "ownerReferences": [
      {"apiVersion": "batch/v1", "kind": "Job", "name": "finetune-7b",
       "uid": "12345678-0000-0000-0000-000000000000", "controller": true,
       "blockOwnerDeletion": true}
    ]
  },
  "spec": {
    "initContainers": [
      {"name": "fetch-weights", "image": "busybox:1.36",
       "resources": {"requests": {"cpu": "12", "memory": "1Gi"}}}
    ],
    "containers": [
      {"name": "trainer", "image": "nvcr.io/nvidia/pytorch:24.10-py3",
       "resources": {"limits": {"nvidia.com/gpu": "4"},
                     "requests": {"cpu": "8", "memory": "128Gi", "nvidia.com/gpu": "4"}}}
    ],
    "restartPolicy": "Never",
    "schedulerName": "default-scheduler",
    "priorityClassName": "throughput-guaranteed",
    "priority": 500000,
    "preemptionPolicy": "PreemptLowerPriority"
  },
  "status": {"phase": "Pending", "qosClass": "Burstable"}
}
"""

POD_CPU_JSON = """
{
  "metadata": {"name": "etl-9", "namespace": "batch", "uid": "9f9f9f9f-0000-1111-2222-333344445555",
               "creationTimestamp": "2026-11-30T11:59:57Z"},
  "spec": {
    "containers": [
      {"name": "etl", "image": "python:3.12-slim",
       "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}
    ],
    "restartPolicy": "OnFailure",
    "schedulerName": "default-scheduler",
    "priority": 0
  },
  "status": {"phase": "Pending", "qosClass": "Burstable"}
}
"""

NODE_TEMPLATE_JSON = """
{
  "metadata": {
    "name": "NAME",
    "uid": "UID",
    "resourceVersion": "77123",
    "creationTimestamp": "2026-10-01T08:00:00Z",
    "labels": {
      "kubernetes.io/arch": "amd64",
      "kubernetes.io/hostname": "NAME",
      "kubernetes.io/os": "linux",
      "nvidia.com/gpu.product": "PRODUCT",
      "nvidia.com/gpu.count": "GPUS"
    },
    "annotations": {"node.alpha.kubernetes.io/ttl": "0"}
  },
  "spec": {"podCIDR": "10.244.3.0/24", "podCIDRs": ["10.244.3.0/24"]},
  "status": {
    "capacity": {"cpu": "64", "memory": "528281160Ki", "nvidia.com/gpu": "GPUS", "pods": "110"},
    "allocatable": {"cpu": "63900m", "memory": "527154760Ki", "nvidia.com/gpu": "GPUS",
                    "pods": "110"},
    "conditions": [
      {"type": "Ready", "status": "True", "lastHeartbeatTime": "2026-11-30T11:59:40Z",
       "lastTransitionTime": "2026-10-01T08:01:10Z", "reason": "KubeletReady",
       "message": "kubelet is posting ready status"}
    ],
    "addresses": [{"type": "InternalIP", "address": "10.0.0.13"},
                  {"type": "Hostname", "address": "NAME"}],
    "nodeInfo": {"kubeletVersion": "v1.31.2", "containerRuntimeVersion": "containerd://1.7.22",
                 "kernelVersion": "6.8.0-45-generic", "osImage": "Ubuntu 24.04.1 LTS",
                 "operatingSystem": "linux", "architecture": "amd64"}
  }
}
"""

#: The candidate nodes the tests send, in kube-scheduler's (arbitrary) order, and what they are.
CANDIDATES = ["gpu-a", "gpu-b", "gpu-c", "cpu-1", "gpu-d", "new-node"]
_NODE_FACTS = {
    "gpu-a": ("NVIDIA-H100-80GB-HBM3", 8),
    "gpu-b": ("NVIDIA-H100-80GB-HBM3", 8),
    "gpu-c": ("NVIDIA-L40S", 4),
    "cpu-1": ("", 0),
    "gpu-d": ("NVIDIA-H100-80GB-HBM3", 8),
    "new-node": ("NVIDIA-H100-80GB-HBM3", 8),
}


def pod(text: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def node_object(name: str) -> dict[str, Any]:
    """A v1.Node as the API server returns it (CPU-only nodes lack the GPU keys)."""
    product, gpus = _NODE_FACTS[name]
    text = (
        NODE_TEMPLATE_JSON.replace("NAME", name)
        .replace("UID", f"uid-{name}")
        .replace("PRODUCT", product)
        .replace('"GPUS"', f'"{gpus}"')
    )
    node: dict[str, Any] = json.loads(text)
    if gpus == 0:
        for key in ("nvidia.com/gpu.product", "nvidia.com/gpu.count"):
            del node["metadata"]["labels"][key]
        for section in ("capacity", "allocatable"):
            del node["status"][section]["nvidia.com/gpu"]
    return node


def args_by_name(pod_json: str, names: list[str] | None = None) -> str:
    """ExtenderArgs with ``nodeCacheCapable: true``: ``Nodes`` null, ``NodeNames`` set."""
    return json.dumps(
        {"Pod": pod(pod_json), "Nodes": None, "NodeNames": CANDIDATES if names is None else names}
    )


def args_with_nodes(pod_json: str, names: list[str] | None = None) -> str:
    """ExtenderArgs with ``nodeCacheCapable: false``: a full v1.NodeList, ``NodeNames`` null."""
    items = [node_object(n) for n in (CANDIDATES if names is None else names)]
    return json.dumps(
        {"Pod": pod(pod_json), "Nodes": {"metadata": {}, "items": items}, "NodeNames": None}
    )
