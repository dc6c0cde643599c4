"""A small cluster written into a real store for the extender tests (unit and integration).

Nodes (inventory at NOW - 10 s, GPU samples at NOW - 5 s and NOW - 4 s):

| node   | GPUs            | allocated                 | free | CPU allocatable |
|--------|-----------------|---------------------------|------|-----------------|
| cpu-1  | none            | 4 CPU pods (1 CPU each)   | -    | 16 CPU          |
| gpu-a  | 8 x H100 80 GiB | nothing                   | 8    | 64 CPU          |
| gpu-b  | 8 x H100 80 GiB | 3 pods x 2 GPUs (4 CPU)   | 2    | 64 CPU          |
| gpu-c  | 4 x L40S 48 GiB | 1 pod x 1 GPU (2 CPU)     | 3    | 32 CPU          |
| gpu-d  | 8 x H100 80 GiB | 2 pods x 4 GPUs (8 CPU)   | 0    | 64 CPU          |

Every free GPU has 1 GiB used (79 / 47 GiB free); a GPU held by a pod has 60 GiB used (the
L40S pod 40 GiB) and carries the pod's name. gpu-a's GPUs report DRAM activity 0.5 (node
interference 0.4 x 0.5 = 0.2, NVLink counters absent); everything else 0.

FGD target workload M (10 pods, all kept at 95% coverage): CPU-only 1 CPU p=0.4,
2 x GPU + 4 CPU p=0.3, 4 x GPU + 8 CPU p=0.2, 1 x GPU + 2 CPU p=0.1.

The 2-GPU pods belong to Deployment ``llm`` (ReplicaSet ``llm-5d8f7c9b4``), namespace ``serve``:
its measured per-GPU need is 60 GiB.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pyarrow as pa

from sits_observe.domain.times import utc_naive as naive
from sits_observe.store import Store

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
GIB = 1024**3
H100 = "NVIDIA H100 80GB HBM3"
L40S = "NVIDIA L40S"

NODES = {
    # name: (gpus, product, memory GiB per GPU, cpu milli)
    "cpu-1": (0, None, None, 16_000),
    "gpu-a": (8, H100, 80, 64_000),
    "gpu-b": (8, H100, 80, 64_000),
    "gpu-c": (4, L40S, 48, 32_000),
    "gpu-d": (8, H100, 80, 64_000),
}

# (namespace, pod, node, gpus, cpu milli, owner kind, owner name, workload, GPU used GiB)
PODS = [
    *[("batch", f"etl-{i}", "cpu-1", 0, 1000, "Job", f"etl-{i}", f"etl-{i}", 0) for i in range(4)],
    *[
        ("serve", f"llm-5d8f7c9b4-{s}", "gpu-b", 2, 4000, "ReplicaSet", "llm-5d8f7c9b4", "llm", 60)
        for s in ("x7k2p", "q9m4t", "h3n8w")
    ],
    ("serve", "embed-0", "gpu-c", 1, 2000, "StatefulSet", "embed", "embed", 40),
    ("train", "big-0", "gpu-d", 4, 8000, "Job", "big-0", "big-0", 60),
    ("train", "big-1", "gpu-d", 4, 8000, "Job", "big-1", "big-1", 60),
]


def nodes_table(
    at: datetime, nodes: dict[str, tuple[int, str | None, int | None, int]]
) -> pa.Table:
    names = list(nodes)
    return pa.table(
        {
            "ts": pa.array([naive(at)] * len(names), pa.timestamp("us")),
            "node": names,
            "gpu_allocatable": pa.array([nodes[n][0] for n in names], pa.int32()),
            "gpu_product": [nodes[n][1] for n in names],
            "gpu_memory_bytes": [
                None if nodes[n][2] is None else nodes[n][2] * 1024 * 1024 * 1024 for n in names
            ],
            "cpu_allocatable_milli": [nodes[n][3] for n in names],
            "memory_allocatable_bytes": [512 * GIB] * len(names),
            "ready": [True] * len(names),
            "labels_json": [json.dumps({"kubernetes.io/hostname": n}) for n in names],
        }
    )


def pods_table(at: datetime) -> pa.Table:
    return pa.table(
        {
            "ts": pa.array([naive(at)] * len(PODS), pa.timestamp("us")),
            "pod_uid": [f"uid-{p[1]}" for p in PODS],
            "namespace": [p[0] for p in PODS],
            "pod": [p[1] for p in PODS],
            "node": [p[2] for p in PODS],
            "phase": ["Running"] * len(PODS),
            "owner_kind": [p[5] for p in PODS],
            "owner_name": [p[6] for p in PODS],
            "workload": [p[7] for p in PODS],
            "gpu_request": pa.array([p[3] for p in PODS], pa.int32()),
            "cpu_request_milli": [p[4] for p in PODS],
        }
    )


def gpu_rows(at: datetime) -> pa.Table:
    """One sample of every GPU at ``at``; pods take GPUs from index 0 upwards."""
    rows: dict[str, list[object]] = {
        k: []
        for k in (
            "ts",
            "node",
            "gpu_uuid",
            "gpu_index",
            "model_name",
            "namespace",
            "pod",
            "fb_used_bytes",
            "fb_free_bytes",
            "fb_total_bytes",
            "dram_active_ratio",
        )
    }
    for node, (gpus, product, mem_gib, _) in NODES.items():
        holders: list[tuple[str, str, int]] = []
        for ns, pod, where, count, _cpu, _k, _o, _w, used in PODS:
            if where == node:
                holders.extend([(ns, pod, used)] * count)
        for g in range(gpus):
            assert mem_gib is not None
            ns, pod, used = holders[g] if g < len(holders) else (None, None, 1)
            rows["ts"].append(naive(at))
            rows["node"].append(node)
            rows["gpu_uuid"].append(f"GPU-{node}-{g}")
            rows["gpu_index"].append(g)
            rows["model_name"].append(product)
            rows["namespace"].append(ns)
            rows["pod"].append(pod)
            rows["fb_used_bytes"].append(used * GIB)
            rows["fb_free_bytes"].append((mem_gib - used) * GIB)
            rows["fb_total_bytes"].append(mem_gib * GIB)
            rows["dram_active_ratio"].append(0.5 if node == "gpu-a" else 0.0)
    table = pa.table(rows)
    return table.set_column(0, "ts", pa.array(rows["ts"], pa.timestamp("us")))


def write_cluster(store: Store, now: datetime = NOW) -> None:
    """Write the cluster of the module docstring, as seen at ``now``."""
    store.append("nodes", nodes_table(now - timedelta(seconds=10), NODES))
    store.append("pods", pods_table(now - timedelta(seconds=10)))
    store.append("gpu_samples", gpu_rows(now - timedelta(seconds=5)))
    store.append("gpu_samples", gpu_rows(now - timedelta(seconds=4)))
