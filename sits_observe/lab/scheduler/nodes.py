"""The live scheduler's cache: the scheduler model's NodeInfos built from API Nodes and Pods.

What kube-scheduler's cache holds, rebuilt from one list of Nodes and one of Pods (the live
scheduler, :mod:`.scheduler_loop`, does it each pass; kube-scheduler keeps it current from
watches):

- **nodes**: those without ``spec.unschedulable``, in name order (a stable order, so the
  model's rotating start index walks the same list every pass); allocatable ``cpu``,
  ``memory`` and ``nvidia.com/gpu``; the ``nvidia.com/gpu.product`` label; the GPU UUIDs from
  the node's HAMi device registration annotation ``hami.io/node-nvidia-register`` (HAMi's
  ``UUID,count,memory,cores,type,numa,health`` entries separated by ``:``; a JSON list of
  ``{"id": ...}`` objects is read too), else ``GPU-<node>-<index>``;
- **bound pods** (a ``spec.nodeName``, not ``Succeeded`` / ``Failed``): their requests
  (:func:`sits_observe.collectors.kube.pods.pod_requests`, the inventory's rule) are assumed on
  their node, on the GPUs HAMi's allocation annotation names; a pod not yet given its GPUs
  (bound moments ago) is assumed on the GPUs the device plugin model would pick, which is what
  a device-aware scheduler (HAMi's) does with a pod in flight;
- **pending pods**: no node, phase ``Pending``, this scheduler's ``schedulerName`` (or none),
  in kube-scheduler's queue order: higher ``spec.priority`` first, then older.

The GPU part of every pod is read by :func:`sits_observe.collectors.kube.gpu.pod_gpu_request`.
Pods and nodes that cannot be read are skipped and counted in :attr:`ClusterState.skipped`.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_CEILING, Decimal
from typing import Any

import numpy as np

from sits_observe.analytics.placement.device_plugin import (
    DEFAULT_SPLIT_COUNT,
    DeviceAllocationError,
    allocate_gpus,
)
from sits_observe.collectors.kube.gpu import GPU_RESOURCE, GpuRequest, pod_gpu_request
from sits_observe.collectors.kube.json_shapes import Malformed
from sits_observe.collectors.kube.pods import pod_requests
from sits_observe.domain.quantity import quantity_milli, quantity_value
from sits_observe.errors import ParseError
from sits_observe.lab.scheduler.kube_nodes import GPU_PRODUCT_LABEL, NodeInfos, SchedPod

JsonObject = dict[str, Any]
#: HAMi's node annotation listing the devices its device plugin registered.
NODE_REGISTER_ANNOTATION = "hami.io/node-nvidia-register"
DEFAULT_SCHEDULER = "default-scheduler"
_TERMINAL = frozenset({"Succeeded", "Failed"})


@dataclass
class ClusterState:
    """One pass's cache: the nodes with bound pods assumed, and the queue of pending pods."""

    nodes: NodeInfos
    pending: list[SchedPod]
    skipped: Counter[str] = field(default_factory=Counter)


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = obj.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def node_gpu_uuids(node: Mapping[str, Any], count: int) -> tuple[str, ...]:
    """The node's GPU UUIDs from HAMi's registration annotation, else ``GPU-<node>-<i>``."""
    name = str(_meta(node).get("name"))
    annotations = _meta(node).get("annotations")
    raw = annotations.get(NODE_REGISTER_ANNOTATION) if isinstance(annotations, Mapping) else None
    found: list[str] = []
    if isinstance(raw, str) and raw.strip().startswith("["):
        try:
            entries = json.loads(raw)
        except ValueError:
            entries = []
        found = [str(e["id"]) for e in entries if isinstance(e, dict) and e.get("id")]
    elif isinstance(raw, str):
        found = [d.split(",", 1)[0].strip() for d in raw.split(":") if d.split(",", 1)[0].strip()]
    if len(found) == count:
        return tuple(found)
    return tuple(f"GPU-{name}-{g}" for g in range(count))


def _node_row(node: Mapping[str, Any]) -> tuple[str, int, int, int, str, tuple[str, ...]]:
    status = node.get("status")
    allocatable = status.get("allocatable") if isinstance(status, Mapping) else None
    if not isinstance(allocatable, Mapping):
        raise ParseError("node has no status.allocatable")
    gpus = quantity_value(allocatable.get(GPU_RESOURCE, 0))
    labels = _meta(node).get("labels")
    product = labels.get(GPU_PRODUCT_LABEL, "") if isinstance(labels, Mapping) else ""
    return (
        str(_meta(node)["name"]),
        quantity_milli(allocatable.get("cpu", 0)),
        quantity_value(allocatable.get("memory", 0)),
        gpus,
        str(product),
        node_gpu_uuids(node, gpus),
    )


def _requests(pod: Mapping[str, Any]) -> dict[str, Decimal]:
    spec = _spec(pod)
    try:
        requests, bad = pod_requests(spec.get("containers") or (), spec.get("initContainers") or ())
    except Malformed as exc:
        raise ParseError(f"malformed containers: {exc}") from exc
    if bad:
        raise ParseError(f"unreadable request(s) for {', '.join(sorted(bad))}")
    return requests


def read_gpu_request(pod: Mapping[str, Any]) -> GpuRequest:
    """A pod's GPU request: the effective ``nvidia.com/gpu`` count by the inventory's rule,
    then the one GPU reader. A pod whose requests cannot be read asks for no GPU."""
    try:
        requests = _requests(pod)
    except ParseError:
        requests = {}
    return pod_gpu_request(pod, int(requests.get(GPU_RESOURCE, Decimal(0))))


def sched_pod(pod: Mapping[str, Any]) -> tuple[SchedPod, GpuRequest]:
    """The scheduler model's view of ``pod`` (its manifest as the extenders get it)."""
    requests = _requests(pod)
    gpu = pod_gpu_request(pod, int(requests.get(GPU_RESOURCE, Decimal(0))))
    meta = _meta(pod)
    cpu = requests.get("cpu", Decimal(0)) * 1000
    return (
        SchedPod(
            namespace=str(meta.get("namespace") or ""),
            name=str(meta.get("name") or ""),
            uid=str(meta.get("uid") or ""),
            cpu_milli=int(cpu.to_integral_value(rounding=ROUND_CEILING)),
            memory_bytes=int(requests.get("memory", Decimal(0))),
            num_gpu=gpu.num_gpu,
            gpu_milli=gpu.gpu_milli,
            gpu_types=gpu.gpu_types,
            manifest=dict(pod),
        ),
        gpu,
    )


def predicted_gpus(
    nodes: NodeInfos, node: int, pod: SchedPod, hint: Sequence[str], split_count: int
) -> tuple[int, ...]:
    """The GPUs the node's device plugin model gives ``pod`` now; DeviceAllocationError if none."""
    return allocate_gpus(
        nodes.gpu_free_milli[node],
        nodes.gpu_pods[node],
        nodes.gpu_uuids[node],
        num_gpu=pod.num_gpu,
        gpu_milli=pod.gpu_milli,
        hint=hint,
        split_count=split_count,
    )


#: Pods already read, by (uid, resourceVersion): :func:`cluster_state`'s ``parsed``.
ParsedPods = dict[tuple[str, str], tuple[SchedPod, GpuRequest]]


def cluster_state(
    nodes: Sequence[Mapping[str, Any]],
    pods: Sequence[Mapping[str, Any]],
    *,
    scheduler_name: str = DEFAULT_SCHEDULER,
    split_count: int = DEFAULT_SPLIT_COUNT,
    parsed: ParsedPods | None = None,
) -> ClusterState:
    """The cache of one pass (see the module docstring).

    ``parsed`` carries the pods read in the previous pass, by uid and resourceVersion: a pod
    whose version is unchanged is not read again (most pods, from one pass to the next). On
    return it holds this pass's pods only."""
    seen: ParsedPods = {}
    skipped: Counter[str] = Counter()
    rows = []
    for node in sorted(nodes, key=lambda n: str(_meta(n).get("name"))):
        if _spec(node).get("unschedulable"):
            continue
        try:
            rows.append(_node_row(node))
        except (ParseError, KeyError):
            skipped["node"] += 1
    infos = NodeInfos.empty(
        [r[0] for r in rows],
        cpu_milli=[r[1] for r in rows],
        memory_bytes=[r[2] for r in rows],
        gpu_count=[r[3] for r in rows],
        gpu_model=[r[4] for r in rows],
        gpu_uuids=[r[5] for r in rows],
    )
    pending: list[tuple[int, str, SchedPod]] = []
    for pod in pods:
        status = pod.get("status")
        phase = status.get("phase") if isinstance(status, Mapping) else None
        if phase in _TERMINAL:
            continue
        node_name = _spec(pod).get("nodeName")
        meta = _meta(pod)
        version = (str(meta.get("uid") or ""), str(meta.get("resourceVersion") or ""))
        known = parsed.get(version) if parsed is not None and all(version) else None
        try:
            sched, gpu = known or sched_pod(pod)
        except ParseError:
            skipped["pod"] += 1
            continue
        if all(version):
            seen[version] = (sched, gpu)
        if node_name:
            _assume_bound(
                infos, str(node_name), sched, gpu, skipped=skipped, split_count=split_count
            )
            continue
        wanted = _spec(pod).get("schedulerName") or DEFAULT_SCHEDULER
        if phase == "Pending" and wanted == scheduler_name:
            priority = _spec(pod).get("priority")
            created = str(_meta(pod).get("creationTimestamp") or "")
            pending.append((-int(priority) if isinstance(priority, int) else 0, created, sched))
    pending.sort(key=lambda p: (p[0], p[1]))
    if parsed is not None:
        parsed.clear()
        parsed.update(seen)
    return ClusterState(infos, [p[2] for p in pending], skipped)


def _assume_bound(
    infos: NodeInfos,
    node_name: str,
    pod: SchedPod,
    gpu: GpuRequest,
    *,
    skipped: Counter[str],
    split_count: int,
) -> None:
    node = infos.index.get(node_name)
    if node is None:
        skipped["pod_on_unknown_node"] += 1
        return
    if not pod.num_gpu:
        infos.assume(node, pod, ())
        return
    uuids = infos.gpu_uuids[node]
    gpus = tuple(uuids.index(u) for u in gpu.allocated_uuids if u in uuids)
    if len(gpus) != pod.num_gpu:
        try:
            gpus = predicted_gpus(infos, node, pod, gpu.hint_uuids, split_count)
        except DeviceAllocationError:
            # Over-committed as far as the cache knows: count its CPU and memory only.
            skipped["pod_gpus_unplaceable"] += 1
            cpu_only = SchedPod(
                pod.namespace, pod.name, pod.uid, pod.cpu_milli, pod.memory_bytes, 0, 0, (), {}
            )
            infos.assume(node, cpu_only, ())
            return
    infos.assume(node, pod, gpus)


def free_gpus(infos: NodeInfos) -> int:
    """Whole free GPUs over the cluster (for progress displays)."""
    return int(np.sum(infos.gpu_free_milli >= 1000))
