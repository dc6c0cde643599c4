"""Filter and prioritize of the ``sits`` extender policy on the hand-computed cluster of
:mod:`tests.unit.control.extender_support` (expected values worked out in each docstring)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sits_observe.control.extender.clusterview.view import ClusterView, build_view
from sits_observe.control.extender.clusterview.view_settings import ViewSettings
from sits_observe.control.extender.scoring import (
    PodRequest,
    filter_nodes,
    fragmentation_delta,
    prioritize,
)
from sits_observe.control.extender.scoring_settings import ScoringSettings
from sits_observe.store import Store
from tests.unit.control.extender_payloads import CANDIDATES
from tests.unit.control.extender_support import GIB, NOW, write_cluster

# The absolute blend (score_mode="absolute"), whose values are worked out by hand below; the
# ranked scores the extender answers by default: tests/unit/control/test_extender_ranked.py.
DEFAULT = ScoringSettings(score_mode="absolute")


@pytest.fixture(scope="module")
def view(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterView]:
    path: Path = tmp_path_factory.mktemp("extender") / "cluster.duckdb"
    with Store.open(path) as store:
        write_cluster(store)
        yield build_view(store, NOW, ViewSettings())


def gpu_pod(gpus: int, cpu_milli: int = 1000, **extra: object) -> PodRequest:
    return PodRequest("serve", "new", gpus, cpu_milli, **extra)  # type: ignore[arg-type]


# -- filter -----------------------------------------------------------------------------------


def test_one_gpu_pod_filter(view: ClusterView) -> None:
    out = filter_nodes(gpu_pod(1), view, CANDIDATES, DEFAULT)
    assert out.passing == ("gpu-a", "gpu-b", "gpu-c", "new-node")  # unknown node passes
    assert out.unresolvable == {"cpu-1": "node has no allocatable nvidia.com/gpu"}
    assert set(out.failed) == {"gpu-d"}
    assert out.failed["gpu-d"].startswith("0 of 8 nvidia.com/gpu unallocated (inventory at ")


def test_four_gpu_pod_filter(view: ClusterView) -> None:
    out = filter_nodes(gpu_pod(4), view, CANDIDATES, DEFAULT)
    assert out.passing == ("gpu-a", "new-node")
    assert set(out.failed) == {"gpu-b", "gpu-c", "gpu-d"}  # preemption could free GPUs
    assert out.failed["gpu-c"].startswith("3 of 4 nvidia.com/gpu unallocated")
    assert set(out.unresolvable) == {"cpu-1"}


def test_pod_larger_than_a_node_is_unresolvable_there(view: ClusterView) -> None:
    out = filter_nodes(gpu_pod(8), view, ["gpu-a", "gpu-c"], DEFAULT)
    assert out.passing == ("gpu-a",)
    assert out.unresolvable == {"gpu-c": "node has 4 allocatable nvidia.com/gpu, pod requests 8"}


def test_cpu_only_pod_passes_every_node(view: ClusterView) -> None:
    out = filter_nodes(gpu_pod(0, 500), view, CANDIDATES, DEFAULT)
    assert out.passing == tuple(CANDIDATES)
    assert out.failed == out.unresolvable == {}


def test_unknown_nodes_can_be_refused(view: ClusterView) -> None:
    strict = ScoringSettings(unknown_nodes="fail")
    out = filter_nodes(gpu_pod(1), view, ["gpu-a", "new-node"], strict)
    assert out.passing == ("gpu-a",)
    assert out.unresolvable["new-node"].startswith("node not in the sits-observe inventory")


def test_free_gpu_check_can_be_left_to_kube_scheduler(view: ClusterView) -> None:
    lax = ScoringSettings(filter_free_gpus=False)
    out = filter_nodes(gpu_pod(4), view, ["gpu-b", "gpu-d", "cpu-1"], lax)
    assert out.passing == ("gpu-b", "gpu-d")


def test_declared_memory_need_filters_small_gpus(view: ClusterView) -> None:
    """60 GiB per GPU: H100s with 79 GiB free pass; the L40S has 47 GiB at most -> failed."""
    out = filter_nodes(gpu_pod(1, gpu_memory_bytes=60 * GIB), view, ["gpu-a", "gpu-c"], DEFAULT)
    assert out.passing == ("gpu-a",)
    assert out.failed == {
        "gpu-c": "0 GPU(s) with >= 60.0 GiB free, pod needs 1 (memory need declared)"
    }
    off = ScoringSettings(filter_gpu_memory=False)
    assert filter_nodes(gpu_pod(1, gpu_memory_bytes=60 * GIB), view, ["gpu-c"], off).passing == (
        "gpu-c",
    )


def test_measured_need_of_the_workload_is_used(view: ClusterView) -> None:
    """Replicas of serve/llm use 60 GiB per GPU; +10% margin = 66 GiB > the L40S's 47 GiB."""
    replica = PodRequest("serve", "llm-new", 1, 1000, workload="llm")
    out = filter_nodes(replica, view, ["gpu-a", "gpu-c"], DEFAULT)
    assert out.passing == ("gpu-a",)
    assert "66.0 GiB" in out.failed["gpu-c"]
    assert "measured for serve/llm" in out.failed["gpu-c"]
    # A workload with no history has no need: the L40S passes.
    fresh = PodRequest("serve", "other", 1, 1000, workload="other")
    assert filter_nodes(fresh, view, ["gpu-c"], DEFAULT).passing == ("gpu-c",)


# -- prioritize --------------------------------------------------------------------------------


def test_fragmentation_delta_by_hand(view: ClusterView) -> None:
    """1 GPU + 1 CPU, M = {CPU-only p .4, 2 GPU p .3, 4 GPU p .2, 1 GPU p .1}:
    gpu-a (8 free -> 7): every GPU shape still fits; the CPU-only share of the idle GPUs
      shrinks: delta = -0.4 x 1000 = -400.
    gpu-b (2 free -> 1): 2-GPU no longer fits (+0.3 x 1000), 4-GPU and CPU-only shares of the
      idle GPUs shrink (-0.2 x 1000, -0.4 x 1000): delta = -300.
    gpu-c (3 free -> 2): 4-GPU and CPU-only shares shrink: delta = -0.6 x 1000 = -600.
    gpu-d (0 free) and cpu-1 (no GPU): the pod does not fit."""
    delta, fits = fragmentation_delta(view, gpu_pod(1))
    by_node = dict(zip(view.node_names, delta.tolist(), strict=True))
    assert by_node["gpu-a"] == pytest.approx(-400.0)
    assert by_node["gpu-b"] == pytest.approx(-300.0)
    assert by_node["gpu-c"] == pytest.approx(-600.0)
    assert np.isnan(by_node["gpu-d"]) and np.isnan(by_node["cpu-1"])
    assert fits.tolist() == [False, True, True, True, False]  # cpu-1, gpu-a, gpu-b, gpu-c, gpu-d


def test_one_gpu_pod_scores_by_hand(view: ClusterView) -> None:
    """frag = (1 - delta/1000)/2: a 0.7, b 0.65, c 0.8.
    fit (need unknown = a whole GPU, cap 1): best free GPU / total: a, b 79/80; c 47/48.
    quiet = 1 - interference: a 1 - 0.4 x 0.5 = 0.8, others 1.
    score = round(10 x (0.5 frag + 0.3 fit + 0.2 quiet)):
      a: 3.5 + 2.9625 + 1.6 = 8.06 -> 8; b: 3.25 + 2.9625 + 2 = 8.21 -> 8;
      c: 4 + 2.9375 + 2 = 8.94 -> 9; gpu-d, cpu-1: do not fit -> 0; new-node: unknown -> 0."""
    result = prioritize(gpu_pod(1), view, CANDIDATES, DEFAULT)
    assert result.hosts == tuple(CANDIDATES)
    np.testing.assert_allclose(result.fragmentation_term[:3], [0.7, 0.65, 0.8])
    np.testing.assert_allclose(result.memory_fit_term[:3], [79 / 80, 79 / 80, 47 / 48])
    np.testing.assert_allclose(result.quiet_term[:3], [0.8, 1.0, 1.0])
    assert result.as_dict() == {
        "gpu-a": 8,
        "gpu-b": 8,
        "gpu-c": 9,
        "cpu-1": 0,
        "gpu-d": 0,
        "new-node": 0,
    }


def test_topology_distance_for_two_gpus(view: ClusterView) -> None:
    """2 GPUs: H100 nodes are NVLink (distance 0.1) -> fit 79/80 / 1.1; the L40S node is PCIe
    with 2 GPUs per NUMA node, so 2 GPUs share a switch (0.4) -> 47/48 / 1.4."""
    result = prioritize(gpu_pod(2), view, ["gpu-a", "gpu-b", "gpu-c"], DEFAULT)
    np.testing.assert_allclose(
        result.memory_fit_term, [79 / 80 / 1.1, 79 / 80 / 1.1, 47 / 48 / 1.4]
    )
    three = prioritize(gpu_pod(3), view, ["gpu-c"], DEFAULT)  # 3 > 2 per NUMA: cross-NUMA 1.0
    np.testing.assert_allclose(three.memory_fit_term, [47 / 48 / 2.0])


def test_h100_boost_only_for_high_priority(view: ClusterView) -> None:
    """x1.3 on H100 nodes for a priority >= 500,000 pod, normalised by the 1.3 maximum."""
    normal = prioritize(gpu_pod(1, priority=1000), view, ["gpu-a", "gpu-c"], DEFAULT)
    high = prioritize(gpu_pod(1, priority=1_000_000), view, ["gpu-a", "gpu-c"], DEFAULT)
    np.testing.assert_allclose(normal.memory_fit_term, [79 / 80, 47 / 48])
    np.testing.assert_allclose(high.memory_fit_term, [79 / 80, 47 / 48 / 1.3])


def test_declared_need_headroom_is_capped(view: ClusterView) -> None:
    """Need 20 GiB: a has 79 GiB free (ratio 3.95 -> capped at 2), c 47 GiB (2.35 -> 2): both
    fit terms are 1 (cap / cap). Need 30 GiB: c's ratio 47/30 = 1.567 -> 1.567 / 2."""
    twenty = prioritize(gpu_pod(1, gpu_memory_bytes=20 * GIB), view, ["gpu-a", "gpu-c"], DEFAULT)
    np.testing.assert_allclose(twenty.memory_fit_term, [1.0, 1.0])
    thirty = prioritize(gpu_pod(1, gpu_memory_bytes=30 * GIB), view, ["gpu-a", "gpu-c"], DEFAULT)
    np.testing.assert_allclose(thirty.memory_fit_term, [1.0, 47 / 30 / 2])


def test_weights_change_the_winner(view: ClusterView) -> None:
    """Only fragmentation: c (delta -600) beats a (-400). Only interference: a (0.2) loses."""
    frag_only = ScoringSettings(memory_fit_weight=0, interference_weight=0, score_mode="absolute")
    scores = prioritize(gpu_pod(1), view, ["gpu-a", "gpu-b", "gpu-c"], frag_only).as_dict()
    assert scores == {"gpu-a": 7, "gpu-b": 6, "gpu-c": 8}  # 7.0, 6.5 -> 6 (half to even), 8.0
    quiet_only = ScoringSettings(fragmentation_weight=0, memory_fit_weight=0, score_mode="absolute")
    scores = prioritize(gpu_pod(1), view, ["gpu-a", "gpu-c"], quiet_only).as_dict()
    assert scores == {"gpu-a": 8, "gpu-c": 10}


def test_cpu_only_pod_is_scored_by_fragmentation(view: ClusterView) -> None:
    """A CPU-only pod takes no GPU, so F_n only grows where its CPU starves GPU shapes.
    Half a CPU starves nothing: delta 0 -> frag 0.5, fit neutral 1; score = 10 x (0.25 + 0.3
    + 0.2 quiet): cpu-1 7.5 -> 8 (half to even), gpu-a (quiet 0.8) 7.1 -> 7.
    60 CPU on gpu-a leaves 4 CPU: the 4-GPU shape (8 CPU) no longer fits, so its share of the
    8 idle GPUs becomes fragment: delta = 0.2 x 8000 = +1600 -> frag 0; cpu-1 lacks the CPU."""
    result = prioritize(gpu_pod(0, 500), view, ["cpu-1", "gpu-a"], DEFAULT)
    assert result.fits.tolist() == [True, True]
    np.testing.assert_allclose(result.fragmentation_delta_milli, [0.0, 0.0])
    assert result.as_dict() == {"cpu-1": 8, "gpu-a": 7}
    hungry = prioritize(gpu_pod(0, 60_000), view, ["cpu-1", "gpu-a"], DEFAULT)
    assert hungry.fits.tolist() == [False, True]
    assert hungry.fragmentation_delta_milli[1] == pytest.approx(1600.0)
    assert hungry.fragmentation_term[1] == 0.0
    assert hungry.as_dict() == {"cpu-1": 0, "gpu-a": 5}  # 10 x (0 + 0.3 + 0.16) = 4.6


def test_unknown_node_score_is_configurable(view: ClusterView) -> None:
    result = prioritize(
        gpu_pod(1), view, ["new-node"], ScoringSettings(unknown_node_score=5, score_mode="absolute")
    )
    assert result.as_dict() == {"new-node": 5}


def test_empty_view_scores_every_node_as_unknown() -> None:
    empty = ClusterView.empty(NOW, "no inventory")
    assert prioritize(gpu_pod(1), empty, ["a", "b"], DEFAULT).as_dict() == {"a": 0, "b": 0}
    out = filter_nodes(gpu_pod(1), empty, ["a", "b"], DEFAULT)
    assert out.passing == ("a", "b")


@settings(max_examples=60, deadline=None)
@given(
    names=st.lists(st.sampled_from([*CANDIDATES, "x-1", "x-2"]), min_size=1, max_size=12),
    gpus=st.integers(0, 9),
    cpu=st.integers(0, 70_000),
    priority=st.one_of(st.none(), st.integers(-10, 2_000_000)),
    need_gib=st.one_of(st.none(), st.integers(1, 100)),
)
def test_scores_are_integers_0_to_10_and_per_node(
    view: ClusterView,
    names: list[str],
    gpus: int,
    cpu: int,
    priority: int | None,
    need_gib: int | None,
) -> None:
    """Every score is an int in 0-10, a node's score does not depend on the other candidates
    or their order, and a node the filter rejects for capacity never scores above 0."""
    request = PodRequest(
        "ns", "p", gpus, cpu, None if need_gib is None else need_gib * GIB, priority
    )
    result = prioritize(request, view, names, DEFAULT)
    assert result.scores.dtype == np.int64
    assert ((result.scores >= 0) & (result.scores <= 10)).all()
    alone = {n: prioritize(request, view, [n], DEFAULT).as_dict()[n] for n in set(names)}
    assert result.as_dict() == alone
    reversed_scores = prioritize(request, view, names[::-1], DEFAULT).scores[::-1]
    np.testing.assert_array_equal(reversed_scores, result.scores)
    rejected = filter_nodes(request, view, names, DEFAULT)
    for name in set(rejected.failed) | set(rejected.unresolvable):
        assert alone[name] == 0


def test_a_zero_weight_leaves_its_term_out_of_the_ranked_order(
    view: ClusterView, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ranked mode (the default) does not blend the weights, but 0 switches a term off (the
    experiment's ablation arms). Interference: a's 0.2 costs it 2 of its 59 FGD points, so b
    (57) ranks above it; without the term a (59) does. Fragmentation: with FGD points that make
    the idle gpu-a the best node it wins; without the term the next levels decide."""
    ranked = ScoringSettings()
    one = gpu_pod(1)
    scores = prioritize(one, view, ["gpu-a", "gpu-b"], ranked).as_dict()
    assert scores["gpu-b"] > scores["gpu-a"]
    no_interference = ScoringSettings(interference_weight=0)
    scores = prioritize(one, view, ["gpu-a", "gpu-b"], no_interference).as_dict()
    assert scores["gpu-a"] > scores["gpu-b"]
    import sits_observe.control.extender.scoring as scoring

    def favour_a(delta: np.ndarray) -> np.ndarray:
        return np.where(np.isclose(delta, -400.0), 100, 0).astype(np.int64)  # gpu-a's delta

    monkeypatch.setattr(scoring, "fgd_score", favour_a)
    with_fgd = prioritize(one, view, ["gpu-a", "gpu-b", "gpu-c"], ranked).as_dict()
    assert max(with_fgd, key=with_fgd.__getitem__) == "gpu-a"
    without = prioritize(
        one, view, ["gpu-a", "gpu-b", "gpu-c"], ScoringSettings(fragmentation_weight=0)
    )
    assert max(without.as_dict(), key=without.as_dict().__getitem__) != "gpu-a"
