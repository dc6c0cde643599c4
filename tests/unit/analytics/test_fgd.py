"""The FGD measure (Weng et al., ATC'23) on hand-computed clusters, the Alibaba default workload
and random clusters (hypothesis)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sits_observe.analytics.fragmentation.fgd.cluster import ClusterState
from sits_observe.analytics.fragmentation.fgd.measure import (
    delta_if_placed,
    fragmentation,
    node_fragmentation,
)
from sits_observe.analytics.fragmentation.fgd.model import CAUSES, PodShape
from sits_observe.analytics.fragmentation.fgd.workload import TargetWorkload, typical_pods
from sits_observe.analytics.traces.cluster_trace import load_node_list, load_pod_list

ALIBABA = Path("traces") / "alibaba-gpu-v2023"


def cluster(
    rows: list[tuple[str, str, int, list[int]]], cpu_capacity: list[int] | None = None
) -> ClusterState:
    """Nodes as (name, model, free CPU milli, per-GPU free milli); capacity = free unless given."""
    names = [r[0] for r in rows]
    counts = [len(r[3]) for r in rows]
    capacity = cpu_capacity or [r[2] for r in rows]
    state = ClusterState.empty(names, capacity, counts, [r[1] for r in rows])
    for i, (_, _, cpu_free, free) in enumerate(rows):
        state.cpu_free_milli[i] = cpu_free
        state.gpu_free_milli[i, : len(free)] = free
    return state


def test_mixed_cluster_by_hand() -> None:
    """Two nodes, three typical pods.

    M: m1 = 4 CPU + 1 GPU x 500 (p 0.5); m2 = 1 CPU + 2 GPUs x 1000 (p 0.25);
       m3 = CPU-only 1 CPU (p 0.25).
    n0 (A): free GPUs [1000, 500, 200, 0], 8 CPU free, R = 1700.
      m1 fits (two GPUs >= 500, CPU ok): F = GPUs with free < 500 = 200 + 0 = 200 (lack_gpu)
      m2: one GPU >= 1000 < 2 needed: F = R = 1700 (lack_gpu)
      m3: CPU-only: F = R = 1700 (cpu_only)
      F_n0 = 0.5*200 + 0.25*1700 + 0.25*1700 = 950
    n1 (B): free GPUs [1000, 1000], 2 CPU free, R = 2000.
      m1: GPUs ok, CPU 2 < 4: F = 2000 (lack_cpu)
      m2: fits, no GPU below 1000: F = 0
      m3: F = 2000 (cpu_only)
      F_n1 = 0.5*2000 + 0 + 0.25*2000 = 1500
    F = 2450; idle 3700; total 6000 -> ratio 0.66216, amount 0.40833.
    Causes: lack_gpu 100 + 425 = 525, lack_cpu 1000, cpu_only 425 + 500 = 925.
    """
    state = cluster([("n0", "A", 8000, [1000, 500, 200, 0]), ("n1", "B", 2000, [1000, 1000])])
    wl = TargetWorkload.from_weights(
        [
            (PodShape(4000, 1, 500), 0.5),
            (PodShape(1000, 2, 1000), 0.25),
            (PodShape(1000, 0, 0), 0.25),
        ]
    )
    np.testing.assert_allclose(node_fragmentation(state, wl), [950.0, 1500.0])
    report = fragmentation(state, wl)
    assert report.frag_milli == pytest.approx(2450.0)
    assert (report.idle_milli, report.total_milli) == (3700, 6000)
    assert report.frag_ratio == pytest.approx(2450 / 3700)
    assert report.frag_amount_ratio == pytest.approx(2450 / 6000)
    assert report.by_cause == pytest.approx(
        {
            "lack_gpu": 525.0,
            "lack_cpu": 1000.0,
            "lack_both": 0.0,
            "cpu_only": 925.0,
            "gpu_type": 0.0,
        }
    )
    assert report.cause_share("lack_cpu") == pytest.approx(1000 / 2450)
    np.testing.assert_array_equal(report.node_idle_milli, [1700, 2000])


def test_gpu_type_and_lack_both_by_hand() -> None:
    """Three nodes, two typical pods with GPU-model constraints.

    M: m1 = 4 CPU + 1 GPU x 1000 on model A (p 0.5); m2 = 0.5 CPU + 1 GPU x 600 on B (p 0.5).
    n0 (A): [1000], CPU 2: m1 GPU ok, CPU short -> 1000 lack_cpu; m2 model A -> 1000 gpu_type.
      F_n0 = 1000
    n1 (B): [300, 1000], CPU 1: m1 -> 1300 gpu_type; m2 fits, GPU at 300 < 600 -> 300 lack_gpu.
      F_n1 = 650 + 150 = 800
    n2 (B): [300, 300], CPU 0.1: m1 -> 600 gpu_type; m2 no GPU >= 600 and CPU short -> 600
      lack_both. F_n2 = 300 + 300 = 600
    F = 2400, idle 2900, total 5000. Causes: lack_cpu 500, gpu_type 500 + 650 + 300 = 1450,
    lack_gpu 150, lack_both 300.
    """
    state = cluster(
        [
            ("n0", "A", 2000, [1000]),
            ("n1", "B", 1000, [300, 1000]),
            ("n2", "B", 100, [300, 300]),
        ]
    )
    wl = TargetWorkload.from_weights(
        [(PodShape(4000, 1, 1000, ("A",)), 1.0), (PodShape(500, 1, 600, ("B",)), 1.0)]
    )
    report = fragmentation(state, wl)
    np.testing.assert_allclose(report.node_frag_milli, [1000.0, 800.0, 600.0])
    assert report.by_cause == pytest.approx(
        {
            "lack_gpu": 150.0,
            "lack_cpu": 500.0,
            "lack_both": 300.0,
            "cpu_only": 0.0,
            "gpu_type": 1450.0,
        }
    )
    assert (report.idle_milli, report.total_milli) == (2900, 5000)
    assert report.frag_ratio == pytest.approx(2400 / 2900)


def test_whole_gpu_request_counts_partly_used_gpus_only() -> None:
    """A 1-GPU x 1000 pod on [1000, 600, 0]: it fits; the GPU with 600 free is fragment
    (600 < 1000), the full GPU adds nothing: F = 600, all lack_gpu."""
    state = cluster([("n", "A", 1000, [1000, 600, 0])])
    wl = TargetWorkload.from_weights([(PodShape(1000, 1, 1000), 1.0)])
    report = fragmentation(state, wl)
    assert report.frag_milli == 600.0
    assert report.by_cause["lack_gpu"] == 600.0


def test_cpu_only_workload_makes_every_idle_gpu_fragment() -> None:
    state = cluster([("n", "A", 1000, [1000, 400]), ("m", "", 5000, [])])
    wl = TargetWorkload.from_weights([(PodShape(100, 0, 0), 1.0)])
    report = fragmentation(state, wl)
    assert report.frag_milli == 1400.0
    assert report.by_cause["cpu_only"] == 1400.0
    assert report.frag_ratio == 1.0


def test_fully_allocated_cluster_has_zero_ratios() -> None:
    state = cluster([("n", "A", 0, [0, 0])])
    wl = TargetWorkload.from_weights([(PodShape(100, 0, 0), 1.0)])
    report = fragmentation(state, wl)
    assert (report.frag_milli, report.frag_ratio, report.frag_amount_ratio) == (0.0, 0.0, 0.0)
    assert report.cause_share("cpu_only") == 0.0


def test_node_subset_matches_the_full_computation() -> None:
    state = cluster(
        [("a", "A", 8000, [1000, 300]), ("b", "B", 100, [500]), ("c", "A", 0, [1000, 1000])]
    )
    wl = TargetWorkload.from_weights(
        [(PodShape(1000, 1, 400), 2.0), (PodShape(200, 2, 1000), 1.0), (PodShape(50, 0, 0), 1.0)]
    )
    full = node_fragmentation(state, wl)
    np.testing.assert_array_equal(node_fragmentation(state, wl, [2, 0]), full[[2, 0]])


def test_delta_if_placed_by_hand() -> None:
    """M = one pod 1 CPU + 1 GPU x 500. Node [1000, 1000], 4 CPU: F = 0.
    Placing 1 CPU + 1 GPU x 700 on GPU 0 leaves [300, 1000]: the 300 GPU is fragment, F = 300.
    Placing it on GPU 1 gives the same; a 1-GPU x 500 pod leaves [500, 1000]: F = 0."""
    state = cluster([("n", "A", 4000, [1000, 1000])])
    wl = TargetWorkload.from_weights([(PodShape(1000, 1, 500), 1.0)])
    assert delta_if_placed(state, wl, PodShape(1000, 1, 700), 0, [0]) == 300.0
    assert delta_if_placed(state, wl, PodShape(1000, 1, 700), 0, [1]) == 300.0
    assert delta_if_placed(state, wl, PodShape(1000, 1, 500), 0, [0]) == 0.0
    # CPU exhaustion: 4 CPU taken leaves nothing for M -> the whole 1500 idle is fragment.
    assert delta_if_placed(state, wl, PodShape(4000, 1, 500), 0, [0]) == 1500.0
    np.testing.assert_array_equal(state.gpu_free_milli[0], [1000, 1000])  # unchanged
    with pytest.raises(ValueError, match="milli-CPU"):
        delta_if_placed(state, wl, PodShape(5000, 0, 0), 0)


@pytest.mark.shared_data
def test_empty_alibaba_cluster_is_13_9_percent_fragmented(shared_data: Path) -> None:
    """SPEC / ATC'23: the empty cluster's fragmentation amount on the default workload is 13.9%
    (the CPU-only share of M cannot use idle GPUs; a little is lack of CPU on small nodes)."""
    nodes = load_node_list(shared_data / ALIBABA / "openb_node_list_gpu_node.csv")
    pods = load_pod_list(shared_data / ALIBABA / "openb_pod_list_default.csv")
    wl = typical_pods(pods.shapes())
    report = fragmentation(ClusterState.from_node_list(nodes), wl)
    assert report.total_milli == report.idle_milli == 6_212_000
    assert round(report.frag_amount_ratio * 100, 1) == 13.9
    assert report.frag_ratio == report.frag_amount_ratio
    cpu_only_weight = float(wl.weight[wl.num_gpu == 0].sum())
    assert report.by_cause["cpu_only"] == pytest.approx(cpu_only_weight * 6_212_000)
    assert report.by_cause["gpu_type"] == report.by_cause["lack_both"] == 0.0


# -- properties ------------------------------------------------------------------------------

MODELS = ("A", "B", "C")
# Round values make equal shares (free == request, fully free GPUs) common, where >= vs >
# matters; any integer keeps the rest covered.
milli = st.one_of(st.sampled_from([0, 200, 300, 500, 700, 800, 1000]), st.integers(0, 1000))


@st.composite
def states(draw: st.DrawFn) -> ClusterState:
    n = draw(st.integers(1, 5))
    rows = []
    for i in range(n):
        gpus = draw(st.integers(0, 4))
        free = draw(st.lists(milli, min_size=gpus, max_size=gpus))
        model = draw(st.sampled_from(MODELS)) if gpus else ""
        rows.append((f"n{i}", model, draw(st.integers(0, 16_000)), free))
    return cluster(rows, [16_000] * n)


@st.composite
def shapes(draw: st.DrawFn) -> PodShape:
    num = draw(st.integers(0, 3))
    share = 0 if num == 0 else 1000 if num > 1 else draw(milli.filter(lambda v: v > 0))
    types = tuple(draw(st.sets(st.sampled_from(MODELS), max_size=2)))
    return PodShape(draw(st.integers(0, 12_000)), num, share, types if num else ())


workloads = st.lists(st.tuples(shapes(), st.floats(0.01, 1.0)), min_size=1, max_size=5).map(
    TargetWorkload.from_weights
)


@settings(max_examples=150, deadline=None)
@given(states(), workloads)
def test_bounds_and_causes_sum(state: ClusterState, wl: TargetWorkload) -> None:
    report = fragmentation(state, wl)
    idle = state.gpu_free_milli.sum(axis=1)
    assert (report.node_frag_milli >= -1e-9).all()
    assert (report.node_frag_milli <= idle + 1e-9).all()
    assert 0.0 <= report.frag_ratio <= 1.0 + 1e-12
    assert 0.0 <= report.frag_amount_ratio <= report.frag_ratio + 1e-12
    assert sum(report.by_cause.values()) == pytest.approx(report.frag_milli, abs=1e-6)
    assert set(report.by_cause) == {str(c) for c in CAUSES}
    np.testing.assert_allclose(node_fragmentation(state, wl), report.node_frag_milli)


@settings(max_examples=100, deadline=None)
@given(states(), workloads)
def test_linear_in_the_weights(state: ClusterState, wl: TargetWorkload) -> None:
    """F_n(M) = sum_m p_m F_n(m): the measure of M is the weighted sum of one-shape measures."""
    parts = [
        p.weight * node_fragmentation(state, TargetWorkload.from_weights([(p.shape, 1.0)]))
        for p in wl.pods
    ]
    np.testing.assert_allclose(node_fragmentation(state, wl), np.sum(parts, axis=0), atol=1e-6)


@settings(max_examples=100, deadline=None)
@given(states(), workloads)
def test_gpu_order_within_a_node_does_not_matter(state: ClusterState, wl: TargetWorkload) -> None:
    shuffled = state.copy()
    for i in range(len(state)):
        count = int(state.gpu_count[i])
        perm = np.random.default_rng(i).permutation(count)
        shuffled.gpu_free_milli[i, :count] = state.gpu_free_milli[i, perm]
    np.testing.assert_allclose(node_fragmentation(shuffled, wl), node_fragmentation(state, wl))


@settings(max_examples=100, deadline=None)
@given(
    st.integers(1, 8),
    st.lists(st.tuples(st.integers(1, 8), st.integers(1, 1000)), min_size=1, max_size=5),
)
def test_idle_node_with_room_for_every_gpu_pod_has_no_fragmentation(
    gpus: int, requests: list[tuple[int, int]]
) -> None:
    """A fully idle node with enough CPU and GPUs for every (GPU-only, any-model) typical pod:
    every GPU has 1000 free >= any share, so no pod is blocked and none sees a small share."""
    shapes_ = [
        PodShape(1000, min(n, gpus), milli if min(n, gpus) == 1 else 1000) for n, milli in requests
    ]
    wl = TargetWorkload.from_weights([(s, 1.0) for s in shapes_])
    state = cluster([("n", "A", 64_000, [1000] * gpus)])
    assert node_fragmentation(state, wl)[0] == 0.0


def test_a_cluster_without_nodes_reports_zeros() -> None:
    state = ClusterState.empty([], [], [], [])
    wl = TargetWorkload.from_weights([(PodShape(100, 1, 500), 1.0), (PodShape(100, 0, 0), 1.0)])
    report = fragmentation(state, wl)
    assert (report.frag_milli, report.total_milli, report.frag_ratio) == (0.0, 0, 0.0)
    assert node_fragmentation(state, wl).shape == (0,)
