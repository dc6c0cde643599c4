"""Queue quota rule (Kueue / KAI): hand-computed numbers, the shared safety, the patches."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import polars as pl
import pytest

from sits_observe.control.controller.actions import Action
from sits_observe.control.controller.apply import writes_for
from sits_observe.control.controller.planning.inputs import CurrentState, QueueState, Signals
from sits_observe.control.controller.planning.model import Plan
from sits_observe.control.controller.planning.plan import plan
from sits_observe.control.controller.rules.queues import queue_quotas
from sits_observe.control.controller.rules.quotas import namespace_quotas
from sits_observe.control.controller.settings import ControllerSettings
from sits_observe.control.signals.kube_queues import gpu_flavors, queue_patch, read_queues
from sits_observe.errors import KubeApiError, ParseError
from sits_observe.reports.actions.recommend import RecommendAction
from tests.unit.control.queue_objects import cluster_queue, kai_pod, kai_queue, local_queue

AT = datetime(2026, 11, 1, 12, 0, 0)

#: Kueue ClusterQueue in a cohort: 8 days, seven at 4 GPUs then 6.
TEAM_A = [4.0] * 7 + [6.0]
#: KAI queue: one day at 10 GPUs, on a 16-GPU cluster.
RESEARCH = [10.0]


def queue_frame(**over: Any) -> pl.DataFrame:
    rows = [
        {
            "kind": "ClusterQueue",
            "name": "team-a",
            "daily_peaks": TEAM_A,
            "allocatable": 64.0,
            "cohort": "pool",
            "flavor": "h100",
            "lending_limit": None,
            "over_quota_weight": None,
            "member_namespaces": 1,
        },
        {
            "kind": "Queue",
            "name": "research",
            "daily_peaks": RESEARCH,
            "allocatable": 16.0,
            "cohort": "root",
            "flavor": None,
            "lending_limit": None,
            "over_quota_weight": 1.0,
            "member_namespaces": 2,
        },
        {
            "kind": "ClusterQueue",
            "name": "solo",
            "daily_peaks": [2.0] * 14,
            "allocatable": 64.0,
            "cohort": None,
            "flavor": "h100",
            "lending_limit": None,
            "over_quota_weight": None,
            "member_namespaces": 1,
        },
    ]
    frame = pl.DataFrame(rows, schema_overrides={"lending_limit": pl.Float64})
    for prefix in ("quota", "borrowing", "limit"):
        frame = frame.with_columns(
            pl.lit(None, pl.String()).alias(f"{prefix}_current"),
            pl.lit(None, pl.String()).alias(f"{prefix}_recommended"),
        )
    return frame.with_columns(**{k: pl.lit(v) for k, v in over.items()})


def proposals(frame: pl.DataFrame) -> dict[tuple[str, str], dict[str, Any]]:
    out = queue_quotas(frame, ControllerSettings()).collect()
    return {(r["name"], r["action"]): r for r in out.iter_rows(named=True)}


def test_the_rule_by_hand() -> None:
    got = proposals(queue_frame())
    # team-a: p95 of [4 x 7, 6] = 4 + 0.65 x 2 = 5.3 (linear, position 0.95 x 7 = 6.65);
    # x 1.15 margin x (1 + 1/8) confidence = 6.857 -> 7 GPUs. Ceiling: 6 x 2 = 12 (< 64);
    # borrowing 12 - 7 = 5.
    quota = got[("team-a", "queue-gpu-quota")]
    assert quota["proposed"] == "7"
    assert quota["proposed_value"] == pytest.approx(5.3 * 1.15 * 1.125)
    evidence = json.loads(quota["evidence"])
    assert evidence["history_days"] == 8 and evidence["capped_by"] is None
    assert evidence["confidence_factor"] == pytest.approx(1.125)
    assert evidence["ceiling"] == 12
    assert got[("team-a", "queue-gpu-borrowing-limit")]["proposed"] == "5"
    # research (KAI): 10 x 1.15 x 2 = 23, over 10 x 2 = 20 and the 16 allocatable: 16.
    research = got[("research", "queue-gpu-quota")]
    assert research["proposed"] == "16"
    assert json.loads(research["evidence"])["capped_by"] == "the cluster's allocatable"
    assert "held at the cluster's allocatable" in research["reason"]
    assert got[("research", "queue-gpu-limit")]["proposed"] == "16"
    # Kueue refuses a borrowingLimit without a cohort; KAI has none; Kueue no KAI limit.
    assert ("solo", "queue-gpu-borrowing-limit") not in got
    assert ("research", "queue-gpu-borrowing-limit") not in got
    assert ("team-a", "queue-gpu-limit") not in got
    # solo: 14 days at 2: 2 x 1.15 x (1 + 1/14) = 2.46 -> 3.
    assert got[("solo", "queue-gpu-quota")]["proposed"] == "3"


def test_the_namespace_and_queue_rules_agree_on_the_same_peaks() -> None:
    """The shared sizing: a namespace and a queue with the same peaks get the same quota."""
    ns = pl.DataFrame(
        {
            "namespace": ["team"],
            "resource": ["requests.nvidia.com/gpu"],
            "daily_peaks": [TEAM_A],
            "allocatable": [64.0],
            "quota_kind": ["ResourceQuota"],
            "quota_name": ["sits-quota"],
            "current": [None],
            "recommended": [None],
        },
        schema_overrides={"current": pl.String, "recommended": pl.String},
    )
    [row] = namespace_quotas(ns, ControllerSettings()).collect().iter_rows(named=True)
    queue = proposals(queue_frame())[("team-a", "queue-gpu-quota")]
    assert row["proposed_value"] == queue["proposed_value"]
    assert row["proposed"] == queue["proposed"]


def _state(values: list[tuple[str, str, str, str | None]] = ()) -> CurrentState:  # type: ignore[assignment]
    facts = queue_frame().select(
        "kind",
        "name",
        "cohort",
        "flavor",
        "lending_limit",
        "over_quota_weight",
        "member_namespaces",
    )
    queues = QueueState.of(
        objects=pl.DataFrame(
            {
                "kind": ["ClusterQueue", "Queue", "ClusterQueue"],
                "name": ["team-a", "research", "solo"],
                "opt_out": [False, False, True],
            }
        ),
        values=pl.DataFrame(
            [(k, None, n, a, c, None) for k, n, a, c in values],
            schema=["kind", "namespace", "name", "action", "current", "recommended"],
            orient="row",
        )
        if values
        else None,
        facts=facts,
    )
    return CurrentState.of().with_queues(queues)


def _signals() -> Signals:
    return Signals.of(AT, queues=queue_frame().select("kind", "name", "daily_peaks", "allocatable"))


def _decisions(p: Plan) -> dict[tuple[str, str], dict[str, Any]]:
    return {(r["name"], r["action"]): r for r in p.frame.iter_rows(named=True)}


def test_plan_applies_the_step_limit_bounds_threshold_and_opt_out() -> None:
    st = _state(
        [
            ("ClusterQueue", "team-a", "queue-gpu-quota", "6.5"),
            ("Queue", "research", "queue-gpu-quota", "8"),
        ]
    )
    got = _decisions(plan(_signals(), st, ControllerSettings(mode="act")))
    # 6.5 -> 7 is +7.7%, under the 10% change threshold: no decision.
    assert ("team-a", "queue-gpu-quota") not in got
    # 8 -> 16 is limited to +50%: 12.
    research = got[("research", "queue-gpu-quota")]
    assert research["proposed"] == "12" and research["current"] == "8"
    assert "limited to 12" in research["reason"]
    # Unset (unlimited) fields have no step to scale.
    assert got[("team-a", "queue-gpu-borrowing-limit")]["proposed"] == "5"
    assert got[("research", "queue-gpu-limit")]["proposed"] == "16"
    # The opt-out annotation on the queue object.
    assert got[("solo", "queue-gpu-quota")]["skip"] == "opt-out"
    # Cluster-scoped: no namespace.
    assert research["namespace"] is None and research["kind"] == "Queue"


def test_a_queue_the_cluster_does_not_hold_gets_nothing() -> None:
    p = plan(_signals(), CurrentState.of(), ControllerSettings(mode="act"))
    assert not any(r["action"].startswith("queue-") for r in p.frame.iter_rows(named=True))


def test_a_zero_borrowing_limit_is_a_valid_value() -> None:
    peaks = queue_frame().with_columns(
        pl.when(pl.col("name") == "team-a")
        .then(pl.lit(1.0))
        .otherwise(pl.col("allocatable"))
        .alias("allocatable")
    )
    got = proposals(peaks)
    # Allocatable 1: quota and ceiling are both held at 1 GPU: borrowing 0.
    assert got[("team-a", "queue-gpu-quota")]["proposed"] == "1"
    assert got[("team-a", "queue-gpu-borrowing-limit")]["proposed"] == "0"
    signals = Signals.of(AT, queues=peaks.select("kind", "name", "daily_peaks", "allocatable"))
    st = _state([("ClusterQueue", "team-a", "queue-gpu-borrowing-limit", "4")])
    decided = _decisions(plan(signals, st, ControllerSettings(mode="act", max_step_ratio=1.0)))
    assert decided[("team-a", "queue-gpu-borrowing-limit")]["proposed"] == "0"


def test_act_writes_the_field_of_each_kind_and_annotate_only_the_annotation() -> None:
    p = plan(_signals(), _state(), ControllerSettings(mode="act"))
    fields = {
        (d.ref.kind, d.ref.name, str(d.action)): [
            (c.field, c.key, c.value) for c in writes_for(d, ControllerSettings(mode="act"), AT)
        ]
        for d in p.decisions()
        if d.skip is None
    }
    assert ("queue", "nominalQuota", "7") in fields[("ClusterQueue", "team-a", "queue-gpu-quota")]
    assert ("queue", "borrowingLimit", "5") in fields[
        ("ClusterQueue", "team-a", "queue-gpu-borrowing-limit")
    ]
    assert ("queue", "quota", "16") in fields[("Queue", "research", "queue-gpu-quota")]
    assert ("queue", "limit", "16") in fields[("Queue", "research", "queue-gpu-limit")]
    annotate = ControllerSettings(mode="annotate")
    for d in p.decisions():
        assert [c.field for c in writes_for(d, annotate, AT)] in ([], ["annotation"])


def test_kueue_patch_rewrites_only_the_gpu_entry_and_sends_the_version() -> None:
    cq = cluster_queue("team-a", gpu={"lendingLimit": "2"})
    cq["metadata"]["resourceVersion"] = "41"
    patch = queue_patch("ClusterQueue", cq, {"nominalQuota": "7", "borrowingLimit": "5"})
    assert patch["metadata"] == {"resourceVersion": "41"}
    groups = patch["spec"]["resourceGroups"]
    assert groups[0] == cq["spec"]["resourceGroups"][0]  # CPU / memory untouched
    assert groups[1]["flavors"][0]["resources"] == [
        {"name": "nvidia.com/gpu", "nominalQuota": "7", "lendingLimit": "2", "borrowingLimit": "5"}
    ]
    assert cq["spec"]["resourceGroups"][1]["flavors"][0]["resources"][0]["nominalQuota"] == "8"
    with pytest.raises(ParseError, match="2 flavors"):
        queue_patch(
            "ClusterQueue", cluster_queue("x", extra_gpu_flavor=True), {"nominalQuota": "1"}
        )


def test_kai_patch_is_the_gpu_map_only() -> None:
    assert queue_patch("Queue", {}, {"quota": "12", "limit": "16"}) == {
        "spec": {"resources": {"gpu": {"quota": 12.0, "limit": 16.0}}}
    }


def test_gpu_flavors_finds_the_gpu_entries() -> None:
    assert [(g, f, r) for g, f, r, _ in gpu_flavors(cluster_queue("a")["spec"])] == [(1, 0, 0)]
    two = gpu_flavors(cluster_queue("b", extra_gpu_flavor=True)["spec"])
    assert [q["nominalQuota"] for *_, q in two] == ["8", 4]


def test_every_queue_action_is_a_recommend_action() -> None:
    for action in (
        Action.QUEUE_GPU_QUOTA,
        Action.QUEUE_GPU_BORROWING_LIMIT,
        Action.QUEUE_GPU_LIMIT,
    ):
        assert RecommendAction(str(action))


class ListedKube:
    """A stand-in for :class:`KubeJson` answering lists from fixtures (404 for the rest)."""

    def __init__(self, lists: dict[str, list[dict[str, Any]]]) -> None:
        self.lists = lists
        self.queries: list[tuple[str, dict[str, str] | None]] = []

    def list_all(
        self, path: str, *, page_size: int = 500, query: dict[str, str] | None = None
    ) -> list[dict[str, Any]]:
        self.queries.append((path, query))
        if path not in self.lists:
            raise KubeApiError(f"GET {path}: 404", status=404)
        items = self.lists[path]
        if query and "labelSelector" in query:
            key = query["labelSelector"]
            items = [i for i in items if key in (i["metadata"].get("labels") or {})]
        return items


def test_membership_rules_of_both_schedulers() -> None:

    kube = ListedKube(
        {
            "/apis/kueue.x-k8s.io/v1beta1/clusterqueues": [
                cluster_queue("a", gpu={"nominalQuota": "500m", "borrowingLimit": "2"}),
                cluster_queue("b", cohort=None),
                cluster_queue("split", extra_gpu_flavor=True),
            ],
            "/apis/kueue.x-k8s.io/v1beta1/localqueues": [
                local_queue("ns-a", "q1", "a"),
                local_queue("ns-a", "q2", "a"),
                local_queue("ns-both", "q1", "a"),
                local_queue("ns-both", "q2", "b"),
                local_queue("ns-split", "q", "split"),
            ],
            "/apis/scheduling.run.ai/v2/queues": [
                kai_queue("x", gpu={"quota": 2.5, "limit": 6, "lendingLimit": 1}),
                kai_queue("y", gpu={"quota": -1}),
            ],
            "/api/v1/pods": [
                kai_pod("one", "p1", "x"),
                kai_pod("one", "p2", "x", label="runai/queue"),
                kai_pod("mix", "m1", "x"),
                kai_pod("mix", "m2", "y"),
                kai_pod("mix", "m3", "nowhere"),  # not a queue the cluster holds
            ],
        }
    )
    queues = read_queues(kube, ControllerSettings())  # type: ignore[arg-type]
    assert queues.errors == ()
    assert sorted(queues.members.iter_rows()) == [
        ("ClusterQueue", "a", "ns-a", None),  # ns-both points at two: neither
        ("Queue", "x", "mix", "m1"),  # two queues named in mix: pod by pod
        ("Queue", "x", "one", None),  # both labels name x: the whole namespace
        ("Queue", "y", "mix", "m2"),
    ]
    facts = {r["name"]: r for r in queues.facts.iter_rows(named=True)}
    assert set(facts) == {"a", "b", "x", "y"}  # split: two GPU flavors
    assert facts["b"]["cohort"] is None and facts["a"]["cohort"] == "pool"
    assert facts["x"]["lending_limit"] == 1 and facts["x"]["member_namespaces"] == 2
    values = {(r["name"], r["action"]): r["current"] for r in queues.values.iter_rows(named=True)}
    assert values[("a", "queue-gpu-quota")] == "0.5"  # 500m GPUs
    assert values[("a", "queue-gpu-borrowing-limit")] == "2"
    assert values[("x", "queue-gpu-quota")] == "2.5" and values[("x", "queue-gpu-limit")] == "6"
    assert values[("y", "queue-gpu-quota")] is None  # -1: unlimited
    # The pods are read by the KAI labels only (a label selector each).
    assert [q for p, q in kube.queries if p == "/api/v1/pods"] == [
        {"labelSelector": "kai.scheduler/queue"},
        {"labelSelector": "runai/queue"},
    ]


def test_no_queue_crds_no_pod_lists() -> None:

    kube = ListedKube({})
    queues = read_queues(kube, ControllerSettings())  # type: ignore[arg-type]
    assert queues.objects.height == 0 and queues.errors == ()
    assert all(p != "/api/v1/pods" for p, _ in kube.queries)
