"""Fragmentation of GPUs under Dynamic Resource Allocation: shares left over, counters stranded.

Two forms of DRA leave GPU capacity that no request can take, and the FGD measure (whole
GPUs and milli-GPU shares of the device plugin world) sees neither:

- **Consumable shares** (KEP-5075; NVIDIA's ``--consumable-shares``): a device with
  ``allowMultipleAllocations`` hands out parts of its ``capacity.memory``; each allocation
  result consumes ``consumedCapacity.memory``. What is left on a device is its memory minus
  what its shares consume (each ``shareID`` once, however many pods use the claim). The left
  bytes are *stranded* when they are fewer than the typical share: the median consumed
  memory of the shares in the snapshot, or the size the caller asks about.
- **Partitionable devices** (KEP-4815, dynamic MIG): the whole GPU and every possible MIG
  placement are published at once and consume one shared counter set (``memory-slice-<i>``
  counters of one each, plus ``multiprocessors``, ``memory`` ...). The allocated devices use
  up counters; a free memory slice is *stranded* when no published device that still fits
  (every counter it consumes within what is left) covers it. On an A100 a lone free slice 7
  is stranded: only the 7g.40gb placement covers it (1g.5gb placements start at 0-6).

The scheduler picks the first device that fits in slice order (the driver orders MIG devices
for that), and the extender, which only scores nodes, cannot steer that choice
(docs/extender.md, "DRA devices"). **First fit's waste** (:func:`first_fit_waste_of`): per
node, the claims it holds, in allocation order, allocated again from an empty node by first
fit and by a best-fit rule (:mod:`.dra_allocator`); the stranded slices and split GPUs first
fit leaves beyond best fit's. The store does not keep the slices' order: devices are taken in
the natural order of their names (``gpu-<minor>``, then its MIG placements by profile and
start, as NVIDIA's driver lists them), claims of one allocation time in the natural order of
their names. Inputs are one snapshot of ``dra_devices`` and
``dra_allocations`` (:func:`dra_fragmentation_at` reads the latest from a store). Units:
bytes, counter units, slices; ratios 0-1.
"""

from __future__ import annotations

import json
import re
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pyarrow as pa

from sits_observe.analytics.fragmentation.dra_allocator import (
    WHOLE_GPU,
    FirstFitWaste,
    NodeDevices,
    PoolDevice,
    first_fit_waste,
)
from sits_observe.domain.times import utc_naive
from sits_observe.store.duck import Store
from sits_observe.store.inventory_reads import rows_at

_SLICE = "memory-slice-"


@dataclass(frozen=True)
class SharedDeviceLeft:
    """What is left on one device shared by consumable capacity. Units: bytes."""

    node: str | None
    device: str
    gpu_uuid: str | None
    capacity_bytes: int
    consumed_bytes: int
    shares: int

    @property
    def free_bytes(self) -> int:
        """Memory no share consumes."""
        return max(0, self.capacity_bytes - self.consumed_bytes)


@dataclass(frozen=True)
class CounterSetLeft:
    """One partitionable GPU's counter set: memory slices used, free and stranded."""

    node: str | None
    counter_set: str
    gpu_uuid: str | None
    slices_total: int
    slices_used: int
    slices_stranded: int

    @property
    def slices_free(self) -> int:
        """Memory slices no allocated device consumes."""
        return self.slices_total - self.slices_used

    @property
    def stranded_ratio(self) -> float:
        """Stranded slices over the GPU's slices (0-1)."""
        return self.slices_stranded / self.slices_total if self.slices_total else 0.0


@dataclass(frozen=True)
class DraFragmentation:
    """Consumable shares and partitionable GPUs of one snapshot."""

    typical_share_bytes: int | None
    shared: tuple[SharedDeviceLeft, ...]
    partitioned: tuple[CounterSetLeft, ...]
    first_fit: tuple[FirstFitWaste, ...] = ()

    @property
    def shared_free_bytes(self) -> int:
        """Memory left on shared devices."""
        return sum(d.free_bytes for d in self.shared)

    @property
    def shared_stranded_bytes(self) -> int:
        """Memory left on shared devices in pieces smaller than the typical share."""
        if self.typical_share_bytes is None:
            return 0
        return sum(d.free_bytes for d in self.shared if d.free_bytes < self.typical_share_bytes)

    @property
    def slices_free(self) -> int:
        """Free memory slices over every partitionable GPU."""
        return sum(p.slices_free for p in self.partitioned)

    @property
    def slices_stranded(self) -> int:
        """Free memory slices no device that still fits can use."""
        return sum(p.slices_stranded for p in self.partitioned)

    @property
    def first_fit_wasted_slices(self) -> int:
        """Stranded slices first fit leaves beyond a best-fit device choice, every node."""
        return sum(w.wasted_slices for w in self.first_fit)


def dra_fragmentation(
    devices: pa.Table, allocations: pa.Table, *, share_bytes: int | None = None
) -> DraFragmentation:
    """The module docstring's measures over one snapshot of ``dra_devices`` and
    ``dra_allocations`` (rows of one ``ts``). ``share_bytes`` is the request size stranding is
    judged against (None: the median consumed memory of the snapshot's shares)."""
    device_rows = devices.to_pylist()
    allocated = _allocated(allocations.to_pylist())
    shared = _shared(device_rows, allocated)
    consumed = [b for key in allocated for b in allocated[key].values() if b]
    typical = share_bytes if share_bytes is not None else _median(consumed)
    return DraFragmentation(
        typical,
        shared,
        _partitioned(device_rows, allocated),
        first_fit_waste_of(device_rows, allocations.to_pylist()),
    )


def first_fit_waste_of(
    devices: Sequence[Mapping[str, Any]], allocations: Sequence[Mapping[str, Any]]
) -> tuple[FirstFitWaste, ...]:
    """Per node with allocated devices of a counter set or a whole GPU: first fit's waste
    (the module docstring) for the claims it holds. Rows as ``dra_devices`` /
    ``dra_allocations`` of one snapshot; shared (consumable-capacity) devices are left out."""
    pools: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for r in devices:
        if r["node"] is not None and not r["multiple_allocations"]:
            pools[r["node"]].append(r)
    held: dict[str, dict[tuple[object, str], tuple[Any, ...]]] = defaultdict(dict)
    for r in allocations:
        if r["node"] in pools and r["share_id"] is None:
            # One request per (claim, device), however many pods consume the claim; in
            # allocation order (unknown times last), then by claim name.
            at = r["allocated_at"]
            order = (at is None, at or 0, r.get("namespace") or "", _natural(r.get("claim")))
            held[r["node"]].setdefault((r["claim_uid"], r["device"]), order)
    out = []
    for node in sorted(held):
        pool = _node_devices(node, sorted(pools[node], key=lambda r: _natural(r["device"])))
        profile = {d.name: d.profile for d in pool.devices}
        ordered = sorted(held[node].items(), key=lambda item: item[1])
        requests = [(profile[dev], 1) for (_, dev), _ in ordered if dev in profile]
        out.append(first_fit_waste(pool, requests))
    return tuple(out)


def _natural(text: str | None) -> tuple[tuple[int, int | str], ...]:
    """``gpu-2`` before ``gpu-10``: digit runs compare as numbers."""
    parts = re.split(r"(\d+)", text or "")
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in parts if p)


def _node_devices(node: str, rows: Sequence[Mapping[str, Any]]) -> NodeDevices:
    devices = []
    sets: dict[str, dict[str, int]] = {}
    for r in rows:
        gpu = r["counter_set"] or r["physical_gpu"] or r["device"]
        if r["counter_set"] and gpu not in sets:
            sets[gpu] = _counters(r["counter_set_json"])
        profile = r["mig_profile"] or (WHOLE_GPU if r["device_type"] == "gpu" else r["device_type"])
        devices.append(PoolDevice(r["device"], gpu, profile, _counters(r["counters_json"])))
    return NodeDevices(node, tuple(devices), sets)


def dra_fragmentation_at(
    store: Store,
    at: datetime | None = None,
    *,
    share_bytes: int | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> DraFragmentation | None:
    """:func:`dra_fragmentation` of the DRA snapshot at ``at`` (None: the newest with
    ``since <= ts < until``, each bound None = open); None when the store holds no DRA
    snapshot there."""
    if at is None:
        bounds = [None if t is None else utc_naive(t) for t in (since, until)]
        at = store.scalar(
            "SELECT max(ts) FROM dra_device_snapshots "
            "WHERE (?::TIMESTAMP IS NULL OR ts >= ?) AND (?::TIMESTAMP IS NULL OR ts < ?)",
            [bounds[0], bounds[0], bounds[1], bounds[1]],
        )
        if at is None:
            return None
    devices = rows_at(store, "dra_devices", at, _DEVICE_COLUMNS)
    if devices.num_rows == 0:
        return None
    allocations = rows_at(store, "dra_allocations", at, _ALLOCATION_COLUMNS)
    return dra_fragmentation(devices, allocations, share_bytes=share_bytes)


_DEVICE_COLUMNS = (
    "node",
    "driver",
    "pool",
    "device",
    "gpu_uuid",
    "memory_bytes",
    "multiple_allocations",
    "counter_set",
    "counters_json",
    "counter_set_json",
    "device_type",
    "mig_profile",
    "physical_gpu",
)
_ALLOCATION_COLUMNS = (
    "driver",
    "pool",
    "device",
    "share_id",
    "consumed_memory_bytes",
    "node",
    "namespace",
    "claim",
    "claim_uid",
    "allocated_at",
)

_Key = tuple[str, str, str]


def _allocated(rows: Iterable[Mapping[str, Any]]) -> dict[_Key, dict[str | None, int | None]]:
    """Allocated devices -> share id -> consumed memory (each share once, whatever the
    number of consumer rows)."""
    out: dict[_Key, dict[str | None, int | None]] = defaultdict(dict)
    for r in rows:
        out[(r["driver"], r["pool"], r["device"])][r["share_id"]] = r["consumed_memory_bytes"]
    return dict(out)


def _shared(
    rows: list[dict[str, Any]], allocated: Mapping[_Key, Mapping[str | None, int | None]]
) -> tuple[SharedDeviceLeft, ...]:
    out = []
    for r in rows:
        if not r["multiple_allocations"] or not r["memory_bytes"]:
            continue
        shares = allocated.get((r["driver"], r["pool"], r["device"]), {})
        # A result without consumed memory takes the device's whole default (the driver's
        # "memory" mode defaults a request to all of it).
        used = sum(b if b is not None else r["memory_bytes"] for b in shares.values())
        out.append(
            SharedDeviceLeft(
                r["node"], r["device"], r["gpu_uuid"], r["memory_bytes"], used, len(shares)
            )
        )
    return tuple(out)


def _partitioned(
    rows: list[dict[str, Any]], allocated: Mapping[_Key, object]
) -> tuple[CounterSetLeft, ...]:
    members: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        if r["counter_set"] and r["counters_json"]:
            members[(r["driver"], r["pool"], r["counter_set"])].append(r)
    out = []
    for (_, _, name), group in members.items():
        totals = _counters(
            next((g["counter_set_json"] for g in group if g["counter_set_json"]), None)
        )
        slices = {c for c in totals if c.startswith(_SLICE)}
        if not slices:
            continue
        left = dict(totals)
        for r in group:
            if (r["driver"], r["pool"], r["device"]) in allocated:
                for counter, value in _counters(r["counters_json"]).items():
                    left[counter] = left.get(counter, 0) - value
        free = {c for c in slices if left.get(c, 0) > 0}
        covered: set[str] = set()
        for r in group:
            if (r["driver"], r["pool"], r["device"]) in allocated:
                continue
            wants = _counters(r["counters_json"])
            if all(v <= left.get(c, 0) for c, v in wants.items()):
                covered |= {c for c in wants if c.startswith(_SLICE)}
        out.append(
            CounterSetLeft(
                group[0]["node"],
                name,
                next((g["gpu_uuid"] for g in group if g["gpu_uuid"]), None),
                len(slices),
                len(slices) - len(free),
                len(free - covered),
            )
        )
    return tuple(out)


def _counters(raw: Any) -> dict[str, int]:
    try:
        found = json.loads(raw) if isinstance(raw, str) else {}
    except ValueError:
        return {}
    return {str(k): int(v) for k, v in found.items()} if isinstance(found, dict) else {}


def _median(values: list[int]) -> int | None:
    return int(statistics.median(values)) if values else None
