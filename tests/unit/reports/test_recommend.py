"""The ``recommend`` report: the controller's plan and the analytics' findings over one window
(idle GPUs, GPU memory in the stack's form, replicas at the SLO), each row with current,
proposed, change and confidence; quotas never above the cluster; the window's cuts."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from sits_observe.control.controller.actions import Action
from sits_observe.control.controller.planning.model import ACTIONS
from sits_observe.control.controller.settings import ControllerSettings
from sits_observe.errors import NoDataError
from sits_observe.reports.actions import recommend, recommend_plan
from sits_observe.reports.result import Report
from sits_observe.reports.spec import run_report
from sits_observe.reports.window import WindowRequest
from sits_observe.store import Store
from sits_observe.surfaces.cli.main import app
from sits_observe.surfaces.cli.reports.output import table_text
from tests.golden_support import assert_golden
from tests.unit.reports.recommend_store import GIB, H100, HOUR, T0, fill


@pytest.fixture(scope="module")
def store() -> Iterator[Store]:
    with Store.open(":memory:") as s:
        fill(s)
        yield s


#: The SPEC's namespace SLA example, configured as a user would (none by default).
SLA_EXAMPLE = ("finance=0.015", "medical=0.12", "government=0.3")


def report(store: Store, since: str | None = None, until: str = "newest", **values: Any) -> Report:
    values.setdefault("sla", SLA_EXAMPLE)
    spec = recommend.SPEC
    return run_report(spec, store, WindowRequest.parse(since, until), spec.validate(values))


def by_key(r: Report) -> dict[tuple[str, str], dict[str, Any]]:
    return {(row["target"], row["action"]): row for row in r.main.records()}


def test_the_plan_as_of_the_newest_sample(store: Store) -> None:
    r = report(store)
    assert r.facts["at"] == T0  # one microsecond before until = T0 + 1 us
    rows = by_key(r)
    assert rows[("finance/p1", "memory-class")]["proposed"] == "L2"
    assert rows[("finance/p1", "time-slice")]["proposed"] == "25ms"
    prio = rows[("finance/p1", "priority-class")]
    assert (prio["current"], prio["proposed"]) == ("throughput-guaranteed", "best-effort")
    memory = rows[("finance", "quota-memory")]
    # Three daily snapshots two days apart: VPA's confidence 2 days, 32Gi x 1.15 x 1.5.
    assert (memory["kind"], memory["proposed"], memory["proposed_value"]) == (
        "Namespace",
        "56Gi",
        math.ceil(32 * GIB * 1.15 * 1.5 / 2**20) * 2**20,
    )
    assert json.loads(memory["evidence"])["history_days"] == 2
    assert rows[("finance", "quota-cpu")]["proposed"] == "13800m"


def test_the_window_start_cuts_every_look_back(store: Store) -> None:
    # The last 5 s: 5 requests of p1 (still ~30 ms P95 > 10 ms) and one inventory snapshot,
    # so no history to speak of: VPA's confidence counts it as one sample, 1/1440 of a day,
    # and widens the estimate x 1441; the cap holds it.
    rows = by_key(report(store, since="5s"))
    assert rows[("finance/p1", "time-slice")]["proposed"] == "25ms"
    gpu = rows[("finance", "quota-gpu")]
    assert json.loads(gpu["evidence"])["history_days"] == 0
    # 3 GPUs x 1.15 x 1441, held at the largest daily peak x 2 = 6.
    assert gpu["proposed_value"] == 6 and gpu["confidence"] == "low"
    assert json.loads(gpu["evidence"])["uncapped"] == pytest.approx(3 * 1.15 * 1441)
    # The sentence gives the history as the confidence column does and names the cap, not
    # the 4,971 GPUs.
    assert "(0s of history); held at the largest daily peak x 2" in gpu["reason"]
    assert "4971" not in gpu["reason"]
    # Until a time before the requests and samples: only the earlier inventory is read.
    early = by_key(report(store, until=(T0 - timedelta(hours=1)).isoformat()))
    assert ("finance/p1", "time-slice") not in early and ("n1", "fragmentation") not in early
    assert json.loads(early[("finance", "quota-gpu")]["evidence"])["history_days"] == 1


def test_filters_and_an_empty_window(store: Store) -> None:
    only = report(store, namespace="finance", action="quota-gpu").main.records()
    assert [(r["target"], r["action"]) for r in only] == [("finance", "quota-gpu")]
    assert report(store, namespace="elsewhere").main.rows.num_rows == 0
    with pytest.raises(NoDataError, match="try --until newest"):
        report(store, since="1h", until="now")
    with Store.open(":memory:") as empty, pytest.raises(NoDataError, match="are empty; fill"):
        report(empty, until="now")


@given(st.text(max_size=200))
def test_a_short_reason_fits_its_column(text: str) -> None:
    short = recommend_plan.short_reason(Action.TIME_SLICE, text, {}, ControllerSettings())
    assert len(short) <= 40
    assert text.startswith(short.removesuffix("…"))


@pytest.mark.parametrize("width", [80, 160])
def test_golden_table(store: Store, width: int) -> None:
    assert_golden(f"recommend_{width}", table_text(report(store), width))


def vpa_answer(index: int) -> float:
    """VPA's percentile answer for bucket ``index``: the start of the next bucket, 10 MB first
    bucket growing 5 % (docs/analytics/rightsizing.md)."""
    return 1e7 * (1.05 ** (index + 1) - 1) / 0.05


def test_an_idle_gpu_is_a_workload_row_with_the_gpu_hours_it_wastes(store: Store) -> None:
    idle = by_key(report(store))[("research/notebook", "idle-gpu")]
    assert (idle["namespace"], idle["name"], idle["kind"]) == ("research", "notebook", "Workload")
    assert (idle["current_value"], idle["proposed_value"], idle["change_ratio"]) == (1, 0, -1)
    evidence = json.loads(idle["evidence"])
    # 121 samples 30 s apart: 120 gaps + the last sample's median gap = 3630 s of one GPU.
    assert evidence["wasted_gpu_hours"] == pytest.approx(3630 / 3600)
    assert (evidence["gpus"], evidence["pods"]) == (["GPU-2"], ["nb-0"])
    assert idle["confidence"] == "medium"  # seen for >= 1 h, under 24 h
    assert idle["reason_short"].startswith("idle 100% of 1h0m")
    # The busy half GPU of serving/embedder is neither idle nor oversized.
    assert ("serving/embedder", "idle-gpu") not in by_key(report(store))


def test_gpu_memory_in_two_stack_forms_with_the_change_from_what_is_held(store: Store) -> None:
    rows = by_key(report(store))
    # research/notebook holds a whole 80 GiB GPU and peaks at 2 GiB: bucket 50 of VPA's
    # histogram ([2.03e9, 2.21e9)), so the target is its end x 1.15.
    whole = rows[("research/notebook", "gpu-memory")]
    target = math.ceil(vpa_answer(50) * 1.15)
    assert (whole["current_value"], whole["proposed_value"]) == (80 * GIB, target)
    assert whole["change_ratio"] == pytest.approx(target / (80 * GIB) - 1)
    assert (whole["current"], whole["proposed"]) == ("80Gi", "3Gi")
    evidence = json.loads(whole["evidence"])
    assert evidence["stack"] == "whole-gpu" and evidence["setting"] == "nvidia.com/gpu: 1"
    assert evidence["alternatives"][0] == "nvidia.com/mig-1g.10gb: 1"
    assert whole["reason_short"] == "mig-1g.10gb: 1 would hold it"
    # serving/embedder holds a HAMi share of 500 milli (40 GiB) and peaks at 10 GiB (bucket
    # 82): the target in HAMi's percentage of the 80 GiB device, rounded up.
    shared = rows[("serving/embedder", "gpu-memory")]
    target = math.ceil(vpa_answer(82) * 1.15)
    assert (shared["current_value"], shared["proposed_value"]) == (40 * GIB, target)
    assert shared["change_ratio"] == pytest.approx(target / (40 * GIB) - 1)
    percent = math.ceil(100 * target / (80 * GIB))
    assert json.loads(shared["evidence"])["setting"] == f"nvidia.com/gpumem-percentage: {percent}"
    assert shared["reason_short"] == f"set gpumem-percentage: {percent}"
    assert shared["confidence"] == whole["confidence"] == "low"  # one hour: 0.04 days


def test_replicas_at_the_slo_for_the_served_model(store: Store) -> None:
    # A heatmap flag fixes the rule's bins (1 s x 10 rps, as the heatmap's fixed defaults).
    fixed = report(store, slo_ms=1000, heatmap__min_bin_requests=20)
    llm = by_key(fixed)[("serving/llm", "replicas")]
    # Safe maximum 10 rps per replica (the [10, 20) rps bin meets the 1 s SLO, [20, 30) breaks
    # it); the busiest minute holds 50 s x 12 + 10 s x 25 = 850 requests: 14.2 rps -> 2.
    assert (llm["current_value"], llm["proposed_value"], llm["change_ratio"]) == (1, 2, 1.0)
    evidence = json.loads(llm["evidence"])
    assert evidence["safe_max_rps"] == 10 and evidence["peak_rps"] == pytest.approx(850 / 60)
    # A measured limit, but a minute of requests: low (VPA's days of history).
    assert evidence["model"] == "llama" and llm["confidence"] == "low"
    # Without heatmap flags the bins come from the pod's requests (2 s x 2 rps at about 14
    # requests/s): the 12 rps bin meets the SLO, still 2 replicas.
    llm = by_key(report(store, slo_ms=1000))[("serving/llm", "replicas")]
    assert (json.loads(llm["evidence"])["safe_max_rps"], llm["proposed_value"]) == (12, 2)


def test_not_enough_data_leaves_the_proposal_empty(store: Store) -> None:
    r = report(store)
    rows = by_key(r)
    # finance/chat (p1): 10 samples over 9 s, and 50 requests under 10 rps (no safe maximum).
    memory = rows[("finance/chat", "gpu-memory")]
    assert memory["proposed"] is None and memory["proposed_value"] is None
    assert memory["change_ratio"] is None and memory["confidence"] == "none"
    assert memory["reason"].startswith("not enough data: 10 samples over 9 s")
    assert memory["current"] == "80Gi"  # what it holds now is still known
    replicas = rows[("finance/chat", "replicas")]
    assert replicas["proposed"] is None and replicas["confidence"] == "none"
    # No SLO is configured: the row says so, and how to set one.
    assert replicas["reason"].startswith("no P95 SLO set for m: set one with --slo m=SECONDS")
    assert replicas["reason_short"] == "no SLO set: --slo m=SECONDS"
    assert any(n.startswith("1 row(s) have not enough data") for n in r.notes)
    assert any(n.startswith("2 replicas row(s) have no P95 SLO set") for n in r.notes)
    fixed = report(store, slo_ms=1000, heatmap__min_bin_requests=20)
    replicas = by_key(fixed)[("finance/chat", "replicas")]
    assert replicas["proposed"] is None and replicas["confidence"] == "none"
    assert replicas["reason"].startswith("not enough data: no safe maximum")
    assert any(n.startswith("2 row(s) have not enough data") for n in fixed.notes)


def tight_store(store: Store) -> None:
    """One 8-GPU node; namespace big asks for 6 GPUs in its one snapshot: the quota rule
    gives 6 x 1.15 x (1 + 1440) GPUs (one snapshot is one minute to VPA's confidence), held at
    the cluster's 8 (under 6 x 2)."""
    node = {"ts": T0, "node": "n1", "gpu_allocatable": 8, "gpu_product": H100,
            "gpu_memory_bytes": 80 * GIB, "cpu_allocatable_milli": 64_000,
            "memory_allocatable_bytes": 512 * GIB, "ready": True, "labels_json": "{}"}  # fmt: skip
    pods = [
        {"ts": T0, "pod_uid": f"u{i}", "namespace": "big", "pod": f"t{i}", "node": "n1",
         "phase": "Running", "gpu_request": 3, "cpu_request_milli": 1000,
         "memory_request_bytes": GIB, "workload": "train"}
        for i in range(2)
    ]  # fmt: skip
    store.append_batch({"nodes": pa.Table.from_pylist([node]), "pods": pa.Table.from_pylist(pods)})


def test_a_quota_is_never_proposed_above_the_cluster() -> None:
    with Store.open(":memory:") as s:
        tight_store(s)
        r = report(s, namespace="big")
    gpu = by_key(r)[("big", "quota-gpu")]
    assert (gpu["proposed"], gpu["proposed_value"]) == ("8", 8)
    evidence = json.loads(gpu["evidence"])
    assert (evidence["uncapped"], evidence["allocatable"]) == (pytest.approx(6 * 1.15 * 1441), 8)
    assert gpu["reason_short"] == "held at the cluster's allocatable"
    assert any(
        "big quota-gpu: the rule gives 9,943 GPUs (x1,441 by VPA's confidence for 0s of "
        "history), held at the cluster" in n
        for n in r.notes
    )
    assert r.facts["allocatable_gpus"] == 8
    # CPU stays under the node's 64 cores: held at its peak x 2 (2 x 2 cores), not the cluster.
    cpu = json.loads(by_key(r)[("big", "quota-cpu")]["evidence"])
    assert (cpu["capped_by"], cpu["peak_cap"]) == ("the largest daily peak x 2", 4000)
    # The note says cores, as prose does (2 cores x 1.15 x 1,441), not a manifest quantity.
    assert any(
        n.startswith("big quota-cpu: the rule gives 3,314 CPU (x1,441") and "m CPU" not in n
        for n in r.notes
    ), r.notes


def test_change_and_confidence_rules() -> None:
    assert recommend_plan.change_ratio(4, 3) == -0.25
    assert (
        recommend_plan.change_ratio(None, 3) is None and recommend_plan.change_ratio(0, 3) is None
    )
    days = [recommend_plan.days_confidence(d) for d in (None, 0, 1.9, 2, 6.9, 7)]
    assert days == ["none", "low", "low", "medium", "medium", "high"]
    # Every controller action can be asked for with --action.
    assert {str(a) for a in ACTIONS} <= {str(a) for a in recommend.RecommendAction}


def test_rows_are_grouped_by_namespace_and_the_n_alias_filters_them(
    store: Store, tmp_path: Path
) -> None:
    rows = report(store).main.records()
    order = [(r["namespace"] is not None, r["namespace"] or "", r["name"]) for r in rows]
    assert order == sorted(order) and rows[0]["kind"] == "Node"  # cluster-scoped first
    db = tmp_path / "r.duckdb"
    with Store.open(db) as s:
        fill(s)
    args = ["recommend", "--db", str(db), "--until", "newest", "-o", "json"]
    outcome = CliRunner().invoke(app, [*args, "-n", "research"])
    assert outcome.exit_code == 0, outcome.output
    got = json.loads(outcome.stdout)["rows"]
    assert {r["namespace"] for r in got} == {"research"}
    assert {r["action"] for r in got} >= {"idle-gpu", "gpu-memory", "quota-gpu", "memory-class"}
    outcome = CliRunner().invoke(app, [*args, "-n", "serving", "--action", "replicas"])
    assert [r["target"] for r in json.loads(outcome.stdout)["rows"]] == ["serving/llm"]
    assert len(HOUR) == 121


def test_every_controller_action_is_a_recommend_action_of_the_same_name() -> None:
    """RecommendAction lists the controller's actions, then the analytics' findings: an
    action added to the controller must be filterable with --action too."""
    from sits_observe.control.controller.actions import Action
    from sits_observe.reports.actions.recommend import RecommendAction

    shared = [(a.name, a.value) for a in RecommendAction][: len(Action)]
    assert shared == [(a.name, a.value) for a in Action]


def test_the_replica_rules_heatmap_takes_flags_of_its_own(store: Store, tmp_path: Path) -> None:
    """``--heatmap-*`` set the nested heatmap settings of the replica rule: when no
    throughput bin holds enough requests to count, there is no safe maximum to size from."""
    same = by_key(report(store, slo_ms=1000, heatmap__min_bin_requests=20))
    assert same[("serving/llm", "replicas")]["proposed_value"] == 2  # 20 is the default
    many = report(store, slo_ms=1000, heatmap__min_bin_requests=1_000_000)
    llm = by_key(many)[("serving/llm", "replicas")]
    assert llm["proposed"] is None and llm["reason"].startswith("not enough data: no safe")
    db = tmp_path / "h.duckdb"
    with Store.open(db) as s:
        fill(s)
    args = ["recommend", "--db", str(db), "--until", "newest", "-o", "json", "-n", "serving"]
    args += ["--action", "replicas", "--slo-ms", "1000"]
    outcome = CliRunner().invoke(app, [*args, "--heatmap-min-bin-requests", "1000000"])
    assert outcome.exit_code == 0, outcome.output
    assert [r["proposed"] for r in json.loads(outcome.stdout)["rows"]] == [None]
    outcome = CliRunner().invoke(app, [*args, "--heatmap-bin-s", "0.0000001"])
    assert outcome.exit_code == 2 and "not a whole number of microseconds" in outcome.output
    # The SLO is the rule's own (--slo-ms): the heatmap's is no flag here.
    outcome = CliRunner().invoke(app, [*args, "--heatmap-slo-ms", "5"])
    assert outcome.exit_code == 2 and "No such option: --heatmap-slo-ms" in outcome.output


def test_offline_rows_of_owned_pods_go_to_their_workload() -> None:
    """From the inventory's owner columns, as the controller does in the cluster
        (control/controller/planning/combine.py): p1 is a Deployment's pod (a ReplicaSet named
        chat-<template hash>), so its memory-class and priority-class rows name the Deployment chat
        (without owner columns
    they name the pod: test_the_plan_as_of_the_newest_sample)."""
    with Store.open(":memory:") as s:
        fill(s)
        s.execute(
            "UPDATE pod_versions SET owner_kind = 'ReplicaSet', owner_name = 'chat-5d9c7b7f9c' "
            "WHERE pod = 'p1'"
        )
        rows = by_key(report(s))
    memory = rows[("finance/chat", "memory-class")]
    assert (memory["kind"], memory["name"], memory["proposed"]) == ("Deployment", "chat", "L2")
    assert json.loads(memory["evidence"])["pods"] == 1
    assert not memory["reason_short"].startswith("1 of 1 pods")  # the pod's own reason
    assert ("finance/p1", "memory-class") not in rows
    assert rows[("finance/chat", "priority-class")]["kind"] == "Deployment"


def test_why_and_the_history_behind_each_row_show_by_default(store: Store) -> None:
    """The table shows each row's short reason and its confidence with the history behind it
    without ``-o wide``; at 100 columns the reason folds onto more lines instead of being cut."""
    r = report(store)
    headers = [c.header for c in r.main.columns if not c.wide]
    assert headers == ["namespace", "name", "action", "current", "proposed", "conf", "why"]
    rows = by_key(r)
    idle = rows[("research/notebook", "idle-gpu")]
    assert (idle["confidence"], idle["backing"]) == ("medium", "medium 1h")  # held 1h0m30s
    quota = rows[("finance", "quota-gpu")]
    assert quota["backing"] == f"{quota['confidence']} 2d"  # daily snapshots over two days
    assert rows[("finance/p1", "time-slice")]["backing"] == "rule"
    text = table_text(r, 100)
    assert "…" not in text.split("\n")[1]  # no header cut
    for word in rows[("research", "quota-gpu")]["reason_short"].split():
        assert word in text


def test_a_short_history_is_sized_with_a_low_confidence_that_says_how_short() -> None:
    """Five minutes of samples once a second: the floors (20 samples, 60 s) are met, so the
    workload gets a proposal, with ``low`` confidence and the 5 minutes behind it; krr's 100
    samples over an hour (the floors before) answered "not enough data" here."""
    start = T0 - timedelta(seconds=300)
    pod = {"ts": T0, "pod_uid": "u", "namespace": "lab", "pod": "job-0", "node": "n1",
           "phase": "Running", "gpu_request": 1, "workload": "job"}  # fmt: skip
    samples = [
        {"ts": start + timedelta(seconds=i), "node": "n1", "gpu_uuid": "GPU-9", "gpu_index": 0,
         "model_name": H100, "namespace": "lab", "pod": "job-0", "fb_used_bytes": 6 * GIB,
         "fb_free_bytes": 74 * GIB, "fb_total_bytes": 80 * GIB, "gpu_util_ratio": 0.9,
         "dram_active_ratio": 0.5, "source": "sim"}
        for i in range(301)
    ]  # fmt: skip
    with Store.open(":memory:") as s:
        s.append_batch(
            {"pods": pa.Table.from_pylist([pod]), "gpu_samples": pa.Table.from_pylist(samples)}
        )
        row = by_key(report(s))[("lab/job", "gpu-memory")]
        assert row["proposed_value"] is not None and row["confidence"] == "low"
        assert row["backing"] == "low 5m" and row["history_s"] == 300
        old = by_key(report(s, min_points=100, min_history_s=3600))[("lab/job", "gpu-memory")]
        assert old["proposed_value"] is None and old["reason"].startswith("not enough data")


def test_the_demo_prints_a_plain_recommend_command() -> None:
    from sits_observe.lab.demo.demo import recommend_command

    assert recommend_command("d.duckdb") == (
        "sits-observe recommend --db d.duckdb --until newest --slo-ms 40000"
    )
