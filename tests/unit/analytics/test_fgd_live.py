"""The live cluster for FGD from hand-made ``nodes`` / ``pods`` inventory rows in DuckDB."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta

import numpy as np
import pyarrow as pa
import pytest

from sits_observe.analytics.fragmentation.fgd.measure import fragmentation
from sits_observe.analytics.fragmentation.fgd.model import PodShape
from sits_observe.analytics.fragmentation.fgd.workload import typical_pods
from sits_observe.analytics.fragmentation.fgd_live import UNKNOWN_CPU_MILLI, live_cluster
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


# -- shared GPUs: assigned devices, unknown devices, shares and types in M --------------------


def share_pod(ts: datetime, uid: str, node_name: str | None, gpus: int, milli: int | None,
              uuids: str | None = None, types: str | None = None,
              cpu: int = 1000) -> dict[str, object]:  # fmt: skip
    row = pod(ts, uid, node_name, "Running", gpus, cpu)
    row.update({"gpu_milli": milli, "gpu_uuids": uuids, "gpu_types": types})
    return row


def gpu_sample(ts: datetime, node_name: str, uuid: str, index: int,
               mig: int | None = None) -> dict[str, object]:  # fmt: skip
    return {"ts": ts, "node": node_name, "gpu_uuid": uuid, "gpu_index": index,
            "mig_instance_id": mig}  # fmt: skip


def fill_devices(store: Store, samples: list[dict[str, object]]) -> None:
    store.append_batch({"gpu_samples": pa.Table.from_pylist(samples)})


def test_shares_on_known_and_unknown_devices_by_hand(store: Store) -> None:
    """g1 (2 x A10, 8 CPU), g2 (2 x L4, 8 CPU); every pod 1 CPU.

    g1: a 300 m on GPU-b (index 1) -> [1000, 700]; b 300 m on GPU-zzz (not sampled): the
    least-free GPU that fits, index 1 -> [1000, 400]; c 300 m, no device known: index 1 again
    -> [1000, 100]. g2: d a whole GPU on GPU-d (index 1) -> [1000, 0]; f 300 m, unknown: the
    only GPU that fits -> [700, 0]. (Counted as whole GPUs in name order, both of g2's GPUs
    would be gone and g1 would hold three.)

    M: 1x300m any (b, c, f: p 3/5), 1x300m [A10] (a: 1/5), 1x1000m [L4] (d: 1/5).
    F_g1 = 3/5 * 100 + 1/5 * 100 (GPU 1 is below 300 m) + 1/5 * 1100 (L4 only) = 300.
    F_g2 = 3/5 * 0 + 1/5 * 700 (A10 only) + 1/5 * 700 (no whole GPU left) = 280.
    """
    fill_devices(
        store,
        [
            gpu_sample(T2, "g1", "GPU-a", 0),
            gpu_sample(T2, "g1", "GPU-b", 1),
            gpu_sample(T2, "g1", "MIG-b-1", 1, mig=1),  # a MIG instance is not a device
            gpu_sample(T2, "g2", "GPU-c", 0),
            gpu_sample(T2, "g2", "GPU-d", 1),
        ],
    )
    fill(
        store,
        [node(T2, "g1", 2, "A10", 8000), node(T2, "g2", 2, "L4", 8000)],
        [
            share_pod(T2, "a", "g1", 1, 300, "GPU-b", "A10"),
            share_pod(T2, "b", "g1", 1, 300, "GPU-zzz"),
            share_pod(T2, "c", "g1", 1, 300),
            share_pod(T2, "d", "g2", 1, 1000, "GPU-d", "L4"),
            share_pod(T2, "f", "g2", 1, 300),
        ],
    )
    live = live_cluster(store)
    np.testing.assert_array_equal(live.state.gpu_free_milli, [[1000, 100], [700, 0]])
    assert live.state.cpu_free_milli.tolist() == [5000, 6000]
    assert sorted(live.shapes) == sorted(
        [
            PodShape(1000, 1, 300, ("A10",)),
            PodShape(1000, 1, 300),
            PodShape(1000, 1, 300),
            PodShape(1000, 1, 1000, ("L4",)),
            PodShape(1000, 1, 300),
        ]
    )
    assert live.pods_placed == 5
    assert len(live.warnings) == 1
    assert live.warnings[0] == (
        "pod ml/pod-b: assigned GPU GPU-zzz is not one of g1's GPUs in recent gpu_samples; "
        "placed on the least-free GPU that fits"
    )
    report = fragmentation(live.state, typical_pods(live.shapes))
    np.testing.assert_allclose(report.node_frag_milli, [300.0, 280.0])
    assert report.frag_ratio == pytest.approx(580 / 1800)
    assert report.by_cause["gpu_type"] == pytest.approx(220 + 140)
    assert report.by_cause["lack_gpu"] == pytest.approx(60 + 20 + 140)


def test_assigned_devices_are_held_before_unknown_ones_are_chosen(store: Store) -> None:
    """'aa' (no device known) sorts before 'zz' (GPU-a, index 0): zz keeps its GPU, aa gets
    the other. A pair naming one known and one unknown device takes the known one and the
    lowest free other; a device past the node's advertised GPUs is unknown."""
    fill_devices(
        store,
        [
            gpu_sample(T2, "g1", "GPU-a", 0),
            gpu_sample(T2, "g1", "GPU-b", 1),
            gpu_sample(T2, "g2", "GPU-p", 0),
            gpu_sample(T2, "g2", "GPU-q", 1),
            gpu_sample(T2, "g2", "GPU-r", 2),
            gpu_sample(T2, "g2", "GPU-s", 3),
            gpu_sample(T2, "g2", "GPU-extra", 4),  # the node advertises 4 of its 5 GPUs
        ],
    )
    fill(
        store,
        [node(T2, "g1", 2, "A10", 8000), node(T2, "g2", 4, "A10", 8000)],
        [
            share_pod(T2, "aa", "g1", 1, 1000),
            share_pod(T2, "zz", "g1", 1, 1000, "GPU-a"),
            share_pod(T2, "pair", "g2", 2, 1000, "GPU-r,GPU-gone"),
            share_pod(T2, "tail", "g2", 1, 1000, "GPU-extra"),
        ],
    )
    live = live_cluster(store)
    np.testing.assert_array_equal(live.state.gpu_free_milli, [[0, 0, 0, 0], [0, 0, 0, 1000]])
    assert live.warnings == (
        "pod ml/pod-pair: assigned GPU GPU-gone is not one of g2's GPUs in recent gpu_samples; "
        "placed on the lowest free GPU that fits",
        "pod ml/pod-tail: assigned GPU GPU-extra is not one of g2's GPUs in recent "
        "gpu_samples; placed on the lowest free GPU that fits",
    )


def test_the_latest_sample_of_an_index_names_its_device(store: Store) -> None:
    """GPU-old held index 0 until GPU-new replaced it: a pod naming GPU-old is on an unknown
    device. GPU-ancient was sampled before the device window (an hour): unknown too.

    b holds index 1 first (500 left); a (200 m) and c (100 m) then take the least-free GPU
    that fits, index 1 both times: [1000, 200, 1000]."""
    fill_devices(
        store,
        [
            gpu_sample(T2 - timedelta(minutes=30), "g1", "GPU-old", 0),
            gpu_sample(T2, "g1", "GPU-new", 0),
            gpu_sample(T2 - timedelta(minutes=1), "g1", "GPU-one", 1),
            gpu_sample(T0, "g1", "GPU-ancient", 2),
        ],
    )
    fill(
        store,
        [node(T2, "g1", 3, "A10", 8000)],
        [
            share_pod(T2, "a", "g1", 1, 200, "GPU-old"),
            share_pod(T2, "b", "g1", 1, 500, "GPU-one"),
            share_pod(T2, "c", "g1", 1, 100, "GPU-ancient"),
        ],
    )
    live = live_cluster(store)
    np.testing.assert_array_equal(live.state.gpu_free_milli, [[1000, 200, 1000]])
    assert [w.split(":")[0] for w in live.warnings] == ["pod ml/pod-a", "pod ml/pod-c"]
    assert "GPU GPU-old is not one of g1's GPUs" in live.warnings[0]
    assert "GPU GPU-ancient is not one of g1's GPUs" in live.warnings[1]


def test_a_node_without_gpu_samples_warns_once(store: Store) -> None:
    fill(
        store,
        [node(T2, "g1", 2, "A10", 8000)],
        [share_pod(T2, "a", "g1", 1, 200, "GPU-a"), share_pod(T2, "b", "g1", 1, 300, "GPU-b")],
    )
    live = live_cluster(store)
    np.testing.assert_array_equal(live.state.gpu_free_milli, [[500, 1000]])
    assert live.warnings == (
        "node g1: no GPU samples within 3600 s of the inventory, so the assigned GPUs of "
        "2 pod(s) are unknown; placed as if unassigned",
    )


def test_over_committed_devices_are_clamped_and_reported(store: Store) -> None:
    fill_devices(store, [gpu_sample(T2, "g1", "GPU-a", 0)])
    fill(
        store,
        [node(T2, "g1", 1, "A10", 8000)],
        [
            share_pod(T2, "a", "g1", 1, 700, "GPU-a"),
            share_pod(T2, "b", "g1", 1, 600, "GPU-a"),
            share_pod(T2, "c", "g1", 1, 200),
        ],
    )
    live = live_cluster(store)
    np.testing.assert_array_equal(live.state.gpu_free_milli, [[0]])
    assert live.warnings == (
        "pod ml/pod-b: holds 600 milli of GPU GPU-a (index 0), 300 left on g1",
        "pod ml/pod-c: requests 1 GPU(s) of 200 milli, 0 fit on g1",
    )


def test_impossible_shares_count_as_whole_gpus(store: Store) -> None:
    """Rows from elsewhere (or before schema version 4: gpu_milli NULL) are whole GPUs."""
    fill(
        store,
        [node(T2, "g1", 4, "A10", 8000)],
        [
            share_pod(T2, "old", "g1", 1, None),
            share_pod(T2, "pair", "g1", 2, 300),
            share_pod(T2, "zero", "g1", 1, 0),
        ],
    )
    live = live_cluster(store)
    np.testing.assert_array_equal(live.state.gpu_free_milli, [[0, 0, 0, 0]])
    assert sorted(live.shapes) == [PodShape(1000, 1, 1000)] * 2 + [PodShape(1000, 2, 1000)]
    assert live.warnings == (
        "2 pod row(s) with a GPU share outside 1-1000 milli, or a partial share of more than "
        "one GPU: counted as whole GPUs",
    )
