"""The controller's rules agree with the scalar oracle of the class rules
(:mod:`tests.unit.analytics.class_oracle`) when no object holds a level yet, their hysteresis
is :mod:`sits_observe.control.controller.planning.safety`'s, and the quota rule's numbers are the
documented formula."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sits_observe.analytics.classes import rules as class_rules
from sits_observe.analytics.topology.interference import interference_score, recommend_topology
from sits_observe.control.controller.planning.inputs import NODE_SIGNALS, POD_SIGNALS, conform
from sits_observe.control.controller.planning.safety import above_with_hysteresis
from sits_observe.control.controller.rules import levels as rules
from sits_observe.control.controller.rules import quotas as rules_quotas
from sits_observe.control.controller.settings import ControllerSettings
from tests.unit.analytics.class_oracle import (
    ElasticSignals,
    Task,
    elastic_quota,
    memory_class,
    recommend_priority,
    tasks_to_reset,
    time_slice,
)

S = ControllerSettings()
GIB = 1024**3
maybe = st.none() | st.floats(min_value=0.0, max_value=1.0)


def pods(rows: list[dict[str, Any]], **extra: pl.DataType) -> pl.DataFrame:
    base = conform(pl.DataFrame(rows, schema_overrides=POD_SIGNALS), POD_SIGNALS)
    return base.with_columns(
        pl.format("{}/{}", "namespace", pl.coalesce("workload", "pod")).alias("workload_key"),
        *[pl.lit(None, pl.String()).alias(c) for c in ("state", "current", "recommended")],
    )


def nodes(rows: list[dict[str, Any]]) -> pl.DataFrame:
    base = conform(pl.DataFrame(rows, schema_overrides=NODE_SIGNALS), NODE_SIGNALS)
    return base.with_columns(
        *[pl.lit(None, pl.String()).alias(c) for c in ("state", "current", "recommended")]
    )


def proposed(frame: pl.LazyFrame) -> dict[str, str]:
    out = frame.collect()
    return dict(zip(out["name"], out["proposed"], strict=True))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=20 * GIB), min_size=1, max_size=30))
def test_memory_class_matches_analytics(peaks: list[int]) -> None:
    rows = [
        {"namespace": "ns", "pod": f"p{i}", "peak_gpu_memory_bytes": v} for i, v in enumerate(peaks)
    ]
    got = proposed(rules.memory_class(pods(rows), S))
    assert got == {f"p{i}": memory_class(v, S.classes) for i, v in enumerate(peaks)}


def test_memory_class_edges() -> None:
    rows = [
        {"namespace": "n", "pod": "a", "peak_gpu_memory_bytes": 2 * GIB},
        {"namespace": "n", "pod": "b", "peak_gpu_memory_bytes": 8 * GIB},
        {"namespace": "n", "pod": "c", "peak_gpu_memory_bytes": 8 * GIB + 1},
        {"namespace": "n", "pod": "d", "peak_gpu_memory_bytes": None},
    ]
    assert proposed(rules.memory_class(pods(rows), S)) == {"a": "L2", "b": "L2", "c": "L3"}


latency = st.none() | st.floats(min_value=0.0, max_value=0.05)
tokens = st.none() | st.floats(min_value=0.0, max_value=9000.0)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(latency, tokens), min_size=1, max_size=30))
def test_time_slice_matches_analytics(inputs: list[tuple[float | None, float | None]]) -> None:
    rows = [
        {"namespace": "ns", "pod": f"p{i}", "p95_latency_s": p, "sequence_tokens": t}
        for i, (p, t) in enumerate(inputs)
    ]
    got = proposed(rules.time_slice(pods(rows), S))
    want = {
        f"p{i}": rules.slice_label(time_slice(p, t, S.classes).slice_s)
        for i, (p, t) in enumerate(inputs)
        if p is not None or t is not None  # nothing measured: no proposal
    }
    assert got == want


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(maybe, st.booleans()), min_size=1, max_size=30))
def test_topology_matches_analytics(inputs: list[tuple[float | None, bool]]) -> None:
    rows = [
        {"node": f"n{i}", "interference_score": s, "sync_delay_breached": b}
        for i, (s, b) in enumerate(inputs)
    ]
    got = proposed(rules.topology_policy(nodes(rows), S))
    want = {}
    for i, (score, breached) in enumerate(inputs):
        # The vectorised rule receives the score; analytics computes it from its inputs.
        sc = interference_score(None, None, None, S.interference)
        sc = type(sc)(score or 0.0, None, None, None, ())
        delays = [1.0] * 3 if breached else None
        policy = recommend_topology(sc, delays, S.interference).policy
        if score is None and not breached:
            policy = None  # not measured: no advice
        if policy is not None:
            want[f"n{i}"] = policy
    assert got == want


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["ultra-low-latency", "throughput-guaranteed", "best-effort"]),
            maybe,
            maybe,
        ),
        min_size=1,
        max_size=30,
    )
)
def test_priority_matches_analytics(inputs: list[tuple[str, float | None, float | None]]) -> None:
    rows = [
        {"namespace": "ns", "pod": f"p{i}", "priority_class": c, "sla_violation_ratio": r}
        for i, (c, r, _) in enumerate(inputs)
    ]
    frame = pods(rows).with_columns(
        pl.Series("fragmentation_ratio", [f for _, _, f in inputs], dtype=pl.Float64)
    )
    out = rules.priority_class(frame, S).collect()
    got = {r["name"]: r["proposed"] for r in out.iter_rows(named=True)}
    for i, (cls, rate, frag) in enumerate(inputs):
        rec = recommend_priority(cls, rate, frag, S.classes)
        if rec.proposed != cls:
            assert got[f"p{i}"] == rec.proposed
        else:
            assert got.get(f"p{i}", cls) == cls  # no change proposed
    for r in out.filter(pl.col("reason").is_not_null()).iter_rows(named=True):
        frag = inputs[int(r["name"][1:])][2]
        want = recommend_priority("best-effort", None, frag, S.classes).preemption_policy
        assert (
            f'"preemption_policy":{"null" if want is None else chr(34) + want + chr(34)}'
            in (r["evidence"])
        )


def test_qos_elastic_rule_resets_only_lower_priority_pods_missing_their_sla() -> None:
    base = {
        "namespace": "ns",
        "node": "n1",
        "gpu_util_ratio": 0.95,
        "link_saturation_ratio": 0.80,
        "sla_p99_s": 0.1,
        "link_capacity_bytes_per_s": 900e9,
    }
    rows = [
        {**base, "pod": "top", "priority_class": "ultra-low-latency", "p99_latency_s": 0.5},
        {**base, "pod": "low-miss", "priority_class": "best-effort", "p99_latency_s": 0.5},
        {**base, "pod": "low-ok", "priority_class": "best-effort", "p99_latency_s": 0.05},
        {
            **base,
            "pod": "mid-miss",
            "priority_class": "throughput-guaranteed",
            "p99_latency_s": 0.2,
        },
        {
            **base,
            "pod": "calm",
            "node": "n2",
            "priority_class": "best-effort",
            "p99_latency_s": 0.5,
            "gpu_util_ratio": 0.5,
        },
    ]
    out = rules_quotas.qos_quotas(pods(rows), S).collect()
    mem = {
        r["name"]: int(r["proposed"])
        for r in out.iter_rows(named=True)
        if r["action"] == "qos-memory-quota"
    }
    bw = {
        r["name"]: float(r["proposed"])
        for r in out.iter_rows(named=True)
        if r["action"] == "qos-bandwidth-quota"
    }
    tiers = S.classes.tiers
    # Who is reset: exactly analytics' tasks_to_reset for node n1 (highest priority 1,000,000).
    prio = {p.name: p.value for p in S.classes.priority_classes}
    tasks = [Task(r["pod"], prio[r["priority_class"]], r["p99_latency_s"] > 0.1) for r in rows[:4]]
    reset = {t.name for t in tasks_to_reset(tasks, 1_000_000)}
    assert reset == {"low-miss", "mid-miss"}
    for r in rows:
        tier = tiers[S.tier_by_priority_class[r["priority_class"]]]
        want = elastic_quota(
            tier.memory_bytes,
            tier.bandwidth_bytes_per_s,
            ElasticSignals(5, 5, r["gpu_util_ratio"], r["link_saturation_ratio"], None, None),
            S.classes,
            memory_minimum_bytes=S.qos_memory_min_bytes,
            bandwidth_maximum_bytes_per_s=900e9,
        )
        if r["pod"] in reset:
            assert mem[r["pod"]] == want.memory_quota_bytes
            assert bw[r["pod"]] == pytest.approx(want.bandwidth_quota_bytes_per_s)
        else:
            assert mem[r["pod"]] == tier.memory_bytes
            assert bw[r["pod"]] == pytest.approx(tier.bandwidth_bytes_per_s)


def test_namespace_quota_formula() -> None:
    peaks = [2.0, 4.0, 3.0, 10.0]
    frame = pl.DataFrame(
        {
            "namespace": ["team"],
            "resource": ["requests.nvidia.com/gpu"],
            "daily_peaks": [peaks],
            "quota_kind": ["ResourceQuota"],
            "quota_name": ["sits-quota"],
            "current": [None],
            "recommended": [None],
        },
        schema_overrides={"current": pl.String, "recommended": pl.String},
    )
    out = rules_quotas.namespace_quotas(frame, S).collect()
    [row] = out.to_dicts()
    # numpy's default (linear) quantile, +15% margin, VPA confidence (1 + 1/4 days).
    want = float(np.quantile(peaks, 0.95)) * 1.15 * (1 + 1 / 4)
    assert row["proposed_value"] == pytest.approx(want)
    assert row["proposed"] == str(int(np.ceil(want)))
    assert (row["kind"], row["namespace"], row["name"]) == ("ResourceQuota", "team", "sits-quota")
    assert rules_quotas.confidence_factor(1, S) == 2.0
    assert rules_quotas.confidence_factor(14, S) == pytest.approx(1 + 1 / 14)


def test_namespace_quota_is_held_under_the_peak_factor_and_the_allocatable() -> None:
    """One day of history doubles the estimate (VPA's confidence): 1 GPU x 1.15 x 2 = 2.3,
    held at the largest peak x 2 (peak_factor_max) = 2; under a 1.5-GPU cluster at 1 (the
    allocatable rounded down to whole GPUs, so rounding up never passes it); with no
    allocatable known, only the peak cap."""
    frame = pl.DataFrame(
        {
            "namespace": ["a", "b", "c"],
            "resource": ["requests.nvidia.com/gpu"] * 3,
            "daily_peaks": [[1.0], [1.0], [4.0, 10.0, 9.0]],
            "allocatable": [8.0, 1.5, None],
            "quota_kind": ["ResourceQuota"] * 3,
            "quota_name": ["sits-quota"] * 3,
            "current": [None] * 3,
            "recommended": [None] * 3,
        },
        schema_overrides={"current": pl.String, "recommended": pl.String},
    )
    rows = {r["namespace"]: r for r in rules_quotas.namespace_quotas(frame, S).collect().to_dicts()}
    a, b, c = rows["a"], rows["b"], rows["c"]
    assert (a["proposed"], a["proposed_value"]) == ("2", 2.0)
    assert json.loads(a["evidence"])["uncapped"] == pytest.approx(2.3)
    assert a["reason"].endswith("(24h of history); held at the largest daily peak x 2")
    assert (b["proposed"], b["proposed_value"]) == ("1", 1.0)
    assert json.loads(b["evidence"])["capped_by"] == "the cluster's allocatable"
    # Three days: quantile 9.95 x 1.15 x 4/3 = 15.3, under 10 x 2 and no allocatable: uncapped.
    want = float(np.quantile([4.0, 10.0, 9.0], 0.95)) * 1.15 * (1 + 1 / 3)
    assert c["proposed"] == str(int(np.ceil(want)))
    assert json.loads(c["evidence"])["capped_by"] is None


def test_round_values_by_unit() -> None:
    from sits_observe.control.controller.actions import Action

    values = np.array([1.2, 2 * 1024**2 + 1])
    assert rules_quotas.round_values(Action.QUOTA_GPU, values).tolist() == [2, 2 * 1024**2 + 1]
    assert rules_quotas.round_values(Action.QUOTA_MEMORY, values).tolist() == [
        1024**2,
        3 * 1024**2,
    ]
    assert rules_quotas.round_values(Action.QOS_MEMORY_QUOTA, values).tolist() == [
        1,
        2 * 1024**2 + 1,
    ]


# -- hysteresis around the analytics rules --------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.tuples(st.none() | st.floats(0.0, 2.0), st.booleans()), min_size=1, max_size=30),
    st.sampled_from([0.05, 0.65, 0.75, 0.9, 0.0]),
)
def test_the_hysteresis_band_is_safetys_test(
    values: list[tuple[float | None, bool]], t: float
) -> None:
    frame = pl.DataFrame(
        {"v": [v for v, _ in values], "e": [e for _, e in values]},
        schema={"v": pl.Float64, "e": pl.Boolean},
    )
    band = rules.hysteresis_band(pl.col("e"), S)
    got = frame.select(class_rules.above(pl.col("v"), t, band)).to_series().to_list()
    want = above_with_hysteresis(
        rules.floats(frame, "v"), t, frame.get_column("e").to_numpy(), S.hysteresis_ratio
    )
    assert got == want.tolist()


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(latency, tokens, st.sampled_from([None, "25ms", "10ms", "15ms"])),
        min_size=1,
        max_size=30,
    )
)
def test_time_slice_with_a_state_keeps_it_inside_the_band(
    inputs: list[tuple[float | None, float | None, str | None]],
) -> None:
    rows = [
        {"namespace": "ns", "pod": f"p{i}", "p95_latency_s": p, "sequence_tokens": t}
        for i, (p, t, _) in enumerate(inputs)
    ]
    frame = pods(rows).with_columns(pl.Series("state", [s for *_, s in inputs], dtype=pl.String))
    got = proposed(rules.time_slice(frame, S))
    c, h = S.classes, S.hysteresis_ratio
    state = np.array([s for *_, s in inputs], dtype=object)
    long_ = above_with_hysteresis(
        rules.floats(frame, "p95_latency_s"), c.slice_p95_above_s, state == "25ms", h
    )
    short = ~long_ & above_with_hysteresis(
        rules.floats(frame, "sequence_tokens"),
        float(c.slice_sequence_above_tokens),
        state == "10ms",
        h,
    )
    want = {
        f"p{i}": "25ms" if long_[i] else "10ms" if short[i] else "15ms"
        for i, (p, t, _) in enumerate(inputs)
        if p is not None or t is not None
    }
    assert got == want


priorities = st.sampled_from(["ultra-low-latency", "throughput-guaranteed", "best-effort", "x"])


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["n1", "n2", None]),
            priorities,
            maybe,
            maybe,
            st.none() | st.floats(0.0, 0.5),
            st.sampled_from([0.015, 0.120, None]),
            st.none() | st.floats(1e9, 1e12),
        ),
        min_size=1,
        max_size=20,
    )
)
def test_qos_quotas_match_the_oracle(
    inputs: list[
        tuple[str | None, str, float | None, float | None, float | None, float | None, float | None]
    ],
) -> None:
    rows = [
        {
            "namespace": "ns",
            "pod": f"p{i}",
            "node": node,
            "priority_class": cls,
            "gpu_util_ratio": util,
            "link_saturation_ratio": link,
            "p99_latency_s": p99,
            "sla_p99_s": sla,
            "link_capacity_bytes_per_s": cap,
        }
        for i, (node, cls, util, link, p99, sla, cap) in enumerate(inputs)
    ]
    out = rules_quotas.qos_quotas(pods(rows), S).collect()
    got = {(r["name"], r["action"]): r["proposed_value"] for r in out.iter_rows(named=True)}
    prio = {p.name: p.value for p in S.classes.priority_classes}
    top: dict[str, int] = {}
    for r in rows:
        key = r["node"] or r["pod"]
        top[key] = max(top.get(key, 0), prio.get(r["priority_class"], 0))
    for r in rows:
        tier_name = S.tier_by_priority_class.get(r["priority_class"])
        if tier_name is None:
            assert (r["pod"], "qos-memory-quota") not in got
            continue
        tier = S.classes.tiers[tier_name]
        cap = r["link_capacity_bytes_per_s"] or S.qos_bandwidth_max_bytes_per_s
        decision = elastic_quota(
            tier.memory_bytes,
            tier.bandwidth_bytes_per_s,
            ElasticSignals(5, 5, r["gpu_util_ratio"], r["link_saturation_ratio"], None, None),
            S.classes,
            memory_minimum_bytes=S.qos_memory_min_bytes,
            bandwidth_maximum_bytes_per_s=cap,
        )
        misses = (
            r["p99_latency_s"] is not None
            and r["sla_p99_s"] is not None
            and (r["p99_latency_s"] > r["sla_p99_s"])
        )
        task = Task(r["pod"], prio.get(r["priority_class"], 0), misses)
        reset = decision.triggered and bool(tasks_to_reset([task], top[r["node"] or r["pod"]]))
        mem = decision.memory_quota_bytes if reset else tier.memory_bytes
        bw = decision.bandwidth_quota_bytes_per_s if reset else tier.bandwidth_bytes_per_s
        assert got[(r["pod"], "qos-memory-quota")] == mem
        assert got[(r["pod"], "qos-bandwidth-quota")] == pytest.approx(bw)
