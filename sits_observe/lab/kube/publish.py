"""The simulated cluster's objects as a Kubernetes API holds them, and a publisher for them.

The demo points these at the emulator (:mod:`.kube_emulator`); the objects are shaped as a
real API server returns them (labels the NVIDIA GPU operator sets, ``nvidia.com/gpu``
capacity, pod conditions with transition times, ``containerID`` with the runtime prefix) so
the inventory collector reads them exactly as it would read a real cluster. Everything goes
through the official ``kubernetes`` client.

- :func:`node_body`: a Node per simulated node;
- :func:`pending_pod_body` and :func:`owner_bodies`: what a workload creates, a Pending pod
  (no node) with ``ownerReferences`` to its ReplicaSet (of a Deployment), Job or StatefulSet;
  a share of one GPU written as HAMi's resources ``nvidia.com/gpucores`` and
  ``nvidia.com/gpumem-percentage`` next to ``nvidia.com/gpu: 1``; an inference server's
  vLLM command line (``--gpu-memory-utilization`` among it) as its container's ``args``;
- :func:`running_status`: the status the node's kubelet reports once it runs the pod;
- :func:`spec_of`: the simulated work of a pod read back from its manifest (:mod:`.kubelet`);
- :class:`KubePublisher`: the standalone cluster's pods (placed by the node model itself)
  created already Running, for tests of the inventory without a scheduler.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from kubernetes import client as k8s_client
from kubernetes.client.exceptions import ApiException

from sits_observe.analytics.placement.device_plugin import DEFAULT_SPLIT_COUNT
from sits_observe.analytics.serving.step_profiles import GPU_FB_TOTAL_MIB, GPU_PRODUCTS
from sits_observe.domain.quantity import format_quantity, parse_quantity
from sits_observe.errors import ParseError
from sits_observe.lab.cluster.cluster import PodEvent, SimNode, SimPod, SimulatedCluster
from sits_observe.lab.cluster.pod_labels import affinity_labels
from sits_observe.lab.cluster.pods.specs import (
    ENV_DURATION_S,
    ENV_GPU_PEAK_BYTES,
    WHOLE_GPU_PERCENT,
    Owner,
    PodKind,
    PodSpec,
)

#: The image every simulated container runs.
IMAGE = "registry.example/sim:1"
#: HAMi's per-container share resources (percent of one device's cores / memory).
HAMI_CORES = "nvidia.com/gpucores"
HAMI_MEMORY_PERCENT = "nvidia.com/gpumem-percentage"
#: Seconds from start to Ready: model load for an inference server, CUDA context otherwise.
WARMUP_S = {"llm": 20.0, "batch": 2.0, "notebook": 2.0}
KIND_LABEL = "sits.io/sim-kind"
PRODUCT_LABEL = "nvidia.com/gpu.product"
#: HAMi's node annotation listing its registered devices.
NODE_REGISTER_ANNOTATION = "hami.io/node-nvidia-register"

log = logging.getLogger(__name__)


def _ts(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def node_body(node: SimNode) -> dict[str, Any]:
    """A Node object for one simulated node."""
    # As a kubelet reports them: whole cores, memory in Ki (not the canonical form).
    capacity = {
        "cpu": str(node.cpu_milli // 1000),
        "memory": f"{node.memory_bytes // 1024}Ki",
        "nvidia.com/gpu": str(len(node.gpus)),
        "pods": "110",
    }
    product = GPU_PRODUCTS[node.kind]
    # HAMi's device registration: UUID,split count,memory MiB,cores %,type,NUMA,health per GPU.
    register = ":".join(
        f"{g.uuid},{DEFAULT_SPLIT_COUNT},{GPU_FB_TOTAL_MIB[node.kind]},100,{product},0,true"
        for g in node.gpus
    )
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": node.name,
            "annotations": {NODE_REGISTER_ANNOTATION: register},
            "labels": {
                "kubernetes.io/hostname": node.name,
                "nvidia.com/gpu.present": "true",
                "nvidia.com/gpu.product": product,
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
        cpu = format_quantity(pod.cpu_request_milli, "millicores")
        resources["requests"]["cpu"] = resources["limits"]["cpu"] = cpu
    if pod.memory_request_bytes:
        memory = format_quantity(pod.memory_request_bytes, "bytes")
        resources["requests"]["memory"] = resources["limits"]["memory"] = memory
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
                {
                    "name": c.name,
                    "image": "registry.example/sim:1",
                    **({"args": list(pod.args)} if pod.args else {}),
                    "resources": resources,
                }
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


# -- what the workloads create ----------------------------------------------------------


def _resources(spec: PodSpec) -> dict[str, dict[str, str]]:
    requests: dict[str, str] = {}
    limits: dict[str, str] = {}
    if spec.cpu_request_milli:
        requests["cpu"] = format_quantity(spec.cpu_request_milli, "millicores")
    if spec.cpu_limit_cores:
        limits["cpu"] = format_quantity(int(spec.cpu_limit_cores * 1000), "millicores")
    if spec.memory_request_bytes:
        requests["memory"] = format_quantity(spec.memory_request_bytes, "bytes")
    if spec.memory_limit_bytes:
        limits["memory"] = format_quantity(spec.memory_limit_bytes, "bytes")
    if spec.num_gpu:
        requests["nvidia.com/gpu"] = limits["nvidia.com/gpu"] = str(spec.num_gpu)
        if spec.gpu_percent < WHOLE_GPU_PERCENT:
            limits[HAMI_CORES] = limits[HAMI_MEMORY_PERCENT] = str(spec.gpu_percent)
    return {"requests": requests, "limits": limits}


def _labels(spec: PodSpec) -> dict[str, str]:
    # The model and precision a GPU pod declares (read by the affinity and TopologyManager
    # advice, as from a real pod's labels).
    labels = {"app": spec.workload, KIND_LABEL: spec.kind, **affinity_labels(spec)}
    if spec.owner.kind == "ReplicaSet":
        labels["pod-template-hash"] = spec.template_hash
    elif spec.owner.kind == "Job":
        labels["job-name"] = labels["batch.kubernetes.io/job-name"] = spec.owner.name
    elif spec.owner.kind == "StatefulSet":
        labels["statefulset.kubernetes.io/pod-name"] = spec.name
    return labels


def _template(spec: PodSpec) -> dict[str, Any]:
    env = [{"name": ENV_GPU_PEAK_BYTES, "value": str(spec.gpu_peak_bytes)}]
    if spec.duration_s is not None:
        env.append({"name": ENV_DURATION_S, "value": repr(spec.duration_s)})
    container: dict[str, Any] = {"name": spec.container, "image": IMAGE}
    if spec.args:
        container["args"] = list(spec.args)
    container |= {"env": env, "resources": _resources(spec)}
    template: dict[str, Any] = {
        "schedulerName": "default-scheduler",
        "priorityClassName": spec.priority_class,
        "restartPolicy": "Never" if spec.owner.kind == "Job" else "Always",
        "containers": [container],
    }
    if spec.gpu_types:
        term = {"key": PRODUCT_LABEL, "operator": "In", "values": list(spec.gpu_types)}
        template["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [term]}]
                }
            }
        }
    return template


def pending_pod_body(spec: PodSpec) -> dict[str, Any]:
    """The Pending pod a workload's controller creates for ``spec`` (no node yet)."""
    owner = spec.owner
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": spec.name,
            "namespace": spec.namespace,
            "uid": spec.uid,
            "labels": _labels(spec),
            "ownerReferences": [
                {
                    "apiVersion": owner.api_version,
                    "kind": owner.kind,
                    "name": owner.name,
                    "uid": owner.uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": _template(spec),
        # The API server sets these on create (the emulator stores status as sent).
        "status": {"phase": "Pending", "qosClass": spec.qos_class},
    }


def owner_bodies(spec: PodSpec, top: Owner | None = None) -> list[tuple[str, dict[str, Any]]]:
    """``(plural, body)`` of the objects that own ``spec``'s pod, outermost first; ``top`` is
    the Deployment above a ReplicaSet."""
    owner = spec.owner
    template = {"metadata": {"labels": _labels(spec)}, "spec": _template(spec)}
    bodies: list[tuple[str, dict[str, Any]]] = []
    if owner.kind == "ReplicaSet" and top is not None:
        bodies.append(
            (
                "deployments",
                _owned_body(top, None, {"replicas": 1, "template": template}, spec),
            )
        )
    extra: dict[str, Any] = {"template": template}
    if owner.kind == "Job":
        extra.update(backoffLimit=0, completions=1, parallelism=1)
    else:
        extra["replicas"] = 1
    plural = {"ReplicaSet": "replicasets", "Job": "jobs", "StatefulSet": "statefulsets"}
    bodies.append((plural[owner.kind], _owned_body(owner, top, extra, spec)))
    return bodies


def _owned_body(
    owner: Owner, parent: Owner | None, spec_fields: dict[str, Any], pod: PodSpec
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": owner.name,
        "namespace": pod.namespace,
        "uid": owner.uid,
        "labels": {"app": pod.workload},
    }
    if parent is not None:
        meta["ownerReferences"] = [
            {
                "apiVersion": parent.api_version,
                "kind": parent.kind,
                "name": parent.name,
                "uid": parent.uid,
                "controller": True,
            }
        ]
    selector = {"matchLabels": {"app": pod.workload}}
    return {
        "apiVersion": owner.api_version,
        "kind": owner.kind,
        "metadata": meta,
        "spec": {"selector": selector, **spec_fields},
    }


def running_status(pod: SimPod, started_at: datetime, *, ready: bool) -> dict[str, Any]:
    """The ``status`` a kubelet reports for ``pod`` running since ``started_at``."""
    ready_at = started_at + timedelta(seconds=WARMUP_S.get(pod.kind, 2.0))
    flag = "True" if ready else "False"
    conditions = [
        {"type": "Initialized", "status": "True", "lastTransitionTime": _ts(started_at)},
        {
            "type": "ContainersReady",
            "status": flag,
            "lastTransitionTime": _ts(ready_at if ready else started_at),
        },
        {
            "type": "Ready",
            "status": flag,
            "lastTransitionTime": _ts(ready_at if ready else started_at),
        },
    ]
    return {
        "phase": "Running",
        "qosClass": pod.qos_class,
        "startTime": _ts(started_at),
        "conditions": conditions,
        "containerStatuses": [
            {
                "name": c.name,
                "containerID": f"containerd://{c.container_id}",
                "ready": ready,
                "restartCount": 0,
                "image": IMAGE,
                "imageID": "",
                "state": {"running": {"startedAt": _ts(started_at)}},
            }
            for c in pod.containers
        ],
    }


# -- what the kubelet reads back ---------------------------------------------------------


def _quantity(raw: Any) -> Decimal | None:
    try:
        return None if raw is None else parse_quantity(raw)
    except ParseError:
        return None


def spec_of(
    manifest: dict[str, Any],
    *,
    num_gpu: int,
    gpu_milli: int,
    gpu_types: tuple[str, ...] = (),
) -> PodSpec:
    """The simulated work of a pod created by :func:`pending_pod_body` (or one like it).

    The GPU request and products come from the caller (the one reader of a pod's GPU
    request); CPU and memory limits, the kind, the main container's arguments (a vLLM
    server's ``--gpu-memory-utilization``) and the simulated work are read here. Raises
    ``ValueError`` for a pod without containers.
    """
    meta = manifest.get("metadata") or {}
    pod_spec = manifest.get("spec") or {}
    containers = pod_spec.get("containers") or []
    if not containers:
        raise ValueError(f"pod {meta.get('name')!r} has no containers")
    main = containers[0]
    resources = main.get("resources") or {}
    requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
    env = {e.get("name"): e.get("value") for e in main.get("env") or () if isinstance(e, dict)}
    cpu_limit = _quantity(limits.get("cpu"))
    memory_limit = _quantity(limits.get("memory"))
    cpu_request = _quantity(requests.get("cpu", limits.get("cpu")))
    memory_request = _quantity(requests.get("memory", limits.get("memory")))
    duration = env.get(ENV_DURATION_S)
    owners = meta.get("ownerReferences") or [{}]
    owner = owners[0]
    labels = meta.get("labels") or {}
    kinds: dict[str, PodKind] = {"llm": "llm", "batch": "batch", "notebook": "notebook"}
    kind = kinds.get(str(labels.get(KIND_LABEL)), "batch")
    status = manifest.get("status") or {}
    return PodSpec(
        kind=kind,
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        owner=Owner(
            str(owner.get("apiVersion") or ""),
            str(owner.get("kind") or ""),
            str(owner.get("name") or ""),
            str(owner.get("uid") or ""),
        ),
        workload=str(labels.get("app") or meta.get("name") or ""),
        container=str(main.get("name") or "main"),
        num_gpu=num_gpu,
        gpu_percent=gpu_milli // 10 if num_gpu else WHOLE_GPU_PERCENT,
        cpu_request_milli=int((cpu_request or 0) * 1000),
        memory_request_bytes=int(memory_request or 0),
        memory_limit_bytes=None if memory_limit is None else int(memory_limit),
        cpu_limit_cores=None if cpu_limit is None else float(cpu_limit),
        qos_class=str(status.get("qosClass") or "BestEffort"),
        priority_class=str(pod_spec.get("priorityClassName") or ""),
        gpu_peak_bytes=int(env.get(ENV_GPU_PEAK_BYTES) or 0),
        duration_s=None if duration is None else float(duration),
        template_hash=str(labels.get("pod-template-hash") or ""),
        gpu_types=gpu_types,
        args=tuple(str(a) for a in main.get("args") or ()),
    )


class KubePublisher:
    """Mirrors the standalone simulated cluster into a Kubernetes API (see module docstring)."""

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
