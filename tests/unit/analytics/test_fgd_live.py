"""The live cluster for FGD from hand-made ``nodes`` / ``pods`` inventory rows in DuckDB."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta

import numpy as np
import pyarrow as pa
import pytest

from sits_observe.analytics.fgd import fragmentation
from sits_observe.analytics.fgd_live import UNKNOWN_CPU_MILLI, live_cluster
from sits_observe.analytics.fgd_model import PodShape
from sits_observe.analytics.fgd_workload import typical_pods
from sits_observe.errors import StoreError
from sits_observe.store import Store

T2 = datetime(2026, 3, 1, 12, 0, 0)
T1 = T2 - timedelta(hours=2)
T0 = T2 - timedelta(days=3)


def node(ts: datetime, name: str, gpus: int | None, product: str | None, cpu: int | None,
         ready: bool | None = True) -> dict[str, object]:  # fmt: skip
    return {"ts": ts, "node": name, "gpu_allocatable": gpus, "gpu_product": product,
            "cpu_allocatable_milli": cpu, "ready": ready}  # fmt: skip


def pod(ts: datetime, uid: str, node_name: str | None, phase: str, gpus: int | None,
        cpu: int | None) -> dict[str, object]:  # fmt: skip
    return {"ts": ts, "pod_uid": uid, "namespace": "ml", "pod": f"pod-{uid}", "node": node_name,
            "phase": phase, "gpu_request": gpus, "cpu_request_milli": cpu}  # fmt: skip


@pytest.fixture
def store() -> Iterator[Store]:
    with Store.open(":memory:") as s:
        yield s


def fill(store: Store, nodes: list[dict[str, object]], pods: list[dict[str, object]]) -> None:
    store.append_batch({"nodes": pa.Table.from_pylist(nodes), "pods": pa.Table.from_pylist(pods)})


def test_latest_snapshot_allocations_and_recent_shapes(store: Store) -> None:
    fill(
        store,
        [
            node(T1, "gpu-a", 8, "NVIDIA A100", 64000),  # older snapshot: ignored
            node(T2, "gpu-a", 4, "NVIDIA A100-SXM4-80GB", 32000),
            node(T2, "gpu-b", 2, None, 8000, ready=None),
            node(T2, "cpu-c", None, None, None),
            node(T2, "down", 8, "NVIDIA H100", 64000, ready=False),
        ],
        [
            pod(T0, "ancient", "gpu-a", "Running", 8, 1000),  # outside the 24 h window
            pod(T1, "old", "gpu-a", "Running", 4, 4000),  # in the window, not in the latest
            pod(T1, "train", "gpu-a", "Pending", 2, 9000),  # latest row wins for the shape
            pod(T2, "train", "gpu-a", "Running", 2, 8000),
            pod(T2, "infer", "gpu-b", "Running", 1, 6000),
            pod(T2, "done", "gpu-a", "Succeeded", 2, 2000),
            pod(T2, "queued", None, "Pending", 1, 1000),
            pod(T2, "ghost", "gone", "Running", 1, 500),
            pod(T2, "greedy", "gpu-b", "Running", 3, 4000),
            pod(T2, "web", "cpu-c", "Running", None, 2000),
        ],
    )
    live = live_cluster(store, since_s=86_400)
    state = live.state
    assert state.node_names == ("cpu-c", "gpu-a", "gpu-b")
    assert state.gpu_models == ("NVIDIA A100-SXM4-80GB", "unknown")
    assert state.gpu_count.tolist() == [0, 4, 2]
    np.testing.assert_array_equal(
        state.gpu_free_milli, [[0, 0, 0, 0], [0, 0, 1000, 1000], [0, 0, 0, 0]]
    )
    assert state.cpu_free_milli.tolist() == [UNKNOWN_CPU_MILLI - 2000, 24000, 0]
    assert (live.nodes_at, live.pods_at, live.pods_placed) == (T2, T2, 4)
    text = "\n".join(live.warnings)
    assert "1 node(s) not Ready" in text
    assert "node cpu-c: allocatable CPU unknown" in text
    assert "pod ml/pod-ghost: node gone not in the node snapshot" in text
    # Pods are applied in name order: greedy takes both GPUs of gpu-b, infer finds none.
    assert "pod ml/pod-greedy: requests 3 GPU(s), 2 left on gpu-b" in text
    assert "pod ml/pod-infer: requests 1 GPU(s), 0 left on gpu-b" in text
    assert "pod ml/pod-infer: requests 6000 milli-CPU, 4000 left on gpu-b" in text
    assert sorted(live.shapes) == sorted(
        [
            PodShape(4000, 4, 1000),
            PodShape(8000, 2, 1000),
            PodShape(6000, 1, 1000),
            PodShape(2000, 2, 1000),
            PodShape(1000, 1, 1000),
            PodShape(500, 1, 1000),
            PodShape(4000, 3, 1000),
            PodShape(2000, 0, 0),
        ]
    )
    narrow = live_cluster(store, since_s=60)
    assert len(narrow.shapes) == 7  # "old" was last seen two hours before the snapshot


def test_measure_on_a_live_cluster_by_hand(store: Store) -> None:
    """g1: 2 GPUs, 8 CPU. Pods: a (1 GPU, 2 CPU) and c (CPU-only, 5 CPU) run on g1; b (1 GPU,
    2 CPU) is pending. Free: GPUs [0, 1000], CPU 1000. M: 2 CPU + 1 GPU (p 2/3), CPU-only 5 CPU
    (p 1/3). F = 2/3 * 1000 (CPU 1 < 2: lack_cpu) + 1/3 * 1000 (cpu_only) = 1000 = all idle."""
    fill(
        store,
        [node(T2, "g1", 2, "NVIDIA L4", 8000)],
        [
            pod(T2, "a", "g1", "Running", 1, 2000),
            pod(T2, "b", None, "Pending", 1, 2000),
            pod(T2, "c", "g1", "Running", 0, 5000),
        ],
    )
    live = live_cluster(store)
    report = fragmentation(live.state, typical_pods(live.shapes))
    assert report.frag_milli == pytest.approx(1000.0)
    assert (report.frag_ratio, report.frag_amount_ratio) == (pytest.approx(1.0), pytest.approx(0.5))
    assert report.by_cause["lack_cpu"] == pytest.approx(2000 / 3)
    assert report.by_cause["cpu_only"] == pytest.approx(1000 / 3)
    assert live.warnings == ()


def test_empty_store_and_no_pods(store: Store) -> None:
    with pytest.raises(StoreError, match="no node inventory"):
        live_cluster(store)
    fill(store, [node(T2, "g1", 1, "L4", 1000)], [])
    with pytest.raises(StoreError, match="no pods in the store within"):
        live_cluster(store)
