"""The ``resource.k8s.io/v1`` JSON the DRA inventory reads: typed shapes and tolerant accessors.

Dynamic Resource Allocation (GA in Kubernetes 1.34) publishes devices as ResourceSlices and
hands them to pods through ResourceClaims. The TypedDicts list only the keys read here,
camelCase as the API writes them (kubernetes/api ``resource/v1/types.go``). A device
attribute is a one-of (``{"string": ...}``, ``{"int": ...}``, ``{"bool": ...}``,
``{"version": ...}``, and the list forms ``strings`` / ``ints`` of KEP-6072); a capacity is
``{"value": <Quantity>, "requestPolicy": ...}``; a counter ``{"value": <Quantity>}``.

Malformed containers raise :class:`~sits_observe.collectors.kube.json_shapes.Malformed` (the
caller drops the object and counts it); an unreadable quantity is None.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict

from sits_observe.collectors.kube.json_shapes import ObjectMetaJson, obj, text
from sits_observe.domain.quantity import quantity_value
from sits_observe.errors import ParseError

#: Where the DRA objects are served (GA version).
DRA_API = "/apis/resource.k8s.io/v1"
#: NVIDIA's DRA driver (kubernetes-sigs/dra-driver-nvidia-gpu): one driver, one pool per node.
NVIDIA_GPU_DRIVER = "gpu.nvidia.com"
#: Its DeviceClasses (``deviceClassName`` of a claim's request): full GPUs, MIG, VFIO.
NVIDIA_DEVICE_CLASSES = ("gpu.nvidia.com", "mig.nvidia.com", "vfio.gpu.nvidia.com")
#: The driver's ``type`` attribute values that are GPUs or parts of one
#: (``site/content/docs/reference/resourceslice-attributes.md``).
GPU_DEVICE_TYPES = ("gpu", "mig", "vfio")


class PoolJson(TypedDict, total=False):
    name: str
    generation: int
    resourceSliceCount: int


class DeviceCounterConsumptionJson(TypedDict, total=False):
    counterSet: str
    counters: dict[str, dict[str, str]]


class DeviceJson(TypedDict, total=False):
    name: str
    attributes: dict[str, dict[str, Any]]
    capacity: dict[str, dict[str, Any]]
    consumesCounters: list[DeviceCounterConsumptionJson]
    allowMultipleAllocations: bool
    nodeName: str


class CounterSetJson(TypedDict, total=False):
    name: str
    counters: dict[str, dict[str, str]]


class ResourceSliceSpecJson(TypedDict, total=False):
    driver: str
    nodeName: str
    pool: PoolJson
    devices: list[DeviceJson]
    sharedCounters: list[CounterSetJson]


class ResourceSliceJson(TypedDict, total=False):
    metadata: ObjectMetaJson
    spec: ResourceSliceSpecJson


class DeviceRequestAllocationResultJson(TypedDict, total=False):
    request: str
    driver: str
    pool: str
    device: str
    shareID: str
    consumedCapacity: dict[str, str]


class OpaqueDeviceConfigurationJson(TypedDict, total=False):
    driver: str
    parameters: dict[str, Any]


class DeviceAllocationConfigurationJson(TypedDict, total=False):
    source: str
    requests: list[str]
    opaque: OpaqueDeviceConfigurationJson


class ResourceClaimConsumerReferenceJson(TypedDict, total=False):
    apiGroup: str
    resource: str
    name: str
    uid: str


class ResourceClaimStatusJson(TypedDict, total=False):
    allocation: dict[str, Any]
    reservedFor: list[ResourceClaimConsumerReferenceJson]


class ResourceClaimJson(TypedDict, total=False):
    metadata: ObjectMetaJson
    spec: dict[str, Any]
    status: ResourceClaimStatusJson


def attribute(attributes: Mapping[str, Any], name: str) -> str | None:
    """A device attribute's value as text (the first of a list form); None when absent.

    Names are looked up bare (``uuid``) and qualified by the driver's domain is not needed:
    the API stores a driver's own attributes bare (resourceslice-attributes.md).
    """
    raw = attributes.get(name)
    if not isinstance(raw, Mapping):
        return None
    for key in ("string", "version", "int", "bool"):
        if key in raw and raw[key] is not None:
            return str(raw[key]).lower() if key == "bool" else str(raw[key])
    for key in ("strings", "versions", "ints"):
        values = raw.get(key)
        if isinstance(values, list) and values:
            return str(values[0])
    return None


def quantity(value: Any) -> int | None:
    """A quantity as an integer (rounded up), None when absent or unreadable."""
    if value is None or isinstance(value, bool):
        return None
    try:
        return quantity_value(value)
    except ParseError:
        return None


def capacity_value(capacity: Mapping[str, Any], name: str) -> int | None:
    """``capacity.<name>.value`` (a device capacity or a counter) as an integer."""
    entry = capacity.get(name)
    if not isinstance(entry, Mapping):
        return None
    return quantity(entry.get("value"))


def counters(raw: Any, what: str) -> dict[str, int]:
    """A counter map (``{name: {value: <Quantity>}}``) as integers; unreadable ones left out."""
    found = obj(raw, what)
    out = {}
    for name, entry in found.items():
        value = capacity_value(found, name) if isinstance(entry, Mapping) else None
        if value is not None:
            out[str(name)] = value
    return out


def name_of(meta: Mapping[str, Any]) -> str | None:
    """``metadata.name`` when it is a non-empty string."""
    return text(meta.get("name"))
