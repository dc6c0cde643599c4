"""A workload's GPU stack from what the store holds, and the bytes it reserves per GPU now."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from sits_observe.analytics.rightsizing.forms import MIB, propose
from sits_observe.analytics.rightsizing.memory import RightsizingSettings
from sits_observe.analytics.rightsizing.stacks import stack_of, workload_sizings
from sits_observe.collectors.kube.pods import pod_row
from sits_observe.store import Store

GIB = 1 << 30
H100 = "NVIDIA H100 80GB HBM3"


def test_mig_first_then_a_share_then_time_slicing_then_whole_gpus() -> None:
    mig, reserved, compute = stack_of(
        {"mig_profile": "3g.40gb", "instance_bytes": 40 * GIB, "util_ratio": 0.2}
    )
    assert (mig.kind, mig.current, reserved) == ("mig", "nvidia.com/mig-3g.40gb: 1", 40 * GIB)
    assert compute == pytest.approx(0.2 * 3 / 7)  # the instance's use, as a share of a GPU
    proposal = propose(mig, 8 * GIB, gpu_memory_bytes=None, gpu_product=H100, compute_ratio=compute)
    # 8 GiB and one compute slice (0.09 x 7, rounded up): the smallest H100 profile, 1g.10gb.
    assert proposal.proposed == "nvidia.com/mig-1g.10gb: 1"
    shared, reserved, compute = stack_of(
        {"gpu_request": 1, "gpu_milli": 250, "device_bytes": 80 * GIB, "util_ratio": 0.9}
    )
    assert (shared.kind, shared.hami_memory_percent, reserved) == ("hami", 25, 20 * GIB)
    assert compute is None  # the device's utilisation, not the pod's
    sliced, reserved, _ = stack_of({"gpu_request": 1, "replicas": 4, "node_gpu_bytes": 80 * GIB})
    assert (sliced.kind, sliced.time_slicing_replicas, reserved) == ("time-slicing", 4, 20 * GIB)
    whole, reserved, compute = stack_of({"gpu_request": 2, "device_bytes": 80 * GIB})
    assert (whole.kind, whole.num_gpu, whole.current) == ("whole-gpu", 2, "nvidia.com/gpu: 2")
    assert (reserved, compute) == (80 * GIB, None)
    unknown, reserved, _ = stack_of({})
    assert (unknown.kind, unknown.num_gpu, reserved) == ("whole-gpu", 1, None)


# -- from a store: the pod spec's stack, and the columns for rows without it ------------------

#: Buckets that double (1, 3, 7, 15, 31, 63, 127 GiB starts) make the targets easy by hand.
COARSE = RightsizingSettings(
    first_bucket_bytes=GIB, bucket_growth_ratio=1.0, min_points=10, min_history_s=60
)
T0 = datetime(2026, 11, 2, 9, 0, 0)
H100_LABEL = "NVIDIA-H100-80GB-HBM3"


def serving_pod(name: str, *, annotations: dict[str, str], container: dict[str, Any]) -> Any:
    """A bound Pod as the API returns it, with one container."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{name}-0",
            "namespace": "serving",
            "uid": f"uid-{name}",
            "annotations": annotations,
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": name, "uid": "o",
                 "controller": True}
            ],
        },
        "spec": {"nodeName": "n1", "containers": [{"name": "main", "image": "x", **container}]},
        "status": {"phase": "Running", "qosClass": "Burstable"},
    }  # fmt: skip


def vllm_server(utilization: str) -> Any:
    args = ["--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu-memory-utilization", utilization]
    limits = {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "1"}
    return serving_pod(
        "vllm", annotations={}, container={"args": args, "resources": {"limits": limits}}
    )


def kai_pod(name: str, annotations: dict[str, str]) -> Any:
    requests = {"cpu": "2", "memory": "8Gi"}  # KAI shares a GPU without nvidia.com/gpu
    return serving_pod(
        name, annotations=annotations, container={"resources": {"requests": requests}}
    )


def inventory_row(pod: Any) -> dict[str, Any]:
    """The ``pods`` row the inventory collector writes for ``pod``."""
    return {"ts": T0, **pod_row(pod, Counter())}


def old_row(pod: str, workload: str, milli: int) -> dict[str, Any]:
    """A row stored before schema version 5: no pod-spec facts."""
    return {"ts": T0, "pod_uid": f"uid-{pod}", "namespace": "legacy", "pod": pod,
            "node": "n1", "phase": "Running", "gpu_request": 1, "gpu_milli": milli,
            "workload": workload}  # fmt: skip


def samples(namespace: str, pod: str, gpu: int, used_gib: float) -> list[dict[str, Any]]:
    """11 samples 10 s apart (100 s of history) at a constant framebuffer use."""
    return [
        {"ts": T0 + timedelta(seconds=10 * i), "node": "n1", "gpu_uuid": f"GPU-{gpu}",
         "gpu_index": gpu, "model_name": H100, "namespace": namespace, "pod": pod,
         "fb_used_bytes": int(used_gib * GIB), "fb_total_bytes": 80 * GIB, "gpu_util_ratio": 0.3}
        for i in range(11)
    ]  # fmt: skip


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path / "stacks.duckdb") as opened:
        pods = [
            inventory_row(vllm_server("0.5")),
            inventory_row(kai_pod("kai-fraction", {"gpu-fraction": "0.5"})),
            inventory_row(kai_pod("kai-memory", {"gpu-memory": "30000"})),
            old_row("shared-0", "shared", 250),
            old_row("llm-0", "llm", 1000),
        ]
        gpu = [
            *samples("serving", "vllm-0", 0, 40),  # vLLM's 0.5 of 80 GiB, pre-allocated
            *samples("serving", "kai-fraction-0", 1, 20),
            *samples("serving", "kai-memory-0", 2, 20),
            *samples("legacy", "shared-0", 3, 10),
            *samples("legacy", "llm-0", 4, 72),
        ]
        node = {"ts": T0, "node": "n1", "gpu_allocatable": 8, "gpu_product": H100_LABEL,
                "gpu_memory_bytes": 80 * GIB, "labels_json": "{}"}  # fmt: skip
        opened.append_batch(
            {
                "nodes": pa.Table.from_pylist([node]),
                "pods": pa.Table.from_pylist(pods),
                "gpu_samples": pa.Table.from_pylist(gpu),
            }
        )
        yield opened


def test_a_store_s_pod_specs_give_the_vllm_and_kai_forms(store: Store) -> None:
    until = T0 + timedelta(minutes=5)
    by = {z.workload: z for z in workload_sizings(store, T0, until, COARSE)}
    # 40 GiB peaks fall in the bucket [31, 63) GiB, answered by its end: 63 x 1.15 = 72.45 GiB,
    # 90.6 % of the 80 GiB GPU (0.91); vLLM holds 0.5 x 80 = 40 GiB now, its pre-allocation,
    # which the target lands above by construction: the setting is kept.
    vllm = by["vllm"]
    assert (vllm.stack.kind, vllm.stack.current) == ("vllm", "--gpu-memory-utilization 0.5")
    assert vllm.memory.target_bytes == pytest.approx(63 * 1.15 * GIB, rel=1e-9)
    assert vllm.reserved_bytes == 40 * GIB and vllm.compute_ratio == pytest.approx(0.3)
    assert vllm.proposal is not None
    assert vllm.proposal.proposed == "--gpu-memory-utilization 0.5"
    assert "91% of the GPU covers the target" in vllm.proposal.note
    # 20 GiB: bucket [15, 31) -> 31 x 1.15 = 35.65 GiB = 44.56 % of the GPU -> 0.45, or
    # 36,505.6 MiB -> 36,506 MiB; the fraction holds 0.5 x 80 = 40 GiB, the MiB 30,000 MiB.
    fraction, memory = by["kai-fraction"], by["kai-memory"]
    assert (fraction.stack.kind, fraction.stack.current) == ("kai", "gpu-fraction: 0.5")
    assert (fraction.reserved_bytes, fraction.compute_ratio) == (40 * GIB, None)
    assert fraction.proposal is not None and fraction.proposal.proposed == "gpu-fraction: 0.45"
    assert (memory.stack.kind, memory.reserved_bytes) == ("kai", 30_000 * MIB)
    assert memory.proposal is not None and memory.proposal.proposed == "gpu-memory: 36506"


def test_rows_without_the_pod_spec_are_read_from_the_columns_as_before(store: Store) -> None:
    by = {z.workload: z for z in workload_sizings(store, T0, T0 + timedelta(minutes=5), COARSE)}
    # 250 milli: HAMi's percentage, 25 % of 80 GiB; 10 GiB in [7, 15) -> 15 x 1.15 = 17.25 GiB,
    # 21.6 % -> 22 %.
    shared = by["shared"]
    assert (shared.stack.kind, shared.reserved_bytes) == ("hami", 20 * GIB)
    assert shared.proposal is not None
    assert shared.proposal.proposed == "nvidia.com/gpumem-percentage: 22"
    # A vLLM server stored without its arguments reads as a whole GPU, as before version 5.
    llm = by["llm"]
    assert (llm.stack.kind, llm.stack.current, llm.reserved_bytes) == (
        "whole-gpu",
        "nvidia.com/gpu: 1",
        80 * GIB,
    )


def test_the_pod_spec_s_mig_hami_and_time_slicing_forms_and_what_they_reserve() -> None:
    def spec(requests: dict[str, str]) -> str:
        return json.dumps({"spec": {"containers": [{"resources": {"requests": requests}}]}})

    # A MIG resource with no sample naming the profile: the profile's figure, 10 x 10^9 bytes.
    mig, reserved, compute = stack_of(
        {"gpu_stack_json": spec({"nvidia.com/mig-1g.10gb": "1"}), "gpu_product": H100,
         "util_ratio": 0.7}
    )  # fmt: skip
    assert (mig.kind, mig.mig_profile, reserved) == ("mig", "1g.10gb", 10 * 10**9)
    assert compute == pytest.approx(0.7 / 7)
    hami, reserved, compute = stack_of(
        {"gpu_stack_json": spec({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "6000"}),
         "gpu_milli": 1000, "device_bytes": 80 * GIB, "util_ratio": 0.7}
    )  # fmt: skip
    # HAMi's MiB, though gpu_milli (cores and percentage only) reads the pod as a whole GPU.
    assert (hami.kind, hami.hami_memory_mib, reserved, compute) == ("hami", 6000, 6000 * MIB, None)
    sliced, reserved, _ = stack_of(
        {"gpu_stack_json": spec({"nvidia.com/gpu": "1"}), "replicas": 4, "device_bytes": 80 * GIB}
    )
    assert (sliced.kind, sliced.time_slicing_replicas, reserved) == ("time-slicing", 4, 20 * GIB)
    # A column that is not a JSON object is read as absent: the columns decide.
    whole, reserved, _ = stack_of(
        {"gpu_stack_json": "[1]", "gpu_request": 2, "device_bytes": 80 * GIB}
    )
    assert (whole.kind, whole.current, reserved) == ("whole-gpu", "nvidia.com/gpu: 2", 80 * GIB)
