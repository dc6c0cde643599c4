"""Shared GPUs and GPU-type constraints in the extender (issue 10, items 1-2): the pod's share
read from its manifest, the filter and the score per share, and the score computed for the
GPU the device plugin will really pick.

The cluster is :mod:`tests.unit.control.extender_support` with two shares assumed on gpu-c
(through the overlay): its GPUs are then [0, 400, 700, 1000] milli free (GPU 0 held whole by
embed-0), 30 CPU free. M = {CPU-only 1 CPU .4, 2 GPU .3, 4 GPU .2, 1 GPU .1}, all whole GPUs.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sits_observe.analytics.fragmentation.fgd.model import PodShape
from sits_observe.analytics.placement.device_plugin import DeviceAllocationError, allocate_gpus
from sits_observe.control.extender.clusterview.view import ClusterView, build_view
from sits_observe.control.extender.clusterview.view_settings import ViewSettings
from sits_observe.control.extender.gpus import device_plugin_gpu
from sits_observe.control.extender.overlay import Placement, with_placements
from sits_observe.control.extender.scoring import (
    PodRequest,
    filter_nodes,
    gpu_placements,
    prioritize,
)
from sits_observe.control.extender.scoring_settings import ScoringSettings
from sits_observe.control.extender.wire import parse_extender_args
from sits_observe.store import Store
from tests.unit.control.extender_payloads import POD_1GPU_JSON, pod
from tests.unit.control.extender_support import L40S, NOW, write_cluster

RANKED = ScoringSettings()


@pytest.fixture(scope="module")
def view(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterView]:
    path: Path = tmp_path_factory.mktemp("shares") / "cluster.duckdb"
    with Store.open(path) as store:
        write_cluster(store)
        base = build_view(store, NOW, ViewSettings())
    shares = [
        Placement("serve", "s-600", "gpu-c", PodShape(0, 1, 600), (1,)),
        Placement("serve", "s-300", "gpu-c", PodShape(0, 1, 300), (2,)),
    ]
    placed, skipped = with_placements(base, shares)
    assert skipped == []
    yield placed


def share(milli: int, cpu_milli: int = 0, types: tuple[str, ...] = ()) -> PodRequest:
    return PodRequest("serve", "new", 1, cpu_milli, gpu_milli=milli, gpu_types=types)


def test_the_wire_reads_shares_and_products_with_the_one_reader() -> None:
    """The trace annotation gives 300 milli exactly; HAMi's gpucores 45 % gives 450 milli;
    required node affinity on nvidia.com/gpu.product gives the allowed products."""
    trace = pod(POD_1GPU_JSON)
    trace["metadata"]["annotations"] = {"alibabacloud.com/gpu-milli": "300"}
    trace["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "nvidia.com/gpu.product", "operator": "In", "values": [L40S]}
                        ]
                    }
                ]
            }
        }
    }
    call = parse_extender_args(json.dumps({"Pod": trace, "NodeNames": ["gpu-c"]}).encode())
    assert (call.pod.gpus, call.pod.gpu_milli, call.pod.gpu_types) == (1, 300, (L40S,))
    assert call.pod.shared
    assert call.pod.shape() == PodShape(1000, 1, 300, (L40S,))
    hami = pod(POD_1GPU_JSON)
    hami["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpucores"] = "45"
    call = parse_extender_args(json.dumps({"Pod": hami, "NodeNames": ["gpu-c"]}).encode())
    assert call.pod.gpu_milli == 450
    assert call.pod.shape().gpu_milli == 450


def test_the_overlay_shares_are_in_the_view(view: ClusterView) -> None:
    row = view.index["gpu-c"]
    assert view.state.gpu_free_milli[row, :4].tolist() == [0, 400, 700, 1000]
    assert view.gpu_pods[row, :4].tolist() == [0, 1, 1, 0]
    assert view.gpu_free[row] == 1  # one GPU still whole


def test_a_share_passes_a_node_with_one_gpu_that_has_it_free(view: ClusterView) -> None:
    """800 milli: gpu-c has it on GPU 3 only; gpu-d has no GPU with any milli free."""
    out = filter_nodes(share(800), view, ["gpu-b", "gpu-c", "gpu-d"], RANKED)
    assert out.passing == ("gpu-b", "gpu-c")
    assert out.failed["gpu-d"].startswith("no GPU of 8 with 800 milli-GPU free")
    # The 4-GPU whole pod does not fit gpu-c any more: one GPU is whole.
    whole = PodRequest("serve", "w", 1, 0)
    assert filter_nodes(whole, view, ["gpu-c"], RANKED).passing == ("gpu-c",)
    four = PodRequest("serve", "w", 4, 0)
    assert (
        "1 of 4 nvidia.com/gpu unallocated"
        in filter_nodes(four, view, ["gpu-c"], RANKED).failed["gpu-c"]
    )


def test_a_product_constraint_is_unresolvable_elsewhere(view: ClusterView) -> None:
    out = filter_nodes(share(300, types=(L40S,)), view, ["gpu-a", "gpu-c", "cpu-1"], RANKED)
    assert out.passing == ("gpu-c",)
    assert out.unresolvable["gpu-a"].startswith("node's GPU product NVIDIA H100 80GB HBM3 is not")
    assert out.unresolvable["cpu-1"] == "node has no allocatable nvidia.com/gpu"


def test_a_share_is_scored_for_the_gpu_the_device_plugin_will_pick(view: ClusterView) -> None:
    """300 milli on gpu-c. F_n(M) before: CPU-only .4 x 2100 + 2 GPU .3 x 2100 + 4 GPU .2 x 2100
    + 1 GPU .1 x (400 + 700) = 2000.
    HAMi spread scores (pods + 1) x 1000 + 2 x used x 10: GPU 1 20,000, GPU 2 14,000, GPU 3
    7,000 -> it picks the empty GPU 3: [0, 400, 700, 700], no whole GPU left: every shape
    counts all 1800 idle -> 1800, delta -200.
    FGD's best is GPU 1 (or 2): [0, 100, 700, 1000] -> 720 + 540 + 360 + .1 x 800 = 1700,
    delta -300; the lowest index, GPU 1."""
    predicted = gpu_placements(view, share(300))
    best = gpu_placements(view, share(300), gpu_choice="fgd")
    row = view.index["gpu-c"]
    assert (predicted.gpu[row], predicted.delta_milli[row]) == (3, pytest.approx(-200.0))
    assert (best.gpu[row], best.delta_milli[row]) == (1, pytest.approx(-300.0))
    result = prioritize(share(300), view, ["gpu-c"], RANKED)
    assert result.gpu.tolist() == [3]
    assert result.fragmentation_delta_milli[0] == pytest.approx(-200.0)
    assert result.fgd_points.tolist() == [54]  # int(100 sigmoid(0.2))
    hinted = prioritize(share(300), view, ["gpu-c"], RANKED, gpu_choice="fgd")
    assert (hinted.gpu.tolist(), hinted.fgd_points.tolist()) == ([1], [57])


def test_shares_rank_by_fgd_then_keep_idle_nodes_idle(view: ClusterView) -> None:
    """300 milli, no CPU. gpu-c delta -200 (54 points). gpu-a (8 whole GPUs): 3200 -> CPU
    .4 x 7700 + (.3 + .2 + .1) x 700 = 3500, +300 (42 points) minus its interference penalty
    round(10 x 0.2) = 2 -> 40. gpu-b (GPUs 6, 7 free): 1200 -> 680 + 510 + 340 + 70 = 1600,
    +400 (40 points). gpu-a and gpu-b tie on points and on memory fit (79 of 80 GiB free);
    gpu-b has GPUs in use, gpu-a none: gpu-b first. gpu-d: no GPU free -> 0."""
    result = prioritize(share(300), view, ["gpu-a", "gpu-b", "gpu-c", "gpu-d"], RANKED)
    np.testing.assert_allclose(result.fragmentation_delta_milli[:3], [300.0, 400.0, -200.0])
    assert result.as_dict() == {"gpu-c": 10, "gpu-b": 9, "gpu-a": 8, "gpu-d": 0}


@settings(max_examples=200, deadline=None)
@given(
    gpus=st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 11)), min_size=1, max_size=8).map(
        lambda g: [(f, p if f < 1000 else 0) for f, p in g]
    ),
    milli=st.integers(1, 999),
    policy=st.sampled_from(["spread", "binpack"]),
)
def test_the_vectorised_prediction_is_the_device_plugin(
    gpus: list[tuple[int, int]], milli: int, policy: str
) -> None:
    """For any node, the vectorised HAMi choice is what ``allocate_gpus`` gives (or none)."""
    free = np.array([[f for f, _ in gpus]], dtype=np.int64)
    pods = np.array([[p for _, p in gpus]], dtype=np.int64)
    count = np.array([len(gpus)], dtype=np.int64)
    got = device_plugin_gpu(free, pods, count, milli, policy=policy, split_count=10)  # type: ignore[arg-type]
    uuids = [f"GPU-{g}" for g in range(len(gpus))]
    try:
        want = allocate_gpus(
            free[0],
            pods[0],
            uuids,
            num_gpu=1,
            gpu_milli=milli,
            policy=policy,  # type: ignore[arg-type]
        )[0]
    except DeviceAllocationError:
        want = -1
    assert int(got[0]) == want


def test_a_cpu_only_pod_ranks_the_node_with_the_least_idle_gpu_first(view: ClusterView) -> None:
    """No CPU asked: F_n(M) does not move anywhere (50 points; gpu-a 48 after its penalty).
    gpu-b and gpu-c are both in use; gpu-b has 2000 milli-GPU idle, gpu-c 2100: gpu-b first.
    Without the level, and smaller nodes first on, the smaller node (gpu-c, 4 GPUs against
    8) would be."""
    cpu_only = PodRequest("serve", "new", 0, 0)
    nodes = ["gpu-a", "gpu-b", "gpu-c"]
    ranked = prioritize(cpu_only, view, nodes, RANKED).as_dict()
    assert ranked["gpu-b"] == 10 and ranked["gpu-c"] == 9
    plain = ScoringSettings(cpu_on_busy_nodes=False, small_nodes_first=True)
    assert prioritize(cpu_only, view, nodes, plain).as_dict()["gpu-c"] == 10
