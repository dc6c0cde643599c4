"""DRA readers on their own: partitions, generations, sharing config, pending requests."""

from __future__ import annotations

from collections import Counter
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from sits_observe.collectors.kube.dra.claims import pod_claims, read_claims
from sits_observe.collectors.kube.dra.rows import merge_node, merge_pod
from sits_observe.collectors.kube.dra.slices import node_gpus, read_slices

DRIVER = "gpu.example.com"


def _slice(
    node: str, devices: list[dict[str, Any]], *, generation: int = 1, name: str = "s", **spec: Any
) -> dict[str, Any]:
    return {
        "metadata": {"name": f"{node}-{name}"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
            "devices": devices,
            **spec,
        },
    }


def _partition(name: str, counter_set: str, memory: str) -> dict[str, Any]:
    return {
        "name": name,
        "capacity": {"memory": {"value": memory}},
        "consumesCounters": [
            {"counterSet": counter_set, "counters": {"memory": {"value": memory}}}
        ],
    }


def test_partitions_of_one_counter_set_are_one_gpu_without_any_attribute() -> None:
    """A driver with no NVIDIA attributes: only the counter set says the partitions share a
    GPU, so two GPUs of three partitions each are two GPUs, not six."""
    devices = [
        _partition(f"gpu-{g}-part-{p}", f"gpu-{g}-counters", "16Gi")
        for g in range(2)
        for p in range(3)
    ]
    sets = [
        {"name": f"gpu-{g}-counters", "counters": {"memory": {"value": "48Gi"}}} for g in range(2)
    ]
    dropped: Counter[str] = Counter()
    inventory = read_slices([_slice("n", devices, sharedCounters=sets)], [DRIVER], dropped)
    gpus = node_gpus(inventory)["n"]
    assert gpus.gpus == 2
    assert gpus.gpu_memory_bytes == 48 * 1024**3
    assert gpus.gpu_uuids == ()  # no uuid attribute: no UUID is made up
    assert {d.physical_gpu for d in inventory.devices} == {
        f"{DRIVER}/n/gpu-0-counters",
        f"{DRIVER}/n/gpu-1-counters",
    }
    assert not dropped


@given(st.lists(st.integers(min_value=0, max_value=5), min_size=1, max_size=6))
def test_only_the_newest_generation_counts(generations: list[int]) -> None:
    """Each generation g publishes g + 1 GPUs; the node has as many as the newest."""
    slices = [
        _slice("n", [{"name": f"gpu-{i}"} for i in range(g + 1)], generation=g, name=f"g{k}")
        for k, g in enumerate(generations)
    ]
    inventory = read_slices(slices, [DRIVER], Counter())
    newest = max(generations)
    assert node_gpus(inventory)["n"].gpus == newest + 1
    assert {d.pool_generation for d in inventory.devices} == {newest}


def test_malformed_slices_and_devices_are_counted_and_other_drivers_ignored() -> None:
    dropped: Counter[str] = Counter()
    other = _slice("n", [{"name": "nic-0"}])
    other["spec"]["driver"] = "net.example.com"
    items = [
        "not an object",
        {"metadata": {"name": "x"}, "spec": {"driver": DRIVER}},  # no pool
        _slice("n", [{"attributes": {}}, {"name": "gpu-0"}]),
        other,
    ]
    inventory = read_slices(items, [DRIVER], dropped)
    assert [d.device for d in inventory.devices] == ["gpu-0"]
    assert dropped == Counter({"resourceslice_malformed": 2, "dra_device_malformed": 1})


def _claim(**status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "c", "namespace": "ns", "uid": "c-uid"},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "firstAvailable": [
                            {"name": "big", "deviceClassName": "gpu.nvidia.com", "count": 3},
                            {"name": "small", "deviceClassName": "mig.nvidia.com"},
                        ],
                    },
                    {
                        "name": "all",
                        "exactly": {"deviceClassName": "gpu.nvidia.com", "allocationMode": "All"},
                    },
                    {"name": "nic", "exactly": {"deviceClassName": "nic.example.com"}},
                ]
            }
        },
        "status": status,
    }


def _pod(uid: str) -> dict[str, Any]:
    return {
        "metadata": {"name": uid, "namespace": "ns", "uid": uid},
        "status": {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "c"}]},
    }


def test_a_pending_claim_asks_for_its_first_choice_of_gpu_classes() -> None:
    read = read_claims(
        [_claim()],
        pod_claims([_pod("p")]),
        {},
        drivers=["gpu.nvidia.com"],
        gpu_classes=["gpu.nvidia.com", "mig.nvidia.com"],
        dropped=Counter(),
    )
    assert read.allocations == ()
    assert read.pods["p"].pending_gpus == 3
    row = {"gpu_request": 0, "gpu_milli": None, "gpu_uuids": None}
    merge_pod(row, read.pods["p"])
    assert row == {"gpu_request": 3, "gpu_milli": 1000, "gpu_uuids": None}


def test_the_last_gpu_config_for_a_request_sets_its_sharing() -> None:
    def config(strategy: str, requests: list[str]) -> dict[str, Any]:
        return {
            "source": "FromClass" if not requests else "FromClaim",
            "requests": requests,
            "opaque": {
                "driver": "gpu.nvidia.com",
                "parameters": {"kind": "GpuConfig", "sharing": {"strategy": strategy}},
            },
        }

    allocation = {
        "devices": {
            "results": [
                {"request": "gpu/small", "driver": "gpu.nvidia.com", "pool": "n", "device": "a"},
                {"request": "other", "driver": "gpu.nvidia.com", "pool": "n", "device": "b"},
                {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n"},  # no device
            ],
            "config": [config("TimeSlicing", []), config("MPS", ["gpu"])],
        }
    }
    dropped: Counter[str] = Counter()
    read = read_claims(
        [_claim(allocation=allocation)],
        {},
        {},
        drivers=["gpu.nvidia.com"],
        gpu_classes=[],
        dropped=dropped,
    )
    strategies = {a.device: a.sharing_strategy for a in read.allocations}
    assert strategies == {"a": "MPS", "b": "TimeSlicing"}
    assert dropped == Counter({"dra_result_malformed": 1})
    assert {a.pod for a in read.allocations} == {None}


def test_node_sum_is_capped_by_the_machine_gpu_count_only_when_both_stacks_publish() -> None:
    devices = [
        {"name": f"gpu-{i}", "attributes": {"uuid": {"string": f"GPU-{i}"}}} for i in range(4)
    ]
    gpus = node_gpus(read_slices([_slice("n", devices)], [DRIVER], Counter()))["n"]
    labels = '{"nvidia.com/gpu.count": "6"}'
    for plugin, expected in ((0, 4), (4, 6), (2, 6), (8, 8)):
        row = {"gpu_allocatable": plugin, "gpu_product": None, "gpu_memory_bytes": None}
        node = {**row, "labels_json": labels}
        merge_node(node, gpus)
        assert node["gpu_allocatable"] == expected, plugin
