"""The proposal in the form of the workload's GPU stack, detected from its pod spec."""

from __future__ import annotations

from typing import Any

import pytest

from sits_observe.analytics.fragmentation.mig_profiles import (
    MIG_PRODUCTS,
    mig_product,
    smallest_fitting,
)
from sits_observe.analytics.rightsizing.forms import detect_stack, propose

GB = 10**9
GIB = 1 << 30


def pod(
    resources: dict[str, Any] | None = None,
    *,
    annotations: dict[str, str] | None = None,
    args: list[str] | None = None,
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "resources": {"limits": resources or {}}}
    if args is not None:
        container["args"] = args
    return {
        "metadata": {"name": "p", "namespace": "ns", "annotations": annotations or {}},
        "spec": {"containers": [container]},
    }


def test_mig_resource_and_the_smallest_profile_that_fits() -> None:
    stack = detect_stack(pod({"nvidia.com/mig-3g.40gb": "1"}))
    assert (stack.kind, stack.mig_profile, stack.current) == (
        "mig",
        "3g.40gb",
        "nvidia.com/mig-3g.40gb: 1",
    )
    # 15 GB on an H100 80GB: 1g.10gb (10 GB) is short, 1g.20gb is the smallest that holds it.
    h100 = propose(stack, 15 * GB, gpu_memory_bytes=80 * GB, gpu_product="NVIDIA-H100-80GB-HBM3")
    assert h100.proposed == "nvidia.com/mig-1g.20gb: 1" and h100.fits
    # Measured compute of 30 % of the GPU needs ceil(0.3 x 7) = 3 slices: 3g.40gb.
    busy = propose(
        stack,
        15 * GB,
        gpu_memory_bytes=80 * GB,
        gpu_product="NVIDIA-H100-80GB-HBM3",
        compute_ratio=0.3,
    )
    assert busy.proposed == "nvidia.com/mig-3g.40gb: 1"
    # Without the product, the profile's name finds the table (A100 80GB and H100 80GB agree).
    assert propose(stack, 15 * GB, gpu_memory_bytes=None).proposed == "nvidia.com/mig-1g.20gb: 1"


@pytest.mark.parametrize(
    ("product", "target_bytes", "expected"),
    [
        ("NVIDIA A100-SXM4-40GB", 4.5e9, "1g.5gb"),
        ("NVIDIA A100-SXM4-40GB", 11e9, "3g.20gb"),
        ("NVIDIA A100-SXM4-80GB", 11e9, "1g.20gb"),
        ("NVIDIA H100 NVL", 30e9, "3g.47gb"),
        ("NVIDIA H200", 17e9, "1g.18gb"),
        ("NVIDIA H200", 72e9, "7g.141gb"),
        ("NVIDIA A100-SXM4-40GB", 41e9, None),
    ],
)
def test_mig_tables_per_product(product: str, target_bytes: float, expected: str | None) -> None:
    table = mig_product(product)
    assert table is not None
    found = smallest_fitting(table, target_bytes)
    assert (found.name if found else None) == expected


def test_every_mig_table_has_eight_memory_slices_in_six_profiles() -> None:
    for product in MIG_PRODUCTS:
        assert [p.memory_slices for p in product.profiles] == [1, 2, 2, 4, 4, 8]
        assert product.profiles[-1].memory_bytes == product.total_memory_bytes


def test_hami_memory_in_mib_and_cores_from_compute() -> None:
    stack = detect_stack(
        pod({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "20000", "nvidia.com/gpucores": "50"})
    )
    assert (stack.kind, stack.hami_memory_mib, stack.hami_cores_percent) == ("hami", 20000, 50)
    out = propose(stack, 6 * GIB + 1, gpu_memory_bytes=80 * GIB, compute_ratio=0.123)
    assert out.proposed == "nvidia.com/gpumem: 6145, nvidia.com/gpucores: 13"
    assert out.current == "nvidia.com/gpumem: 20000, nvidia.com/gpucores: 50"
    pct = detect_stack(pod({"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "50"}))
    assert propose(pct, 20 * GIB + 1, gpu_memory_bytes=80 * GIB).proposed == (
        "nvidia.com/gpumem-percentage: 26"
    )


def test_kai_annotations() -> None:
    memory = detect_stack(pod({"nvidia.com/gpu": "1"}, annotations={"gpu-memory": "4096"}))
    assert (memory.kind, memory.kai_memory_mib) == ("kai", 4096)
    assert propose(memory, 2 * GIB, gpu_memory_bytes=None).proposed == "gpu-memory: 2048"
    fraction = detect_stack(pod(annotations={"gpu-fraction": "0.5"}))
    out = propose(fraction, int(0.301 * 80 * GIB), gpu_memory_bytes=80 * GIB)
    assert (fraction.kai_fraction_ratio, out.proposed) == (0.5, "gpu-fraction: 0.31")


@pytest.mark.parametrize(
    "args",
    [
        ["--model", "m", "--gpu-memory-utilization", "0.9"],
        ["--gpu-memory-utilization=0.9"],
        ["vllm serve m --gpu-memory-utilization 0.9"],
    ],
)
def test_vllm_argument(args: list[str]) -> None:
    stack = detect_stack(pod({"nvidia.com/gpu": "1"}, args=args))
    assert (stack.kind, stack.vllm_utilization_ratio) == ("vllm", 0.9)
    out = propose(stack, int(0.412 * 80 * GIB), gpu_memory_bytes=80 * GIB)
    assert out.proposed == "--gpu-memory-utilization 0.42"
    assert "pre-allocation" in out.note


def test_time_slicing_replicas_from_the_node_label() -> None:
    stack = detect_stack(pod({"nvidia.com/gpu": "1"}), {"nvidia.com/gpu.replicas": "4"})
    assert (stack.kind, stack.time_slicing_replicas) == ("time-slicing", 4)
    out = propose(stack, 15 * GIB, gpu_memory_bytes=80 * GIB)
    assert out.proposed == "time-slicing, 5 replicas"  # floor(80 / 15)
    renamed = detect_stack(pod({"nvidia.com/gpu.shared": "1"}))
    assert renamed.kind == "time-slicing" and renamed.time_slicing_replicas is None


def test_whole_gpu_names_the_shared_forms_that_would_fit() -> None:
    stack = detect_stack(pod({"nvidia.com/gpu": "2"}))
    assert (stack.kind, stack.num_gpu, stack.current) == ("whole-gpu", 2, "nvidia.com/gpu: 2")
    out = propose(stack, 9 * GB, gpu_memory_bytes=80 * GIB, gpu_product="NVIDIA-H100-80GB-HBM3")
    assert out.proposed == "nvidia.com/gpu: 2"
    assert out.alternatives == ("nvidia.com/mig-1g.10gb: 1", "nvidia.com/gpumem: 8584")
    big = propose(stack, 60 * GIB, gpu_memory_bytes=80 * GIB, gpu_product="NVIDIA-H100-80GB-HBM3")
    assert big.alternatives == ()


def test_malformed_values_are_named_not_raised() -> None:
    stack = detect_stack(
        pod(
            {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "lots"},
            annotations={"gpu-fraction": "2"},
            args=["--gpu-memory-utilization", "x"],
        )
    )
    assert stack.kind == "whole-gpu"
    assert any("nvidia.com/gpumem='lots'" in p for p in stack.problems)
    assert any("gpu-fraction='2'" in p for p in stack.problems)
    assert any("--gpu-memory-utilization 'x'" in p for p in stack.problems)


def test_vllm_keeps_its_setting_when_the_target_is_its_own_pre_allocation() -> None:
    """72 GiB measured under 0.9 of 80 GiB, + 15 %: 82.8 GiB is above the setting, not a need."""
    stack = detect_stack(pod({"nvidia.com/gpu": "4"}, args=["--gpu-memory-utilization", "0.9"]))
    out = propose(stack, int(72 * 1.15 * GIB), gpu_memory_bytes=80 * GIB)
    assert (out.current, out.proposed, out.fits) == (
        "--gpu-memory-utilization 0.9",
        "--gpu-memory-utilization 0.9",
        True,
    )
    assert "keep it" in out.note
