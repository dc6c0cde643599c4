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
    over three daily inventory snapshots; 10 s of DCGM samples and 50 requests up to T0.
    Then the analytics' cases (:func:`analytics_rows`): one snapshot at T0 and an hour of
    samples on n2."""
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
    store.append_batch(analytics_rows())


#: Samples every 30 s for the hour before T0: 121 points over 3600 s, the right-sizing floor.
HOUR = [T0 - timedelta(seconds=30 * i) for i in range(121)]


def analytics_rows() -> dict[str, pa.Table]:
    """On n2: research/nb-0 (workload notebook, a whole GPU idle for the hour at 2 GiB),
    serving/emb-0 (embedder, half a GPU (HAMi share 500 milli), 40 % busy at 10 GiB) and
    serving/llm-0 (llm, 1 GPU, model llama: 12 rps at 0.2 s for 60 s, then 25 rps at 2 s
    for 10 s: safe maximum 10 rps at the 1 s SLO, peak 850 requests in one minute)."""
    pods = [
        {"ts": T0, "pod_uid": f"uid-{pod}", "namespace": ns, "pod": pod, "node": "n2",
         "phase": "Running", "gpu_request": 1, "gpu_milli": milli, "cpu_request_milli": 2000,
         "memory_request_bytes": 8 * GIB, "workload": workload}
        for ns, pod, workload, milli in (
            ("research", "nb-0", "notebook", None), ("serving", "emb-0", "embedder", 500),
            ("serving", "llm-0", "llm", None),
        )
    ]  # fmt: skip
    samples = [
        {"ts": at, "node": "n2", "gpu_uuid": uuid, "gpu_index": index, "model_name": H100,
         "namespace": ns, "pod": pod, "fb_used_bytes": used * GIB,
         "fb_free_bytes": (80 - used) * GIB, "fb_total_bytes": 80 * GIB, "gpu_util_ratio": util,
         "dram_active_ratio": util / 2, "source": "sim"}
        for at in HOUR
        for uuid, index, ns, pod, used, util in (
            ("GPU-2", 2, "research", "nb-0", 2, 0.0), ("GPU-3", 3, "serving", "emb-0", 10, 0.4)
        )
    ]  # fmt: skip
    start = T0 - timedelta(seconds=70)
    served = [(k, 12, 0.2) for k in range(60)] + [(60 + k, 25, 2.0) for k in range(10)]
    requests = [
        {"ts": start + timedelta(seconds=k + (j + 0.5) / rate), "model": "llama",
         "latency_s": latency, "ok": True, "namespace": "serving", "pod": "llm-0",
         "prompt_tokens": 100, "output_tokens": 50}
        for k, rate, latency in served
        for j in range(rate)
    ]  # fmt: skip
    return {
        "pods": pa.Table.from_pylist(pods),
        "gpu_samples": pa.Table.from_pylist(samples),
        "requests": pa.Table.from_pylist(requests),
    }
