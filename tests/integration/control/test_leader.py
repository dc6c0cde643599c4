"""Leader election through a coordination.k8s.io/v1 Lease on the emulator."""

from __future__ import annotations

from typing import Any

import pytest

from sits_observe.collectors.kube.api import JsonObject, KubeJson
from sits_observe.control.controller.leader import LeaderElector
from sits_observe.control.controller.settings import ControllerSettings
from sits_observe.lab.kube.emulator import KubeEmulator
from tests.integration.control.conftest import FakeClock

pytestmark = pytest.mark.k8s


def elector(kube: KubeJson, clock: FakeClock, who: str, **kw: Any) -> LeaderElector:
    settings = ControllerSettings(replica_id=who, lease_duration_s=15, renew_deadline_s=10, **kw)
    return LeaderElector(kube, settings, clock=clock)


def lease(emu: KubeEmulator) -> dict[str, Any]:
    [obj] = emu.objects("leases", group="coordination.k8s.io")
    spec: dict[str, Any] = obj["spec"]
    return spec


def test_first_replica_creates_and_holds_the_lease(
    emu: KubeEmulator, kube: KubeJson, clock: FakeClock
) -> None:
    a = elector(kube, clock, "a")
    assert a.tick() is True
    spec = lease(emu)
    assert spec["holderIdentity"] == "a"
    assert spec["leaseDurationSeconds"] == 15
    assert spec["renewTime"] == "2026-11-01T12:00:00.000000Z"
    assert spec["leaseTransitions"] == 0


def test_only_one_replica_leads_and_the_other_takes_over_after_expiry(
    emu: KubeEmulator, kube: KubeJson, clock: FakeClock
) -> None:
    a, b = elector(kube, clock, "a"), elector(kube, clock, "b")
    assert a.tick() and not b.tick()
    for _ in range(5):  # a keeps renewing: b never gets in
        clock.advance(5)
        assert a.tick() and not b.tick()
    # a stops renewing (crashed). b must wait a full lease duration from the last change.
    clock.advance(10)
    assert not b.tick()
    assert not a.is_leader  # a's own renew deadline (10 s) passed: it stopped acting
    clock.advance(6)
    assert b.tick()
    spec = lease(emu)
    assert spec["holderIdentity"] == "b" and spec["leaseTransitions"] == 1
    # a comes back: it sees b's live lease and does not act.
    assert not a.tick()


def test_release_hands_over_at_once(emu: KubeEmulator, kube: KubeJson, clock: FakeClock) -> None:
    a, b = elector(kube, clock, "a"), elector(kube, clock, "b")
    assert a.tick() and not b.tick()
    a.release()
    assert lease(emu)["holderIdentity"] == ""
    assert not a.is_leader
    assert b.tick()


class Interleaving(KubeJson):
    """Runs ``before_put`` right before this client's first PUT: a peer that writes between
    our read and our write."""

    def __init__(self, base: KubeJson, before_put: Any) -> None:
        super().__init__(base.api, timeout_s=base.timeout_s)
        self.before_put = before_put

    def request(self, method: str, path: str, **kw: Any) -> JsonObject:
        if method == "PUT" and self.before_put is not None:
            hook, self.before_put = self.before_put, None
            hook()
        return super().request(method, path, **kw)


def test_a_race_for_an_expired_lease_has_exactly_one_winner(
    emu: KubeEmulator, kube: KubeJson, clock: FakeClock
) -> None:
    dead = elector(kube, clock, "dead")
    assert dead.tick()
    a = elector(kube, clock, "a")
    b = elector(Interleaving(kube, a.tick), clock, "b")
    hook = b.kube.before_put  # type: ignore[attr-defined]
    b.kube.before_put = None  # type: ignore[attr-defined]
    a.tick()
    b.tick()  # both observe dead's record (no writes: it is live)
    b.kube.before_put = hook  # type: ignore[attr-defined]
    clock.advance(16)
    # b reads the expired lease, then a takes it before b writes: b's replace is stale (409).
    assert b.tick() is False
    assert a.is_leader
    assert lease(emu)["holderIdentity"] == "a"


def test_a_leader_that_cannot_renew_stops_acting_before_the_lease_expires(
    emu: KubeEmulator, kube: KubeJson, clock: FakeClock
) -> None:
    a = elector(kube, clock, "a")
    assert a.tick()
    emu.inject_error(r"/apis/coordination.k8s.io/v1/namespaces/kube-system/leases", 503)
    clock.advance(5)
    assert a.tick()  # within the renew deadline: still leader
    clock.advance(6)
    assert not a.tick()  # 11 s since the last renewal > 10 s deadline
    emu.clear_errors()
    clock.advance(1)
    assert a.tick()  # it still holds the lease record and renews it


def test_leader_changes_are_reported(kube: KubeJson, clock: FakeClock) -> None:
    seen: list[bool] = []
    settings = ControllerSettings(replica_id="a")
    a = LeaderElector(kube, settings, clock=clock, on_change=seen.append)
    a.tick()
    a.tick()
    a.release()
    assert seen == [True, False]
