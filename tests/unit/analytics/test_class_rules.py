"""The vectorised class rules agree with the scalar oracle (the rules as they were written
before, :mod:`tests.unit.analytics.class_oracle`) on many generated inputs, thresholds and
their neighbours included, and the class report applies them as the oracle would."""

from __future__ import annotations

import math
from datetime import datetime, timedelta

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sits_observe.analytics.classes import rules
from sits_observe.analytics.classes import scalar as class_scalar
from sits_observe.analytics.classes.classify import class_report
from sits_observe.analytics.classes.scalar import ElasticSignals
from sits_observe.analytics.classes.settings import ClassSettings, TierQuota
from sits_observe.analytics.settings import GIB
from sits_observe.analytics.topology.settings import DEFAULT_LINKS, find_link_capacity
from tests.unit.analytics import class_oracle as oracle

S = ClassSettings()
T0 = datetime(2026, 1, 1)


def near(*edges: float) -> st.SearchStrategy[float]:
    """Values at, just below and just above each edge, mixed with arbitrary ones."""
    exact = [
        v for e in edges for v in (e, math.nextafter(e, -math.inf), math.nextafter(e, math.inf))
    ]
    return st.sampled_from([v for v in exact if v >= 0]) | st.floats(0.0, 2 * max(edges))


def maybe(values: st.SearchStrategy[float]) -> st.SearchStrategy[float | None]:
    return st.none() | values


def column(values: list[object], dtype: pl.DataType) -> pl.DataFrame:
    return pl.DataFrame({"v": values}, schema={"v": dtype})


# -- memory class and tiers -----------------------------------------------------------------

peaks = st.sampled_from(
    [0, 2 * GIB - 1, 2 * GIB, 2 * GIB + 1, 4 * GIB, 8 * GIB - 1, 8 * GIB, 8 * GIB + 1]
) | st.integers(0, 40 * GIB)


@settings(max_examples=200, deadline=None)
@given(st.lists(peaks, min_size=1, max_size=40))
def test_memory_class_and_fitting_tier_match_the_oracle(values: list[int]) -> None:
    got = column(values, pl.Int64()).select(
        rules.memory_class(pl.col("v"), S).alias("c"),
        rules.smallest_fitting_tier(pl.col("v"), S).alias("t"),
    )
    assert got["c"].to_list() == [oracle.memory_class(v, S) for v in values]
    assert got["t"].to_list() == [oracle.smallest_fitting_tier(v, S) for v in values]
    assert [class_scalar.memory_class(v, S) for v in values[:3]] == got["c"].to_list()[:3]


def test_memory_class_of_nothing_measured_is_null() -> None:
    got = column([None, float("nan")], pl.Float64()).select(rules.memory_class(pl.col("v"), S))
    assert got.to_series().to_list() == [None, None]


# -- time slice -----------------------------------------------------------------------------

p95s = maybe(near(S.slice_p95_above_s))
tokens = maybe(near(float(S.slice_sequence_above_tokens)))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(p95s, tokens), min_size=1, max_size=40))
def test_time_slice_matches_the_oracle(pairs: list[tuple[float | None, float | None]]) -> None:
    frame = pl.DataFrame(
        {"p95": [p for p, _ in pairs], "seq": [t for _, t in pairs]},
        schema={"p95": pl.Float64(), "seq": pl.Float64()},
    )
    rule = rules.time_slice_rule(pl.col("p95"), pl.col("seq"), S)
    got = frame.select(rule.alias("rule"), rules.time_slice_s(rule, S).alias("s"))
    want = [oracle.time_slice(p, t, S) for p, t in pairs]
    assert got["s"].to_list() == [w.slice_s for w in want]
    texts = [
        class_scalar.time_slice_text(r, p, t, S)
        for r, (p, t) in zip(got["rule"].to_list(), pairs, strict=True)
    ]
    assert texts == [w.rule for w in want]


# -- priority -------------------------------------------------------------------------------

classes = st.sampled_from(["ultra-low-latency", "throughput-guaranteed", "best-effort", "custom"])
rates = maybe(near(S.sla_violation_above_ratio))
fragments = maybe(near(S.preemption_fragmentation_above_ratio))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.none() | classes, rates, fragments), min_size=1, max_size=40))
def test_priority_matches_the_oracle(
    rows: list[tuple[str | None, float | None, float | None]],
) -> None:
    frame = pl.DataFrame(
        {"cls": [r[0] for r in rows], "rate": [r[1] for r in rows], "frag": [r[2] for r in rows]},
        schema={"cls": pl.String(), "rate": pl.Float64(), "frag": pl.Float64()},
    )
    got = frame.select(
        rules.proposed_priority_class(pl.col("cls"), pl.col("rate"), S).alias("p"),
        rules.preemption_policy(pl.col("frag"), S).alias("x"),
    )
    for (cls, rate, frag), proposed, preempt in zip(rows, got["p"], got["x"], strict=True):
        want = oracle.recommend_priority(cls, rate, frag, S)
        assert (proposed, preempt) == (want.proposed, want.preemption_policy)
        assert class_scalar.priority_text(cls, proposed, rate, frag, S) == want.reason


# -- SLA violation rate and GPU sharing -----------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(
    st.lists(near(0.015), max_size=30),
    st.integers(0, 5),
    st.sampled_from([0.015, 0.120, 0.300]),
)
def test_sla_violation_ratio_matches_the_oracle(
    latencies: list[float], failed: int, sla: float
) -> None:
    slow = sum(1 for v in latencies if v > sla)
    got = pl.select(
        rules.sla_violation_ratio(pl.lit(slow), pl.lit(failed), pl.lit(len(latencies)))
    ).item()
    want = oracle.sla_violation_rate(latencies, failed, sla)
    assert got == pytest.approx(want) if want is not None else got is None


@pytest.mark.parametrize("qos", ["Guaranteed", "Burstable", "BestEffort", "mixed", None])
@pytest.mark.parametrize("memory", [80 * GIB, 24 * GIB + 1, None])
def test_gpu_sharing_matches_the_oracle(qos: str | None, memory: int | None) -> None:
    frame = pl.DataFrame({"q": [qos], "m": [memory]}, schema={"q": pl.String(), "m": pl.Int64()})
    got = frame.select(rules.gpu_sharing(pl.col("q"), pl.col("m"), S)).row(0)
    want = oracle.gpu_sharing(qos, memory, S)
    assert got == (want.exclusive, want.memory_share_ratio, want.memory_limit_bytes)


# -- elastic rule ---------------------------------------------------------------------------

ratios = maybe(near(S.elastic_util_above_ratio, S.elastic_link_above_ratio) | st.floats(0, 1))


@settings(max_examples=200, deadline=None)
@given(
    ratios,
    ratios,
    st.sampled_from(list(S.tiers.values())),
    st.integers(0, 10 * GIB),
    st.floats(1e9, 1e12),
)
def test_elastic_rule_matches_the_oracle(
    util: float | None, link: float | None, quota: TierQuota, minimum: int, maximum: float
) -> None:
    signals = ElasticSignals(5.0, 5, util, link, None, None)
    args = (quota.memory_bytes, quota.bandwidth_bytes_per_s, signals, S)
    bounds = {"memory_minimum_bytes": minimum, "bandwidth_maximum_bytes_per_s": maximum}
    want = oracle.elastic_quota(*args, **bounds)  # type: ignore[arg-type]
    got = class_scalar.elastic_quota(*args, **bounds)  # type: ignore[arg-type]
    assert got.triggered is want.triggered
    assert got.memory_quota_bytes == want.memory_quota_bytes
    assert got.bandwidth_quota_bytes_per_s == pytest.approx(want.bandwidth_quota_bytes_per_s)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 2_000_000), st.booleans()), max_size=20),
    st.integers(-(2**62), 2**62),
)
def test_tasks_to_reset_matches_the_oracle(tasks: list[tuple[int, bool]], top: int) -> None:
    items = [class_scalar.Task(f"t{i}", p, m) for i, (p, m) in enumerate(tasks)]
    assert class_scalar.tasks_to_reset(items, top) == oracle.tasks_to_reset(items, top)


link_rates = st.none() | st.sampled_from([0.0, 450e9, 900e9, 1200e9]) | st.floats(0, 1e12)


Sample = tuple[float | None, int | None, float | None, float | None, float | None]


@settings(max_examples=100, deadline=None)
@given(
    st.dictionaries(
        st.integers(0, 20),  # seconds after T0
        st.tuples(
            maybe(st.floats(0, 1)),
            st.none() | st.integers(0, 80 * GIB),
            link_rates,
            link_rates,
            st.none() | st.floats(0, 64e9),
        ),
        min_size=1,
        max_size=25,
    ),
    st.sampled_from(["NVIDIA H100 80GB HBM3", "NVIDIA L4", "unknown"]),
)
def test_elastic_inputs_match_the_oracle(samples: dict[int, Sample], model: str) -> None:
    values = list(samples.values())
    series = pl.DataFrame(
        {
            "ts": [T0 + timedelta(seconds=t) for t in samples],
            "gpu_util_ratio": [v[0] for v in values],
            "fb_used_bytes": [v[1] for v in values],
            "nvlink_tx_bytes_per_s": [v[2] for v in values],
            "nvlink_rx_bytes_per_s": [v[3] for v in values],
            "pcie_tx_bytes_per_s": [v[4] for v in values],
            "pcie_rx_bytes_per_s": [v[4] for v in values],
        },
        schema_overrides={
            "gpu_util_ratio": pl.Float64,
            "fb_used_bytes": pl.Int64,
            "nvlink_tx_bytes_per_s": pl.Float64,
            "nvlink_rx_bytes_per_s": pl.Float64,
            "pcie_tx_bytes_per_s": pl.Float64,
            "pcie_rx_bytes_per_s": pl.Float64,
        },
    )
    link = find_link_capacity(DEFAULT_LINKS, model)
    want = oracle.elastic_signals(series, link, S)
    got = class_scalar.elastic_signals(series, link, S)
    assert got.samples == want.samples
    # A slope of ~8.6e9-byte samples over 1 s cancels ~16 digits: two correct formulas differ
    # by about eps x the largest value, so the memory slope's tolerance scales with it.
    biggest = max((abs(v[1]) for v in values if v[1] is not None), default=0)
    for name, slack in (
        ("gpu_util_ratio", 1e-6),
        ("link_saturation_ratio", 1e-6),
        ("memory_growth_bytes_per_s", max(1e-6, 1e-12 * biggest)),
        ("link_bandwidth_variance", 1e-6),
    ):
        g, w = getattr(got, name), getattr(want, name)
        assert (g is None) == (w is None), name
        if w is not None:
            assert g == pytest.approx(w, rel=1e-9, abs=slack), name


# -- the class report -----------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["finance", "ml"]),
            st.sampled_from(["Guaranteed", "Burstable", None]),
            st.sampled_from(["ultra-low-latency", "best-effort", None]),
            st.none() | peaks,
            st.lists(st.tuples(maybe(near(0.010, 0.015)), st.booleans()), max_size=8),
        ),
        min_size=1,
        max_size=8,
    ),
    fragments,
)
def test_class_report_applies_the_rules_as_the_oracle_does(
    pods: list[tuple[str, str | None, str | None, int | None, list[tuple[float | None, bool]]]],
    fragmentation: float | None,
) -> None:
    names = [f"p{i}" for i in range(len(pods))]
    pod_frame = pl.DataFrame(
        {
            "namespace": [p[0] for p in pods],
            "pod": names,
            "workload": names,
            "node": ["n1"] * len(pods),
            "qos_class": [p[1] for p in pods],
            "priority_class": [p[2] for p in pods],
            "gpu_request": [1] * len(pods),
        }
    )
    memory = pl.DataFrame(
        {
            "namespace": [p[0] for p in pods],
            "pod": names,
            "peak_gpu_memory_bytes": [p[3] for p in pods],
            "peak_total_gpu_memory_bytes": [p[3] for p in pods],
            "memory_source": ["gpu_processes"] * len(pods),
            "shared_gpu": [False] * len(pods),
        },
        schema_overrides={
            "peak_gpu_memory_bytes": pl.Int64,
            "peak_total_gpu_memory_bytes": pl.Int64,
        },
    )
    reqs = [(p[0], n, lat, ok) for p, n in zip(pods, names, strict=True) for lat, ok in p[4]]
    requests = pl.DataFrame(
        {
            "namespace": [r[0] for r in reqs],
            "pod": [r[1] for r in reqs],
            "latency_s": [r[2] for r in reqs],
            "ok": [r[3] for r in reqs],
            "prompt_tokens": [5000] * len(reqs),
            "output_tokens": [None] * len(reqs),
        },
        schema={
            "namespace": pl.String,
            "pod": pl.String,
            "latency_s": pl.Float64,
            "ok": pl.Boolean,
            "prompt_tokens": pl.Int64,
            "output_tokens": pl.Int64,
        },
    )
    got = class_report(
        pod_frame,
        memory,
        requests,
        S,
        fragmentation_ratio=fragmentation,
        gpu_memory_bytes={"n1": 80 * GIB},
    )
    assert [w.name for w in got] == sorted(names, key=lambda n: (pods[int(n[1:])][0], n))
    for w in got:
        ns, qos, cls, peak, rows = pods[int(str(w.name)[1:])]
        ok = [lat for lat, good in rows if good and lat is not None]
        failed = sum(1 for _, good in rows if not good)
        p95 = float(np.quantile(ok, 0.95)) if ok else None
        seq = 5000.0 if any(good for _, good in rows) else None
        sla = S.namespace_sla_p99_s.get(ns)
        rate = oracle.sla_violation_rate(ok, failed, sla) if sla is not None else None
        assert w.memory_class == (None if peak is None else oracle.memory_class(peak, S))
        assert w.fitting_tier == (None if peak is None else oracle.smallest_fitting_tier(peak, S))
        assert w.sharing == oracle.gpu_sharing(qos, 80 * GIB, S)
        assert w.p95_latency_s == (None if p95 is None else pytest.approx(p95))
        assert w.time_slice == oracle.time_slice(w.p95_latency_s, seq, S)
        assert w.sla_violation_rate == (None if rate is None else pytest.approx(rate))
        assert w.priority == oracle.recommend_priority(cls, w.sla_violation_rate, fragmentation, S)
