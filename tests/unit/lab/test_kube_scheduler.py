"""The kube-scheduler model (analytics.kube_scheduler) against hand-computed plugin scores and
the upstream cycle rules (schedule_one.go, noderesources/*.go)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from sits_observe.lab.scheduler.config import (
    ExtenderConfig,
    SchedulerConfig,
    load_scheduler_config,
)
from sits_observe.lab.scheduler.kube_nodes import GPU_PRODUCT_LABEL, MIB, NodeInfos, SchedPod
from sits_observe.lab.scheduler.model import Extender, KubeScheduler, nodes_to_find
from sits_observe.lab.scheduler.wire import ExtenderCallError

GIB = 1 << 30
REPO = Path(__file__).resolve().parents[3]


def pod(
    cpu_milli: int = 1000,
    memory_bytes: int = 2 * GIB,
    num_gpu: int = 0,
    gpu_milli: int = 0,
    gpu_types: tuple[str, ...] = (),
    name: str = "p",
) -> SchedPod:
    manifest = {"metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"}}
    return SchedPod(
        "default",
        name,
        f"uid-{name}",
        cpu_milli,
        memory_bytes,
        num_gpu,
        gpu_milli,
        gpu_types,
        manifest,
    )


def two_nodes() -> NodeInfos:
    """a: 4 cores, 8 GiB, 1 core + 2 GiB already requested; b: 8 cores, 8 GiB, empty."""
    nodes = NodeInfos.empty(
        ["a", "b"],
        cpu_milli=[4000, 8000],
        memory_bytes=[8 * GIB, 8 * GIB],
        gpu_count=[0, 0],
        gpu_model=["", ""],
    )
    nodes.assume(0, pod(name="existing"), [])
    return nodes


def test_least_allocated_and_balanced_allocation_match_hand_computed_scores() -> None:
    nodes = two_nodes()
    scheduler = KubeScheduler(SchedulerConfig())
    scores = scheduler.plugin_scores(nodes, pod(), np.array([0, 1]))
    # a: LeastAllocated cpu (4000-2000)*100/4000 = 50, memory (8-4)*100/8 = 50 -> 50;
    #    Balanced fractions 0.5, 0.5 -> std 0 -> 100.          total 150
    # b: LeastAllocated cpu 7000*100/8000 = 87 (87.5 truncated), memory 6*100/8 = 75 -> (87+75)//2
    #    = 81; Balanced fractions 0.125, 0.25 -> std 0.0625 -> 93 (93.75 truncated). total 174
    assert scores.tolist() == [150, 174]


def test_a_pod_without_requests_counts_defaults_only_for_least_allocated() -> None:
    nodes = two_nodes()
    scheduler = KubeScheduler(SchedulerConfig())
    scores = scheduler.plugin_scores(nodes, pod(cpu_milli=0, memory_bytes=0), np.array([1]))
    # LeastAllocated with 100m / 200Mi: cpu 7900*100//8000 = 98, memory (8192-200)*100//8192 = 97
    # -> 97; Balanced with nothing requested: fractions 0, 0 -> 100.
    assert scores.tolist() == [97 + 100]


def test_most_allocated_prefers_the_fuller_node() -> None:
    nodes = two_nodes()
    config = SchedulerConfig(fit_strategy="MostAllocated")
    scores = KubeScheduler(config).plugin_scores(nodes, pod(), np.array([0, 1]))
    # a: cpu 2000*100/4000 = 50, memory 4*100/8 = 50 -> 50 (+100 balanced);
    # b: cpu 1000*100/8000 = 12, memory 2*100/8 = 25 -> 18 (+93 balanced).
    assert scores.tolist() == [150, 111]


@pytest.mark.parametrize(
    ("nodes", "percentage", "found"),
    [
        (50, 0, 50),
        (150, 0, 100),
        (1213, 0, 497),
        (5000, 0, 500),
        (10000, 0, 500),
        (1213, 100, 1213),
    ],
)
def test_nodes_to_find_is_adaptive_with_a_floor_of_100(
    nodes: int, percentage: int, found: int
) -> None:
    assert nodes_to_find(percentage, nodes) == found


def _uniform(n: int) -> NodeInfos:
    return NodeInfos.empty(
        [f"n{i:03d}" for i in range(n)],
        cpu_milli=[8000] * n,
        memory_bytes=[8 * GIB] * n,
        gpu_count=[0] * n,
        gpu_model=[""] * n,
    )


def test_the_start_index_rotates_by_the_nodes_examined() -> None:
    nodes = _uniform(200)  # 49% of 200 = 98 -> floor 100 feasible nodes per cycle
    seen: list[list[str]] = []

    def filter_answer(url: str, body: bytes) -> bytes:
        names = json.loads(body)["NodeNames"]
        if url.endswith("/filter"):
            seen.append(names)
        return _answers({})(url, body)

    scheduler = KubeScheduler(
        _with_extender(), [Extender(_with_extender().extenders[0], Fake(filter_answer))]
    )
    rng = np.random.default_rng(0)
    scheduler.schedule(nodes, pod(), rng)
    scheduler.schedule(nodes, pod(), rng)
    assert seen[0] == [f"n{i:03d}" for i in range(100)]
    assert seen[1] == [f"n{i:03d}" for i in range(100, 200)]


class Fake:
    """An extender transport that answers with a function of (url, body)."""

    def __init__(self, answer: Callable[[str, bytes], bytes]) -> None:
        self.answer = answer
        self.urls: list[str] = []

    def post(self, url: str, body: bytes, timeout_s: float) -> bytes:
        self.urls.append(url)
        return self.answer(url, body)


def _with_extender(**changes: object) -> SchedulerConfig:
    base = {
        "url_prefix": "http://sits/scheduler",
        "filter_verb": "filter",
        "prioritize_verb": "prioritize",
        "weight": 5,
        "node_cache_capable": True,
    }
    base.update(changes)
    return SchedulerConfig(extenders=(ExtenderConfig(**base),))  # type: ignore[arg-type]


def _answers(
    priorities: dict[str, int], passing: list[str] | None = None
) -> Callable[[str, bytes], bytes]:
    def answer(url: str, body: bytes) -> bytes:
        names = json.loads(body)["NodeNames"]
        if url.endswith("/filter"):
            ok = names if passing is None else [n for n in names if n in passing]
            failed = {n: "sits says no" for n in names if n not in ok}
            return json.dumps({"NodeNames": ok, "FailedNodes": failed, "Error": ""}).encode()
        return json.dumps([{"Host": n, "Score": priorities.get(n, 0)} for n in names]).encode()

    return answer


def test_extender_priorities_are_weighted_by_weight_times_ten() -> None:
    nodes = two_nodes()  # plugin totals: a 150, b 174
    config = _with_extender(weight=5)
    # a gets 1 point more from the extender: 150 + 5*10*1 = 200 > 174 -> a wins.
    fake = Fake(_answers({"a": 1, "b": 0}))
    decision = KubeScheduler(config, [Extender(config.extenders[0], fake)]).schedule(
        nodes, pod(), np.random.default_rng(0)
    )
    assert decision.node_name == "a"
    assert decision.calls == {"filter": 1, "prioritize": 1}
    # With weight 0.4x (2) the extender's point is worth 20: b keeps its 24-point lead.
    config = _with_extender(weight=2)
    fake = Fake(_answers({"a": 1, "b": 0}))
    decision = KubeScheduler(config, [Extender(config.extenders[0], fake)]).schedule(
        nodes, pod(), np.random.default_rng(0)
    )
    assert decision.node_name == "b"


def test_one_node_left_after_the_extender_filter_is_chosen_without_prioritize() -> None:
    nodes = two_nodes()
    config = _with_extender()
    fake = Fake(_answers({}, passing=["a"]))
    decision = KubeScheduler(config, [Extender(config.extenders[0], fake)]).schedule(
        nodes, pod(), np.random.default_rng(0)
    )
    assert decision.node_name == "a"
    assert [u.rsplit("/", 1)[1] for u in fake.urls] == ["filter"]


def _failing(url: str, body: bytes) -> bytes:
    raise ExtenderCallError("connection refused")


def test_a_failing_ignorable_extender_is_skipped_and_a_required_one_fails_the_attempt() -> None:
    nodes = two_nodes()
    ignorable = _with_extender(ignorable=True)
    decision = KubeScheduler(
        ignorable, [Extender(ignorable.extenders[0], Fake(_failing))]
    ).schedule(nodes, pod(), np.random.default_rng(0))
    assert decision.node_name == "b"  # the plugin scores alone
    required = _with_extender(ignorable=False)
    decision = KubeScheduler(required, [Extender(required.extenders[0], Fake(_failing))]).schedule(
        nodes, pod(), np.random.default_rng(0)
    )
    assert decision.node is None and "connection refused" in decision.message


def test_an_extender_is_asked_only_about_pods_with_its_managed_resources() -> None:
    nodes = two_nodes()
    config = _with_extender(managed_resources=("nvidia.com/gpu",))
    fake = Fake(_answers({"a": 10}))
    KubeScheduler(config, [Extender(config.extenders[0], fake)]).schedule(
        nodes, pod(), np.random.default_rng(0)
    )
    assert fake.urls == []


def test_a_binder_extender_binds_and_the_error_of_a_required_one_leaves_the_pod_pending() -> None:
    nodes = two_nodes()
    config = _with_extender(bind_verb="bind")
    bodies: list[dict[str, str]] = []

    def answer(url: str, body: bytes) -> bytes:
        if url.endswith("/bind"):
            bodies.append(json.loads(body))
            return b'{"Error": ""}'
        return _answers({})(url, body)

    decision = KubeScheduler(config, [Extender(config.extenders[0], Fake(answer))]).schedule(
        nodes, pod(name="web"), np.random.default_rng(0)
    )
    assert decision.bound_by == "http://sits/scheduler"
    assert bodies == [
        {"PodName": "web", "PodNamespace": "default", "PodUID": "uid-web", "Node": "b"}
    ]

    def refuse(url: str, body: bytes) -> bytes:
        return b'{"Error": "no"}' if url.endswith("/bind") else _answers({})(url, body)

    decision = KubeScheduler(config, [Extender(config.extenders[0], Fake(refuse))]).schedule(
        nodes, pod(), np.random.default_rng(0)
    )
    assert decision.node is None and "binding rejected" in decision.message


def test_ties_are_broken_uniformly_at_random() -> None:
    nodes = _uniform(4)
    scheduler = KubeScheduler(SchedulerConfig())
    rng = np.random.default_rng(1)
    chosen = {scheduler.schedule(nodes, pod(), rng).node_name for _ in range(60)}
    assert chosen == {"n000", "n001", "n002", "n003"}


def test_gpu_pods_need_devices_with_their_share_free_and_an_allowed_model() -> None:
    nodes = NodeInfos.empty(
        ["h100", "a100"],
        cpu_milli=[64000, 64000],
        memory_bytes=[256 * GIB] * 2,
        gpu_count=[2, 2],
        gpu_model=["H100", "A100"],
    )
    nodes.assume(0, pod(num_gpu=1, gpu_milli=600, name="s1"), [0])
    nodes.assume(0, pod(num_gpu=1, gpu_milli=1000, name="w1"), [1])
    scheduler = KubeScheduler(SchedulerConfig())
    rng = np.random.default_rng(0)
    assert scheduler.schedule(nodes, pod(num_gpu=1, gpu_milli=400), rng).node_name in {
        "h100",
        "a100",
    }
    decision = scheduler.schedule(nodes, pod(num_gpu=2, gpu_milli=1000, gpu_types=("H100",)), rng)
    assert decision.node is None
    assert decision.message == (
        "0/2 nodes are available: 1 Insufficient nvidia.com/gpu, "
        "1 node(s) didn't match Pod's node affinity/selector."
    )
    assert (
        scheduler.schedule(nodes, pod(num_gpu=1, gpu_milli=500, gpu_types=("H100",)), rng).node
        is None
    )


def test_the_fit_error_counts_each_reason_over_the_plugins_and_the_extender() -> None:
    nodes = NodeInfos.empty(
        ["small", "tiny", "fine", "also-fine"],
        cpu_milli=[500, 500, 8000, 8000],
        memory_bytes=[8 * GIB, 1 * GIB, 8 * GIB, 8 * GIB],
        gpu_count=[0, 0, 0, 0],
        gpu_model=["", "", "", ""],
    )
    config = _with_extender()
    fake = Fake(_answers({}, passing=[]))
    decision = KubeScheduler(config, [Extender(config.extenders[0], fake)]).schedule(
        nodes, pod(cpu_milli=1000, memory_bytes=2 * GIB), np.random.default_rng(0)
    )
    assert decision.node is None
    # kube-scheduler counts every reason a node gave: "tiny" is short of both.
    assert decision.message == (
        "0/4 nodes are available: 2 Insufficient cpu, 1 Insufficient memory, 2 sits says no."
    )


def test_the_shipped_scheduler_configuration_is_read_as_kube_scheduler_reads_it() -> None:
    config = load_scheduler_config(REPO / "deploy" / "scheduler-config.yaml")
    extender, binder = config.extenders
    assert extender.url_prefix.endswith("/scheduler") and binder.url_prefix == extender.url_prefix
    assert (extender.filter_verb, extender.prioritize_verb) == ("filter", "prioritize")
    assert extender.node_cache_capable and extender.ignorable
    assert extender.managed_resources == ()  # every pod (docs/extender.md, "Measured")
    assert extender.weight >= 1 and extender.http_timeout_s == pytest.approx(2.0)
    assert (binder.bind_verb, binder.managed_resources) == ("bind", ("nvidia.com/gpu",))
    assert binder.ignorable and not (binder.filter_verb or binder.prioritize_verb)
    assert config.fit_strategy == "LeastAllocated"


def test_memory_is_in_bytes_and_the_label_name_is_nvidias() -> None:
    assert MIB == 1 << 20 and GPU_PRODUCT_LABEL == "nvidia.com/gpu.product"
