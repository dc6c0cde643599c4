"""The replay of the shipped path (control.replay_extender): kube-scheduler's model calling the
service's extender handler in process, with the view following every placement.

Trace: tests.unit.lab.test_schedsim's small node and pod lists (shares, whole GPUs,
CPU-only pods)."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from sits_observe.analytics.fragmentation.fgd.cluster import ClusterState
from sits_observe.analytics.fragmentation.fgd.model import PodShape
from sits_observe.analytics.fragmentation.fgd.workload import TargetWorkload
from sits_observe.analytics.traces.cluster_trace import PodList
from sits_observe.control.extender.clusterview.view import build_view
from sits_observe.control.extender.clusterview.view_settings import ViewSettings
from sits_observe.control.extender.overlay import Placement, with_placements
from sits_observe.control.extender.scoring import PodRequest, prioritize
from sits_observe.control.extender.scoring_settings import ScoringSettings
from sits_observe.errors import ConfigError
from sits_observe.lab.replay.engine.replay import replay
from sits_observe.lab.replay.engine.sits import SitsSettings
from sits_observe.lab.replay.engine.state import SimState
from sits_observe.lab.replay.extender import (
    DEFAULT_SCHEDULER_CONFIG,
    KUBE_SITS,
    KUBE_SITS_GPUHINT,
    KUBE_SITS_NOBIND,
    SNAPSHOT_AT,
    ExtenderReplayPolicy,
    replay_policies,
    replay_store,
    with_gpu_hint,
    without_bind,
)
from sits_observe.lab.scheduler.config import ExtenderConfig, SchedulerConfig
from tests.unit.lab.test_schedsim import NODES, PODS

EXTENDER = ExtenderConfig(
    url_prefix="http://sits/scheduler",
    filter_verb="filter",
    prioritize_verb="prioritize",
    weight=100,
    node_cache_capable=True,
)


def _view_matches_the_replay(policy: ExtenderReplayPolicy) -> None:
    """The service's view (store snapshot + assumed pods) equals kube-scheduler's cache."""
    assert policy._kube is not None and policy._transport is not None
    cache = policy._kube.nodes
    view = policy._transport.views.get()
    assert cache is not None and view is not None
    for name in cache.names:
        row, i = view.index[name], cache.index[name]
        count = int(cache.gpu_count[i])
        assert view.state.gpu_free_milli[row, :count].tolist() == (
            cache.gpu_free_milli[i, :count].tolist()
        ), name
        free_cpu = int(cache.cpu_alloc_milli[i] - cache.cpu_requested_milli[i])
        assert int(view.state.cpu_free_milli[row]) == free_cpu, name


@pytest.mark.parametrize("gpu_hint", [False, True])
def test_the_view_follows_every_placement_and_the_gpus_are_predicted(gpu_hint: bool) -> None:
    config = SchedulerConfig(extenders=(EXTENDER,))
    policy = ExtenderReplayPolicy("kube-sits-test", config, PODS, gpu_hint=gpu_hint)
    result = replay(NODES, PODS, policy, seed=1)
    counts = policy.counts
    assert counts["scheduled"] == result.pods_placed > 0
    # Every placed pod went through the handler's filter (no managedResources: CPU-only pods
    # too); prioritize is skipped when one node is left (kube-scheduler's shortcut).
    assert counts["filter_scored"] >= result.pods_placed
    assert 0 < counts["prioritize_scored"] <= counts["filter_scored"]
    assert counts["bind_bound"] == (result.pods_placed if gpu_hint else 0)
    # The bind verb assumed each pod on the GPUs the device plugin then gave it.
    assert counts["gpu_mismatch"] == 0
    _view_matches_the_replay(policy)


def test_the_hint_makes_the_device_plugin_take_fgds_gpu() -> None:
    """With the hint, share pods land where the extender scored them; the replay is
    deterministic for a seed and differs between the two policies only by the GPU choice."""
    config = SchedulerConfig(extenders=(EXTENDER,))
    hinted = [
        replay(NODES, PODS, ExtenderReplayPolicy("h", config, PODS, gpu_hint=True), seed=2)
        for _ in range(2)
    ]
    np.testing.assert_array_equal(hinted[0].alloc_ratio, hinted[1].alloc_ratio)
    assert hinted[0].unallocated_gpus == hinted[1].unallocated_gpus


def test_the_policy_pickles_before_its_first_pod_and_restarts_for_a_new_replay() -> None:
    config = SchedulerConfig(extenders=(EXTENDER,))
    policy = ExtenderReplayPolicy("kube-sits-test", config, PODS)
    twin = pickle.loads(pickle.dumps(policy))
    first = replay(NODES, PODS, policy, seed=3)
    second = replay(NODES, PODS, policy, seed=3)  # the same object, a fresh cluster
    third = replay(NODES, PODS, twin, seed=3)
    assert first.unallocated_gpus == second.unallocated_gpus == third.unallocated_gpus
    np.testing.assert_array_equal(first.alloc_ratio, second.alloc_ratio)


def test_the_shipped_configuration_is_replayed() -> None:
    """The shipped file binds GPU pods through the extender already: kube-sits-gpuhint is the
    same configuration; kube-sits-nobind drops the binding extender."""
    factories = replay_policies(PODS)
    plain = factories[KUBE_SITS]()
    hinted = factories[KUBE_SITS_GPUHINT]()
    nobind = factories[KUBE_SITS_NOBIND]()
    assert plain.config.source == str(DEFAULT_SCHEDULER_CONFIG)
    assert [e.bind_verb for e in plain.config.extenders] == ["", "bind"]
    assert hinted.config == plain.config
    assert [(e.filter_verb, e.bind_verb) for e in nobind.config.extenders] == [("filter", "")]
    bare = SchedulerConfig(extenders=(EXTENDER,))
    assert [e.bind_verb for e in with_gpu_hint(bare).extenders] == ["bind"]
    assert [e.bind_verb for e in without_bind(with_gpu_hint(bare)).extenders] == [""]


def test_a_configuration_without_an_extender_is_refused(tmp_path: object) -> None:
    with pytest.raises(ConfigError, match="has no extender"):
        ExtenderReplayPolicy("x", SchedulerConfig(), PODS)


def test_the_replay_and_the_extender_default_every_shared_tie_level_alike() -> None:
    """`sits` and `kube-sits` are one order (analytics/placement/sits_order.py) with two settings
    classes: a level switched in one and not the other would make the replay measure a policy
    the extender does not ship."""
    shared = SitsSettings.model_fields.keys() & ScoringSettings.model_fields.keys()
    assert {"cpu_on_busy_nodes", "tightest_share", "small_nodes_first", "keep_idle_nodes"} <= shared
    for name in shared:
        assert (
            SitsSettings.model_fields[name].default == ScoringSettings.model_fields[name].default
        ), name


def test_the_extender_ranks_a_gpu_pod_where_its_cpu_strands_the_fewest_idle_gpus() -> None:
    """The replay policy's case (test_schedsim_policies) through the service's view builder:
    n0 (6 CPU) and n1 (16 CPU), 3 GPUs each with half of GPU 0 used, M = 1 CPU + half a GPU.
    A 4-CPU whole-GPU pod leaves F at 0 on both (equal points) and would leave n0 1,500
    usable idle milli-GPU with 2 CPU, enough for 500 at 4 CPU per GPU: n1 ranks first. With
    the level off the tie order (n0 before n1) decides."""
    state = ClusterState.empty(["n0", "n1"], [6000, 16000], [3, 3], ["G", "G"])
    half = PodShape(1000, 1, 500)
    sim = SimState(state, TargetWorkload.from_weights([(half, 1.0)]))
    one = np.ones(1, dtype=np.int64)
    typical = PodList(("m",), 1000 * one, 0 * one, one, 500 * one, ((),))
    with replay_store(sim, typical) as store:
        empty = build_view(store, SNAPSHOT_AT, ViewSettings())
    fillers = [Placement("t", f"fill-{n}", n, PodShape(0, 1, 500), (0,)) for n in ("n0", "n1")]
    view, skipped = with_placements(empty, fillers)
    assert skipped == [] and view.tie_rank.tolist() == [0, 1]
    big = PodRequest("serve", "new", 1, 4000)
    shipped = prioritize(big, view, ["n0", "n1"], ScoringSettings())
    assert shipped.fgd_points.tolist() == [50, 50]
    assert shipped.as_dict() == {"n0": 9, "n1": 10}
    plain = prioritize(big, view, ["n0", "n1"], ScoringSettings(cpu_for_idle_gpus=False))
    assert plain.as_dict() == {"n0": 10, "n1": 9}
