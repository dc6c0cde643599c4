"""One ``pods`` inventory row from a Pod's JSON: requests, QoS, workload, containers, GPUs.

Rules (every Kubernetes JSON key of a pod stays inside this module and the GPU reader):

- A pod's request per resource is what the scheduler reserves: a container's request defaults
  to its limit, and init containers are counted by the rule in "Init containers - Resource
  sharing within containers" and "Sidecar containers - Resource sharing" (kubernetes.io/docs/
  concepts/workloads/pods/init-containers/ and .../sidecar-containers/):
  ``max(sum(app) + sum(sidecars), max over init i of (init_i + sidecars started before i))``.
  Pod ``overhead`` (RuntimeClass) and pod-level ``resources`` (1.32+) are not added.
- QoS is ``status.qosClass``; when absent it is derived like ``GetPodQOS``
  (pkg/apis/core/helper/qos): only CPU and memory count, over app and init containers.
- Condition times are the ``lastTransitionTime`` of conditions whose status is ``True``.
- The GPU columns come from :func:`sits_observe.collectors.kube.gpu.pod_gpu_request`, the one
  reader of a pod's GPU request: ``gpu_milli`` the share of each device (1000 = whole; NULL
  for a CPU-only pod or an unreadable device count), ``gpu_types`` the allowed products
  ``|``-joined (NULL = any), ``gpu_uuids`` the devices the device plugin assigned (HAMi's
  allocation annotation), comma-joined in its order (NULL = unknown). A GPU field the reader
  could not use is counted once per problem as ``pod_bad_gpu_request``; the row keeps the
  default (a whole GPU, any product). ``gpu_stack_json`` keeps the pod-spec facts its GPU
  stack is read from (:mod:`sits_observe.collectors.kube.gpu_stack`), NULL when it has none.

A malformed pod raises :class:`~sits_observe.collectors.kube.json_shapes.Malformed`; an unreadable
quantity NULLs that column and is counted (``pod_bad_quantity``), as is an unreadable time
(``pod_bad_timestamp``).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from decimal import ROUND_CEILING, Decimal
from typing import Any, cast

from sits_observe.collectors.kube.gpu import GPU_RESOURCE, pod_gpu_request
from sits_observe.collectors.kube.gpu_stack import gpu_stack_json
from sits_observe.collectors.kube.json_shapes import (
    ContainerStatusJson,
    OwnerReferenceJson,
    PodJson,
    condition_times,
    identity,
    obj,
    seq,
    text,
    timestamp,
)
from sits_observe.domain.quantity import parse_quantity
from sits_observe.errors import ParseError

_REQUESTED = ("cpu", "memory", GPU_RESOURCE)
#: pod-template-hash: the decimal FNV-32 hash of the pod template, each digit mapped into the
#: alphabet of k8s.io/apimachinery rand.SafeEncodeString (so 1-10 characters, nearly always
#: 5 or more). Only used when a pod lacks its ``pod-template-hash`` label.
_TEMPLATE_HASH = re.compile(r"^[bcdfghjklmnpqrstvwxz2456789]{5,10}$")
_RUNTIME_PREFIX = re.compile(r"^[a-z0-9.+-]+://")


def _container_resources(container: Mapping[str, Any]) -> tuple[dict[str, Decimal], set[str]]:
    """(resource -> request, defaulting to the limit; resources whose quantity is unreadable)."""
    resources = obj(container.get("resources"), "resources")
    requests = obj(resources.get("requests"), "resources.requests")
    limits = obj(resources.get("limits"), "resources.limits")
    out: dict[str, Decimal] = {}
    bad: set[str] = set()
    for key in _REQUESTED:
        raw = requests.get(key, limits.get(key))
        if raw is None:
            continue
        try:
            out[key] = parse_quantity(raw)
        except ParseError:
            bad.add(key)
    return out, bad


def pod_requests(
    containers: Iterable[Mapping[str, Any]], init_containers: Iterable[Mapping[str, Any]]
) -> tuple[dict[str, Decimal], set[str]]:
    """The pod's effective request per resource and the resources that were unreadable.

    ``max(sum(app) + sum(sidecars), max over init i of (init_i + sidecars started before i))``,
    where a sidecar is an init container with ``restartPolicy: Always`` (its own peak counts
    the sidecars started before it and itself).
    """
    zero = Decimal(0)
    bad: set[str] = set()
    app = dict.fromkeys(_REQUESTED, zero)
    for container in containers:
        req, b = _container_resources(container)
        bad |= b
        for key, value in req.items():
            app[key] += value
    sidecars = dict.fromkeys(_REQUESTED, zero)
    init_peak = dict.fromkeys(_REQUESTED, zero)
    for container in init_containers:
        req, b = _container_resources(container)
        bad |= b
        sidecar = container.get("restartPolicy") == "Always"
        for key in _REQUESTED:
            if sidecar:
                sidecars[key] += req.get(key, zero)
                during = sidecars[key]
            else:
                during = req.get(key, zero) + sidecars[key]
            init_peak[key] = max(init_peak[key], during)
    total = {key: max(app[key] + sidecars[key], init_peak[key]) for key in _REQUESTED}
    return total, bad


def derive_qos(containers: Iterable[Mapping[str, Any]]) -> str:
    """QoS class from container resources, as ``GetPodQOS`` computes it (CPU and memory)."""
    requests: dict[str, Decimal] = {}
    limits: dict[str, Decimal] = {}
    guaranteed = True
    for container in containers:
        resources = obj(container.get("resources"), "resources")
        req = obj(resources.get("requests"), "resources.requests")
        lim = obj(resources.get("limits"), "resources.limits")
        found_limits = set()
        for key in ("cpu", "memory"):
            limit = _maybe_quantity(lim.get(key))
            request = _maybe_quantity(req.get(key))
            request = limit if request is None else request  # API defaulting: request = limit
            if request:
                requests[key] = requests.get(key, Decimal(0)) + request
            if limit:
                limits[key] = limits.get(key, Decimal(0)) + limit
                found_limits.add(key)
        if found_limits != {"cpu", "memory"}:
            guaranteed = False
    if not requests and not limits:
        return "BestEffort"
    if (
        guaranteed
        and requests.keys() == limits.keys()
        and all(requests[k] == limits[k] for k in requests)
    ):
        return "Guaranteed"
    return "Burstable"


def _maybe_quantity(raw: Any) -> Decimal | None:
    if raw is None:
        return None
    try:
        return parse_quantity(raw)
    except ParseError:
        return None


def workload_of(
    owner_kind: str | None, owner_name: str | None, labels: Mapping[str, Any], pod: str
) -> str:
    """The top-level workload: a ReplicaSet's Deployment, else the owner, else the pod."""
    if owner_kind is None or owner_name is None:
        return pod
    if owner_kind == "ReplicaSet":
        template_hash = labels.get("pod-template-hash")
        if isinstance(template_hash, str) and owner_name.endswith(f"-{template_hash}"):
            return owner_name[: -len(template_hash) - 1]
        head, _, tail = owner_name.rpartition("-")
        if head and _TEMPLATE_HASH.match(tail):
            return head
    return owner_name


def _controller(meta: Mapping[str, Any]) -> tuple[str | None, str | None]:
    for raw in seq(meta.get("ownerReferences"), "metadata.ownerReferences"):
        ref = cast(OwnerReferenceJson, obj(raw, "ownerReference"))
        if ref.get("controller") is True:
            return text(ref.get("kind")), text(ref.get("name"))
    return None, None


def _containers_json(spec: Mapping[str, Any], status: Mapping[str, Any]) -> str:
    ids: dict[str, str | None] = {}
    for key in ("initContainerStatuses", "containerStatuses", "ephemeralContainerStatuses"):
        for raw in seq(status.get(key), f"status.{key}"):
            st = cast(ContainerStatusJson, obj(raw, "container status"))
            name = text(st.get("name"))
            cid = text(st.get("containerID"))
            if name is not None:
                ids[name] = _RUNTIME_PREFIX.sub("", cid) if cid else None
    entries: list[dict[str, str | None]] = []
    for key in ("initContainers", "containers", "ephemeralContainers"):
        for raw in seq(spec.get(key), f"spec.{key}"):
            name = text(obj(raw, "container").get("name"))
            if name is not None:
                entries.append({"name": name, "container_id": ids.pop(name, None)})
    entries.extend({"name": n, "container_id": c} for n, c in ids.items())
    return json.dumps(entries)


def _gpu_columns(
    pod: Mapping[str, Any], num_gpu: int | None, dropped: Counter[str]
) -> dict[str, Any]:
    """``gpu_milli``, ``gpu_types``, ``gpu_uuids``, ``gpu_stack_json`` (module docstring)."""
    request = pod_gpu_request(pod, max(num_gpu or 0, 0))
    if num_gpu is not None and request.problems:
        dropped["pod_bad_gpu_request"] += len(request.problems)
    gpu_pod = num_gpu is not None and request.num_gpu > 0
    return {
        "gpu_milli": request.gpu_milli if gpu_pod else None,
        "gpu_types": "|".join(request.gpu_types) if gpu_pod and request.gpu_types else None,
        "gpu_uuids": ",".join(request.allocated_uuids) or None,
        "gpu_stack_json": gpu_stack_json(pod),
    }


def pod_row(item: Any, dropped: Counter[str]) -> dict[str, Any]:
    """One ``pods`` row (without ``ts``) from a Pod's JSON; raises ``Malformed``."""
    pod = cast(PodJson, obj(item, "pod", required=True))
    meta = obj(pod.get("metadata"), "metadata", required=True)
    spec = obj(pod.get("spec"), "spec")
    status = obj(pod.get("status"), "status")
    labels = obj(meta.get("labels"), "metadata.labels")
    obj(meta.get("annotations"), "metadata.annotations")
    name = identity(meta, "name")
    containers = [obj(c, "container") for c in seq(spec.get("containers"), "spec.containers")]
    init = [obj(c, "container") for c in seq(spec.get("initContainers"), "spec.initContainers")]
    requests, bad = pod_requests(containers, init)
    # A quantity the API server capped at 2^63-1 fits no int64 column once in milli-CPU.
    bad |= {key for key, scale in _SCALES.items() if _ceil(requests[key] * scale) > _INT64_MAX}
    if bad:
        dropped["pod_bad_quantity"] += len(bad)
    owner_kind, owner_name = _controller(meta)
    conditions = condition_times(
        seq(status.get("conditions"), "status.conditions"), "pod_bad_timestamp", dropped
    )
    gpus = None if GPU_RESOURCE in bad else _ceil(requests[GPU_RESOURCE])
    return {
        "pod_uid": identity(meta, "uid"),
        "namespace": identity(meta, "namespace"),
        "pod": name,
        "node": text(spec.get("nodeName")),
        "phase": text(status.get("phase")),
        "qos_class": text(status.get("qosClass")) or derive_qos([*init, *containers]),
        "owner_kind": owner_kind,
        "owner_name": owner_name,
        "workload": workload_of(owner_kind, owner_name, labels, name),
        "gpu_request": gpus,
        "cpu_request_milli": None if "cpu" in bad else _ceil(requests["cpu"] * 1000),
        "memory_request_bytes": None if "memory" in bad else _ceil(requests["memory"]),
        "priority_class": text(spec.get("priorityClassName")),
        "containers_json": _containers_json(spec, status),
        "created_at": timestamp(meta.get("creationTimestamp"), "pod_bad_timestamp", dropped),
        "scheduled_at": conditions.get("PodScheduled"),
        "initialized_at": conditions.get("Initialized"),
        "containers_ready_at": conditions.get("ContainersReady"),
        "ready_at": conditions.get("Ready"),
        **_gpu_columns(pod, gpus, dropped),
    }


#: The ``pods`` columns' unit per resource (CPU in milli-cores), and int64's largest value.
_SCALES = {"cpu": 1000, "memory": 1, GPU_RESOURCE: 1}
_INT64_MAX = 2**63 - 1


def _ceil(value: Decimal) -> int:
    return int(value.to_integral_value(rounding=ROUND_CEILING))
