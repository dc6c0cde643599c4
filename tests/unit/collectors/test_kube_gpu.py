"""GPU requests read from pod manifests (collectors.kube_gpu): every form the GPU stacks write."""

from __future__ import annotations

from typing import Any

from sits_observe.collectors.kube.gpu import (
    GPU_HINT_ANNOTATION,
    GPU_MILLI_ANNOTATION,
    HAMI_ALLOCATED_ANNOTATION,
    GpuRequest,
    hami_allocation,
    pod_gpu_request,
)


def manifest(
    *,
    annotations: dict[str, str] | None = None,
    resources: dict[str, Any] | None = None,
    spec: dict[str, Any] | None = None,
) -> dict[str, Any]:
    container = {"name": "c", "resources": resources or {}}
    return {
        "metadata": {"name": "p", "annotations": annotations or {}},
        "spec": {"containers": [container], **(spec or {})},
    }


def test_a_plain_gpu_request_is_whole_devices() -> None:
    assert pod_gpu_request(manifest(), 2) == GpuRequest(2, 1000)
    assert pod_gpu_request(manifest(), 0) == GpuRequest(0, 0)


def test_the_trace_annotation_gives_the_exact_share() -> None:
    got = pod_gpu_request(manifest(annotations={GPU_MILLI_ANNOTATION: "460"}), 1)
    assert got.gpu_milli == 460 and got.shared


def test_hami_percentages_give_the_larger_share_rounded_up() -> None:
    resources = {
        "limits": {
            "nvidia.com/gpu": 1,
            "nvidia.com/gpucores": 30,
            "nvidia.com/gpumem-percentage": "45.5",
        }
    }
    assert pod_gpu_request(manifest(resources=resources), 1).gpu_milli == 455


def test_bad_values_are_absent_and_named() -> None:
    got = pod_gpu_request(
        manifest(
            annotations={GPU_MILLI_ANNOTATION: "1500"},
            resources={"limits": {"nvidia.com/gpucores": "lots"}},
        ),
        1,
    )
    assert got.gpu_milli == 1000
    assert len(got.problems) == 2
    multi = pod_gpu_request(manifest(annotations={GPU_MILLI_ANNOTATION: "300"}), 2)
    assert multi.gpu_milli == 1000 and "per device" in multi.problems[0]


def test_products_come_from_the_selector_and_required_affinity() -> None:
    selector = {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}}
    assert pod_gpu_request(manifest(spec=selector), 1).gpu_types == ("NVIDIA-H100-80GB-HBM3",)
    term = {
        "matchExpressions": [
            {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["T4", "A10"]}
        ]
    }
    affinity = {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
            }
        }
    }
    assert pod_gpu_request(manifest(spec=affinity), 1).gpu_types == ("A10", "T4")
    open_term = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
    either = {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [term, open_term]
                }
            }
        }
    }
    assert pod_gpu_request(manifest(spec=either), 1).gpu_types == ()
    both = {**affinity, "nodeSelector": {"nvidia.com/gpu.product": "T4"}}
    assert pod_gpu_request(manifest(spec=both), 1).gpu_types == ("T4",)


def test_hint_and_allocation_annotations_are_read_in_order() -> None:
    allocated = hami_allocation(["GPU-b", "GPU-a"], memory_mib=1024, cores_percent=30)
    got = pod_gpu_request(
        manifest(
            annotations={
                GPU_HINT_ANNOTATION: "GPU-a, GPU-a,GPU-c",
                HAMI_ALLOCATED_ANNOTATION: allocated,
            }
        ),
        2,
    )
    assert got.hint_uuids == ("GPU-a", "GPU-c")
    assert got.allocated_uuids == ("GPU-b", "GPU-a")
    assert pod_gpu_request(
        manifest(annotations={HAMI_ALLOCATED_ANNOTATION: "GPU-x,NVIDIA,10,20:;GPU-y,NVIDIA,1,1:;"}),
        1,
    ).allocated_uuids == ("GPU-x", "GPU-y")
