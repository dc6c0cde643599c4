"""plan(): current state, history and the safety rules turn proposals into decisions."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import polars as pl
import pytest

from sits_observe.control.controller.actions import Action
from sits_observe.control.controller.planning.inputs import CurrentState, History, Signals
from sits_observe.control.controller.planning.model import QUOTA_ACTIONS, Plan
from sits_observe.control.controller.planning.plan import plan
from sits_observe.control.controller.quota_settings import Bound, QuotaRuleSettings
from sits_observe.control.controller.settings import RULES_OFF_BY_DEFAULT, ControllerSettings

AT = datetime(2026, 11, 1, 12, 0, 0)
GIB = 1024**3


def one_node(frag: float | None = 0.8, score: float | None = None) -> Signals:
    return Signals.of(
        AT,
        nodes=pl.DataFrame(
            {"node": ["n1"], "fragmentation_ratio": [frag], "interference_score": [score]}
        ),
    )


def one_pod(**cols: Any) -> Signals:
    row = {"namespace": "team", "pod": "p1", "node": "n1", "peak_gpu_memory_bytes": 3 * GIB}
    row.update(cols)
    return Signals.of(AT, pods=pl.DataFrame([row]))


def quota(peaks: list[float], resource: str = "requests.nvidia.com/gpu") -> Signals:
    return Signals.of(
        AT,
        namespaces=pl.DataFrame(
            {"namespace": ["team"], "resource": [resource], "daily_peaks": [peaks]}
        ),
    )


def state(
    objects: list[tuple[str, str | None, str, bool]] = (),  # type: ignore[assignment]
    values: list[tuple[str, str | None, str, str, str | None, str | None]] = (),  # type: ignore[assignment]
    **kw: Any,
) -> CurrentState:
    return CurrentState.of(
        objects=pl.DataFrame(
            list(objects), schema=["kind", "namespace", "name", "opt_out"], orient="row"
        )
        if objects
        else None,
        values=pl.DataFrame(
            list(values),
            schema=["kind", "namespace", "name", "action", "current", "recommended"],
            orient="row",
        )
        if values
        else None,
        **kw,
    )


def history(rows: list[dict[str, Any]]) -> History:
    return History.of(pl.DataFrame(rows))


def act(**kw: Any) -> ControllerSettings:
    kw.setdefault("rules_on", RULES_OFF_BY_DEFAULT)  # off by default; these tests plan them
    return ControllerSettings(mode="act", **kw)


NODE = ("Node", None, "n1", False)
POD = ("Pod", "team", "p1", False)


def actions(p: Plan) -> dict[str, dict[str, Any]]:
    return {r["action"]: r for r in p.frame.iter_rows(named=True)}


# -- no-ops ----------------------------------------------------------------------------------


def test_a_value_already_in_effect_is_no_decision() -> None:
    st = state([NODE], [("Node", None, "n1", "fragmentation", "high", None)])
    p = plan(one_node(0.8), st, act())
    assert "fragmentation" not in actions(p)
    assert p.suppressed["unchanged"] == 1


def test_dry_run_remembers_what_it_recommended() -> None:
    hist = history(
        [
            {
                "kind": "Node",
                "namespace": None,
                "name": "n1",
                "action": "fragmentation",
                "proposed": "high",
                "outcome": "recommended",
                "mode": "dry-run",
                "decided_at": AT,
                "changed_at": AT - timedelta(hours=1),
            }
        ]
    )
    dry = plan(one_node(0.8), state([NODE]), ControllerSettings(), hist)
    assert "fragmentation" not in actions(dry)
    assert dry.suppressed["already-recommended"] == 1
    # Acting on it is a different matter: the label is not there yet.
    applied = plan(one_node(0.8), state([NODE]), act(), hist)
    assert actions(applied)["fragmentation"]["proposed"] == "high"


def test_recommendation_only_actions_are_not_repeated_in_act_mode() -> None:
    st = state([NODE], [("Node", None, "n1", "topology-policy", None, "single-numa-node")])
    p = plan(one_node(None, score=0.9), st, act())
    assert "topology-policy" not in actions(p)
    kept = plan(one_node(None, score=0.9), st, act(), keep_recommended=True)
    assert actions(kept)["topology-policy"]["proposed"] == "single-numa-node"


# -- skips -----------------------------------------------------------------------------------


def test_opt_out_on_the_object_or_its_namespace() -> None:
    p = plan(one_node(0.8), state([("Node", None, "n1", True)]), act())
    assert actions(p)["fragmentation"]["skip"] == "opt-out"
    st = state([POD, ("Namespace", None, "team", True)])
    p = plan(one_pod(), st, act())
    assert actions(p)["memory-class"]["skip"] == "opt-out"
    p = plan(one_pod(), state([POD, ("Namespace", None, "team", False)]), act())
    assert actions(p)["memory-class"]["skip"] is None


def test_an_object_missing_from_the_cluster_is_gone_unless_the_state_is_offline() -> None:
    assert actions(plan(one_pod(), state([NODE]), act()))["memory-class"]["skip"] == "gone"
    offline = CurrentState.of(complete=False)
    assert actions(plan(one_pod(), offline, act()))["memory-class"]["skip"] is None


def test_cooldown_after_a_change() -> None:
    def hist(ago_s: float) -> History:
        return history(
            [
                {
                    "kind": "Node",
                    "namespace": None,
                    "name": "n1",
                    "action": "fragmentation",
                    "proposed": "medium",
                    "outcome": "applied",
                    "mode": "act",
                    "decided_at": AT - timedelta(seconds=ago_s),
                    "changed_at": AT - timedelta(seconds=ago_s),
                }
            ]
        )

    st = state([NODE], [("Node", None, "n1", "fragmentation", "medium", "medium")])
    settings = act(min_change_interval_s=300)
    assert actions(plan(one_node(0.8), st, settings, hist(60)))["fragmentation"]["skip"] == (
        "cooldown"
    )
    assert actions(plan(one_node(0.8), st, settings, hist(400)))["fragmentation"]["skip"] is None


def test_a_skip_already_recorded_is_not_repeated() -> None:
    hist = history(
        [
            {
                "kind": "Node",
                "namespace": None,
                "name": "n1",
                "action": "fragmentation",
                "proposed": "high",
                "outcome": "skipped:opt-out",
                "mode": "act",
                "decided_at": AT,
                "changed_at": None,
            }
        ]
    )
    p = plan(one_node(0.8), state([("Node", None, "n1", True)]), act(), hist)
    assert "fragmentation" not in actions(p)
    assert p.suppressed["repeat"] == 1


# -- numeric safety --------------------------------------------------------------------------


def quota_state(current: str) -> CurrentState:
    return state(
        [("ResourceQuota", "team", "sits-quota", False), ("Namespace", None, "team", False)],
        [("ResourceQuota", "team", "sits-quota", "quota-gpu", current, None)],
    )


def test_max_step_limits_one_change() -> None:
    # 14 days at 40 GPUs: 40 x 1.15 x (1 + 1/14) = 49.3 -> 50; from 10 at most +50% = 15.
    p = plan(quota([40.0] * 14), quota_state("10"), act())
    row = actions(p)["quota-gpu"]
    assert (row["kind"], row["current"], row["proposed"]) == ("ResourceQuota", "10", "15")
    assert "limited to 15" in row["reason"] and "rule said 50" in row["reason"]


def test_hard_bounds_win() -> None:
    bounds = dict(QuotaRuleSettings().bounds)
    bounds["requests.nvidia.com/gpu"] = Bound(min_value=2, max_value=12)
    settings = act(quota=QuotaRuleSettings(bounds=bounds), max_step_ratio=10)
    assert (
        actions(plan(quota([40.0] * 14), quota_state("10"), settings))["quota-gpu"]["proposed"]
        == "12"
    )
    assert (
        actions(plan(quota([0.1] * 14), quota_state("10"), settings))["quota-gpu"]["proposed"]
        == "2"
    )


def test_small_numeric_changes_are_not_written() -> None:
    # 20 x 1.15 x (1 + 1/14) = 24.6 -> 25 against 24: 4% < 10%.
    p = plan(quota([20.0] * 14), quota_state("24"), act())
    assert "quota-gpu" not in actions(p)
    assert p.suppressed["below-threshold"] == 1


def test_quota_advice_goes_to_the_namespace_without_a_managed_quota() -> None:
    st = state([("Namespace", None, "team", False)])
    row = actions(plan(quota([4.0] * 14), st, act()))["quota-gpu"]
    assert (row["kind"], row["namespace"], row["name"]) == ("Namespace", None, "team")


# -- flapping --------------------------------------------------------------------------------


def simulate(values: list[float], settings: ControllerSettings) -> list[str]:
    """Apply each pass's fragmentation decision as act mode would; return the labels set."""
    label: str | None = None
    written = []
    for i, value in enumerate(values):
        vals = [("Node", None, "n1", "fragmentation", label, label)] if label else []
        p = plan(one_node(value), state([NODE], vals), settings, at=AT + timedelta(minutes=i))
        row = actions(p).get("fragmentation")
        if row is not None and row["skip"] is None:
            label = row["proposed"]
            written.append(label)
    return written


def test_noisy_signal_around_a_boundary_does_not_flap() -> None:
    noisy = [0.74, 0.66, 0.72, 0.68, 0.71, 0.65, 0.73, 0.69] * 3
    assert simulate(noisy, act(min_change_interval_s=0)) == ["high"]
    # The same signal without hysteresis flips the label on every crossing.
    flapping = simulate(noisy, act(min_change_interval_s=0, hysteresis_ratio=0))
    assert len(flapping) > 10


def test_a_real_change_still_gets_through() -> None:
    assert simulate([0.74, 0.2], act(min_change_interval_s=0)) == ["high", "low"]


# -- time slices and outputs -------------------------------------------------------------------


def test_time_slice_current_comes_from_the_configmap_entry_of_the_workload() -> None:
    sig = one_pod(workload="chat", p95_latency_s=0.02)
    settings = act(time_slicing_configmap="gpu-operator/time-slicing")
    same = CurrentState.of(complete=False, time_slices={"team/chat": "25ms"})
    assert "time-slice" not in actions(plan(sig, same, settings))
    other = CurrentState.of(complete=False, time_slices={"team/chat": "15ms"})
    row = actions(plan(sig, other, settings))["time-slice"]
    assert (row["current"], row["proposed"], row["workload"]) == ("15ms", "25ms", "team/chat")


def test_recommendations_have_exactly_the_documented_keys() -> None:
    [rec] = [r for r in plan(one_node(0.8), state([NODE]), act()).recommendations()]
    assert list(rec) == [
        "kind",
        "namespace",
        "name",
        "action",
        "current",
        "proposed",
        "reason",
        "evidence",
    ]
    assert rec["evidence"] == {"fragmentation_ratio": 0.8}
    assert [d.action for d in plan(one_node(0.8), state([NODE]), act()).decisions()] == [
        Action.FRAGMENTATION
    ]


def test_signals_reject_unknown_columns() -> None:
    with pytest.raises(ValueError, match="fragmentaton_ratio"):
        Signals.of(AT, nodes=pl.DataFrame({"node": ["a"], "fragmentaton_ratio": [0.1]}))


def test_quota_actions_cover_every_quota_resource() -> None:
    from sits_observe.control.controller.quota_settings import QUOTA_RESOURCES

    assert set(QUOTA_ACTIONS) == set(QUOTA_RESOURCES)


def test_a_rule_switched_off_gives_no_decision() -> None:
    """``rules_off`` (the experiment's ablation arms): the action is neither recommended nor
    applied, and the other rules are untouched; an unknown name is refused."""
    signals = Signals.of(AT, nodes=one_node(0.8).nodes, pods=one_pod().pods)
    current = state([NODE, POD])
    assert set(actions(plan(signals, current, act()))) == {"fragmentation", "memory-class"}
    kept = actions(plan(signals, current, act(rules_off="memory-class,time-slice")))
    assert set(kept) == {"fragmentation"}
    with pytest.raises(ValueError, match="unknown action 'memry-class'"):
        act(rules_off=["memry-class"])
