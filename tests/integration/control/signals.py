"""Synthetic signals for the seeded emulator cluster (see conftest.seed)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import polars as pl

from sits_observe.control.controller.planning.inputs import Signals
from tests.integration.control.conftest import WORKLOAD_PODS

GIB = 1024**3


def cluster_signals(
    at: datetime,
    *,
    frag_n1: float = 0.8,
    frag_n2: float = 0.1,
    gpu_peaks: list[float] | None = None,
    **pod_overrides: Any,
) -> Signals:
    """n1 high fragmentation and hot, n2 calm; p1 a low-priority pod missing its SLA on a
    contended GPU, p2 the node's top-priority pod; team's GPU peaks grew to 6."""
    pods = [
        {
            "namespace": "team",
            "pod": "p1",
            "workload": "chat",
            "node": "n1",
            "priority_class": "throughput-guaranteed",
            "peak_gpu_memory_bytes": 3 * GIB,
            "p95_latency_s": 0.02,
            "p99_latency_s": 0.3,
            "sla_p99_s": 0.12,
            "sla_violation_ratio": 0.2,
            "gpu_util_ratio": 0.95,
            "link_saturation_ratio": 0.8,
            "link_capacity_bytes_per_s": 900e9,
        },
        {
            "namespace": "team",
            "pod": "p2",
            "workload": "search",
            "node": "n1",
            "priority_class": "ultra-low-latency",
            "peak_gpu_memory_bytes": 12 * GIB,
            "p95_latency_s": 0.004,
            "sequence_tokens": 8000.0,
            "p99_latency_s": 0.01,
            "sla_p99_s": 0.12,
            "sla_violation_ratio": 0.0,
            "gpu_util_ratio": 0.95,
            "link_saturation_ratio": 0.8,
        },
    ]
    for pod in pods:
        pod.update(pod_overrides.get(pod["pod"], {}))
    return Signals.of(
        at,
        nodes=pl.DataFrame(
            {
                "node": ["n1", "n2"],
                "fragmentation_ratio": [frag_n1, frag_n2],
                "interference_score": [0.9, 0.1],
                "sync_delay_breached": [False, False],
            }
        ),
        pods=pl.DataFrame(pods),
        namespaces=pl.DataFrame(
            {
                "namespace": ["team"],
                "resource": ["requests.nvidia.com/gpu"],
                "daily_peaks": [gpu_peaks or [6.0] * 14],
            }
        ),
    )


def workload_signals(
    at: datetime, namespaces: list[str], peaks_gib: dict[str, float] | None = None
) -> Signals:
    """Peak GPU memory of every pod of ``conftest.seed_workloads`` in each namespace (3 GiB,
    a memory class of L2, unless ``peaks_gib`` says otherwise), nothing else measured."""
    peaks = peaks_gib or {}
    pods = [
        {
            "namespace": namespace,
            "pod": pod,
            "node": "n1",
            "peak_gpu_memory_bytes": int(peaks.get(pod, 3.0) * GIB),
        }
        for namespace in namespaces
        for pod in WORKLOAD_PODS
    ]
    return Signals.of(at, pods=pl.DataFrame(pods))
