"""Pod JSON -> the ``pods`` row's GPU columns: share, allowed products, assigned devices."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from sits_observe.collectors.kube.gpu import hami_allocation
from sits_observe.collectors.kube.json_shapes import Malformed
from sits_observe.collectors.kube.pods import pod_row

GPU_COLUMNS = ("gpu_request", "gpu_milli", "gpu_types", "gpu_uuids")


def gpu_pod(
    *,
    limits: dict[str, Any] | None = None,
    annotations: dict[str, Any] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A bound pod with one container; ``limits`` are its resources (requests default)."""
    return {
        "metadata": {
            "name": "p",
            "namespace": "ml",
            "uid": "u-1",
            "annotations": annotations or {},
        },
        "spec": {
            "nodeName": "gpu-node-1",
            "containers": [{"name": "c", "resources": {"limits": limits or {}}}],
            **spec,
        },
        "status": {"phase": "Running"},
    }


def gpu_columns(pod: dict[str, Any], dropped: Counter[str] | None = None) -> tuple[Any, ...]:
    row = pod_row(pod, Counter() if dropped is None else dropped)
    return tuple(row[c] for c in GPU_COLUMNS)


def test_a_hami_share_is_its_percentage_on_the_device_hami_assigned() -> None:
    """nvidia.com/gpu: 1 with 30 % of the cores and of the memory is 300 milli, not a GPU."""
    pod = gpu_pod(
        limits={
            "nvidia.com/gpu": "1",
            "nvidia.com/gpucores": "30",
            "nvidia.com/gpumem-percentage": "30",
        },
        annotations={
            "hami.io/vgpu-devices-allocated": hami_allocation(
                ["GPU-1a2b"], memory_mib=24_000, cores_percent=30
            )
        },
        nodeSelector={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
    )
    dropped: Counter[str] = Counter()
    assert gpu_columns(pod, dropped) == (1, 300, "NVIDIA-A100-SXM4-80GB", "GPU-1a2b")
    assert not dropped


def test_the_trace_share_and_affinity_products_joined_in_order() -> None:
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {
                                "key": "nvidia.com/gpu.product",
                                "operator": "In",
                                "values": ["V100M32", "T4"],
                            }
                        ]
                    },
                ]
            }
        }
    }
    pod = gpu_pod(
        limits={"nvidia.com/gpu": "1"},
        annotations={"alibabacloud.com/gpu-milli": "460"},
        affinity=affinity,
    )
    assert gpu_columns(pod) == (1, 460, "T4|V100M32", None)


def test_whole_gpus_name_every_assigned_device_in_order() -> None:
    allocated = "GPU-b,NVIDIA,81559,100:GPU-a,NVIDIA,81559,100:;"
    pod = gpu_pod(
        limits={"nvidia.com/gpu": "2"}, annotations={"hami.io/vgpu-devices-allocated": allocated}
    )
    assert gpu_columns(pod) == (2, 1000, None, "GPU-b,GPU-a")
    # The NVIDIA device plugin writes no annotation: the devices are unknown.
    assert gpu_columns(gpu_pod(limits={"nvidia.com/gpu": "2"})) == (2, 1000, None, None)


def test_a_cpu_only_pod_has_no_gpu_columns() -> None:
    pod = gpu_pod(limits={"cpu": "2"}, nodeSelector={"nvidia.com/gpu.product": "T4"})
    assert gpu_columns(pod) == (0, None, None, None)


def test_unreadable_gpu_fields_are_whole_gpus_and_counted() -> None:
    pod = gpu_pod(
        limits={"nvidia.com/gpu": "1", "nvidia.com/gpucores": "lots"},
        annotations={"alibabacloud.com/gpu-milli": "1500"},
    )
    dropped: Counter[str] = Counter()
    assert gpu_columns(pod, dropped) == (1, 1000, None, None)
    assert dropped == Counter({"pod_bad_gpu_request": 2})
    shared_pair = gpu_pod(
        limits={"nvidia.com/gpu": "2"}, annotations={"alibabacloud.com/gpu-milli": "500"}
    )
    dropped.clear()
    assert gpu_columns(shared_pair, dropped) == (2, 1000, None, None)
    assert dropped == Counter({"pod_bad_gpu_request": 1})


def test_an_unreadable_gpu_count_keeps_the_assigned_devices() -> None:
    pod = gpu_pod(
        limits={"nvidia.com/gpu": "one"},
        annotations={"hami.io/vgpu-devices-allocated": "GPU-a,NVIDIA,100,30:;"},
    )
    dropped: Counter[str] = Counter()
    assert gpu_columns(pod, dropped) == (None, None, None, "GPU-a")
    assert dropped == Counter({"pod_bad_quantity": 1})


def test_annotations_that_are_not_an_object_make_the_pod_malformed() -> None:
    pod = gpu_pod(limits={"nvidia.com/gpu": "1"})
    pod["metadata"]["annotations"] = ["hami.io/vgpu-devices-allocated"]
    with pytest.raises(Malformed):
        pod_row(pod, Counter())


def test_a_request_past_int64_once_in_the_columns_unit_is_nulled_and_counted() -> None:
    """The API server caps a quantity at 2^63-1 (the Quantity reference); in milli-CPU that
    no longer fits the int64 column, so the row keeps the pod with that value NULL."""
    import pyarrow as pa

    from sits_observe.domain.tables import conform

    dropped: Counter[str] = Counter()
    row = pod_row(gpu_pod(limits={"cpu": "1e30", "memory": "1e30", "nvidia.com/gpu": "2"}), dropped)
    assert row["cpu_request_milli"] is None  # 1000 x (2^63-1) milli-cores
    assert row["memory_request_bytes"] == 2**63 - 1  # capped, and it fits
    assert row["gpu_request"] == 2
    assert dropped == Counter({"pod_bad_quantity": 1})
    ok = pod_row(gpu_pod(limits={"cpu": "9223372036854775", "memory": "1e18"}), Counter())
    assert ok["cpu_request_milli"] == 9223372036854775000
    conform("pods", pa.Table.from_pylist([{**row, "ts": None}, {**ok, "ts": None}]))
