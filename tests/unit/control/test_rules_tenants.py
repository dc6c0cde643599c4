"""Tenant throttle rule: hand-computed steps, where it goes, and the plan's shared safety."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import polars as pl

from sits_observe.control.controller.actions import Action
from sits_observe.control.controller.apply import writes_for
from sits_observe.control.controller.planning.inputs import CurrentState, History, Signals
from sits_observe.control.controller.planning.plan import plan
from sits_observe.control.controller.quota_settings import QUOTA_GPU
from sits_observe.control.controller.settings import ControllerSettings
from sits_observe.reports.actions.recommend import RecommendAction

AT = datetime(2026, 11, 1, 12, 0, 0)
THROTTLE = str(Action.TENANT_THROTTLE)


def finding(namespace: str = "batch", victim: str = "finance", **over: Any) -> dict[str, Any]:
    row = {
        "namespace": namespace,
        "victim": victim,
        "sla_p99_s": 0.015,
        "victim_p99_high_s": 0.039,
        "victim_p99_low_s": 0.0069,
        "load": "gpu_util",
        "load_high": 0.9,
        "load_low": 0.1,
        "correlation": 0.95,
        "bins_high": 5,
        "bins_low": 5,
        "breach_high_ratio": 1.0,
        "noncritical_gpus": 8.0,
    }
    return {**row, **over}


def state(hard: str | None, *, opt_out: bool = False) -> CurrentState:
    """Namespaces batch and finance; batch's throttle quota with ``hard`` GPUs (None: none)."""
    objects = [
        {"kind": "Namespace", "namespace": None, "name": "batch", "opt_out": False},
        {"kind": "Namespace", "namespace": None, "name": "finance", "opt_out": False},
    ]
    values = []
    if hard is not None:
        objects.append(
            {"kind": "ResourceQuota", "namespace": "batch", "name": "sits-noncritical",
             "opt_out": opt_out}
        )  # fmt: skip
        values.append(
            {"kind": "ResourceQuota", "namespace": "batch", "name": "sits-noncritical",
             "action": THROTTLE, "current": hard}
        )  # fmt: skip
    return CurrentState.of(objects=pl.DataFrame(objects), values=pl.DataFrame(values or None))


def throttles(signals: Signals, current: CurrentState, **settings: Any) -> list[dict[str, Any]]:
    p = plan(signals, current, ControllerSettings(**settings), at=AT)
    return [r for r in p.frame.iter_rows(named=True) if r["action"] == THROTTLE]


def test_steps_the_smaller_of_the_quota_and_the_noncritical_use() -> None:
    signals = Signals.of(AT, tenants=pl.DataFrame([finding(noncritical_gpus=8.0)]))
    # Quota 10, 8 GPUs in use: floor(8 x 0.75) = 6, within 50% of 10.
    [row] = throttles(signals, state("10"))
    assert (row["kind"], row["namespace"], row["name"]) == (
        "ResourceQuota",
        "batch",
        "sits-noncritical",
    )
    assert (row["current"], row["proposed"], row["skip"]) == ("10", "6", None)
    evidence = json.loads(row["evidence"])
    assert evidence["victims"] == "finance" and evidence["correlation"] == 0.95
    assert (
        "pushes finance out of its 15.0 ms P99 SLA (P99 39.0 ms there, 6.9 ms otherwise"
        in (row["reason"])
    )


def test_the_max_step_and_the_bounds_hold() -> None:
    # Quota 20 with 4 in use: the rule says floor(4 x 0.75) = 3, max_step_ratio 0.5 holds 10.
    signals = Signals.of(AT, tenants=pl.DataFrame([finding(noncritical_gpus=4.0)]))
    [row] = throttles(signals, state("20"))
    assert row["proposed"] == "10" and "limited to 10" in row["reason"]
    # At 1 GPU the rule says 0; the GPU quota's lower bound (1) keeps it: nothing to do.
    signals = Signals.of(AT, tenants=pl.DataFrame([finding(noncritical_gpus=1.0)]))
    assert throttles(signals, state("1")) == []
    # A step of 0.6 from 10: 4, limited to 5 by max_step_ratio 0.5.
    signals = Signals.of(AT, tenants=pl.DataFrame([finding(noncritical_gpus=None)]))
    [row] = throttles(signals, state("10"), tenant_throttle_step_ratio=0.6)
    assert row["proposed"] == "5"


def test_without_the_quota_it_is_advice_on_the_namespace() -> None:
    signals = Signals.of(AT, tenants=pl.DataFrame([finding(noncritical_gpus=8.0)]))
    [row] = throttles(signals, state(None), mode="act")
    assert (row["kind"], row["namespace"], row["name"]) == ("Namespace", None, "batch")
    assert (row["current"], row["proposed"]) == ("8", "6")
    # Nothing known to step from: no proposal.
    none = Signals.of(AT, tenants=pl.DataFrame([finding(noncritical_gpus=None)]))
    assert throttles(none, state(None)) == []


def test_one_proposal_per_offender_with_every_victim() -> None:
    rows = [finding(victim="medical", correlation=0.6), finding(victim="finance")]
    [row] = throttles(Signals.of(AT, tenants=pl.DataFrame(rows)), state("10"))
    evidence = json.loads(row["evidence"])
    assert evidence["victim"] == "finance" and evidence["victims"] == "finance,medical"


def test_act_writes_the_quota_gpu_key_dry_run_nothing() -> None:
    signals = Signals.of(AT, tenants=pl.DataFrame([finding()]))
    for mode, writes in (("dry-run", 0), ("act", 1)):
        settings = ControllerSettings(mode=mode)
        p = plan(signals, state("10"), settings, at=AT)
        [decision] = [d for d in p.decisions() if d.action is Action.TENANT_THROTTLE]
        changes = [c for c in writes_for(decision, settings, AT) if c.field == "quota"]
        assert len(changes) == writes
        if writes:
            assert (changes[0].key, changes[0].value) == (QUOTA_GPU, "6")


def test_cooldown_opt_out_and_rules_off() -> None:
    signals = Signals.of(AT, tenants=pl.DataFrame([finding()]))
    history = History.of(
        pl.DataFrame(
            [{"kind": "ResourceQuota", "namespace": "batch", "name": "sits-noncritical",
              "action": THROTTLE, "proposed": "10", "outcome": "applied", "mode": "act",
              "decided_at": AT - timedelta(seconds=60), "changed_at": AT - timedelta(seconds=60)}]
        )
    )  # fmt: skip
    settings = ControllerSettings(mode="act")
    [row] = [
        r
        for r in plan(signals, state("10"), settings, history, at=AT).frame.iter_rows(named=True)
        if r["action"] == THROTTLE
    ]
    assert row["skip"] == "cooldown"
    [row] = throttles(signals, state("10", opt_out=True), mode="act")
    assert row["skip"] == "opt-out"
    assert throttles(signals, state("10"), rules_off=(THROTTLE,)) == []


def test_recommend_knows_the_action() -> None:
    assert RecommendAction(THROTTLE)
