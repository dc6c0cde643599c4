"""Incremental FGD scoring: every option's delta equals recomputing the node from scratch."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sits_observe.analytics.fragmentation.fgd.cluster import ClusterState
from sits_observe.analytics.fragmentation.fgd.index import FragmentationIndex
from sits_observe.analytics.fragmentation.fgd.measure import (
    delta_if_placed,
    fragmentation,
    node_fragmentation,
)
from sits_observe.analytics.fragmentation.fgd.model import PodShape
from sits_observe.analytics.fragmentation.fgd.workload import TargetWorkload, typical_pods
from sits_observe.analytics.traces.cluster_trace import load_node_list, load_pod_list
from tests.unit.analytics.test_fgd import cluster, shapes, states, workloads


def test_partial_pod_options_by_hand() -> None:
    """M = 1 CPU + 1 GPU x 500. Node a: [1000, 1000, 300] (R 2300; F_a = 300, the 300 GPU).
    Node b: [600] (F_b = 0). Pod = 1 CPU + 1 GPU x 300:
      a, a GPU with 1000 -> [700, 1000, 300]: F = 300 -> delta 0 (one option for both 1000s)
      a, the GPU with 300 -> [1000, 1000, 0]: F = 0 -> delta -300
      b, [600] -> [300]: 300 < 500 and no GPU >= 500 left -> F = R = 300 -> delta +300
    FGD takes (a, GPU 2)."""
    state = cluster([("a", "A", 4000, [1000, 1000, 300]), ("b", "A", 4000, [600])])
    wl = TargetWorkload.from_weights([(PodShape(1000, 1, 500), 1.0)])
    index = FragmentationIndex(state, wl)
    np.testing.assert_array_equal(index.node_frag_milli, [300.0, 0.0])
    options = index.options(PodShape(1000, 1, 300))
    got = sorted(
        zip(options.node.tolist(), options.gpu.tolist(), options.delta_milli.tolist(), strict=True)
    )
    assert got == [(0, 0, 0.0), (0, 2, -300.0), (1, 0, 300.0)]
    assert options.best() == (0, 2)
    # A request equal to the workload's share leaves a GPU exactly at that share: still usable.
    exact = FragmentationIndex(cluster([("c", "A", 4000, [1000])]), wl)
    assert exact.options(PodShape(1000, 1, 500)).delta_milli.tolist() == [0.0]


def test_whole_and_cpu_only_options_by_hand() -> None:
    """M = 1 CPU + 1 GPU x 1000. Node a: [1000, 500] (F 500), node b: [1000, 1000] (F 0),
    node c: [1000] with 1 CPU free (F 0). A 2-GPU pod fits only b: b -> [0, 0], F 0, delta 0.
    A 1-CPU CPU-only pod: on a or b nothing changes for M (delta 0); on c the CPU runs out,
    so its 1000 idle becomes fragment (delta +1000)."""
    state = cluster(
        [("a", "A", 4000, [1000, 500]), ("b", "A", 4000, [1000, 1000]), ("c", "A", 1000, [1000])]
    )
    wl = TargetWorkload.from_weights([(PodShape(1000, 1, 1000), 1.0)])
    index = FragmentationIndex(state, wl)
    two = index.options(PodShape(1000, 2, 1000))
    assert (two.node.tolist(), two.gpu.tolist(), two.delta_milli.tolist()) == ([1], [-1], [0.0])
    cpu = index.options(PodShape(1000, 0, 0))
    assert cpu.delta_milli.tolist() == [0.0, 0.0, 1000.0]
    assert cpu.best() == (0, -1)
    assert index.options(PodShape(9000, 0, 0)).best() is None
    # M = 3 whole GPUs: a 2-GPU pod on a 4-GPU idle node leaves 2 < 3 -> all 2000 idle is lost.
    three = TargetWorkload.from_weights([(PodShape(0, 3, 1000), 1.0)])
    four = FragmentationIndex(cluster([("d", "A", 4000, [1000] * 4)]), three)
    assert four.options(PodShape(1000, 2, 1000)).delta_milli.tolist() == [2000.0]


def test_place_updates_only_the_state_and_that_row() -> None:
    state = cluster([("a", "A", 4000, [1000, 1000]), ("b", "A", 4000, [1000])])
    wl = TargetWorkload.from_weights([(PodShape(1000, 1, 600), 1.0)])
    index = FragmentationIndex(state, wl)
    gpus = index.place(0, PodShape(500, 1, 700), [1])
    assert gpus == (1,)
    np.testing.assert_array_equal(state.gpu_free_milli[0], [1000, 300])
    assert state.cpu_free_milli[0] == 3500
    np.testing.assert_array_equal(index.node_frag_milli, [300.0, 0.0])
    assert index.frag_milli == fragmentation(state, wl).frag_milli


@settings(max_examples=150, deadline=None)
@given(states(), workloads, shapes())
def test_options_equal_brute_force(state: ClusterState, wl: TargetWorkload, pod: PodShape) -> None:
    index = FragmentationIndex(state, wl)
    np.testing.assert_allclose(index.node_frag_milli, node_fragmentation(state, wl))
    options = index.options(pod)
    fits = state.fits(pod)
    assert sorted(set(options.node.tolist())) == np.flatnonzero(fits).tolist()
    for node, gpu, delta in zip(options.node, options.gpu, options.delta_milli, strict=True):
        gpus = None if gpu < 0 else [int(gpu)]
        expected = delta_if_placed(state, wl, pod, int(node), gpus)
        assert delta == pytest.approx(expected, abs=1e-6)
    if pod.num_gpu == 1 and pod.gpu_milli < 1000:
        # one option per distinct free share >= the request on each fitting node
        for node in np.flatnonzero(fits):
            free = state.gpu_free_milli[node, : state.gpu_count[node]]
            offered = options.gpu[options.node == node]
            assert sorted(free[offered].tolist()) == sorted(set(free[free >= pod.gpu_milli]))


@settings(max_examples=60, deadline=None)
@given(states(), workloads, st.lists(shapes(), min_size=1, max_size=8))
def test_greedy_replay_keeps_the_index_exact(
    state: ClusterState, wl: TargetWorkload, pods: list[PodShape]
) -> None:
    index = FragmentationIndex(state, wl)
    for pod in pods:
        best = index.options(pod).best()
        if best is None:
            continue
        node, gpu = best
        index.place(node, pod, None if gpu < 0 else [gpu])
        np.testing.assert_allclose(index.node_frag_milli, node_fragmentation(state, wl), atol=1e-6)


@pytest.mark.shared_data
def test_fgd_replay_on_the_alibaba_trace_stays_consistent(shared_data: Path) -> None:
    """500 pods placed by fragmentation descent: the index equals a fresh full computation,
    and the allocation equals what was placed."""
    base = shared_data / "traces" / "alibaba-gpu-v2023"
    nodes = load_node_list(base / "openb_node_list_gpu_node.csv")
    pods = load_pod_list(base / "openb_pod_list_default.csv")
    wl = typical_pods(pods.shapes())
    state = ClusterState.from_node_list(nodes)
    index = FragmentationIndex(state, wl)
    placed_milli = 0
    for i in np.random.default_rng(42).permutation(len(pods))[:500]:
        pod = pods.shape(int(i))
        best = index.options(pod).best()
        assert best is not None  # the cluster is far from full
        node, gpu = best
        index.place(node, pod, None if gpu < 0 else [gpu])
        placed_milli += pod.gpu_request_milli
    report = fragmentation(state, wl)
    np.testing.assert_allclose(index.node_frag_milli, report.node_frag_milli, atol=1e-6)
    assert report.total_milli - report.idle_milli == placed_milli
