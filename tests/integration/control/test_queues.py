"""Kueue and KAI queue quotas against the emulator: read, dry-run, act, the loop, recommend.

The emulator serves a custom resource once an object of it exists (a CRD installed) and
answers 404 before (none installed), which is how an API server without the CRD answers.
Measured use comes from a real DuckDB file: eight daily inventory snapshots.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from prometheus_client import CollectorRegistry

from sits_observe.collectors.kube.api import KubeJson
from sits_observe.control.controller.apply import Applier
from sits_observe.control.controller.planning.inputs import Signals
from sits_observe.control.controller.planning.plan import plan
from sits_observe.control.controller.planning.safety import TokenBucket
from sits_observe.control.controller.record import ControllerMetrics, StoreRecorder
from sits_observe.control.controller.settings import ControllerSettings
from sits_observe.control.controller.state import read_state
from sits_observe.control.signals.kube_queues import read_queues
from sits_observe.control.signals.store_queues import queue_signals
from sits_observe.lab.kube.emulator import KubeEmulator
from sits_observe.reports.actions import recommend
from sits_observe.reports.window import Window
from sits_observe.store import Store
from sits_observe.surfaces.cli.controller import build_loop
from tests.unit.control.queue_objects import cluster_queue, kai_pod, kai_queue, local_queue

pytestmark = pytest.mark.k8s

NOW = datetime.now(UTC).replace(microsecond=0)
KUEUE = "/apis/kueue.x-k8s.io/v1beta1"
KAI = "/apis/scheduling.run.ai/v2"


def _pod(
    ts: datetime, namespace: str, pod: str, gpus: int, phase: str = "Running"
) -> dict[str, Any]:
    return {
        "ts": ts.replace(tzinfo=None),
        "pod_uid": f"{namespace}-{pod}",
        "namespace": namespace,
        "pod": pod,
        "workload": pod,
        "node": "n1",
        "phase": phase,
        "gpu_request": gpus,
    }


def fill(store: Store) -> None:
    """ml (Kueue team-a): 4 GPUs a day for seven days, 6 on the eighth; lab (KAI research):
    10 GPUs on the last day, and a finished 8-GPU pod that holds nothing; 16 GPUs allocatable."""
    pods = []
    for back in range(8):
        ts = NOW - timedelta(days=7 - back, minutes=30)
        pods.append(_pod(ts, "ml", "train-a", 4))
        if back == 7:
            pods.append(_pod(ts, "ml", "train-b", 2))
            pods.append(_pod(ts, "lab", "sweep-0", 6))
            pods.append(_pod(ts, "lab", "sweep-1", 4))
            pods.append(_pod(ts, "lab", "done-0", 8, phase="Succeeded"))
            pods.append(_pod(ts, "other", "bystander", 8))
    nodes = [
        {"ts": (NOW - timedelta(minutes=30)).replace(tzinfo=None), "node": n, "gpu_allocatable": 8,
         "cpu_allocatable_milli": 64_000, "ready": True}
        for n in ("n1", "n2")
    ]  # fmt: skip
    store.append_batch({"pods": pa.Table.from_pylist(pods), "nodes": pa.Table.from_pylist(nodes)})


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Store]:
    store = Store.open(str(tmp_path / "sits.duckdb"))
    try:
        fill(store)
        yield store
    finally:
        store.close()


def install(kube: KubeJson) -> None:
    """team-a (cohort pool, 8 GPUs nominal) with LocalQueues in ml; split (two GPU flavors);
    KAI research (quota 8, unlimited) with two labelled pods in lab."""
    kube.request("POST", f"{KUEUE}/clusterqueues", body=cluster_queue("team-a"))
    kube.request(
        "POST", f"{KUEUE}/clusterqueues", body=cluster_queue("split", extra_gpu_flavor=True)
    )
    for name in ("default", "batch"):
        kube.request(
            "POST", f"{KUEUE}/namespaces/ml/localqueues", body=local_queue("ml", name, "team-a")
        )
    kube.request("POST", f"{KAI}/queues", body=kai_queue("root", parent=None))
    kube.request("POST", f"{KAI}/queues", body=kai_queue("research"))
    kube.request("POST", "/api/v1/namespaces/lab/pods", body=kai_pod("lab", "sweep-0", "research"))
    kube.request(
        "POST",
        "/api/v1/namespaces/lab/pods",
        body=kai_pod("lab", "sweep-1", "research", label="runai/queue"),
    )


def _objects(emu: KubeEmulator) -> dict[str, dict[str, Any]]:
    found = {
        o["metadata"]["name"]: o
        for o in emu.objects("clusterqueues", group="kueue.x-k8s.io", version="v1beta1")
    }
    found.update(
        {
            o["metadata"]["name"]: o
            for o in emu.objects("queues", group="scheduling.run.ai", version="v2")
        }
    )
    return found


def _pass(
    kube: KubeJson, store: Store, settings: ControllerSettings, recorder: StoreRecorder
) -> dict[tuple[str, str], str]:
    state = read_state(kube, settings)
    signals = Signals.of(NOW).with_queues(queue_signals(store, NOW, settings, state.queues.members))
    p = plan(signals, state, settings, at=NOW)
    applier = Applier(
        kube, settings, recorder, limiter=TokenBucket(1000, 1000), sleep=lambda s: None
    )
    return {
        (o.decision.ref.name, str(o.decision.action)): o.outcome
        for o in applier.apply(p)
        if str(o.decision.action).startswith("queue-")
    }


def test_absent_crds_are_no_queues_and_no_error(kube: KubeJson) -> None:
    queues = read_queues(kube, ControllerSettings())
    assert queues.facts.height == 0 and queues.members.height == 0
    assert queues.errors == ()


def test_a_failing_list_is_reported_and_the_other_scheduler_still_read(
    emu: KubeEmulator, kube: KubeJson
) -> None:
    install(kube)
    emu.inject_error(r"GET /apis/kueue\.x-k8s\.io/v1beta1/clusterqueues", 500)
    queues = read_queues(kube, ControllerSettings())
    assert queues.errors == ("clusterqueues",)
    assert sorted(queues.facts.get_column("name").to_list()) == ["research", "root"]


def test_read_maps_queues_to_namespaces_and_pods(kube: KubeJson) -> None:
    install(kube)
    queues = read_queues(kube, ControllerSettings())
    facts = {r["name"]: r for r in queues.facts.iter_rows(named=True)}
    # split holds its GPU quota in two flavors: not advised.
    assert set(facts) == {"team-a", "root", "research"}
    assert facts["team-a"]["cohort"] == "pool" and facts["team-a"]["flavor"] == "h100"
    assert facts["research"]["cohort"] == "root" and facts["research"]["over_quota_weight"] == 1
    assert facts["team-a"]["member_namespaces"] == 1 and facts["root"]["member_namespaces"] == 0
    members = sorted(queues.members.iter_rows())
    # Both labels name one queue in lab: the whole namespace counts.
    assert members == [("ClusterQueue", "team-a", "ml", None), ("Queue", "research", "lab", None)]
    values = {(r["name"], r["action"]): r["current"] for r in queues.values.iter_rows(named=True)}
    assert values[("team-a", "queue-gpu-quota")] == "8"
    assert values[("team-a", "queue-gpu-borrowing-limit")] is None
    assert values[("research", "queue-gpu-quota")] == "8"
    assert values[("research", "queue-gpu-limit")] is None  # -1: unlimited


def test_the_measured_peaks_per_queue(kube: KubeJson, db: Store) -> None:
    install(kube)
    queues = read_queues(kube, ControllerSettings())
    got = queue_signals(db, NOW, ControllerSettings(), queues.members)
    rows = {r["name"]: r for r in got.iter_rows(named=True)}
    assert rows["team-a"]["daily_peaks"] == [4.0] * 7 + [6.0]
    assert rows["research"]["daily_peaks"] == [10.0]  # the finished pod holds nothing
    assert rows["team-a"]["allocatable"] == 16.0


def test_dry_run_writes_nothing_and_act_patches_the_quota_fields(
    emu: KubeEmulator, kube: KubeJson, db: Store
) -> None:
    install(kube)
    recorder = StoreRecorder(db, ControllerMetrics(CollectorRegistry()), "r1")
    before = json.dumps(_objects(emu), sort_keys=True)
    dry = _pass(kube, db, ControllerSettings(), recorder)
    # team-a: p95 5.3 x 1.15 x 1.125 = 6.86 -> 7 (from 8); ceiling min(6 x 2, 16) = 12:
    # borrowing 5. research: 10 x 1.15 x 2 = 23, held at the 16 allocatable, +50% of 8 = 12;
    # its limit: min(10 x 2, 16) = 16.
    assert dry == {
        ("team-a", "queue-gpu-quota"): "recommended",
        ("team-a", "queue-gpu-borrowing-limit"): "recommended",
        ("research", "queue-gpu-quota"): "recommended",
        ("research", "queue-gpu-limit"): "recommended",
    }
    assert json.dumps(_objects(emu), sort_keys=True) == before
    acted = _pass(kube, db, ControllerSettings(mode="act"), recorder)
    assert set(acted.values()) == {"applied"}
    objects = _objects(emu)
    team_a = objects["team-a"]
    groups = team_a["spec"]["resourceGroups"]
    assert groups[0] == cluster_queue("team-a")["spec"]["resourceGroups"][0]
    assert groups[1]["flavors"][0]["resources"] == [
        {"name": "nvidia.com/gpu", "nominalQuota": "7", "borrowingLimit": "5"}
    ]
    annotation = json.loads(
        team_a["metadata"]["annotations"]["sits.io/recommendation.queue-gpu-quota"]
    )
    assert annotation["proposed"] == "7" and annotation["current"] == "8"
    research = objects["research"]["spec"]["resources"]
    assert research["gpu"] == {"quota": 12, "limit": 16, "overQuotaWeight": 1}
    assert research["cpu"] == {"quota": -1, "limit": -1, "overQuotaWeight": 1}
    assert objects["split"]["spec"] == cluster_queue("split", extra_gpu_flavor=True)["spec"]
    events = [e for e in emu.objects("events") if e["reason"] == "SitsApplied"]
    assert {(e["involvedObject"]["kind"], e["involvedObject"]["name"]) for e in events} == {
        ("ClusterQueue", "team-a"),
        ("Queue", "research"),
    }
    assert {e["involvedObject"]["apiVersion"] for e in events} == {
        "kueue.x-k8s.io/v1beta1",
        "scheduling.run.ai/v2",
    }
    recorded = db.query(
        "SELECT name, action, outcome FROM decisions WHERE action LIKE 'queue-%' AND mode = 'act'"
    ).to_pylist()
    assert len(recorded) == 4 and {r["outcome"] for r in recorded} == {"applied"}


def test_the_loop_reads_queues_and_counts_a_failed_list(
    emu: KubeEmulator, kube: KubeJson, db: Store
) -> None:
    install(kube)
    emu.inject_error(r"GET /apis/scheduling\.run\.ai/v2/queues", 503)
    registry = CollectorRegistry()
    settings = ControllerSettings(mode="act", replica_id="r1")
    report = build_loop(
        store=db, kube=kube, settings=settings, registry=registry, leader_election=False
    ).run_once()
    assert report.error is None
    errors = registry.get_sample_value("sits_controller_errors_total", {"where": "queues"})
    assert errors == 1
    quota = _objects(emu)["team-a"]["spec"]["resourceGroups"][1]["flavors"][0]["resources"][0]
    assert quota["nominalQuota"] == "7"
    assert _objects(emu)["research"]["spec"]["resources"]["gpu"]["quota"] == 8  # not read


def test_recommend_shows_queue_rows_with_current_proposed_and_confidence(
    kube: KubeJson, db: Store
) -> None:
    install(kube)
    queues = read_queues(kube, ControllerSettings())
    naive = NOW.replace(tzinfo=None)
    window = Window(naive - timedelta(days=14), naive + timedelta(seconds=1), "given")
    report = recommend.build(db, window, recommend.RecommendQuery(), queues=queues)
    rows = {
        (r["name"], r["action"]): r
        for r in report.main.rows.to_pylist()
        if str(r["action"]).startswith("queue-")
    }
    quota = rows[("team-a", "queue-gpu-quota")]
    assert (quota["current"], quota["proposed"], quota["confidence"]) == ("8", "7", "high")
    assert quota["kind"] == "ClusterQueue" and quota["namespace"] is None
    research = rows[("research", "queue-gpu-quota")]
    # One day of history: low confidence; held at the allocatable, with a note.
    assert (research["proposed"], research["confidence"]) == ("12", "low")
    assert research["reason_short"] == "held at the cluster's allocatable"
    assert rows[("research", "queue-gpu-limit")]["reason_short"] == "peak cap 16 GPUs"
    assert any("research queue-gpu-quota" in n for n in report.notes)
    assert len(rows) == 4


def test_recommend_reads_the_queues_from_the_cli_and_the_service(
    emu: KubeEmulator, kube: KubeJson, tmp_path: Path
) -> None:
    """``recommend --db F --kubeconfig K`` and ``GET /api/v1/reports/recommend`` of a service
    with Kubernetes access give the same queue rows as the report built with the queues;
    without access, none."""
    from fastapi.testclient import TestClient
    from typer.testing import CliRunner

    from sits_observe.surfaces.cli.main import app
    from sits_observe.surfaces.service import ServiceSettings, create_app

    install(kube)
    path = tmp_path / "cli.duckdb"
    with Store.open(path) as store:
        fill(store)
    until = (NOW + timedelta(seconds=1)).isoformat()
    args = ["recommend", "--db", str(path), "--since", "14d", "--until", until, "-o", "json"]

    def queue_rows(document: dict[str, Any]) -> dict[tuple[str, str], str]:
        return {
            (r["name"], r["action"]): r["proposed"]
            for r in document["rows"]
            if str(r["action"]).startswith("queue-")
        }

    kubeconfig = emu.write_kubeconfig(tmp_path / "kubeconfig")
    outcome = CliRunner().invoke(app, [*args, "--kubeconfig", str(kubeconfig)])
    assert outcome.exit_code == 0, outcome.output
    from_cli = queue_rows(json.loads(outcome.stdout))
    assert from_cli[("team-a", "queue-gpu-quota")] == "7" and len(from_cli) == 4
    outcome = CliRunner().invoke(app, args)
    assert queue_rows(json.loads(outcome.stdout)) == {}  # the store keeps no queues
    outcome = CliRunner().invoke(app, [*args, "--context", "x"])
    assert outcome.exit_code == 2 and "--context needs --kubeconfig" in outcome.output
    with Store.open(path, read_only=True) as store:
        settings = ServiceSettings(token="t", retention_interval_s=0)  # type: ignore[arg-type]
        api = emu.api_client()
        try:
            client = TestClient(create_app(settings, store, kube_api=api))
            answer = client.get(
                "/api/v1/reports/recommend",
                params={"since": "14d", "until": until},
                headers={"Authorization": "Bearer t"},
            )
        finally:
            api.close()
    assert answer.status_code == 200, answer.text
    assert queue_rows(answer.json()) == from_cli
