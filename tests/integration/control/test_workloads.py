"""Recommendations on the owner workload, and namespace selection, against the emulator.

The pods of ``conftest.seed_workloads`` carry the ownerReferences their controllers set; an
act pass must annotate the Deployment (not its pods, which still get their per-pod label),
the StatefulSet, DaemonSet and CronJob (not its Job) and the bare Job, while a bare pod keeps
its own annotation. A namespace labelled ``sits.io/enabled=false`` gets nothing; with
``namespace_selection=opt-in`` an unlabelled namespace gets nothing and a labelled one does.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from sits_observe.collectors.kube.api import KubeJson
from sits_observe.control.controller.apply import Applier
from sits_observe.control.controller.planning.inputs import History, Signals
from sits_observe.control.controller.planning.model import Outcome
from sits_observe.control.controller.planning.plan import plan
from sits_observe.control.controller.planning.safety import TokenBucket
from sits_observe.control.controller.record import StoreRecorder, load_history
from sits_observe.control.controller.settings import RULES_OFF_BY_DEFAULT, ControllerSettings
from sits_observe.control.controller.state import read_state
from sits_observe.lab.kube.emulator import KubeEmulator
from sits_observe.store import Store
from tests.integration.control.conftest import WORKLOAD_PODS, FakeClock, seed_workloads
from tests.integration.control.signals import workload_signals

#: The fragmentation and memory-class rules are off by default in annotate and act mode.
RULES_ON = RULES_OFF_BY_DEFAULT  # every rule on: these tests write them all

pytestmark = pytest.mark.k8s

RECOMMENDATION = "sits.io/recommendation.memory-class"
#: (plural, API group) of each workload kind in the emulator.
PLURALS = {
    "Deployment": ("deployments", "apps"),
    "StatefulSet": ("statefulsets", "apps"),
    "DaemonSet": ("daemonsets", "apps"),
    "Job": ("jobs", "batch"),
    "CronJob": ("cronjobs", "batch"),
}


def one_pass(
    kube: KubeJson,
    settings: ControllerSettings,
    recorder: StoreRecorder,
    clock: FakeClock,
    signals: Signals,
    history: History | None = None,
) -> list[Outcome]:
    decisions = plan(signals, read_state(kube, settings), settings, history, at=clock())
    limiter = TokenBucket(1000, 1000, clock=clock.monotonic)
    return Applier(kube, settings, recorder, limiter=limiter, sleep=clock.sleep, clock=clock).apply(
        decisions
    )


def objects(emu: KubeEmulator, kind: str, namespace: str) -> dict[str, dict[str, Any]]:
    plural, group = ("pods", "") if kind == "Pod" else PLURALS[kind]
    return {
        o["metadata"]["name"]: o["metadata"]
        for o in emu.objects(plural, group=group)
        if o["metadata"].get("namespace") == namespace
    }


def recommendations(meta: dict[str, Any]) -> dict[str, Any]:
    found = meta.get("annotations") or {}
    return {k: json.loads(v) for k, v in found.items() if k.startswith("sits.io/recommendation.")}


def test_an_act_pass_annotates_the_owner_workloads_not_their_pods(
    emu: KubeEmulator, kube: KubeJson, recorder: StoreRecorder, clock: FakeClock, store: Store
) -> None:
    seed_workloads(kube, "apps")
    # Two of web's three pods are L2 (3 GiB), one L3 (12 GiB): the workload gets L2.
    signals = workload_signals(clock(), ["apps"], {"web-5d8f7-c": 12.0})
    settings = ControllerSettings(mode="act", rules_on=RULES_ON)
    outcomes = one_pass(kube, settings, recorder, clock, signals)

    [web] = [o for o in outcomes if o.decision.ref.name == "web"]
    assert (web.decision.ref.kind, web.outcome) == ("Deployment", "recommended")
    deployment = objects(emu, "Deployment", "apps")["web"]
    rec = recommendations(deployment)[RECOMMENDATION]
    assert rec["proposed"] == "L2" and rec["mode"] == "act"
    assert (rec["evidence"]["pods"], rec["evidence"]["pods_agreeing"]) == (3, 2)
    assert rec["reason"].startswith("2 of 3 pods: peak GPU memory 3.0 GiB")
    assert "labels" not in deployment  # the workload gets the recommendation only
    # Its pods: no recommendation annotation, but each its own label (read per pod).
    pods = objects(emu, "Pod", "apps")
    for name in ("web-5d8f7-a", "web-5d8f7-b", "web-5d8f7-c"):
        assert recommendations(pods[name]) == {}, name
    assert pods["web-5d8f7-a"]["labels"]["sits.io/memory-class"] == "L2"
    assert pods["web-5d8f7-c"]["labels"]["sits.io/memory-class"] == "L3"
    # Every other workload kind is annotated once; the CronJob's Job is not, the bare pod is.
    for pod, owner in WORKLOAD_PODS.items():
        if owner is None:
            assert recommendations(pods[pod])[RECOMMENDATION]["proposed"] == "L2"
            continue
        kind, name = owner
        assert recommendations(objects(emu, kind, "apps")[name])[RECOMMENDATION]["proposed"] == (
            "L2"
        ), owner
        assert recommendations(pods[pod]) == {}, pod
    assert recommendations(objects(emu, "Job", "apps")["nightly-29000000"]) == {}
    # The Event is about the Deployment, with its apiVersion.
    [event] = [
        e
        for e in emu.objects("events")
        if e["involvedObject"]["name"] == "web" and e["reason"] == "SitsRecommendation"
    ]
    assert event["involvedObject"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "web",
        "namespace": "apps",
    }
    # Recorded as today: one decision per workload, one per pod label.
    rows = store.query(
        "SELECT kind, name FROM decisions WHERE action = 'memory-class' ORDER BY kind, name"
    ).to_pylist()
    assert {(r["kind"], r["name"]) for r in rows if r["kind"] != "Pod"} == {
        ("CronJob", "nightly"),
        ("DaemonSet", "agent"),
        ("Deployment", "web"),
        ("Job", "train"),
        ("StatefulSet", "db"),
    }
    assert {r["name"] for r in rows if r["kind"] == "Pod"} == set(WORKLOAD_PODS)

    # The next pass, past the cooldown, writes nothing: the workloads already hold it.
    versions = deployment["resourceVersion"]
    clock.advance(600)
    history = load_history(store, clock() - timedelta(days=1))
    again = one_pass(kube, settings, recorder, clock, signals, history)
    assert again == []
    assert objects(emu, "Deployment", "apps")["web"]["resourceVersion"] == versions


def test_annotate_mode_writes_the_workload_and_leaves_the_pods_alone(
    emu: KubeEmulator, kube: KubeJson, recorder: StoreRecorder, clock: FakeClock
) -> None:
    seed_workloads(kube, "apps")
    before = objects(emu, "Pod", "apps")
    outcomes = one_pass(
        kube,
        ControllerSettings(mode="annotate", rules_on=RULES_ON),
        recorder,
        clock,
        workload_signals(clock(), ["apps"]),
    )
    assert {o.decision.ref.kind for o in outcomes} == {
        "Deployment",
        "StatefulSet",
        "DaemonSet",
        "CronJob",
        "Job",
        "Pod",
    }
    assert [o.decision.ref.name for o in outcomes if o.decision.ref.kind == "Pod"] == ["solo"]
    after = objects(emu, "Pod", "apps")
    assert {k: v for k, v in after.items() if k != "solo"} == {
        k: v for k, v in before.items() if k != "solo"
    }


def test_a_namespace_labelled_false_gets_nothing(
    emu: KubeEmulator, kube: KubeJson, recorder: StoreRecorder, clock: FakeClock, store: Store
) -> None:
    seed_workloads(kube, "apps")
    seed_workloads(kube, "quiet", labels={"sits.io/enabled": "false"})
    signals = workload_signals(clock(), ["apps", "quiet"])
    outcomes = one_pass(
        kube,
        ControllerSettings(mode="act", rules_on=RULES_ON),
        recorder,
        clock,
        signals,
    )
    quiet = [o for o in outcomes if o.decision.ref.namespace == "quiet"]
    assert quiet and {o.outcome for o in quiet} == {"skipped:opt-out"}
    for kind in ("Pod", *PLURALS):
        for name, meta in objects(emu, kind, "quiet").items():
            assert recommendations(meta) == {}, (kind, name)
            assert "sits.io/memory-class" not in (meta.get("labels") or {}), (kind, name)
    assert not [e for e in emu.objects("events") if e["involvedObject"]["namespace"] == "quiet"]
    assert recommendations(objects(emu, "Deployment", "apps")["web"])  # the default: included
    skipped = store.scalar(
        "SELECT count(*) FROM decisions WHERE namespace = 'quiet' AND outcome = 'skipped:opt-out'"
    )
    assert skipped == len(quiet)


def test_opt_in_selection_writes_only_in_namespaces_labelled_true(
    emu: KubeEmulator, kube: KubeJson, recorder: StoreRecorder, clock: FakeClock
) -> None:
    seed_workloads(kube, "lab")  # unlabelled
    seed_workloads(kube, "prod", labels={"sits.io/enabled": "true"})
    settings = ControllerSettings(mode="act", rules_on=RULES_ON, namespace_selection="opt-in")
    outcomes = one_pass(kube, settings, recorder, clock, workload_signals(clock(), ["lab", "prod"]))
    by_namespace: dict[str, set[str]] = {}
    for o in outcomes:
        by_namespace.setdefault(str(o.decision.ref.namespace), set()).add(o.outcome)
    assert by_namespace == {"lab": {"skipped:not-opted-in"}, "prod": {"recommended", "applied"}}
    for kind in ("Pod", *PLURALS):
        for name, meta in objects(emu, kind, "lab").items():
            assert recommendations(meta) == {}, (kind, name)
    assert recommendations(objects(emu, "Deployment", "prod")["web"])[RECOMMENDATION]
    assert objects(emu, "Pod", "prod")["web-5d8f7-a"]["labels"]["sits.io/memory-class"] == "L2"
