"""The replay on DRA-shaped nodes: DRA's first-fit device step and the waste it measures.

A constructed case where node choice provably recovers first fit's waste: nodes of one
A100 under dynamic MIG, claims 3g.20gb then 1g.5gb. Both on one node, first fit takes 3g at
0 and 1g at 4, and slice 7 is stranded (only 3g at 4, 7g and the whole GPU cover it), where
best fit (3g at 4, 1g at 0) strands none: one slice wasted. On two nodes nothing is wasted.
"""

from __future__ import annotations

from sits_observe.lab.replay.dra import (
    DraDevices,
    DraReplaySettings,
    dra_cluster,
    dra_replay,
    node_devices,
)
from sits_observe.lab.scheduler.kube_nodes import SchedPod


def _pod(name: str, milli: int, gpus: int = 1) -> SchedPod:
    return SchedPod("replay", name, f"uid-{name}", 1000, 0, gpus, milli, (), {})


def _devices() -> DraDevices:
    return DraDevices({n: node_devices(n, 1, 1) for n in ("a", "b")})


def test_node_choice_recovers_the_slice_first_fit_strands() -> None:
    together = _devices()
    assert together.allocate("a", _pod("p3g", 500)) == (0,)
    assert together.allocate("a", _pod("p1g", 125)) == (0,)
    (waste,) = together.waste()
    assert (waste.first_fit.slices_stranded, waste.best_fit.slices_stranded) == (1, 0)
    assert waste.wasted_slices == 1
    apart = _devices()
    apart.allocate("a", _pod("p3g", 500))
    apart.allocate("b", _pod("p1g", 125))
    assert [w.wasted_slices for w in apart.waste()] == [0, 0]


def test_the_filter_refuses_a_node_where_the_claim_cannot_be_allocated() -> None:
    devices = _devices()
    devices.allocate("a", _pod("p1g", 125))
    assert not devices.feasible("a", _pod("whole", 1000))
    assert devices.feasible("b", _pod("whole", 1000))
    assert devices.allocate("a", _pod("whole", 1000)) is None
    # Seven 1g.5gb placements: the eighth does not fit although slice 7 is free.
    for i in range(6):
        assert devices.allocate("a", _pod(f"more-{i}", 125)) == (0,)
    assert not devices.feasible("a", _pod("eighth", 125))


def test_plain_gpus_follow_the_partitionable_ones_and_take_whole_claims() -> None:
    pool = node_devices("n", 4, 2)
    assert pool.gpus == ("gpu-0", "gpu-1", "gpu-2", "gpu-3")
    devices = DraDevices({"n": pool})
    # First fit gives a whole-GPU claim the partitionable GPUs listed first.
    assert devices.allocate("n", _pod("two", 1000, gpus=2)) == (0, 1)
    assert not devices.feasible("n", _pod("mig", 125))


def test_both_node_choices_replay_the_same_arrivals_and_measure_the_waste() -> None:
    settings = DraReplaySettings(nodes=4, pods=60, load_ratio=0.8)
    nodes, pools = dra_cluster(settings)
    assert len(nodes) == 4 and len(pools["dra-node-000"].devices) == 4 * 15 + 4
    results = dra_replay(settings, [0])
    assert [r.policy for r in results] == ["kube-default", "kube-sits"]
    default, sits = results
    assert default.pods_placed + default.pods_failed == sits.pods_placed + sits.pods_failed
    for r in results:
        assert r.pods_placed > 0
        assert r.wasted_slices >= r.first_fit_stranded_slices - r.best_fit_stranded_slices
        assert 0 <= r.first_fit_stranded_slices <= r.slices_free
