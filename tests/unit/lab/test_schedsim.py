"""The replay engine: arrival order and inflation, curves, seeds, aggregation, processes."""

from __future__ import annotations

import numpy as np
import pytest

from sits_observe.analytics.fragmentation.fgd.model import CAUSES
from sits_observe.analytics.traces.cluster_trace import NodeList, PodList
from sits_observe.errors import ConfigError, NoDataError, UnknownNameError
from sits_observe.lab.replay.engine.replay import (
    PolicyResult,
    ReplayResult,
    SimulationSettings,
    Spread,
    arrival_order,
    policy_names,
    replay,
    simulate,
)
from sits_observe.lab.replay.engine.sits import SitsPolicy, SitsSettings

# Shapes of the synthetic workload: (cpu_milli, num_gpu, gpu_milli, memory_mib, weight).
SHAPES = [
    (4000, 1, 500, 8000, 5),
    (2000, 1, 250, 4000, 4),
    (8000, 1, 1000, 16000, 5),
    (6000, 0, 0, 8000, 2),
    (16000, 2, 1000, 32000, 1),
    (30000, 8, 1000, 64000, 1),
]


def synthetic_trace(nodes: int = 24, pods: int = 80, seed: int = 7) -> tuple[NodeList, PodList]:
    """A small cluster (8-GPU and 2-GPU nodes) and a pod list drawn from SHAPES."""
    gen = np.random.default_rng(seed)
    big = np.arange(nodes) % 3 == 0
    node_list = NodeList(
        names=tuple(f"node-{i:03d}" for i in range(nodes)),
        cpu_milli=np.where(big, 96000, 32000).astype(np.int64),
        memory_mib=np.where(big, 393216, 131072).astype(np.int64),
        gpu_count=np.where(big, 8, 2).astype(np.int64),
        gpu_model=tuple("G2" if b else "T4" for b in big),
    )
    weights = np.array([s[4] for s in SHAPES], dtype=np.float64)
    picks = gen.choice(len(SHAPES), size=pods, p=weights / weights.sum())
    rows = [SHAPES[k] for k in picks]
    pod_list = PodList(
        names=tuple(f"pod-{i:04d}" for i in range(pods)),
        cpu_milli=np.array([r[0] for r in rows], dtype=np.int64),
        memory_mib=np.array([r[3] for r in rows], dtype=np.int64),
        num_gpu=np.array([r[1] for r in rows], dtype=np.int64),
        gpu_milli=np.array([r[2] for r in rows], dtype=np.int64),
        gpu_types=tuple(() for _ in rows),
    )
    return node_list, pod_list


NODES, PODS = synthetic_trace()
CAPACITY = int(NODES.gpu_count.sum()) * 1000
REQUEST = PODS.num_gpu * PODS.gpu_milli


# -- arrival order ---------------------------------------------------------------------------


def test_inflation_appends_draws_until_the_load_is_reached() -> None:
    assert REQUEST.sum() < 1.3 * CAPACITY  # the synthetic list needs inflating
    order = arrival_order(PODS, CAPACITY, 1.3, np.random.default_rng(1))
    n = len(PODS)
    # Every original pod once, shuffled, then draws from the list (with replacement).
    assert sorted(order[:n].tolist()) == list(range(n))
    assert order[:n].tolist() != list(range(n))
    extra = order[n:]
    assert extra.shape[0] > 0 and (extra >= 0).all() and (extra < n).all()
    assert len(set(extra.tolist())) < extra.shape[0]  # some pod drawn twice
    total = int(REQUEST[order].sum())
    target = int(1.3 * CAPACITY)
    assert target - int(REQUEST.max()) < total <= target


def test_a_list_above_the_load_is_trimmed_at_random() -> None:
    order = arrival_order(PODS, CAPACITY, 0.4, np.random.default_rng(2))
    assert len(set(order.tolist())) == order.shape[0] < len(PODS)
    total = int(REQUEST[order].sum())
    target = int(0.4 * CAPACITY)
    assert target - int(REQUEST.max()) < total <= target


def test_arrival_order_depends_only_on_the_seed() -> None:
    first = arrival_order(PODS, CAPACITY, 1.3, np.random.default_rng(3))
    again = arrival_order(PODS, CAPACITY, 1.3, np.random.default_rng(3))
    other = arrival_order(PODS, CAPACITY, 1.3, np.random.default_rng(4))
    assert first.tolist() == again.tolist()
    assert first.tolist() != other.tolist()


def test_a_workload_without_gpu_requests_cannot_be_replayed() -> None:
    cpu_only = PodList(("a",), np.array([1000]), np.array([0]), np.array([0]), np.array([0]), ((),))
    with pytest.raises(NoDataError, match="requesting 0 milli-GPU"):
        arrival_order(cpu_only, CAPACITY, 1.3, np.random.default_rng(0))


# -- one replay ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def replays() -> dict[str, ReplayResult]:
    """The score-plugin policies (the paper's and sits); kube-* spread pods and fail earlier,
    see test_schedsim_kube.py."""
    names = [n for n in policy_names() if not n.startswith("kube-")]
    return {name: replay(NODES, PODS, name, seed=5) for name in names}


def test_curve_invariants_hold_for_every_policy(replays: dict[str, ReplayResult]) -> None:
    for name, r in replays.items():
        steps = np.arange(131) / 100
        assert np.array_equal(r.arrived_ratio, steps), name
        assert (np.diff(r.alloc_ratio) >= 0).all(), name  # pods never leave
        assert (r.alloc_ratio >= 0).all() and (r.alloc_ratio <= steps + 1e-12).all(), name
        assert ((r.frag_ratio >= 0) & (r.frag_ratio <= 1)).all(), name
        # F <= idle: the amount never exceeds the unallocated share or the ratio.
        assert (r.frag_amount_ratio <= 1 - r.alloc_ratio + 1e-12).all(), name
        assert (r.frag_amount_ratio <= r.frag_ratio + 1e-12).all(), name
        assert r.pods_placed + r.pods_failed == r.pods_arrived, name
        assert r.unallocated_gpus == pytest.approx(CAPACITY / 1000 * (1 - r.final_alloc_ratio))
        assert r.first_failure_arrived is not None and 0 < r.first_failure_arrived <= 1.3
        # The end's F(M) split by cause adds up to the curve's last fragmentation amount.
        assert set(r.frag_by_cause_gpus) == {str(c) for c in CAUSES}, name
        total = sum(r.frag_by_cause_gpus.values())
        assert total == pytest.approx(r.frag_amount_ratio[-1] * CAPACITY / 1000), name
        # The failures by kind add up to the pods that found no node, and their GPUs to what
        # arrived (at most 1.3x the capacity, within one pod's request of it) but was not placed.
        assert list(r.failed_pods_by_kind) == ["cpu_only", "share", "1gpu", "2gpu", "8gpu"], name
        assert sum(r.failed_pods_by_kind.values()) == r.pods_failed, name
        unplaced = (1.3 - r.final_alloc_ratio) * CAPACITY / 1000
        failed_gpus = sum(r.failed_gpus_by_kind.values())
        assert unplaced - REQUEST.max() / 1000 < failed_gpus <= unplaced + 1e-9, name
        assert r.failed_gpus_by_kind["cpu_only"] == 0.0, name


def test_policies_see_the_same_arrivals_until_the_first_failure(
    replays: dict[str, ReplayResult],
) -> None:
    first = min(r.first_failure_arrived or 2.0 for r in replays.values())
    before = replays["random"].arrived_ratio < first
    assert before.sum() > 50
    for name, r in replays.items():
        assert np.array_equal(r.alloc_ratio[before], replays["random"].alloc_ratio[before]), name
    # ... while the fragmentation they leave behind differs.
    assert len({r.frag_ratio.tobytes() for r in replays.values()}) > 3


def test_a_replay_is_deterministic_for_a_seed() -> None:
    a = replay(NODES, PODS, "packing", seed=11)
    b = replay(NODES, PODS, "packing", seed=11)
    c = replay(NODES, PODS, "packing", seed=12)
    for field in ("alloc_ratio", "frag_ratio", "frag_amount_ratio"):
        assert np.array_equal(getattr(a, field), getattr(b, field))
    assert not np.array_equal(a.frag_ratio, c.frag_ratio)


def test_sits_without_signals_or_idle_protection_is_fgd() -> None:
    plain = SitsPolicy(SitsSettings(keep_idle_nodes=False))
    fgd = replay(NODES, PODS, "fgd", seed=3)
    sits = replay(NODES, PODS, plain, seed=3)
    assert sits.policy == "sits"
    assert np.array_equal(fgd.alloc_ratio, sits.alloc_ratio)
    assert np.array_equal(fgd.frag_ratio, sits.frag_ratio)


def test_a_small_load_on_a_big_cluster_never_fails() -> None:
    r = replay(NODES, PODS, "fgd", seed=0, settings=SimulationSettings(load_ratio=0.3))
    assert r.first_failure_arrived is None and r.pods_failed == 0
    assert r.arrived_ratio[-1] == pytest.approx(0.3)
    assert 0.3 - REQUEST.max() / CAPACITY < r.final_alloc_ratio <= 0.3


def test_load_steps_stop_at_the_last_whole_percent() -> None:
    r = replay(NODES, PODS, "bestfit", seed=0, settings=SimulationSettings(load_ratio=0.555))
    assert r.arrived_ratio[-1] == pytest.approx(0.55)
    assert r.arrived_ratio.shape == (56,)


def test_memory_filter_can_be_switched_off() -> None:
    # One node, plenty of CPU and GPU, almost no memory.
    nodes = NodeList(("n",), np.array([64000]), np.array([10]), np.array([2]), ("G",))
    pods = PodList(
        ("p",), np.array([1000]), np.array([100]), np.array([1]), np.array([1000]), ((),)
    )
    with_mem = replay(nodes, pods, "fgd", seed=0, settings=SimulationSettings(load_ratio=0.5))
    without = replay(
        nodes, pods, "fgd", seed=0, settings=SimulationSettings(load_ratio=0.5, memory_filter=False)
    )
    assert with_mem.pods_placed == 0 and with_mem.first_failure_arrived == pytest.approx(0.5)
    assert without.pods_placed == 1 and without.final_alloc_ratio == pytest.approx(0.5)


def test_random_ties_change_the_outcome_of_a_tie_heavy_policy() -> None:
    ordered = replay(NODES, PODS, "clustering", seed=2)
    shuffled = replay(
        NODES, PODS, "clustering", seed=2, settings=SimulationSettings(tie_break="random")
    )
    assert not np.array_equal(ordered.frag_ratio, shuffled.frag_ratio)


# -- many replays ----------------------------------------------------------------------------


def test_simulate_aggregates_mean_min_max_over_seeds() -> None:
    (result,) = simulate(NODES, PODS, ["bestfit"], [0, 1, 2])
    assert isinstance(result, PolicyResult)
    assert result.seeds == (0, 1, 2)
    finals = [r.final_alloc_ratio for r in result.replays]
    assert result.final_alloc_ratio.mean == pytest.approx(np.mean(finals))
    assert result.final_alloc_ratio.min == min(finals)
    assert result.final_alloc_ratio.max == max(finals)
    stack = np.stack([r.alloc_ratio for r in result.replays])
    assert np.allclose(result.alloc_ratio[0], stack.mean(axis=0))
    assert np.array_equal(result.alloc_ratio[1], stack.min(axis=0))
    assert np.array_equal(result.alloc_ratio[2], stack.max(axis=0))
    unallocated = [r.unallocated_gpus for r in result.replays]
    assert result.unallocated_gpus.mean == pytest.approx(np.mean(unallocated))
    assert result.seeds_with_failure == 3
    for name in ("frag_by_cause_gpus", "failed_pods_by_kind", "failed_gpus_by_kind"):
        spreads: dict[str, Spread] = getattr(result, name)
        assert set(spreads) == set(getattr(result.replays[0], name)), name
        for key, spread in spreads.items():
            values = [getattr(r, name)[key] for r in result.replays]
            assert (spread.mean, spread.min, spread.max) == (
                pytest.approx(np.mean(values)),
                min(values),
                max(values),
            )


def test_the_end_fragmentation_is_split_by_why_the_idle_gpus_are_unusable() -> None:
    # One 1-GPU node with 5 cores; every pod asks 600 milli-GPU and 2 cores. The first pod
    # leaves 400 milli, too small a share for the next (lack_gpu); on a second node with the
    # same GPU but 2 cores, one pod leaves 400 milli *and* no CPU (lack_both).
    nodes = NodeList(
        names=("a", "b"),
        cpu_milli=np.array([5000, 2000], dtype=np.int64),
        memory_mib=np.array([65536, 65536], dtype=np.int64),
        gpu_count=np.array([1, 1], dtype=np.int64),
        gpu_model=("T4", "T4"),
    )
    pods = PodList(
        names=("p1", "p2", "p3"),
        cpu_milli=np.full(3, 2000, dtype=np.int64),
        memory_mib=np.full(3, 1024, dtype=np.int64),
        num_gpu=np.ones(3, dtype=np.int64),
        gpu_milli=np.full(3, 600, dtype=np.int64),
        gpu_types=((), (), ()),
    )
    r = replay(nodes, pods, "fgd", seed=0)
    assert r.final_alloc_ratio == pytest.approx(0.6)  # one pod per node, the rest fail
    assert r.frag_by_cause_gpus == {
        "lack_gpu": pytest.approx(0.4),
        "lack_cpu": 0.0,
        "lack_both": pytest.approx(0.4),
        "cpu_only": 0.0,
        "gpu_type": 0.0,
    }
    # p3 (or p2, by arrival order) and the copies drawn up to 1.3x the GPUs fail, all shares.
    assert list(r.failed_pods_by_kind) == ["share"]
    assert r.failed_pods_by_kind["share"] == r.pods_failed == r.pods_arrived - 2
    assert r.failed_gpus_by_kind["share"] == pytest.approx(0.6 * r.pods_failed)


def test_processes_give_the_same_results_as_one() -> None:
    seen: list[str] = []
    alone = simulate(NODES, PODS, ["fgd", "random"], [0, 1])
    pooled = simulate(
        NODES, PODS, ["fgd", "random"], [0, 1], workers=2, progress=lambda r: seen.append(r.policy)
    )
    assert sorted(seen) == ["fgd", "fgd", "random", "random"]
    assert [r.policy for r in pooled] == ["fgd", "random"]
    for a, b in zip(alone, pooled, strict=True):
        assert np.array_equal(a.alloc_ratio, b.alloc_ratio)
        assert np.array_equal(a.frag_amount_ratio, b.frag_amount_ratio)


def test_simulate_rejects_unknown_policies_and_no_seeds() -> None:
    with pytest.raises(UnknownNameError, match="unknown policy"):
        simulate(NODES, PODS, ["fgd", "tetris"], [0])
    with pytest.raises(ConfigError, match="seed"):
        simulate(NODES, PODS, ["fgd"], [])
    with pytest.raises(ConfigError, match="distinct"):
        simulate(NODES, PODS, ["sits", SitsPolicy(SitsSettings(keep_idle_nodes=False))], [0])
