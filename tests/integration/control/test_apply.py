"""apply() against the emulator: what each mode writes, opt-out, flapping, rate limit,
404 / 409 / 429 / 5xx handling, Events and the decisions table."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

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
from tests.integration.control.conftest import FakeClock, seed
from tests.integration.control.signals import cluster_signals

#: The fragmentation and memory-class rules are off by default in annotate and act mode.
RULES_ON = RULES_OFF_BY_DEFAULT  # every rule on: these tests write them all

pytestmark = pytest.mark.k8s


def snapshot(emu: KubeEmulator) -> dict[str, Any]:
    return {
        plural: sorted(
            (json.dumps(o, sort_keys=True) for o in emu.objects(plural)),
        )
        for plural in ("nodes", "pods", "namespaces", "resourcequotas", "configmaps", "events")
    }


def one_pass(
    kube: KubeJson,
    settings: ControllerSettings,
    recorder: StoreRecorder,
    clock: FakeClock,
    signals: Signals | None = None,
    *,
    limiter: TokenBucket | None = None,
    history: History | None = None,
) -> list[Outcome]:
    state = read_state(kube, settings)
    p = plan(signals or cluster_signals(clock()), state, settings, history, at=clock())
    # Unless a test is about the rate limit, give it budget for every decision.
    limiter = limiter or TokenBucket(1000, 1000, clock=clock.monotonic)
    applier = Applier(kube, settings, recorder, limiter=limiter, sleep=clock.sleep, clock=clock)
    return applier.apply(p)


def by_action(outcomes: list[Outcome]) -> dict[tuple[str, str], Outcome]:
    return {(o.decision.ref.name, str(o.decision.action)): o for o in outcomes}


def metric(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


# -- modes -----------------------------------------------------------------------------------


def test_dry_run_writes_nothing_and_records_everything(
    emu: KubeEmulator, kube: KubeJson, recorder: StoreRecorder, store: Store, clock: FakeClock
) -> None:
    seed(kube)
    before = snapshot(emu)
    outcomes = one_pass(kube, ControllerSettings(), recorder, clock)
    assert snapshot(emu) == before
    assert outcomes and {o.outcome for o in outcomes} == {"recommended"}
    assert {o.attempts for o in outcomes} == {0}
    rows = store.query("SELECT dry_run, mode, outcome FROM decisions").to_pylist()
    assert len(rows) == len(outcomes)
    assert all(r == {"dry_run": True, "mode": "dry-run", "outcome": "recommended"} for r in rows)


def test_annotate_writes_annotations_and_events_only(
    emu: KubeEmulator, kube: KubeJson, recorder: StoreRecorder, clock: FakeClock
) -> None:
    seed(kube)
    outcomes = one_pass(
        kube,
        ControllerSettings(mode="annotate", rules_on=RULES_ON),
        recorder,
        clock,
    )
    assert {o.outcome for o in outcomes} == {"recommended"}
    n1 = next(n for n in emu.objects("nodes") if n["metadata"]["name"] == "n1")
    assert n1["metadata"]["labels"] == {"zone": "a"}  # no sits.io label
    rec = json.loads(n1["metadata"]["annotations"]["sits.io/recommendation.fragmentation"])
    assert rec["proposed"] == "high" and rec["mode"] == "annotate"
    assert rec["evidence"] == {"fragmentation_ratio": 0.8}
    [quota] = emu.objects("resourcequotas")
    assert quota["spec"]["hard"] == {"requests.nvidia.com/gpu": "4", "requests.cpu": "8"}
    assert "sits.io/recommendation.quota-gpu" in quota["metadata"]["annotations"]
    p1 = next(p for p in emu.objects("pods") if p["metadata"]["name"] == "p1")
    assert "sits.io/qos-memory-quota-bytes" not in p1["metadata"]["annotations"]
    events = emu.objects("events")
    assert len(events) == len(outcomes)
    assert {e["reason"] for e in events} == {"SitsRecommendation"}


def test_act_writes_labels_quotas_qos_and_is_idempotent(
    emu: KubeEmulator, kube: KubeJson, recorder: StoreRecorder, clock: FakeClock, store: Store
) -> None:
    seed(kube)
    settings = ControllerSettings(
        mode="act", rules_on=RULES_ON, time_slicing_configmap="gpu-operator/time-slicing"
    )
    outcomes = by_action(one_pass(kube, settings, recorder, clock))
    assert outcomes[("n1", "fragmentation")].outcome == "applied"
    assert outcomes[("n1", "topology-policy")].outcome == "recommended"  # annotation only
    assert outcomes[("p1", "priority-class")].outcome == "recommended"
    assert outcomes[("sits-quota", "quota-gpu")].outcome == "applied"
    nodes = {n["metadata"]["name"]: n for n in emu.objects("nodes")}
    assert nodes["n1"]["metadata"]["labels"] == {"zone": "a", "sits.io/fragmentation": "high"}
    assert nodes["n2"]["metadata"]["labels"]["sits.io/fragmentation"] == "low"
    pods = {p["metadata"]["name"]: p["metadata"] for p in emu.objects("pods")}
    assert pods["p1"]["labels"] == {"app": "chat", "sits.io/memory-class": "L2"}
    assert pods["p2"]["labels"]["sits.io/memory-class"] == "L3"
    # p1: lower priority than p2 on a contended GPU and missing its SLA: elastic quota.
    assert pods["p1"]["annotations"]["sits.io/qos-memory-quota-bytes"] == str(
        int(4 * 1024**3 * 0.8)
    )
    assert pods["p1"]["annotations"]["sits.io/qos-bandwidth-quota-bytes-per-s"] == "19200000000"
    assert "sits.io/qos-memory-quota-bytes" not in pods["p2"]["annotations"]
    # 14 days at 6 GPUs: 6 x 1.15 x (1 + 1/14) = 7.4 -> 8, within +50% of 4 -> 6.
    [quota] = emu.objects("resourcequotas")
    assert quota["spec"]["hard"] == {"requests.nvidia.com/gpu": "6", "requests.cpu": "8"}
    [cm] = emu.objects("configmaps")
    assert cm["data"]["any"].startswith("version: v1")  # the plug-in's own config untouched
    assert yaml.safe_load(cm["data"]["sits-time-slices.yaml"]) == {
        "team/chat": "25ms",
        "team/search": "10ms",
    }
    events = emu.objects("events")
    assert {e["reason"] for e in events} == {"SitsApplied", "SitsRecommendation"}
    assert all(
        e["involvedObject"]["name"] in ("n1", "n2", "p1", "p2", "sits-quota") for e in events
    )
    # The next pass (after the cooldown) only continues the quota's climb towards 8.
    history = load_history(store, clock() - __import__("datetime").timedelta(days=1))
    clock.advance(600)
    before = snapshot(emu)
    again = one_pass(kube, settings, recorder, clock, history=history)
    assert [
        (o.decision.ref.name, str(o.decision.action), o.decision.recommendation.proposed)
        for o in again
    ] == [("sits-quota", "quota-gpu", "8")]
    after = snapshot(emu)
    assert after["nodes"] == before["nodes"] and after["pods"] == before["pods"]


def test_opt_out_is_respected(
    emu: KubeEmulator, kube: KubeJson, recorder: StoreRecorder, clock: FakeClock, store: Store
) -> None:
    seed(kube, opt_out_node=True)
    outcomes = by_action(
        one_pass(
            kube,
            ControllerSettings(mode="act", rules_on=RULES_ON),
            recorder,
            clock,
        )
    )
    assert outcomes[("n2", "fragmentation")].outcome == "skipped:opt-out"
    n2 = next(n for n in emu.objects("nodes") if n["metadata"]["name"] == "n2")
    assert "labels" not in n2["metadata"] or not n2["metadata"]["labels"]
    assert set(n2["metadata"]["annotations"]) == {"sits.io/opt-out"}
    assert not [e for e in emu.objects("events") if e["involvedObject"]["name"] == "n2"]
    assert (
        store.scalar(
            "SELECT count(*) FROM decisions WHERE name = 'n2' AND outcome = 'skipped:opt-out'"
        )
        == 1
    )


# -- flapping --------------------------------------------------------------------------------


def test_noisy_signals_do_not_cause_oscillating_writes(
    emu: KubeEmulator, kube: KubeJson, recorder: StoreRecorder, clock: FakeClock, store: Store
) -> None:
    seed(kube)
    settings = ControllerSettings(mode="act", rules_on=RULES_ON, min_change_interval_s=0)
    noise = [0.74, 0.66, 0.72, 0.68, 0.71, 0.65, 0.73, 0.69, 0.70, 0.67]
    versions = []
    for i, frag in enumerate(noise):
        peaks = [6.0 * (1.03 if i % 2 else 0.97)] * 14  # +-3% quota noise
        signals = cluster_signals(clock(), frag_n1=frag, gpu_peaks=peaks)
        one_pass(
            kube,
            settings,
            recorder,
            clock,
            signals,
            history=load_history(store, clock() - __import__("datetime").timedelta(days=1)),
        )
        n1 = next(n for n in emu.objects("nodes") if n["metadata"]["name"] == "n1")
        versions.append(n1["metadata"]["resourceVersion"])
        clock.advance(30)
    assert len(set(versions)) == 1  # n1 written in the first pass only
    applied = (
        store.query(
            "SELECT proposed FROM decisions WHERE name = 'n1' AND action = 'fragmentation' "
            "AND outcome = 'applied'"
        )
        .column("proposed")
        .to_pylist()
    )
    assert applied == ["high"]
    quota_writes = store.scalar(
        "SELECT count(*) FROM decisions WHERE action = 'quota-gpu' AND outcome = 'applied'"
    )
    assert quota_writes <= 2  # 4 -> 6 -> 8, then the noise stays below the threshold


# -- rate limit ------------------------------------------------------------------------------


def test_rate_limit_defers_writes_to_later_passes(
    emu: KubeEmulator, kube: KubeJson, recorder: StoreRecorder, clock: FakeClock, store: Store
) -> None:
    seed(kube)
    # Every decision here is one PATCH and one Event: two API requests, two tokens.
    settings = ControllerSettings(mode="act", rules_on=RULES_ON, writes_per_minute=1, write_burst=4)
    bucket = TokenBucket(
        settings.writes_per_minute / 60, settings.write_burst, clock=clock.monotonic
    )
    first = one_pass(kube, settings, recorder, clock, limiter=bucket)
    counts = [o.outcome for o in first]
    assert counts.count("applied") + counts.count("recommended") == 2
    assert counts.count("skipped:rate-limited") == len(first) - 2
    # The budget goes to one decision of each action in turn, not to the first action's.
    written = [o.decision.action for o in first if o.outcome != "skipped:rate-limited"]
    first_action = first[0].decision.action
    assert sum(o.decision.action == first_action for o in first) >= 2  # plan order: both its
    assert len(set(written)) == 2
    assert len(emu.objects("events")) == 2
    clock.advance(120)  # two more tokens: one more decision
    second = one_pass(kube, settings, recorder, clock, limiter=bucket)
    assert sum(o.outcome != "skipped:rate-limited" for o in second) == 1
    # A backlog skip is stored once, not on every pass.
    again = store.scalar(
        "SELECT max(c) FROM (SELECT count(*) AS c FROM decisions "
        "WHERE outcome = 'skipped:rate-limited' GROUP BY kind, namespace, name, action)"
    )
    assert again == 1


class Sleeper(FakeClock):
    """A clock whose ``sleep`` lets the time pass (as ``time.sleep`` does)."""

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.advance(seconds)


class Counting(KubeJson):
    """Notes the (monotonic) time of every request sent."""

    def __init__(self, base: KubeJson, clock: FakeClock) -> None:
        super().__init__(base.api, timeout_s=base.timeout_s)
        self.clock = clock
        self.sent: list[tuple[float, str, str]] = []

    def request(self, method: str, path: str, **kw: Any) -> dict[str, Any]:
        self.sent.append((self.clock.monotonic(), method, path))
        return super().request(method, path, **kw)


def test_the_rate_limit_counts_every_api_request_retries_included(
    emu: KubeEmulator, kube: KubeJson, recorder: StoreRecorder
) -> None:
    """With 500s and 429s answered, patches and Events are retried: the requests sent must
    still never exceed the bucket (burst + rate x elapsed) at any moment of the pass."""
    seed(kube)
    clock = Sleeper()
    settings = ControllerSettings(
        mode="act",
        rules_on=RULES_ON,
        writes_per_minute=12,
        write_burst=5,
        time_slicing_configmap="gpu-operator/time-slicing",
    )
    emu.inject_error(r"PATCH /api/v1/nodes/n1", 500, reason="Injected", times=3)
    emu.inject_error(r"POST /api/v1/namespaces/default/events", 429, reason="Injected", times=2)
    emu.inject_error(r"PUT /api/v1/namespaces/gpu-operator/configmaps", 409, times=1)
    bucket = TokenBucket(
        settings.writes_per_minute / 60, settings.write_burst, clock=clock.monotonic
    )
    counting = Counting(kube, clock)
    applier = Applier(counting, settings, recorder, limiter=bucket, sleep=clock.sleep, clock=clock)
    start = clock.monotonic()
    outcomes: list[Outcome] = []
    for _ in range(10):  # the bucket persists across passes, as in the loop
        state = read_state(kube, settings)
        outcomes += applier.apply(plan(cluster_signals(clock()), state, settings, at=clock()))
        clock.advance(60)
    rate_per_s = settings.writes_per_minute / 60
    for count, (at, _, _) in enumerate(counting.sent, start=1):
        assert count <= settings.write_burst + rate_per_s * (at - start) + 1e-6, counting.sent
    assert applier.requests_sent == len(counting.sent)
    # Not vacuous: retries happened, decisions were written, and others were deferred.
    methods = [(method, path) for _, method, path in counting.sent]
    assert methods.count(("PATCH", "/api/v1/nodes/n1")) >= 2
    assert methods.count(("PUT", "/api/v1/namespaces/gpu-operator/configmaps/time-slicing")) >= 2
    by_outcome = [o.outcome for o in outcomes]
    assert by_outcome.count("applied") >= 3 and "skipped:rate-limited" in by_outcome
    written = [o for o in outcomes if o.outcome in ("applied", "recommended")]
    assert len(counting.sent) >= 2 * len(written)  # at least a write and an Event each


# -- errors ----------------------------------------------------------------------------------


def test_a_deleted_object_is_gone_and_not_retried(
    emu: KubeEmulator, kube: KubeJson, recorder: StoreRecorder, clock: FakeClock
) -> None:
    seed(kube)
    settings = ControllerSettings(mode="act", rules_on=RULES_ON)
    state = read_state(kube, settings)
    kube.request("DELETE", "/api/v1/namespaces/team/pods/p1")
    p = plan(cluster_signals(clock()), state, settings, at=clock())
    applier = Applier(
        kube, settings, recorder, limiter=TokenBucket(1000, 1000), sleep=clock.sleep, clock=clock
    )
    outcomes = by_action(applier.apply(p))
    gone = outcomes[("p1", "memory-class")]
    assert (gone.outcome, gone.attempts) == ("skipped:gone", 1)
    assert clock.slept == []
    assert outcomes[("p2", "memory-class")].outcome == "applied"


@pytest.mark.parametrize("status", [409, 429, 500, 503])
def test_transient_errors_are_retried_with_backoff(
    status: int, emu: KubeEmulator, kube: KubeJson, recorder: StoreRecorder, clock: FakeClock
) -> None:
    seed(kube)
    emu.inject_error(r"PATCH /api/v1/nodes/n1", status, reason="Injected", times=2)
    outcome = by_action(
        one_pass(
            kube,
            ControllerSettings(mode="act", rules_on=RULES_ON),
            recorder,
            clock,
        )
    )[("n1", "fragmentation")]
    assert (outcome.outcome, outcome.attempts) == ("applied", 3)
    assert clock.slept[:2] == [0.5, 1.0]
    n1 = next(n for n in emu.objects("nodes") if n["metadata"]["name"] == "n1")
    assert n1["metadata"]["labels"]["sits.io/fragmentation"] == "high"


def test_persistent_errors_fail_one_object_and_spare_the_others(
    emu: KubeEmulator,
    kube: KubeJson,
    recorder: StoreRecorder,
    clock: FakeClock,
    registry: CollectorRegistry,
) -> None:
    seed(kube)
    emu.inject_error(r"PATCH /api/v1/nodes/n1", 500, reason="Injected")
    settings = ControllerSettings(mode="act", rules_on=RULES_ON, max_attempts=4)
    outcomes = by_action(one_pass(kube, settings, recorder, clock))
    failed = outcomes[("n1", "fragmentation")]
    assert (failed.outcome, failed.attempts) == ("failed:http-500", 4)
    assert outcomes[("n2", "fragmentation")].outcome == "applied"
    assert metric(registry, "sits_controller_errors_total", where="apply") >= 1
    assert (
        metric(
            registry,
            "sits_controller_decisions_total",
            action="fragmentation",
            outcome="failed:http-500",
        )
        == 1
    )


def test_a_failed_event_is_counted_but_keeps_the_change(
    emu: KubeEmulator,
    kube: KubeJson,
    recorder: StoreRecorder,
    clock: FakeClock,
    registry: CollectorRegistry,
) -> None:
    seed(kube)
    emu.inject_error(r"POST /api/v1/namespaces/default/events", 500, reason="Injected")
    outcomes = by_action(
        one_pass(
            kube,
            ControllerSettings(mode="act", rules_on=RULES_ON),
            recorder,
            clock,
        )
    )
    assert outcomes[("n1", "fragmentation")].outcome == "applied"
    assert metric(registry, "sits_controller_errors_total", where="event") >= 1


def test_configmap_conflict_rereads_and_retries(
    emu: KubeEmulator, kube: KubeJson, recorder: StoreRecorder, clock: FakeClock
) -> None:
    seed(kube)
    emu.inject_error(
        r"PUT /api/v1/namespaces/gpu-operator/configmaps", 409, reason="Conflict", times=1
    )
    settings = ControllerSettings(
        mode="act", rules_on=RULES_ON, time_slicing_configmap="gpu-operator/time-slicing"
    )
    outcomes = by_action(one_pass(kube, settings, recorder, clock))
    first = outcomes[("p1", "time-slice")]
    assert first.outcome == "applied" and first.attempts >= 3  # GET+PUT retried, then the pod
    [cm] = emu.objects("configmaps")
    assert yaml.safe_load(cm["data"]["sits-time-slices.yaml"])["team/chat"] == "25ms"


def test_the_decisions_table_holds_the_outcomes(
    kube: KubeJson, recorder: StoreRecorder, clock: FakeClock, store: Store
) -> None:
    seed(kube)
    outcomes = one_pass(
        kube,
        ControllerSettings(mode="act", rules_on=RULES_ON),
        recorder,
        clock,
    )
    rows = store.query(
        "SELECT replica, kind, namespace, name, action, current, proposed, reason, evidence, "
        "outcome, attempts, dry_run FROM decisions WHERE action = 'quota-gpu'"
    ).to_pylist()
    [row] = rows
    assert row["replica"] == "replica-a" and row["dry_run"] is False
    assert (row["kind"], row["namespace"], row["name"]) == ("ResourceQuota", "team", "sits-quota")
    assert (row["current"], row["proposed"], row["outcome"], row["attempts"]) == (
        "4",
        "6",
        "applied",
        1,
    )
    assert json.loads(row["evidence"])["history_days"] == 14
    assert "limited to 6" in row["reason"]
    assert store.count("decisions") == len(outcomes)
