"""Publishes the simulated cluster's nodes and pods to a Kubernetes API.

The demo points this at the emulator (:mod:`.kube_emulator`); the objects are shaped as a
real API server returns them (labels the NVIDIA GPU operator sets, ``nvidia.com/gpu``
capacity, pod conditions with transition times, ``containerID`` with the runtime prefix) so
the inventory collector reads them exactly as it would read a real cluster. Everything goes
through the official ``kubernetes`` client.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from kubernetes import client as k8s_client
from kubernetes.client.exceptions import ApiException

from sits_observe.simulator.calibration import GPU_FB_TOTAL_MIB
from sits_observe.simulator.cluster import PodEvent, SimNode, SimPod, SimulatedCluster
from sits_observe.simulator.render import MODEL_NAMES

log = logging.getLogger(__name__)


def _ts(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def node_body(node: SimNode) -> dict[str, Any]:
    """A Node object for one simulated node."""
    capacity = {
        "cpu": str(node.cpu_milli // 1000),
        "memory": f"{node.memory_bytes // 1024}Ki",
        "nvidia.com/gpu": str(len(node.gpus)),
        "pods": "110",
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": node.name,
            "labels": {
                "kubernetes.io/hostname": node.name,
                "nvidia.com/gpu.present": "true",
                "nvidia.com/gpu.product": MODEL_NAMES[node.kind].replace(" ", "-"),
                "nvidia.com/gpu.memory": str(GPU_FB_TOTAL_MIB[node.kind]),
                "nvidia.com/gpu.count": str(len(node.gpus)),
            },
        },
        "spec": {},
        "status": {
            "capacity": capacity,
            "allocatable": capacity,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
        },
    }


def pod_body(pod: SimPod, created_at: datetime) -> dict[str, Any]:
    """A running Pod object for one simulated pod, with plausible start-up gaps."""
    scheduled = created_at + timedelta(milliseconds=40)
    initialized = scheduled + timedelta(milliseconds=300)
    warmup_s = 20.0 if pod.kind == "llm" else 2.0  # model load / CUDA context warm-up
    ready = initialized + timedelta(seconds=warmup_s)
    resources: dict[str, dict[str, str]] = {"requests": {}, "limits": {}}
    if pod.cpu_request_milli:
        resources["requests"]["cpu"] = f"{pod.cpu_request_milli}m"
        resources["limits"]["cpu"] = f"{pod.cpu_request_milli}m"
    if pod.memory_request_bytes:
        resources["requests"]["memory"] = str(pod.memory_request_bytes)
        resources["limits"]["memory"] = str(pod.memory_request_bytes)
    if pod.gpu_request:
        resources["limits"]["nvidia.com/gpu"] = str(pod.gpu_request)
        resources["requests"]["nvidia.com/gpu"] = str(pod.gpu_request)
    owner_kind = "ReplicaSet" if pod.kind == "llm" else "Job"
    owner_name = f"{pod.owner}-7d4b9c" if owner_kind == "ReplicaSet" else pod.owner
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod.name,
            "namespace": pod.namespace,
            "uid": pod.uid,
            "creationTimestamp": _ts(created_at),
            "labels": {"app": pod.owner, "sits.io/sim-kind": pod.kind},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1" if owner_kind == "ReplicaSet" else "batch/v1",
                    "kind": owner_kind,
                    "name": owner_name,
                    "uid": pod.uid[::-1],
                    "controller": True,
                }
            ],
        },
        "spec": {
            "nodeName": pod.node,
            "priorityClassName": "inference-critical" if pod.kind == "llm" else "batch-low",
            "containers": [
                {"name": c.name, "image": "registry.example/sim:1", "resources": resources}
                for c in pod.containers
            ],
        },
        "status": {
            "phase": "Running",
            "qosClass": pod.qos_class,
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": _ts(scheduled)},
                {"type": "Initialized", "status": "True", "lastTransitionTime": _ts(initialized)},
                {"type": "ContainersReady", "status": "True", "lastTransitionTime": _ts(ready)},
                {"type": "Ready", "status": "True", "lastTransitionTime": _ts(ready)},
            ],
            "containerStatuses": [
                {
                    "name": c.name,
                    "containerID": f"containerd://{c.container_id}",
                    "ready": True,
                    "restartCount": 0,
                    "image": "registry.example/sim:1",
                    "imageID": "",
                    "state": {"running": {"startedAt": _ts(initialized)}},
                }
                for c in pod.containers
            ],
        },
    }


class KubePublisher:
    """Mirrors the simulated cluster into a Kubernetes API (see module docstring)."""

    def __init__(self, api: k8s_client.ApiClient) -> None:
        self.core = k8s_client.CoreV1Api(api)
        self.errors = 0

    def register_nodes(self, cluster: SimulatedCluster) -> None:
        """Create a Node object per simulated node."""
        for node in cluster.nodes.values():
            # The client sends a JSON-shaped dict as is; its stubs only name the model class.
            self.core.create_node(node_body(node))  # type: ignore[arg-type]

    def on_pod_event(self, event: PodEvent, at: datetime) -> None:
        """Create or delete the Pod object of ``event``; API errors are logged and counted."""
        try:
            if event.kind == "added":
                body = pod_body(event.pod, at)
                self.core.create_namespaced_pod(event.pod.namespace, body)  # type: ignore[arg-type]
            else:
                self.core.delete_namespaced_pod(event.pod.name, event.pod.namespace)
        except ApiException as exc:
            self.errors += 1
            log.warning("pod %s %s: API answered %s", event.kind, event.pod.name, exc.status)
