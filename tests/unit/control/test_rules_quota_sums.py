"""Namespace quotas that a cluster can honour: their sum within its allocatable, never under
what the namespaces' pods request now, no CPU or memory key where no pod asks for one or the
managed quota is GPU-only, and VPA's confidence in the history's length.

The case is the demo's after six minutes: a 16-GPU cluster, inference running its two 4-GPU
servers, research a GPU notebook with no CPU or memory requests, training one 4-GPU Job. One
snapshot-day of peaks each; alone, each quota would be held at twice its peak or at the
cluster (16 + 2 + 8 = 26 GPUs, and the old rule's 16 + 8 + 8 with a day's confidence).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sits_observe.control.controller.quota_settings import QUOTA_CPU, QUOTA_GPU, QUOTA_MEMORY
from sits_observe.control.controller.rules import quotas as rules_quotas
from sits_observe.control.controller.settings import ControllerSettings

S = ControllerSettings()
GIB = 1024**3
SIX_MINUTES_S = 360.0


def frame(rows: list[dict[str, Any]]) -> pl.DataFrame:
    defaults = {
        "quota_kind": "Namespace",
        "current": None,
        "recommended": None,
        "history_s": SIX_MINUTES_S,
    }
    return pl.DataFrame(
        [{**defaults, **r} for r in rows],
        schema_overrides={
            "current": pl.String,
            "recommended": pl.String,
            "allocatable": pl.Float64,
            "running": pl.Float64,
            "history_s": pl.Float64,
            "daily_peaks": pl.List(pl.Float64),
        },
    )


def demo_namespaces() -> pl.DataFrame:
    rows = []
    for ns, gpu, cpu, mem in (
        ("inference", 8.0, 32_000.0, 128 * GIB),
        ("research", 1.0, 0.0, 0.0),
        ("training", 4.0, 21_000.0, 48 * GIB),
    ):
        for resource, peak, held in (
            (QUOTA_GPU, gpu, 16.0),
            (QUOTA_CPU, cpu, 128_000.0),
            (QUOTA_MEMORY, mem, 1024.0 * GIB),
        ):
            rows.append(
                {"namespace": ns, "quota_name": ns, "resource": resource,
                 "daily_peaks": [peak], "allocatable": held, "running": peak}
            )  # fmt: skip
    return frame(rows)


def proposals(namespaces: pl.DataFrame) -> dict[tuple[str, str], dict[str, Any]]:
    out = rules_quotas.namespace_quotas(namespaces, S).collect().to_dicts()
    return {(r["name"], r["action"]): r for r in out}


def test_gpu_quotas_sum_to_the_cluster_and_keep_what_runs() -> None:
    rows = proposals(demo_namespaces())
    gpus = {
        ns: rows[(ns, "quota-gpu")]["proposed_value"]
        for ns in ("inference", "research", "training")
    }
    assert sum(gpus.values()) <= 16
    # Each keeps the GPUs its pods request now; the rest is shared by what each asked above.
    assert gpus["inference"] >= 8 and gpus["research"] >= 1 and gpus["training"] >= 4
    assert all(float(g).is_integer() for g in gpus.values())
    shared = json.loads(rows[("inference", "quota-gpu")]["evidence"])["capped_by"]
    assert shared == "the cluster's allocatable, shared among the namespaces"


def test_no_cpu_or_memory_key_where_no_pod_asks_for_one() -> None:
    """research's notebook requests a GPU and no CPU or memory: a 1-CPU / 1Gi quota (the
    bounds' minimum over a zero peak) would refuse every pod that does not state them."""
    rows = proposals(demo_namespaces())
    assert ("research", "quota-gpu") in rows
    assert ("research", "quota-cpu") not in rows and ("research", "quota-memory") not in rows
    assert ("training", "quota-cpu") in rows and ("training", "quota-memory") in rows


def test_a_gpu_only_quota_stays_gpu_only() -> None:
    managed = frame(
        [
            {"namespace": "team", "quota_kind": "ResourceQuota", "quota_name": "sits-quota",
             "resource": resource, "daily_peaks": [peak], "allocatable": held, "running": peak,
             "current": current}
            for resource, peak, held, current in (
                (QUOTA_GPU, 2.0, 16.0, "4"),
                (QUOTA_CPU, 8_000.0, 128_000.0, None),
                (QUOTA_MEMORY, 16.0 * GIB, 1024.0 * GIB, None),
            )
        ]
    )  # fmt: skip
    assert set(proposals(managed)) == {("sits-quota", "quota-gpu")}
    # A managed quota with every key is advised on every key.
    full = managed.with_columns(pl.lit("1").alias("current"))
    assert len(proposals(full)) == 3


def test_confidence_grows_with_the_history_as_vpa_s() -> None:
    """VPA's recommender scales the upper bound by (1 + multiplier / confidence) ** exponent
    with the confidence in days of history (estimator.go): six minutes widen the estimate
    x 241, fourteen days x 1.07; one peak per daily snapshot no longer counts as a day."""
    one = frame(
        [{"namespace": "a", "quota_name": "a", "resource": QUOTA_GPU, "daily_peaks": [4.0],
          "allocatable": None, "running": 4.0}]
    )  # fmt: skip
    short = json.loads(proposals(one)[("a", "quota-gpu")]["evidence"])
    assert short["confidence_factor"] == pytest.approx(1 + 1 / (SIX_MINUTES_S / 86_400))
    assert short["history_s"] == SIX_MINUTES_S
    # The reason gives the history in the unit a person reads it in.
    assert "(6m of history)" in proposals(one)[("a", "quota-gpu")]["reason"]
    hours = proposals(one.with_columns(pl.lit(3 * 3600.0).alias("history_s")))
    assert "(3h of history)" in hours[("a", "quota-gpu")]["reason"]
    long = json.loads(
        proposals(one.with_columns(pl.lit(14 * 86_400.0).alias("history_s")))[("a", "quota-gpu")][
            "evidence"
        ]
    )
    assert long["confidence_factor"] == pytest.approx(1 + 1 / 14)
    assert rules_quotas.confidence_factor(0.0, S) == pytest.approx(1441)  # one sample a minute


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 12), st.integers(0, 12), st.floats(60, 30 * 86_400)),
        min_size=1,
        max_size=6,
    ),
    st.integers(1, 64),
)
def test_the_sum_never_passes_the_allocatable_unless_what_runs_does(
    spaces: list[tuple[int, int, float]], allocatable: int
) -> None:
    rows = [
        {"namespace": f"n{i}", "quota_name": f"n{i}", "resource": QUOTA_GPU,
         "daily_peaks": [float(max(peak, running, 1))], "allocatable": float(allocatable),
         "running": float(running), "history_s": history}
        for i, (peak, running, history) in enumerate(spaces)
    ]  # fmt: skip
    got = proposals(frame(rows))
    values = [got[(r["namespace"], "quota-gpu")]["proposed_value"] for r in rows]
    running = sum(min(r["running"], allocatable) for r in rows)
    assert sum(values) <= max(allocatable, running)
    for r, v in zip(rows, values, strict=True):
        assert v >= min(r["running"], allocatable) and v <= allocatable


def tenants(
    *, cluster: float = 64.0, others_running: float = 58.0, history_s: float = 1800.0
) -> pl.DataFrame:
    """The experiment's tenants in a full cluster: team-a holds 8 GPUs of quota and runs one,
    team-b's sweeps fill its 2, training holds 16, runs 3 now and peaked at 8;
    inference and the notebooks (no managed quota) run ``others_running``; half an hour of
    history (``history_s``)."""
    rows = [
        {"namespace": ns, "quota_kind": "ResourceQuota", "quota_name": "sits-quota",
         "resource": QUOTA_GPU, "daily_peaks": [peak], "allocatable": cluster,
         "running": running, "current": current, "history_s": history_s}
        for ns, peak, running, current in (
            ("team-a", 1.0, 1.0, "8"), ("team-b", 2.0, 2.0, "2"), ("training", 8.0, 3.0, "16"),
        )
    ]  # fmt: skip
    rows.append(
        {"namespace": "inference", "quota_name": "inference", "resource": QUOTA_GPU,
         "daily_peaks": [others_running], "allocatable": cluster, "running": others_running,
         "history_s": history_s}
    )  # fmt: skip
    return frame(rows)


def gpu_rows(namespaces: pl.DataFrame) -> dict[str, dict[str, Any]]:
    """The GPU proposals by namespace (a Namespace's advice has none: its name is it)."""
    out = rules_quotas.namespace_quotas(namespaces, S).collect().to_dicts()
    return {r["namespace"] or r["name"]: r for r in out if r["action"] == "quota-gpu"}


def gpu_values(namespaces: pl.DataFrame) -> dict[str, float]:
    return {ns: float(r["proposed_value"]) for ns, r in gpu_rows(namespaces).items()}


def test_idle_quota_is_lent_to_the_tenant_that_queues_in_a_full_cluster() -> None:
    """team-a's idle quota (8 held, 1 used) is taken back to its peak's cap (2) and lent to
    team-b (its peak x 2 = 4), though running pods fill the cluster; training keeps the 16
    its peaks size (8 x 2), not the 3 it runs now; the managed quotas' sum does not grow."""
    got = gpu_values(tenants())
    assert got["team-a"] == 2.0
    assert got["team-b"] == 4.0
    assert got["training"] == 16.0
    assert got["team-a"] + got["team-b"] + got["training"] <= 8 + 2 + 16
    # The advice for inference keeps what it runs.
    assert got["inference"] == 58.0


def test_no_quota_is_lowered_on_a_short_history() -> None:
    """Six minutes of history (under ``quota.lower_after_s``) have not seen a namespace's
    next Jobs: nothing is taken back, so nothing is lent, and the raises wait."""
    got = gpu_values(tenants(history_s=SIX_MINUTES_S))
    assert (got["team-a"], got["team-b"], got["training"]) == (8.0, 2.0, 16.0)
    assert S.quota.lower_after_s > SIX_MINUTES_S


def test_raises_share_what_was_reclaimed_when_they_ask_for_more() -> None:
    """With team-a holding only 3 (1 reclaimable above its cap of 2) and no free capacity,
    team-b's ask of 2 gets the 1 reclaimed, and says so."""
    frame_ = tenants().with_columns(
        pl.when(pl.col("namespace") == "team-a").then(pl.lit("3")).otherwise("current")
        .alias("current")
    )  # fmt: skip
    team_b = gpu_rows(frame_)["team-b"]
    assert float(team_b["proposed_value"]) == 3.0
    assert json.loads(team_b["evidence"])["capped_by"] == rules_quotas.SHARED_QUOTA


def test_free_capacity_no_quota_holds_pays_for_raises() -> None:
    """team-a holds exactly its cap, so nothing is reclaimed; 8 GPUs that neither a quota
    nor a running pod holds pay for team-b's raise."""
    frame_ = tenants(cluster=80.0, others_running=50.0).with_columns(
        pl.when(pl.col("namespace") == "team-a").then(pl.lit("2")).otherwise("current")
        .alias("current")
    )  # fmt: skip
    assert gpu_values(frame_)["team-b"] == 4.0


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 12), st.integers(0, 12), st.integers(0, 16), st.booleans()),
        min_size=1,
        max_size=6,
    ),
    st.integers(1, 64),
)
def test_managed_quotas_are_redistributed_never_grown_past_the_cluster(
    spaces: list[tuple[int, int, int, bool]], allocatable: int
) -> None:
    rows = [
        {"namespace": f"n{i}", "quota_kind": "ResourceQuota" if is_managed else "Namespace",
         "quota_name": "sits-quota" if is_managed else f"n{i}", "resource": QUOTA_GPU,
         "daily_peaks": [float(max(peak, running, 1))], "allocatable": float(allocatable),
         "running": float(running), "current": str(current) if is_managed else None}
        for i, (peak, running, current, is_managed) in enumerate(spaces)
    ]  # fmt: skip
    out = rules_quotas.namespace_quotas(frame(rows), S).collect().to_dicts()
    value = {r["namespace"] or r["name"]: float(r["proposed_value"]) for r in out}
    held_before, total = 0.0, 0.0
    for r in rows:
        v = value[r["namespace"]]
        running = min(r["running"], allocatable)
        assert v >= running and v <= allocatable
        if r["current"] is not None:
            current = min(float(r["current"]), allocatable)
            # Never cut below what the peaks size or what runs, whichever the current allows.
            assert v >= min(current, max(running, 1.0))
            held_before += max(current, running)
        else:
            held_before += running
        total += v
    # The proposals pass the allocatable only where the quotas held and what runs already did.
    assert total <= max(allocatable, held_before) + 1e-9


def test_fair_shares_meet_the_smallest_asks_first() -> None:
    """Max-min fairness in whole units: 2 GPUs over asks of 1 and 6 give 1 each (a
    proportional share rounded down gave 0 and 1: the tenant asking for one GPU starved)."""
    fair = rules_quotas.fair_shares
    assert fair(np.array([1.0, 6.0]), 2.0, 1.0).tolist() == [1.0, 1.0]
    assert fair(np.array([6.0, 1.0, 3.0]), 7.0, 1.0).tolist() == [3.0, 1.0, 3.0]
    assert fair(np.array([2.0, 2.0]), 9.0, 1.0).tolist() == [2.0, 2.0]
    # The units a level rounded down leaves go to the asks still short, largest first: 5 GPUs
    # over three asks of 4 are 2, 2, 1, not 1, 1, 1 with two GPUs lent to nobody.
    assert fair(np.array([4.0, 4.0, 4.0]), 5.0, 1.0).tolist() == [2.0, 2.0, 1.0]
    assert fair(np.array([3.0, 8.0, 9.0]), 7.0, 1.0).tolist() == [2.0, 2.0, 3.0]
    assert fair(np.array([]), 3.0, 1.0).tolist() == []


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 40), min_size=1, max_size=8), st.integers(0, 100))
def test_fair_shares_stay_within_the_budget_and_the_asks(asks: list[int], budget: int) -> None:
    got = rules_quotas.fair_shares(np.array(asks, dtype=float), float(budget), 1.0)
    assert all(0 <= g <= a for g, a in zip(got, asks, strict=True))
    assert all(float(g).is_integer() for g in got)
    # Every ask met when the budget covers them all; else the whole budget given out.
    assert float(got.sum()) == (sum(asks) if sum(asks) <= budget else budget)
    # Nobody gets more than an ask that was cut, as max-min fairness requires, but for the
    # one unit a level rounded down leaves over.
    cut = [g for g, a in zip(got, asks, strict=True) if g < a]
    assert not cut or max(got) <= min(cut) + 1
