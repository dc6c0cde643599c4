"""Devices from ResourceSlices: what each node offers through Dynamic Resource Allocation.

A DRA driver publishes each pool (NVIDIA's ``gpu.nvidia.com``: one pool per node) as one or
more ResourceSlices. The rules read here are the API's (kubernetes/api ``resource/v1``):

- **Generations.** A pool's slices carry ``pool.generation``; while a driver republishes, old
  and new slices coexist and "only the slices with the highest generation number are
  considered" (ResourcePool's doc). Slices of older generations are skipped.
- **Node.** ``spec.nodeName``, else the device's own ``nodeName`` (``perDeviceNodeSelection``);
  None for devices reachable from several nodes.
- **Identity.** A device is ``(driver, pool, device name)``, the key claims allocate by.
- **Physical GPU.** NVIDIA's ``type`` attribute says what a device is (``gpu``, ``mig``,
  ``vfio``; no attribute: a GPU, for other GPU drivers). Partitions of one GPU are not
  additive: a MIG device names its GPU in ``parentUUID``, and with partitionable devices
  (KEP-4815, dynamic MIG) the whole GPU and every possible partition consume one shared
  counter set (``consumesCounters[].counterSet``). Devices are grouped into physical GPUs by
  the counter set when they consume one, else by ``parentUUID`` / ``uuid``; a node's GPU
  capacity counts groups, never devices.
- **Memory.** ``capacity.memory`` in bytes; a physical GPU's memory is its whole-GPU device's,
  else its counter set's ``memory`` counter.

Units: bytes, counts. Nothing here raises for a bad slice: the caller's ``dropped`` counts it.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from sits_observe.collectors.kube.dra.shapes import (
    GPU_DEVICE_TYPES,
    DeviceJson,
    ResourceSliceJson,
    attribute,
    capacity_value,
    counters,
    name_of,
)
from sits_observe.collectors.kube.json_shapes import Malformed, obj, seq, text


@dataclass(frozen=True)
class DraDevice:
    """One device of the newest generation of its pool. Units: bytes, counts."""

    node: str | None
    driver: str
    pool: str
    pool_generation: int
    slice_name: str
    device: str
    device_type: str | None
    device_uuid: str | None
    gpu_uuid: str | None
    gpu_product: str | None
    mig_profile: str | None
    memory_bytes: int | None
    #: ``capacity.shares`` of a device shared in N parts (``--consumable-shares=N``).
    shares: int | None = None
    counter_set: str | None = None
    counters: Mapping[str, int] = field(default_factory=dict)
    multiple_allocations: bool = False
    #: The physical GPU the device is (a whole GPU) or is part of; None: not a GPU.
    physical_gpu: str | None = None
    #: That physical GPU's memory.
    gpu_memory_bytes: int | None = None

    @property
    def key(self) -> tuple[str, str, str]:
        """``(driver, pool, device)``: how claims name it."""
        return (self.driver, self.pool, self.device)


@dataclass(frozen=True)
class DraInventory:
    """The devices of the newest pool generations, and their shared counter sets."""

    devices: tuple[DraDevice, ...] = ()
    #: ``(driver, pool, counter set)`` -> counter -> total.
    counter_sets: Mapping[tuple[str, str, str], Mapping[str, int]] = field(default_factory=dict)

    def by_key(self) -> dict[tuple[str, str, str], DraDevice]:
        """Devices by ``(driver, pool, device)``."""
        return {d.key: d for d in self.devices}


@dataclass(frozen=True)
class _Raw:
    node: str | None
    driver: str
    pool: str
    generation: int
    slice_name: str
    device: DeviceJson


def read_slices(
    items: Iterable[Any], drivers: Iterable[str], dropped: Counter[str]
) -> DraInventory:
    """The devices of ``drivers`` in the newest generation of each pool (module docstring).

    A slice that is not an object, lacks ``metadata.name``, ``spec.driver`` or ``spec.pool``
    is counted as ``resourceslice_malformed``; a device without a name as
    ``dra_device_malformed``.
    """
    wanted = set(drivers)
    slices: list[tuple[ResourceSliceJson, str, str, str, int]] = []
    for item in items:
        try:
            parsed = _slice_head(item)
        except Malformed:
            dropped["resourceslice_malformed"] += 1
            continue
        if parsed[2] in wanted:
            slices.append(parsed)
    newest: dict[tuple[str, str], int] = {}
    for _, _, driver, pool, generation in slices:
        newest[(driver, pool)] = max(generation, newest.get((driver, pool), generation))
    raws: list[_Raw] = []
    sets: dict[tuple[str, str, str], dict[str, int]] = {}
    for body, slice_name, driver, pool, generation in slices:
        if generation != newest[(driver, pool)]:
            continue
        spec = obj(body.get("spec"), "spec")
        try:
            for raw_set in seq(spec.get("sharedCounters"), "spec.sharedCounters"):
                found = obj(raw_set, "counter set")
                set_name = text(found.get("name"))
                if set_name is not None:
                    sets[(driver, pool, set_name)] = counters(found.get("counters"), "counters")
            devices = seq(spec.get("devices"), "spec.devices")
        except Malformed:
            dropped["resourceslice_malformed"] += 1
            continue
        node = text(spec.get("nodeName"))
        for raw in devices:
            if not isinstance(raw, dict) or text(raw.get("name")) is None:
                dropped["dra_device_malformed"] += 1
                continue
            device = cast(DeviceJson, raw)
            device_node = node or text(device.get("nodeName"))
            raws.append(_Raw(device_node, driver, pool, generation, slice_name, device))
    return DraInventory(devices=_devices(raws, sets, dropped), counter_sets=sets)


def _slice_head(item: Any) -> tuple[ResourceSliceJson, str, str, str, int]:
    body = cast(ResourceSliceJson, obj(item, "resourceslice", required=True))
    meta = obj(body.get("metadata"), "metadata", required=True)
    spec = obj(body.get("spec"), "spec", required=True)
    pool = obj(spec.get("pool"), "spec.pool", required=True)
    name, driver, pool_name = name_of(meta), text(spec.get("driver")), text(pool.get("name"))
    generation = pool.get("generation", 0)
    if name is None or driver is None or pool_name is None or not isinstance(generation, int):
        raise Malformed("a ResourceSlice needs a name, a driver and a pool")
    return body, name, driver, pool_name, generation


def _devices(
    raws: list[_Raw], sets: Mapping[tuple[str, str, str], Mapping[str, int]], dropped: Counter[str]
) -> tuple[DraDevice, ...]:
    parsed = []
    for raw in raws:
        try:
            parsed.append(_device(raw))
        except Malformed:
            dropped["dra_device_malformed"] += 1
    # A counter set's GPU: the UUID of a whole GPU consuming it, else a MIG device's parent.
    set_gpu: dict[tuple[str, str, str], str] = {}
    for d in sorted(parsed, key=lambda d: d.device_type != "gpu"):
        own = d.parent_or_uuid
        if d.counter_set is not None and own is not None:
            set_gpu.setdefault((d.driver, d.pool, d.counter_set), own)
    memory: dict[str, int] = defaultdict(int)
    devices = []
    for d in parsed:
        physical = d.physical(set_gpu)
        if physical is not None and d.device_type in ("gpu", "vfio", None) and d.memory_bytes:
            memory[physical] = max(memory[physical], d.memory_bytes)
        devices.append((d, physical))
    for (driver, pool, set_name), found in sets.items():
        physical = set_gpu.get((driver, pool, set_name), f"{driver}/{pool}/{set_name}")
        if found.get("memory"):
            memory[physical] = max(memory[physical], found["memory"])
    return tuple(
        d.done(physical, memory.get(physical) if physical else None) for d, physical in devices
    )


@dataclass(frozen=True)
class _Parsed:
    raw: _Raw
    device_type: str | None
    device_uuid: str | None
    parent_uuid: str | None
    product: str | None
    profile: str | None
    memory_bytes: int | None
    shares: int | None
    counter_set: str | None
    consumed: dict[str, int]
    multiple: bool

    @property
    def driver(self) -> str:
        return self.raw.driver

    @property
    def pool(self) -> str:
        return self.raw.pool

    @property
    def parent_or_uuid(self) -> str | None:
        return self.parent_uuid if self.device_type == "mig" else self.device_uuid

    def physical(self, set_gpu: Mapping[tuple[str, str, str], str]) -> str | None:
        if self.device_type is not None and self.device_type not in GPU_DEVICE_TYPES:
            return None
        if self.counter_set is not None:
            key = (self.driver, self.pool, self.counter_set)
            return set_gpu.get(key, f"{self.driver}/{self.pool}/{self.counter_set}")
        return self.parent_or_uuid or f"{self.driver}/{self.pool}/{self.raw.device['name']}"

    def done(self, physical: str | None, gpu_memory_bytes: int | None) -> DraDevice:
        raw = self.raw
        return DraDevice(
            node=raw.node,
            driver=raw.driver,
            pool=raw.pool,
            pool_generation=raw.generation,
            slice_name=raw.slice_name,
            device=raw.device["name"],
            device_type=self.device_type,
            device_uuid=self.device_uuid,
            gpu_uuid=physical if physical and not physical.startswith(raw.driver + "/") else None,
            gpu_product=self.product,
            mig_profile=self.profile,
            memory_bytes=self.memory_bytes,
            shares=self.shares,
            counter_set=self.counter_set,
            counters=self.consumed,
            multiple_allocations=self.multiple,
            physical_gpu=physical,
            gpu_memory_bytes=gpu_memory_bytes,
        )


def _device(raw: _Raw) -> _Parsed:
    device = raw.device
    attributes = obj(device.get("attributes"), "attributes")
    capacity = obj(device.get("capacity"), "capacity")
    consumption = [obj(c, "consumesCounters") for c in seq(device.get("consumesCounters"), "c")]
    first = consumption[0] if consumption else {}
    return _Parsed(
        raw=raw,
        device_type=attribute(attributes, "type"),
        device_uuid=attribute(attributes, "uuid"),
        parent_uuid=attribute(attributes, "parentUUID"),
        product=attribute(attributes, "productName"),
        profile=attribute(attributes, "profile"),
        memory_bytes=capacity_value(capacity, "memory"),
        shares=capacity_value(capacity, "shares"),
        counter_set=text(first.get("counterSet")),
        consumed=counters(first.get("counters"), "consumesCounters.counters"),
        multiple=device.get("allowMultipleAllocations") is True,
    )


@dataclass(frozen=True)
class NodeGpus:
    """A node's GPUs as DRA publishes them: physical GPUs, never partitions, counted."""

    gpus: int
    gpu_product: str | None
    gpu_memory_bytes: int | None
    gpu_uuids: tuple[str, ...]


def node_gpus(inventory: DraInventory) -> dict[str, NodeGpus]:
    """Per node, its physical GPUs (distinct :attr:`DraDevice.physical_gpu`), the most common
    product and the largest GPU memory."""
    physical: dict[str, dict[str, DraDevice]] = defaultdict(dict)
    for d in inventory.devices:
        if d.node is not None and d.physical_gpu is not None:
            physical[d.node].setdefault(d.physical_gpu, d)
    out = {}
    for node, gpus in physical.items():
        products = Counter(d.gpu_product for d in gpus.values() if d.gpu_product)
        memories = [d.gpu_memory_bytes for d in gpus.values() if d.gpu_memory_bytes]
        out[node] = NodeGpus(
            gpus=len(gpus),
            gpu_product=min(products, key=lambda p: (-products[p], p)) if products else None,
            gpu_memory_bytes=max(memories) if memories else None,
            gpu_uuids=tuple(sorted(d.gpu_uuid for d in gpus.values() if d.gpu_uuid)),
        )
    return out
