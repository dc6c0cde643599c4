"""Placement policies of the scheduling simulator on tiny clusters where the answer is known."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from sits_observe.analytics.fragmentation.fgd.cluster import ClusterState
from sits_observe.analytics.fragmentation.fgd.model import PodShape
from sits_observe.analytics.fragmentation.fgd.workload import TargetWorkload
from sits_observe.analytics.placement.fgd_score import fgd_score
from sits_observe.errors import UnknownNameError
from sits_observe.lab.replay.engine.policies import (
    BestFitPolicy,
    ClusteringPolicy,
    DotProductPolicy,
    PackingPolicy,
)
from sits_observe.lab.replay.engine.replay import find_policy, policy_names
from sits_observe.lab.replay.engine.sits import SitsPolicy, SitsSettings
from sits_observe.lab.replay.engine.state import NodeSignals, SimPod, SimState

#: One shape, 1 CPU + half a GPU: a GPU with less than 500 milli free is fragment.
HALF_GPU = TargetWorkload.from_weights([(PodShape(1000, 1, 500), 1.0)])


def pod(cpu_milli: int = 1000, num_gpu: int = 1, gpu_milli: int = 1000, mem: int = 0) -> SimPod:
    """A pod request (CPU-only when ``num_gpu`` is 0)."""
    return SimPod(PodShape(cpu_milli, num_gpu, gpu_milli if num_gpu else 0), mem)


def cluster(
    *nodes: tuple[int, Sequence[int]],
    memory_mib: Sequence[int] | None = None,
    signals: NodeSignals | None = None,
) -> SimState:
    """Nodes as ``(cpu_milli, [GPU milli already used, per GPU])``; node i is row i (``n<i>``).

    Used milli is placed as GPU-only filler pods (one per used GPU, partial or whole), so the
    affinity counts and totals stay consistent. Ties go to the lowest row (tie_rank = rows).
    """
    names = [f"n{i}" for i in range(len(nodes))]
    state = ClusterState.empty(
        names, [c for c, _ in nodes], [len(g) for _, g in nodes], ["G"] * len(nodes)
    )
    sim = SimState(state, HALF_GPU, memory_mib, signals)
    for row, (_, used) in enumerate(nodes):
        for gpu, milli in enumerate(used):
            if milli:
                sim.place(row, SimPod(PodShape(0, 1, milli), 0), (gpu,))
    return sim


def choose(
    policy: str, sim: SimState, request: SimPod, seed: int = 0
) -> tuple[int, tuple[int, ...] | None] | None:
    choice = find_policy(policy).choose(sim, request, np.random.default_rng(seed))
    return None if choice is None else (choice.node, choice.gpus)


def test_in_use_follows_the_running_totals_as_the_cluster_reads_them() -> None:
    sim = cluster((4000, [0, 0]), (4000, [0, 300]), (4000, []))
    rows = np.arange(3)
    assert sim.in_use(rows).tolist() == [False, True, False]
    sim.place(0, pod(num_gpu=2), None)
    assert sim.in_use(rows).tolist() == [True, True, False]
    assert sim.in_use(rows).tolist() == sim.cluster.nodes_in_use().tolist()


# -- the baselines ---------------------------------------------------------------------------


def test_packing_prefers_an_already_shared_gpu_then_a_used_node() -> None:
    # n0, n2 idle (2 GPUs); n1 has GPU 0 half used.
    sim = cluster((8000, [0, 0]), (8000, [500, 0]), (8000, [0, 0]))
    nodes = np.arange(3)
    # Partial pod: idle nodes max(33 - 2, 2) = 31; n1 shares GPU 0 (500 free): 100 - 50/10 = 95.
    assert PackingPolicy().scores(sim, pod(gpu_milli=300), nodes).tolist() == [31, 95, 31]
    assert choose("packing", sim, pod(gpu_milli=300)) == (1, (0,))
    # Whole GPU: on a used node max(50 - 1, 33) = 49 beats an idle node's 31.
    assert PackingPolicy().scores(sim, pod(), nodes).tolist() == [31, 49, 31]
    assert choose("packing", sim, pod()) == (1, None)


def test_bestfit_takes_the_tightest_node_and_the_tightest_gpu() -> None:
    sim = cluster((32000, [0, 0, 0, 0]), (8000, [0, 600]), (16000, [0] * 8))
    request = pod(cpu_milli=4000, gpu_milli=300)
    # 100 x (1 - 0.5 cpu_left/128k - 0.5 gpu_left/8k): n0 (28k, 3.7k) 70; n1 (4k, 1.1k) 91;
    # n2 (12k, 7.7k) 47.
    scores = BestFitPolicy().scores(sim, request, np.arange(3))
    assert scores.tolist() == [
        int(100 * (1 - (28000 / 128000 + 3700 / 8000) / 2)),
        int(100 * (1 - (4000 / 128000 + 1100 / 8000) / 2)),
        int(100 * (1 - (12000 / 128000 + 7700 / 8000) / 2)),
    ]
    assert choose("bestfit", sim, request) == (1, (1,))  # GPU 1 has 400 free: the tightest


def test_dotprod_takes_the_smallest_normalised_dot_product() -> None:
    # n0: lots of CPU, one GPU; n1: little CPU, eight GPUs. A 4-CPU 1-GPU pod aligns worst
    # with n1's free GPUs: dot n0 = 0.78 x 0.031 + 0.125 x 0.125 = 0.040 -> 97;
    # n1 = 0.0625 x 0.031 + 1 x 0.125 = 0.127 -> 93.
    sim = cluster((100000, [0]), (8000, [0] * 8))
    request = pod(cpu_milli=4000)
    assert DotProductPolicy().scores(sim, request, np.arange(2)).tolist() == [97, 93]
    assert choose("dotprod", sim, request) == (0, None)


def test_clustering_keeps_pods_of_the_same_gpu_share_together() -> None:
    # n0 holds a whole-GPU pod, n1 a shared GPU, n2 both, n3 nothing.
    sim = cluster((8000, [1000, 0]), (8000, [300, 0]), (8000, [1000, 300]), (8000, [0, 0]))
    nodes = np.arange(4)
    used = [25 * (8000 - free) // 8000 for free in (1000, 1700, 700, 2000)]
    # A shared-GPU pod: only-share n1 (75+), mixed n2 (50+), idle n3 (25+), other n0 (0+).
    share = ClusteringPolicy().scores(sim, pod(gpu_milli=200), nodes).tolist()
    assert share == [used[0], 75 + used[1], 50 + used[2], 25 + used[3]]
    assert choose("clustering", sim, pod(gpu_milli=200)) == (1, (0,))
    # A whole-GPU pod goes to the node that holds only whole-GPU pods.
    assert choose("clustering", sim, pod()) == (0, None)
    assert ClusteringPolicy().scores(sim, pod(num_gpu=0), nodes).tolist() == [0, 0, 0, 0]


def test_fgd_avoids_leaving_an_unusable_share() -> None:
    # M = 1 CPU + 500 milli. n0 has one GPU with 600 free; n1 two idle GPUs.
    sim = cluster((8000, [400]), (8000, [0, 0]))
    request = pod(gpu_milli=500)
    # Best fit fills n0's GPU to 100 free (now fragment for M); FGD uses n1 (F stays 0).
    assert choose("bestfit", sim, request) == (0, (0,))
    assert choose("fgd", sim, request) == (1, (0,))


def test_fgd_picks_the_gpu_that_keeps_shares_usable() -> None:
    # Free [1000, 600]: 500 on GPU 1 leaves 100 (fragment); on GPU 0 leaves 500 and 600.
    sim = cluster((8000, [0, 400]))
    assert choose("fgd", sim, pod(gpu_milli=500)) == (0, (0,))
    assert choose("bestfit", sim, pod(gpu_milli=500)) == (0, (1,))


def test_fgd_score_is_the_plugins_truncated_sigmoid() -> None:
    deltas = np.array([0.0, 1e-9, -1e12, 1e12, 40.0, -40.0, 1000.0, -1000.0, 100.0])
    assert fgd_score(deltas).tolist() == [50, 50, 100, 0, 49, 50, 26, 73, 47]


def test_random_never_picks_an_infeasible_node_or_gpu() -> None:
    # n1 lacks CPU; on n2 only GPU 1 has room for 300 milli.
    sim = cluster((8000, [0]), (500, [0]), (8000, [800, 0]))
    picks = {choose("random", sim, pod(gpu_milli=300), seed) for seed in range(200)}
    assert picks == {(0, (0,)), (2, (1,))}


def test_memory_filter_skips_nodes_without_room() -> None:
    sim = cluster((8000, [0]), (8000, [0]), memory_mib=[100, 5000])
    for name in policy_names():
        chosen = choose(name, sim, pod(mem=1000))
        # kube-* name the device plugin's GPU even for a whole GPU (the lowest free one).
        assert chosen in ((1, None), (1, (0,))), name
    assert choose("bestfit", sim, pod(mem=0)) == (0, None)


def test_every_policy_answers_none_when_nothing_fits() -> None:
    sim = cluster((8000, [0]), (8000, [300]))
    for name in policy_names():
        assert choose(name, sim, pod(num_gpu=2)) is None, name
        assert choose(name, sim, pod(cpu_milli=9000)) is None, name


def test_ties_follow_the_node_order_or_go_random() -> None:
    sim = cluster((8000, [0]), (8000, [0]), (8000, [0]))
    sim.tie_rank = np.array([2, 0, 1])
    assert choose("bestfit", sim, pod()) == (1, None)
    sim.random_ties = True
    assert {choose("bestfit", sim, pod(), seed) for seed in range(100)} == {
        (0, None),
        (1, None),
        (2, None),
    }


def test_unknown_policy_lists_the_valid_names() -> None:
    with pytest.raises(UnknownNameError, match="fgd"):
        find_policy("tetris")
    assert policy_names() == (
        "random", "dotprod", "clustering", "packing", "bestfit", "fgd", "sits", "kube-default",
    )  # fmt: skip


# -- sits ------------------------------------------------------------------------------------


def signals(
    n: int, interference: Sequence[float] | None = None, per_numa: Sequence[int] | None = None
) -> NodeSignals:
    return NodeSignals(
        np.asarray(interference if interference is not None else [np.nan] * n, dtype=np.float64),
        np.asarray(per_numa if per_numa is not None else [0] * n, dtype=np.int64),
        np.zeros(n, dtype=np.bool_),
    )


def test_sits_keeps_idle_nodes_for_later_among_equal_scores() -> None:
    # A whole GPU on idle n0 or on n1 (GPU 2 half used) leaves F at 0 on both: FGD takes the
    # first node, sits the node already in use.
    sim = cluster((8000, [0, 0]), (8000, [0, 0, 500]))
    assert choose("fgd", sim, pod()) == (0, None)
    assert choose("sits", sim, pod()) == (1, None)
    plain = SitsPolicy(SitsSettings(keep_idle_nodes=False))
    assert plain.choose(sim, pod(), np.random.default_rng(0)) is not None
    assert plain.choose(sim, pod(), np.random.default_rng(0)).node == 0  # type: ignore[union-attr]


def test_sits_interference_penalty_moves_pods_off_a_noisy_node() -> None:
    quiet = cluster((8000, [0, 0]), (8000, [0, 0]), signals=signals(2, [0.9, 0.0]))
    assert choose("fgd", quiet, pod()) == (0, None)
    assert choose("sits", quiet, pod()) == (1, None)  # n0 loses round(0.9 x 10) = 9 points


def test_sits_fragmentation_still_outweighs_a_small_interference() -> None:
    # n1's only GPU would be left with 100 (fragment): delta +100 -> 47; n0 delta 0 -> 50 - 1.
    sim = cluster((8000, [0, 0]), (8000, [400]), signals=signals(2, [0.1, 0.0]))
    assert choose("sits", sim, pod(gpu_milli=500)) == (0, (0,))


def test_sits_places_multi_gpu_pods_inside_one_numa_domain() -> None:
    # Row 0: free GPUs 3 and 7 (one per NUMA domain of 4). Row 1: GPU 3 and GPUs 4-7 free.
    # Both leave F at 0 for M, so FGD takes row 0 (cross-NUMA) and GPUs 3, 4 on row 1; sits
    # takes row 1 (same PCIe switch: 1 / 1.4 beats 1 / 2) and GPUs 4, 5.
    full = 1000
    sim = cluster(
        (64000, [full, full, full, 0, full, full, full, 0]),
        (64000, [full, full, full, 0, 0, 0, 0, 0]),
        signals=signals(2, per_numa=[4, 4]),
    )
    assert choose("fgd", sim, pod(num_gpu=2)) == (0, None)
    assert choose("sits", sim, pod(num_gpu=2)) == (1, (4, 5))


def test_node_signals_are_checked() -> None:
    with pytest.raises(ValueError, match="length"):
        NodeSignals(np.zeros(2), np.zeros(3, dtype=np.int64), np.zeros(2, dtype=np.bool_))
    with pytest.raises(ValueError, match="0-1"):
        signals(1, [1.5])
    with pytest.raises(ValueError, match="signals cover"):
        cluster((8000, [0]), signals=signals(2))


def test_sits_keeps_idle_nodes_even_when_ties_go_random() -> None:
    # Two idle nodes and one in use tie on the FGD score; random ties never pick an idle one.
    sim = cluster((8000, [0, 0]), (8000, [0, 0]), (8000, [0, 0, 500]))
    sim.random_ties = True
    assert {choose("sits", sim, pod(), seed) for seed in range(30)} == {(2, None)}
    assert len({choose("fgd", sim, pod(), seed) for seed in range(30)}) == 3


def _sits(**levels: bool) -> SitsPolicy:
    return SitsPolicy(SitsSettings.model_validate(levels))


def test_sits_puts_a_share_on_the_tightest_gpu_among_equal_scores() -> None:
    # A 200 share leaves every GPU at >= 500 free (no fragment for M, delta 0, 50 points) on
    # n0 (free 1000, 900) and n1 (free 700, 1000): FGD takes n0's lowest GPU; sits the GPU
    # with the least free share, on the node where it is least: n1 GPU 0; within n0 alone
    # GPU 1. CPU is ample, so no idle GPU goes unfed (cpu_short 0 on both).
    sim = cluster((64000, [0, 100]), (64000, [300, 0]))
    assert choose("fgd", sim, pod(gpu_milli=200)) == (0, (0,))
    assert choose("sits", sim, pod(gpu_milli=200)) == (1, (0,))
    plain = _sits(tightest_share=False).choose(sim, pod(gpu_milli=200), np.random.default_rng(0))
    assert plain is not None and (plain.node, plain.gpus) == (0, (0,))
    alone = cluster((64000, [0, 100]))
    assert choose("sits", alone, pod(gpu_milli=200)) == (0, (1,))


def test_sits_fills_small_nodes_first_among_equal_scores_when_asked() -> None:
    # A whole GPU leaves F at 0 on both nodes in use: with the level on, sits takes the 2-GPU
    # node; by default (off, measured: docs/analytics/simulator.md) it keeps node order.
    sim = cluster((8000, [500, 0, 0, 0]), (8000, [500, 0]))
    assert choose("fgd", sim, pod()) == (0, None)
    assert choose("sits", sim, pod()) == (0, None)
    small = _sits(small_nodes_first=True).choose(sim, pod(), np.random.default_rng(0))
    assert small is not None and small.node == 1


def test_sits_sends_a_gpu_pod_where_its_cpu_strands_the_fewest_idle_gpus() -> None:
    # A 4-CPU whole-GPU pod on n0 (6 CPU, GPUs [500, 0, 0] used) or n1 (16 CPU, the same
    # GPUs): M's 1 CPU + half a GPU still fits everywhere after it (F stays 0, 50 points on
    # both) and both are in use. n0 is left with 2 CPU for 1,500 usable idle milli-GPU, which
    # feeds only 500 at the pod's 4 CPU per GPU (1,000 short: 4 steps); n1 with 12 CPU, enough
    # for all. FGD takes n0 (node order), sits n1; with the level off, n0.
    sim = cluster((6000, [500, 0, 0]), (16000, [500, 0, 0]))
    big = pod(cpu_milli=4000)
    assert choose("fgd", sim, big) == (0, None)
    assert choose("sits", sim, big) == (1, None)
    plain = _sits(cpu_for_idle_gpus=False).choose(sim, big, np.random.default_rng(0))
    assert plain is not None and plain.node == 0


def test_sits_puts_cpu_only_pods_where_the_fewest_gpus_are_idle() -> None:
    # 1 CPU leaves 7 CPUs for M's pod on either node (delta 0): n0 has 1,500 milli-GPU idle,
    # n1 1,000: sits takes n1, so the CPU it uses can strand less GPU.
    sim = cluster((8000, [500, 0]), (8000, [1000, 0]))
    assert choose("fgd", sim, pod(num_gpu=0)) == (0, None)
    assert choose("sits", sim, pod(num_gpu=0)) == (1, None)
    plain = _sits(cpu_on_busy_nodes=False).choose(sim, pod(num_gpu=0), np.random.default_rng(0))
    assert plain is not None and plain.node == 0
