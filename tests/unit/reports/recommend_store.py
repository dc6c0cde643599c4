"""A small cluster's store for the ``recommend`` report's tests (unit, golden, service)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pyarrow as pa

from sits_observe.store import Store

GIB = 1024**3
T0 = datetime(2026, 3, 1, 12, 0, 0)
H100 = "NVIDIA H100 80GB HBM3"


def fill(store: Store) -> None:
    """Two H100 nodes; finance/p1 (1 GPU, 3 GiB, ~35 ms P95, SLA 15 ms) and finance/p2 (2 GPUs)
    over three daily inventory snapshots; 10 s of DCGM samples and 50 requests up to T0."""
    nodes = [
        {"ts": T0, "node": n, "gpu_allocatable": 8, "gpu_product": H100,
         "gpu_memory_bytes": 80 * GIB, "cpu_allocatable_milli": 64_000,
         "memory_allocatable_bytes": 512 * GIB, "ready": True, "labels_json": "{}"}
        for n in ("n1", "n2")
    ]  # fmt: skip
    pods = [
        {"ts": T0 - timedelta(days=day), "pod_uid": f"uid-{pod}", "namespace": "finance",
         "pod": pod, "node": "n1", "phase": "Running", "gpu_request": gpus,
         "cpu_request_milli": 4000, "memory_request_bytes": 16 * GIB, "priority_class": prio,
         "workload": workload}
        for day in range(3)
        for pod, gpus, prio, workload in (
            ("p1", 1, "throughput-guaranteed", "chat"), ("p2", 2, "ultra-low-latency", "search")
        )
    ]  # fmt: skip
    samples = [
        {"ts": T0 - timedelta(seconds=s), "node": "n1", "gpu_uuid": "GPU-1", "gpu_index": 0,
         "model_name": H100, "namespace": "finance", "pod": "p1", "fb_used_bytes": 3 * GIB,
         "fb_free_bytes": 77 * GIB, "fb_total_bytes": 80 * GIB, "gpu_util_ratio": 0.5,
         "dram_active_ratio": 0.3, "source": "sim"}
        for s in range(10)
    ]  # fmt: skip
    requests = [
        {"ts": T0 - timedelta(seconds=i), "model": "m", "latency_s": 0.03 + i * 1e-4, "ok": True,
         "namespace": "finance", "pod": "p1", "prompt_tokens": 100, "output_tokens": 50}
        for i in range(50)
    ]  # fmt: skip
    store.append_batch(
        {
            "nodes": pa.Table.from_pylist(nodes),
            "pods": pa.Table.from_pylist(pods),
            "gpu_samples": pa.Table.from_pylist(samples),
            "requests": pa.Table.from_pylist(requests),
        }
    )
