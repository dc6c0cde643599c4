"""First fit's waste under DRA: the allocator's device choice against a best-fit one.

The devices are an A100-40GB under dynamic MIG as NVIDIA's driver publishes it (one counter
set per GPU: ``memory-slice-0..7`` and 98 multiprocessors; 1g.5gb at 0-6, 2g.10gb at 0/2/4,
3g.20gb at 0/4, 4g.20gb at 0, 7g.40gb and the whole GPU over everything), written out here
and not taken from the lab's builder.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import pyarrow as pa

from sits_observe.analytics.fragmentation.dra import dra_fragmentation, first_fit_waste_of
from sits_observe.analytics.fragmentation.dra_allocator import (
    WHOLE_GPU,
    NodeAllocation,
    NodeDevices,
    PoolDevice,
    first_fit_waste,
)

#: profile -> (starts, slices, multiprocessors)
A100 = {
    "1g.5gb": (range(7), 1, 14),
    "2g.10gb": ((0, 2, 4), 2, 28),
    "3g.20gb": ((0, 4), 4, 42),
    "4g.20gb": ((0,), 4, 56),
    "7g.40gb": ((0,), 8, 98),
}
TOTALS = {"multiprocessors": 98, **{f"memory-slice-{i}": 1 for i in range(8)}}


def _slices(start: int, size: int) -> dict[str, int]:
    return {f"memory-slice-{i}": 1 for i in range(start, start + size)}


def partitionable(gpu: str) -> list[PoolDevice]:
    devices = [PoolDevice(gpu, f"{gpu}-set", WHOLE_GPU, dict(TOTALS))]
    for profile, (starts, size, sms) in A100.items():
        for start in starts:
            counters = {"multiprocessors": sms, **_slices(start, size)}
            devices.append(
                PoolDevice(f"{gpu}-mig-{profile}-{start}", f"{gpu}-set", profile, counters)
            )
    return devices


def node(*gpus: str, plain: tuple[str, ...] = ()) -> NodeDevices:
    devices = [d for g in gpus for d in partitionable(g)]
    devices += [PoolDevice(p, p, WHOLE_GPU) for p in plain]
    return NodeDevices("n1", tuple(devices), {f"{g}-set": dict(TOTALS) for g in gpus})


def test_first_fit_takes_the_first_device_in_published_order() -> None:
    allocation = NodeAllocation(node("gpu-0", "gpu-1"))
    assert allocation.allocate("3g.20gb", "first_fit").name == "gpu-0-mig-3g.20gb-0"  # type: ignore[union-attr]
    assert allocation.allocate("1g.5gb", "first_fit").name == "gpu-0-mig-1g.5gb-4"  # type: ignore[union-attr]
    # 3g.20gb at 4 now overlaps the 1g.5gb: the next one splits gpu-1.
    assert allocation.allocate("3g.20gb", "first_fit").name == "gpu-1-mig-3g.20gb-0"  # type: ignore[union-attr]
    left = allocation.leftover()
    # gpu-0: slices 5 and 6 still take a 1g.5gb each, 7 none of the fitting devices.
    assert (left.slices_free, left.slices_stranded, left.split_gpus) == (7, 1, 2)


def test_best_fit_keeps_the_slice_first_fit_strands() -> None:
    waste = first_fit_waste(node("gpu-0", "gpu-1"), [("3g.20gb", 1), ("1g.5gb", 1), ("3g.20gb", 1)])
    assert waste.first_fit.slices_stranded == 1
    assert waste.best_fit.slices_stranded == 0
    assert waste.wasted_slices == 1
    assert waste.first_fit.slices_free == waste.best_fit.slices_free == 7
    assert waste.first_fit.failed == waste.best_fit.failed == 0


def test_whole_gpu_on_a_partitionable_gpu_leaves_no_room_for_mig() -> None:
    pool = node("gpu-0", plain=("gpu-1",))
    waste = first_fit_waste(pool, [(WHOLE_GPU, 1), ("1g.5gb", 1)])
    # First fit gives the whole request the partitionable GPU listed first; the 1g.5gb then
    # finds no device. Best fit takes the plain GPU (it blocks no other device).
    assert (waste.first_fit.failed, waste.best_fit.failed) == (1, 0)
    assert waste.best_fit.split_gpus == 1


def test_best_fit_fills_a_partly_used_gpu_before_splitting_another() -> None:
    allocation = NodeAllocation(node("gpu-0", "gpu-1"))
    allocation.take(next(d for d in partitionable("gpu-1") if d.name == "gpu-1-mig-1g.5gb-0"))
    chosen = allocation.allocate("1g.5gb", "best_fit")
    assert chosen is not None and chosen.gpu == "gpu-1-set"
    assert allocation.leftover().split_gpus == 1
    first = NodeAllocation(node("gpu-0", "gpu-1"))
    first.take(next(d for d in partitionable("gpu-1") if d.name == "gpu-1-mig-1g.5gb-0"))
    assert first.allocate("1g.5gb", "first_fit").gpu == "gpu-0-set"  # type: ignore[union-attr]
    assert first.leftover().split_gpus == 2


def test_can_allocate_counts_devices_that_fit_together() -> None:
    allocation = NodeAllocation(node("gpu-0"))
    assert allocation.can_allocate("3g.20gb", 2)
    assert not allocation.can_allocate("3g.20gb", 3)
    allocation.take(partitionable("gpu-0")[1])  # 1g.5gb at 0
    assert not allocation.can_allocate(WHOLE_GPU)
    assert allocation.can_allocate("1g.5gb", 6)
    assert not allocation.can_allocate("1g.5gb", 7)


# -- from a snapshot's rows ------------------------------------------------------------------


def _device_rows(pool: NodeDevices) -> list[dict[str, Any]]:
    rows = []
    for d in pool.devices:
        partitioned = d.gpu in pool.counter_sets
        rows.append(
            {
                "node": pool.node,
                "driver": "gpu.nvidia.com",
                "pool": pool.node,
                "device": d.name,
                "device_type": "gpu" if d.profile == WHOLE_GPU else "mig",
                "mig_profile": None if d.profile == WHOLE_GPU else d.profile,
                "physical_gpu": f"GPU-{d.gpu}",
                "gpu_uuid": f"GPU-{d.gpu}",
                "memory_bytes": 40 << 30,
                "multiple_allocations": False,
                "counter_set": d.gpu if partitioned else None,
                "counters_json": json.dumps(dict(d.counters)) if partitioned else None,
                "counter_set_json": json.dumps(TOTALS) if partitioned else None,
            }
        )
    return rows


def _allocation(device: str, claim: str, at: datetime | None) -> dict[str, Any]:
    return {
        "node": "n1",
        "driver": "gpu.nvidia.com",
        "pool": "n1",
        "device": device,
        "claim_uid": claim,
        "share_id": None,
        "consumed_memory_bytes": None,
        "allocated_at": at,
    }


def test_snapshot_replays_the_claims_in_allocation_order() -> None:
    pool = node("gpu-0", "gpu-1")
    t0 = datetime(2026, 1, 1)
    # Listed out of order; by allocation time: 3g, 1g, 3g (the first-fit state of above).
    allocations = [
        _allocation("gpu-1-mig-3g.20gb-0", "c3", t0 + timedelta(seconds=2)),
        _allocation("gpu-0-mig-3g.20gb-0", "c1", t0),
        _allocation("gpu-0-mig-1g.5gb-4", "c2", t0 + timedelta(seconds=1)),
        _allocation("gpu-0-mig-1g.5gb-4", "c2", t0 + timedelta(seconds=1)),  # a second pod
    ]
    (waste,) = first_fit_waste_of(_device_rows(pool), allocations)
    assert (waste.node, waste.requests, waste.wasted_slices) == ("n1", 3, 1)
    # The first-fit replay ends where the cluster is: the snapshot's own stranded slices.
    found = dra_fragmentation(
        pa.Table.from_pylist(_device_rows(pool)), pa.Table.from_pylist(allocations)
    )
    assert found.slices_stranded == waste.first_fit.slices_stranded == 1
    assert found.first_fit_wasted_slices == 1
    # Another order of the same claims (1g first): first fit strands nothing.
    allocations[2]["allocated_at"] = allocations[3]["allocated_at"] = t0 - timedelta(seconds=1)
    (again,) = first_fit_waste_of(_device_rows(pool), allocations)
    assert again.wasted_slices == 0
