"""The control loop on the emulator: two replicas, one acts; prompt shutdown; isolated errors."""

from __future__ import annotations

import threading
import time
from datetime import datetime

import pytest
from polars.exceptions import PanicException
from prometheus_client import CollectorRegistry

from sits_observe.collectors.kube.api import KubeJson
from sits_observe.control.controller.apply import Applier
from sits_observe.control.controller.leader import LeaderElector
from sits_observe.control.controller.loop import ControllerLoop
from sits_observe.control.controller.planning.inputs import Signals
from sits_observe.control.controller.planning.safety import TokenBucket
from sits_observe.control.controller.record import ControllerMetrics, StoreRecorder
from sits_observe.control.controller.settings import ControllerSettings
from sits_observe.control.controller.state import read_state
from sits_observe.lab.kube.emulator import KubeEmulator
from sits_observe.store import Store
from tests.integration.control.conftest import FakeClock, seed
from tests.integration.control.signals import cluster_signals

pytestmark = pytest.mark.k8s


class Replica:
    """One controller replica with its own store, metrics and elector, sharing the clock."""

    def __init__(self, kube: KubeJson, clock: FakeClock, name: str, **kw: object) -> None:
        self.settings = ControllerSettings(
            mode="act",
            replica_id=name,
            lease_duration_s=15,
            renew_deadline_s=10,
            min_change_interval_s=0,
            rules_on=("fragmentation",),  # off by default in act mode; these tests write it
            **kw,
        )
        self.store = Store.open(":memory:")
        self.registry = CollectorRegistry()
        self.metrics = ControllerMetrics(self.registry)
        self.recorder = StoreRecorder(self.store, self.metrics, name)
        self.signals: Signals | None = None
        self.elector = LeaderElector(kube, self.settings, clock=clock)
        self.loop = ControllerLoop(
            settings=self.settings,
            read_signals=lambda at: self.signals or cluster_signals(at),
            read_state=lambda: read_state(kube, self.settings),
            applier=Applier(
                kube,
                self.settings,
                self.recorder,
                limiter=TokenBucket(1000, 1000),
                sleep=clock.sleep,
                clock=clock,
            ),
            recorder=self.recorder,
            metrics=self.metrics,
            store=self.store,
            elector=self.elector,
            clock=clock,
        )

    def decisions(self) -> int:
        return self.store.count("decisions")

    def gauge(self, name: str, **labels: str) -> float:
        return self.registry.get_sample_value(name, labels) or 0.0


def test_two_replicas_only_the_leader_acts_and_the_other_takes_over(
    emu: KubeEmulator, kube: KubeJson, clock: FakeClock
) -> None:
    seed(kube)
    a, b = Replica(kube, clock, "a"), Replica(kube, clock, "b")
    report_a = a.loop.run_once()
    report_b = b.loop.run_once()
    assert report_a.leader and report_a.decisions > 0
    assert not report_b.leader and report_b.decisions == 0
    assert a.decisions() > 0 and b.decisions() == 0
    assert (a.gauge("sits_controller_leader"), b.gauge("sits_controller_leader")) == (1, 0)
    events = emu.objects("events")
    assert events and {e["reportingInstance"] for e in events} == {"a"}
    # a dies (stops passing). b waits out the 15 s lease from when it saw the last renewal.
    for _ in range(2):
        clock.advance(6)
        assert not b.loop.run_once().leader
    clock.advance(4)
    b.signals = cluster_signals(clock(), frag_n1=0.1)
    report = b.loop.run_once()
    assert report.leader and report.outcomes.get("applied", 0) >= 1
    n1 = next(n for n in emu.objects("nodes") if n["metadata"]["name"] == "n1")
    assert n1["metadata"]["labels"]["sits.io/fragmentation"] == "low"
    assert {e["reportingInstance"] for e in emu.objects("events")} == {"a", "b"}


@pytest.mark.parametrize(
    ("failure", "message"),
    [
        (RuntimeError("store hiccup"), "RuntimeError: store hiccup"),
        # polars reports its own bugs as a BaseException; the demo's controller thread once
        # died of one (see control.model.ENGINE).
        (PanicException("assertion failed"), "PanicException: assertion failed"),
    ],
)
def test_a_failing_pass_is_counted_and_the_next_pass_works(
    kube: KubeJson, clock: FakeClock, failure: BaseException, message: str
) -> None:
    seed(kube)
    r = Replica(kube, clock, "a")
    calls = []

    def flaky(at: datetime) -> Signals:
        calls.append(at)
        if len(calls) == 1:
            raise failure
        return cluster_signals(at)

    r.loop.read_signals = flaky
    first = r.loop.run_once()
    assert first.error == message
    assert r.gauge("sits_controller_errors_total", where="pass") == 1
    second = r.loop.run_once()
    assert second.error is None and second.decisions > 0
    assert r.gauge("sits_controller_passes_total") == 2
    assert (
        r.gauge("sits_controller_decisions_total", action="fragmentation", outcome="applied") == 2
    )


def test_stop_is_prompt_and_releases_the_lease(emu: KubeEmulator, kube: KubeJson) -> None:
    seed(kube)
    clock = FakeClock()
    r = Replica(kube, clock, "a", interval_s=3600)
    stop = threading.Event()
    thread = threading.Thread(target=r.loop.run, args=(stop,))
    thread.start()
    deadline = time.monotonic() + 10
    while r.decisions() == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    started = time.monotonic()
    stop.set()
    thread.join(5)
    assert not thread.is_alive()
    assert time.monotonic() - started < 2  # not the 3600 s interval
    [lease] = emu.objects("leases", group="coordination.k8s.io")
    assert lease["spec"]["holderIdentity"] == ""
    assert r.gauge("sits_controller_leader") == 0


def test_the_lease_is_renewed_between_passes(emu: KubeEmulator, kube: KubeJson) -> None:
    seed(kube)
    r = Replica(kube, FakeClock(), "a", interval_s=3600, retry_period_s=0.2)
    stop = threading.Event()
    thread = threading.Thread(target=r.loop.run, args=(stop,))
    thread.start()

    def version() -> int:
        leases = emu.objects("leases", group="coordination.k8s.io")
        return int(leases[0]["metadata"]["resourceVersion"]) if leases else 0

    deadline = time.monotonic() + 10
    while r.decisions() == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    first, passes = version(), r.gauge("sits_controller_passes_total")
    time.sleep(1.0)
    renewed = version()
    stop.set()
    thread.join(5)
    assert renewed > first  # renewed several times ...
    assert r.gauge("sits_controller_passes_total") == passes == 1  # ... within one pass
