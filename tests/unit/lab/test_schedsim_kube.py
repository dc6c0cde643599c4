"""The kube-scheduler replay policy (analytics.schedsim_kube): the cycle a cluster runs, in the
replay, deterministic for a seed, with the device plugin choosing GPUs inside the node."""

from __future__ import annotations

import json

import numpy as np

from sits_observe.analytics.fragmentation.fgd.model import PodShape
from sits_observe.analytics.fragmentation.fgd.workload import TargetWorkload
from sits_observe.analytics.placement.device_plugin import GPU_HINT_ANNOTATION
from sits_observe.analytics.traces.cluster_trace import NodeList
from sits_observe.lab.replay.engine.kube import (
    GPU_MILLI_ANNOTATION,
    KubePolicy,
    PodStore,
    trace_pod,
)
from sits_observe.lab.replay.engine.replay import replay
from sits_observe.lab.replay.engine.state import SimPod, SimState
from sits_observe.lab.scheduler.config import ExtenderConfig, SchedulerConfig
from sits_observe.lab.scheduler.model import Extender
from tests.unit.lab.test_kube_scheduler import Fake
from tests.unit.lab.test_schedsim import NODES, PODS

GIB_MIB = 1024


def _cluster() -> SimState:
    nodes = NodeList(
        names=("small", "big"),
        cpu_milli=np.array([8000, 32000], dtype=np.int64),
        memory_mib=np.array([32 * GIB_MIB, 128 * GIB_MIB], dtype=np.int64),
        gpu_count=np.array([2, 2], dtype=np.int64),
        gpu_model=("T4", "T4"),
    )
    workload = TargetWorkload.from_weights([(PodShape(1000, 1, 1000), 1.0)])
    return SimState.from_node_list(nodes, workload)


def test_least_allocated_spreads_and_the_device_plugin_spreads_shares_over_gpus() -> None:
    sim = _cluster()
    policy = KubePolicy()
    rng = np.random.default_rng(0)
    share = SimPod(PodShape(1000, 1, 300), 1024)
    first = policy.choose(sim, share, rng)
    assert first is not None and first.node == 1  # the big node has more left
    sim.place(first.node, share, first.gpus)
    second = policy.choose(sim, share, rng)
    assert second is not None and second.node == 1
    # HAMi's spread: the second share goes to the other, idle GPU.
    assert {first.gpus, second.gpus} == {(0,), (1,)}


def test_a_pod_that_fits_nowhere_is_counted_unschedulable() -> None:
    sim = _cluster()
    policy = KubePolicy()
    assert (
        policy.choose(sim, SimPod(PodShape(1000, 4, 1000), 1024), np.random.default_rng(0)) is None
    )
    assert policy.counts["unschedulable"] == 1


def test_the_replay_is_deterministic_for_a_seed() -> None:
    one = replay(NODES, PODS, "kube-default", seed=3)
    two = replay(NODES, PODS, "kube-default", seed=3)
    assert np.array_equal(one.alloc_ratio, two.alloc_ratio)
    assert one.unallocated_gpus == two.unallocated_gpus
    other = replay(NODES, PODS, "kube-default", seed=4)
    assert not np.array_equal(one.alloc_ratio, other.alloc_ratio)


def test_one_policy_object_starts_each_replay_on_an_empty_cluster() -> None:
    # simulate() runs every seed of a policy on the same object when it runs in process;
    # the second replay must not begin on the first one's full cluster.
    policy = KubePolicy()
    first = replay(NODES, PODS, policy, seed=3)
    again = replay(NODES, PODS, policy, seed=3)
    assert np.array_equal(first.alloc_ratio, again.alloc_ratio)
    assert first.final_alloc_ratio == again.final_alloc_ratio > 0


def test_trace_pods_carry_their_share_exactly_and_a_hint_is_honoured() -> None:
    pod = trace_pod(SimPod(PodShape(2000, 1, 460, ("V100M16", "V100M32")), 4096), 7)
    metadata = pod.manifest["metadata"]
    assert isinstance(metadata, dict) and metadata["annotations"][GPU_MILLI_ANNOTATION] == "460"
    spec = pod.manifest["spec"]
    assert isinstance(spec, dict)
    term = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == ["V100M16", "V100M32"]

    sim = _cluster()
    pods = PodStore()

    def bind_to_gpu_1(url: str, body: bytes) -> bytes:
        """A binding extender that pins every pod to GPU 1 of the node it binds to."""
        args = json.loads(body)
        if url.endswith("/bind"):
            hint = f"GPU-{args['Node']}-1"
            pods.annotate(args["PodNamespace"], args["PodName"], GPU_HINT_ANNOTATION, hint)
        return b'{"Error": ""}'

    config = SchedulerConfig(
        extenders=(ExtenderConfig("http://sits/scheduler", bind_verb="bind", weight=1),)
    )
    extender = Extender(config.extenders[0], Fake(bind_to_gpu_1))
    policy = KubePolicy("kube-hint", config, [extender], pods=pods)
    choice = policy.choose(sim, SimPod(PodShape(1000, 1, 300), 1024), np.random.default_rng(0))
    # Spread alone would take GPU 0 of the big node (both idle, lowest index); the hint wins.
    assert choice is not None and choice.node == 1 and choice.gpus == (1,)
    assert policy.counts["bound_by_extender"] == 1
