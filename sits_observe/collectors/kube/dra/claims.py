"""Allocations from ResourceClaims: which pod holds which DRA device, and how much of it.

A ResourceClaim's ``status.allocation.devices.results[]`` names each allocated device by
``(driver, pool, device)``, with ``shareID`` and ``consumedCapacity`` when the device allows
multiple allocations (KEP-5075, consumable capacity). Its consumers are read from both sides:

- the claim's ``status.reservedFor[]`` entries of resource ``pods`` (name and uid);
- the pods' ``status.resourceClaimStatuses[]`` (pod claim name -> generated claim name, for
  claims made from templates), ``spec.resourceClaims[].resourceClaimName`` (a claim shared by
  name) and ``status.extendedResourceClaimStatus`` (the claim the scheduler made for an
  extended resource such as ``nvidia.com/gpu`` served by DRA, GA in 1.37).

The sharing mode is NVIDIA's opaque ``GpuConfig`` in ``status.allocation.devices.config[]``
(``parameters.sharing.strategy``: ``TimeSlicing`` or ``MPS``; api/nvidia.com/resource/v1beta1
``sharing.go``), applying to the requests it lists (none listed: all of the claim's).

**Share of a GPU** (milli-GPU, 1000 = a whole physical GPU) held by one allocation result:
the device's part of its GPU (a MIG device: its memory over the GPU's) times the part of the
device consumed (``consumedCapacity.memory`` over the device's memory, else
``consumedCapacity.shares`` over its ``shares``), rounded up. A claim whose devices several
pods reserve (time-slicing, MPS, one claim in many pods) is counted once: each consumer is
given the share divided by the number of consumers, so shares never add up past the device.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, cast

from sits_observe.collectors.kube.dra.shapes import (
    DeviceRequestAllocationResultJson,
    ResourceClaimJson,
    quantity,
)
from sits_observe.collectors.kube.dra.slices import DraDevice
from sits_observe.collectors.kube.json_shapes import (
    Malformed,
    identity,
    obj,
    seq,
    text,
    timestamp,
)

MILLI_PER_GPU = 1000


@dataclass(frozen=True)
class PodRef:
    """A pod that consumes a claim."""

    uid: str
    name: str | None
    pod_claim: str | None = None
    extended: bool = False


@dataclass(frozen=True)
class DraAllocation:
    """One allocated device of one claim, seen from one consumer (or none). Units: bytes,
    milli-GPU."""

    namespace: str
    claim: str
    claim_uid: str | None
    pod: PodRef | None
    consumers: int
    request: str | None
    driver: str
    pool: str
    device: str
    share_id: str | None
    consumed_memory_bytes: int | None
    #: The part of one physical GPU the result holds (before dividing among consumers).
    share_milli: int
    sharing_strategy: str | None
    allocated_at: datetime | None
    found: DraDevice | None

    @property
    def pod_share_milli(self) -> int:
        """The part of the GPU each consumer is given."""
        return max(1, math.ceil(self.share_milli / max(self.consumers, 1)))


@dataclass
class PodDra:
    """What DRA gives one pod: devices (by key), their shares, and requests still waiting."""

    devices: dict[tuple[str, str, str], int] = field(default_factory=dict)
    extended_devices: set[tuple[str, str, str]] = field(default_factory=set)
    gpu_uuids: list[str] = field(default_factory=list)
    pending_gpus: int = 0


@dataclass(frozen=True)
class ClaimsRead:
    """Every allocation row and, per pod uid, what DRA gives it."""

    allocations: tuple[DraAllocation, ...]
    pods: Mapping[str, PodDra]


def pod_claims(pods: Iterable[Any]) -> dict[tuple[str, str], list[PodRef]]:
    """``(namespace, claim name)`` -> the pods that reference it (module docstring)."""
    out: dict[tuple[str, str], list[PodRef]] = defaultdict(list)
    for item in pods:
        try:
            pod = obj(item, "pod", required=True)
            meta = obj(pod.get("metadata"), "metadata", required=True)
            ns, name, uid = (identity(meta, k) for k in ("namespace", "name", "uid"))
            spec, status = obj(pod.get("spec"), "spec"), obj(pod.get("status"), "status")
            refs = [
                (text(s.get("resourceClaimName")), text(s.get("name")))
                for s in map(_entry, seq(status.get("resourceClaimStatuses"), "claim statuses"))
            ]
            refs += [
                (text(c.get("resourceClaimName")), text(c.get("name")))
                for c in map(_entry, seq(spec.get("resourceClaims"), "spec.resourceClaims"))
            ]
            extended = text(
                obj(status.get("extendedResourceClaimStatus"), "extended").get("resourceClaimName")
            )
        except Malformed:
            continue  # the pod itself is counted as malformed by the pods reader
        seen = set()
        for claim, pod_claim in refs:
            if claim is not None and claim not in seen:
                seen.add(claim)
                out[(ns, claim)].append(PodRef(uid, name, pod_claim))
        if extended is not None and extended not in seen:
            out[(ns, extended)].append(PodRef(uid, name, None, extended=True))
    return out


def _entry(raw: Any) -> dict[str, Any]:
    return obj(raw, "entry")


def read_claims(
    items: Iterable[Any],
    pods: Mapping[tuple[str, str], list[PodRef]],
    devices: Mapping[tuple[str, str, str], DraDevice],
    *,
    drivers: Iterable[str],
    gpu_classes: Iterable[str],
    dropped: Counter[str],
) -> ClaimsRead:
    """Allocations of ``drivers``' devices and what each pod is given (module docstring).

    A claim that is not an object or lacks name or namespace counts as
    ``resourceclaim_malformed``; a result without driver, pool or device as
    ``dra_result_malformed``.
    """
    wanted, classes = set(drivers), set(gpu_classes)
    rows: list[DraAllocation] = []
    given: dict[str, PodDra] = defaultdict(PodDra)
    for item in items:
        try:
            claim = cast(ResourceClaimJson, obj(item, "resourceclaim", required=True))
            meta = obj(claim.get("metadata"), "metadata", required=True)
            ns, name = identity(meta, "namespace"), identity(meta, "name")
            status = obj(claim.get("status"), "status")
            allocation = obj(status.get("allocation"), "status.allocation")
            consumers = _consumers(status, pods.get((ns, name), []))
            results = _results(allocation, wanted, dropped)
            strategies = _strategies(allocation, wanted)
            spec = obj(claim.get("spec"), "spec")
            pending = 0 if allocation else _requested_gpus(spec, classes)
        except Malformed:
            dropped["resourceclaim_malformed"] += 1
            continue
        allocated_at = timestamp(
            allocation.get("allocationTimestamp"), "resourceclaim_bad_timestamp", dropped
        )
        for pod in consumers:
            given[pod.uid].pending_gpus += 0 if pod.extended else pending
        for result in results:
            found = devices.get((result["driver"], result["pool"], result["device"]))
            consumed = obj(result.get("consumedCapacity"), "consumedCapacity")
            request = text(result.get("request"))
            base = DraAllocation(
                namespace=ns,
                claim=name,
                claim_uid=text(meta.get("uid")),
                pod=None,
                consumers=len(consumers),
                request=request,
                driver=result["driver"],
                pool=result["pool"],
                device=result["device"],
                share_id=text(result.get("shareID")),
                consumed_memory_bytes=quantity(consumed.get("memory")),
                share_milli=_share_milli(found, consumed),
                sharing_strategy=_strategy_of(request, strategies),
                allocated_at=allocated_at,
                found=found,
            )
            if not consumers:
                rows.append(base)
            for pod in consumers:
                rows.append(_for_pod(base, pod))
                _give(given[pod.uid], base, pod)
    return ClaimsRead(tuple(rows), dict(given))


def _for_pod(base: DraAllocation, pod: PodRef) -> DraAllocation:
    return DraAllocation(**{**base.__dict__, "pod": pod})


def _give(pod: PodDra, allocation: DraAllocation, ref: PodRef) -> None:
    found = allocation.found
    if found is not None and found.physical_gpu is None:
        return  # a device of the GPU driver that is not a GPU (none of NVIDIA's today)
    device_key = (allocation.driver, allocation.pool, allocation.device)
    if ref.extended:
        pod.extended_devices.add(device_key)
    else:
        pod.devices[device_key] = pod.devices.get(device_key, 0) + allocation.pod_share_milli
    if found is not None and found.gpu_uuid and found.gpu_uuid not in pod.gpu_uuids:
        pod.gpu_uuids.append(found.gpu_uuid)


def _consumers(status: Mapping[str, Any], referencing: list[PodRef]) -> list[PodRef]:
    """The pods reserving the claim, joined with the pods that reference it, by uid."""
    by_uid = {p.uid: p for p in referencing}
    for raw in seq(status.get("reservedFor"), "status.reservedFor"):
        ref = obj(raw, "reservedFor")
        uid = text(ref.get("uid"))
        if ref.get("resource") == "pods" and not ref.get("apiGroup") and uid is not None:
            by_uid.setdefault(uid, PodRef(uid, text(ref.get("name"))))
    return sorted(by_uid.values(), key=lambda p: p.uid)


def _results(
    allocation: Mapping[str, Any], wanted: set[str], dropped: Counter[str]
) -> list[DeviceRequestAllocationResultJson]:
    devices = obj(allocation.get("devices"), "allocation.devices")
    out = []
    for raw in seq(devices.get("results"), "allocation.devices.results"):
        result = cast(DeviceRequestAllocationResultJson, obj(raw, "result"))
        if not all(text(result.get(k)) for k in ("driver", "pool", "device")):
            dropped["dra_result_malformed"] += 1
        elif result["driver"] in wanted:
            out.append(result)
    return out


def _strategies(allocation: Mapping[str, Any], wanted: set[str]) -> list[tuple[set[str], str]]:
    """``(requests it applies to (empty: all), strategy)`` of each GpuConfig, in order."""
    devices = obj(allocation.get("devices"), "allocation.devices")
    found = []
    for raw in seq(devices.get("config"), "allocation.devices.config"):
        config = obj(raw, "config")
        opaque = obj(config.get("opaque"), "config.opaque")
        parameters = opaque.get("parameters")
        if opaque.get("driver") not in wanted or not isinstance(parameters, dict):
            continue
        sharing = parameters.get("sharing")
        strategy = text(sharing.get("strategy")) if isinstance(sharing, dict) else None
        if strategy is not None:
            requests = {str(r) for r in seq(config.get("requests"), "config.requests")}
            found.append((requests, strategy))
    return found


def _strategy_of(request: str | None, strategies: list[tuple[set[str], str]]) -> str | None:
    """The last config that applies to ``request`` (``main/sub`` matches ``main`` too)."""
    names = {request, request.split("/", 1)[0]} if request else set()
    chosen = None
    for requests, strategy in strategies:
        if not requests or requests & names:
            chosen = strategy
    return chosen


def _share_milli(found: DraDevice | None, consumed: Mapping[str, Any]) -> int:
    """The module docstring's share of a GPU held by one result."""
    if found is None:
        return MILLI_PER_GPU
    part = 1.0
    if found.device_type == "mig" and found.memory_bytes and found.gpu_memory_bytes:
        part = min(1.0, found.memory_bytes / found.gpu_memory_bytes)
    memory, shares = quantity(consumed.get("memory")), quantity(consumed.get("shares"))
    if memory is not None and found.memory_bytes:
        part *= min(1.0, memory / found.memory_bytes)
    elif shares is not None and found.shares:
        part *= min(1.0, shares / found.shares)
    return max(1, math.ceil(round(part * MILLI_PER_GPU, 6)))


def _requested_gpus(spec: Mapping[str, Any], classes: set[str]) -> int:
    """GPUs a claim not yet allocated asks for: ``exactly.count`` (default 1) of requests
    whose device class is a GPU class; for ``firstAvailable``, its first choice."""
    devices = obj(spec.get("devices"), "spec.devices")
    total = 0
    for raw in seq(devices.get("requests"), "spec.devices.requests"):
        request = obj(raw, "request")
        choices = [obj(c, "subrequest") for c in seq(request.get("firstAvailable"), "sub")]
        exact = obj(request.get("exactly"), "exactly") or (choices[0] if choices else {})
        if exact.get("deviceClassName") in classes and exact.get("allocationMode") != "All":
            count = exact.get("count", 1)
            total += count if isinstance(count, int) and count > 0 else 1
    return total
