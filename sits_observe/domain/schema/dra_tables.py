"""The Dynamic Resource Allocation tables (schema version 9, docs/collectors/kube.md "DRA").

Per inventory snapshot: the devices of the newest ResourceSlice generation, and the devices
allocated to claims with the pods using them. Conventions: :mod:`sits_observe.domain.tables`,
which lists every table.
"""

from __future__ import annotations

import pyarrow as pa

from sits_observe.domain.schema.table_spec import TS, TableSpec, table_schema

DRA_DEVICES = TableSpec(
    "dra_devices",
    table_schema(
        ("ts", TS, "inventory snapshot time, UTC"),
        ("node", pa.string(), "node the device is on; NULL = reachable from several nodes"),
        ("driver", pa.string(), "DRA driver, e.g. gpu.nvidia.com"),
        ("pool", pa.string(), "resource pool (NVIDIA: the node name)"),
        ("pool_generation", pa.int64(), "the pool's generation (only the newest is kept)"),
        ("slice", pa.string(), "ResourceSlice that published the device"),
        ("device", pa.string(), "device name in the pool, e.g. gpu-0, gpu-0-mig-1g10gb-19-0"),
        ("device_type", pa.string(), "the driver's type attribute: gpu | mig | vfio | ..."),
        ("device_uuid", pa.string(), "the device's uuid attribute (MIG-... for MIG); NULL = none"),
        ("gpu_uuid", pa.string(), "UUID of the physical GPU it is or is part of"),
        ("physical_gpu", pa.string(), "key of that physical GPU (its UUID, else pool/counter set)"),
        ("gpu_product", pa.string(), "productName attribute"),
        ("mig_profile", pa.string(), "profile attribute (1g.10gb ...); NULL = not MIG"),
        ("memory_bytes", pa.int64(), "capacity.memory of the device"),
        ("gpu_memory_bytes", pa.int64(), "memory of the physical GPU"),
        ("shares", pa.int64(), "capacity.shares of a device shared in N parts; NULL = none"),
        ("multiple_allocations", pa.bool_(), "allowMultipleAllocations (consumable capacity)"),
        ("counter_set", pa.string(), "shared counter set it consumes (partitionable devices)"),
        ("counters_json", pa.string(), "counters it consumes from that set, as a JSON object"),
        ("counter_set_json", pa.string(), "the counter set's totals, as a JSON object"),
    ),
    "DRA devices of the newest ResourceSlice generation, per inventory snapshot",
)

DRA_ALLOCATIONS = TableSpec(
    "dra_allocations",
    table_schema(
        ("ts", TS, "inventory snapshot time, UTC"),
        ("namespace", pa.string(), "namespace of the ResourceClaim"),
        ("claim", pa.string(), "ResourceClaim name"),
        ("claim_uid", pa.string(), "ResourceClaim uid"),
        ("pod_uid", pa.string(), "consuming pod; NULL = allocated, reserved for no pod"),
        ("pod", pa.string(), "consuming pod's name"),
        ("pod_claim", pa.string(), "the pod's name for the claim (spec.resourceClaims)"),
        ("extended_resource", pa.bool_(), "the claim serves an extended resource request"),
        ("consumers", pa.int32(), "pods sharing the claim"),
        ("node", pa.string(), "node of the device"),
        ("driver", pa.string(), "DRA driver"),
        ("pool", pa.string(), "resource pool"),
        ("device", pa.string(), "device name in the pool"),
        ("request", pa.string(), "the claim's request the device satisfies"),
        ("share_id", pa.string(), "shareID of a consumable-capacity allocation"),
        ("consumed_memory_bytes", pa.int64(), "consumedCapacity.memory"),
        ("share_milli", pa.int32(), "part of the physical GPU held, milli (1000 = whole)"),
        ("pod_share_milli", pa.int32(), "share_milli divided among the consumers"),
        ("sharing_strategy", pa.string(), "GpuConfig sharing: TimeSlicing | MPS; NULL = none"),
        ("device_uuid", pa.string(), "the device's uuid attribute"),
        ("gpu_uuid", pa.string(), "UUID of the physical GPU"),
        ("mig_profile", pa.string(), "MIG profile of the device; NULL = not MIG"),
        ("allocated_at", TS, "status.allocation.allocationTimestamp"),
    ),
    "DRA devices allocated to claims and the pods using them, per inventory snapshot",
)
