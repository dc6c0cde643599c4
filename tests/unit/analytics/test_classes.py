"""Workload classes and QoS rules, each against the numbers of SPEC "Workload classes and QoS
tiers", with the edges the spec leaves to interpretation pinned down. The rules are the
vectorised ones of :mod:`sits_observe.analytics.classes.rules`, called here through their
one-value front-ends; ``test_class_rules`` checks them against the scalar oracle at scale."""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np
import polars as pl
import pytest

from sits_observe.analytics.classes import rules as class_rules
from sits_observe.analytics.classes.classify import (
    NO_PREEMPT,
    PREEMPT,
    ElasticSignals,
    Task,
    class_report,
    elastic_quota,
    elastic_signals,
    memory_class,
    pod_memory_peaks,
    recommend_priority,
    tasks_to_reset,
    tier_quota,
    time_slice,
)
from sits_observe.analytics.classes.settings import ClassSettings
from sits_observe.analytics.settings import GB_PER_S, GIB
from sits_observe.analytics.topology.settings import DEFAULT_LINKS, find_link_capacity
from sits_observe.errors import UnknownNameError

#: The SPEC's namespace SLA example, configured (no namespace has an SLA by default).
SLA_EXAMPLE = ("finance=0.015", "medical=0.12", "government=0.3")
S = ClassSettings(sla=SLA_EXAMPLE)
T0 = datetime(2026, 1, 1)


@pytest.mark.parametrize(
    ("peak", "expected"),
    [
        (0, "L1"),
        (2 * GIB - 1, "L1"),
        (2 * GIB, "L2"),  # "L2 2-8 GiB": exactly 2 GiB is L2
        (8 * GIB, "L2"),  # "L3 > 8 GiB": exactly 8 GiB is still L2
        (8 * GIB + 1, "L3"),
        (80 * GIB, "L3"),
    ],
)
def test_memory_sensitivity(peak: int, expected: str) -> None:
    assert memory_class(peak, S) == expected


def test_tiers_are_the_specs() -> None:
    assert tier_quota("Gold", S).memory_bytes == 8 * GIB
    assert tier_quota("gold", S).bandwidth_bytes_per_s == 32 * GB_PER_S
    assert (
        tier_quota("silver", S).memory_bytes,
        tier_quota("silver", S).bandwidth_bytes_per_s,
    ) == (
        4 * GIB,
        16e9,
    )
    assert (
        tier_quota("bronze", S).memory_bytes,
        tier_quota("bronze", S).bandwidth_bytes_per_s,
    ) == (
        2 * GIB,
        8e9,
    )
    with pytest.raises(UnknownNameError, match="tiers: gold, silver, bronze"):
        tier_quota("platinum", S)


def test_smallest_fitting_tier() -> None:
    peaks = pl.DataFrame({"peak": [2 * GIB, 2 * GIB + 1, 8 * GIB, 8 * GIB + 1]})
    got = peaks.select(class_rules.smallest_fitting_tier(pl.col("peak"), S)).to_series()
    assert got.to_list() == ["bronze", "silver", "gold", None]


# -- elastic rule ---------------------------------------------------------------------------------


def signals(util: float | None, link: float | None) -> ElasticSignals:
    return ElasticSignals(5.0, 5, util, link, None, None)


GOLD_MEM, GOLD_BW = 8 * GIB, 32e9


@pytest.mark.parametrize(
    ("util", "link", "fires"),
    [
        (0.90, 0.80, False),  # utilisation exactly 90% is not above
        (0.95, 0.75, False),  # link saturation exactly 75% is not above
        (0.9000001, 0.7500001, True),
        (1.0, 1.0, True),
        (0.5, 0.99, False),
    ],
)
def test_elastic_rule_edges(util: float, link: float, fires: bool) -> None:
    decision = elastic_quota(
        GOLD_MEM,
        GOLD_BW,
        signals(util, link),
        S,
        memory_minimum_bytes=0,
        bandwidth_maximum_bytes_per_s=1e12,
    )
    assert decision.triggered is fires
    if fires:
        assert decision.memory_quota_bytes == int(8 * GIB * 0.8)
        assert decision.bandwidth_quota_bytes_per_s == pytest.approx(32e9 * 1.2)  # 38.4 GB/s
    else:
        assert (decision.memory_quota_bytes, decision.bandwidth_quota_bytes_per_s) == (
            GOLD_MEM,
            GOLD_BW,
        )


def test_elastic_rule_respects_minimum_and_hardware_maximum() -> None:
    decision = elastic_quota(
        GOLD_MEM,
        GOLD_BW,
        signals(0.95, 0.9),
        S,
        memory_minimum_bytes=7 * GIB,  # above 0.8 x 8 GiB = 6.4 GiB
        bandwidth_maximum_bytes_per_s=35e9,  # below 1.2 x 32 GB/s = 38.4 GB/s
    )
    assert (decision.memory_quota_bytes, decision.bandwidth_quota_bytes_per_s) == (7 * GIB, 35e9)


def test_elastic_rule_not_evaluated_without_signals() -> None:
    decision = elastic_quota(
        GOLD_MEM,
        GOLD_BW,
        signals(0.95, None),
        S,
        memory_minimum_bytes=0,
        bandwidth_maximum_bytes_per_s=1e12,
    )
    assert not decision.triggered
    assert decision.reason == "not evaluated: link saturation not measured"


def test_elastic_signals_over_the_last_5_seconds() -> None:
    # 8 samples at 1 Hz; the window (t_last - 5 s, t_last] holds the last 5 (t = 3..7).
    n = 8
    frame = pl.DataFrame(
        {
            "ts": [T0 + timedelta(seconds=i) for i in range(n)],
            "gpu_util_ratio": [0.0, 0.0, 0.0, 0.9, 0.92, 0.94, 0.96, 0.98],
            "fb_used_bytes": [GIB * i for i in range(n)],  # grows 1 GiB/s
            "nvlink_tx_bytes_per_s": [360e9] * n,
            "nvlink_rx_bytes_per_s": [360e9, 360e9, 360e9, 360e9, 360e9, 360e9, 360e9, 450e9],
            "pcie_tx_bytes_per_s": [1e9] * n,
            "pcie_rx_bytes_per_s": [1e9] * n,
        }
    )
    link = find_link_capacity(DEFAULT_LINKS, "NVIDIA H100 80GB HBM3")
    got = elastic_signals(frame, link, S)
    assert got.samples == 5
    assert got.gpu_util_ratio == pytest.approx(0.94)
    # NVLink (tx + rx) / 900 GB/s: 0.8 four times and 0.9 once; PCIe 2/128 is lower.
    assert got.link_saturation_ratio == pytest.approx((0.8 * 4 + 0.9) / 5)
    assert got.memory_growth_bytes_per_s == pytest.approx(GIB)
    traffic = [722e9] * 4 + [812e9]
    assert got.link_bandwidth_variance == pytest.approx(float(np.var(traffic, ddof=1)))
    assert elastic_quota(
        GOLD_MEM, GOLD_BW, got, S, memory_minimum_bytes=0, bandwidth_maximum_bytes_per_s=900e9
    ).triggered


def test_only_lower_priority_tasks_missing_their_sla_are_reset() -> None:
    tasks = [
        Task("low-miss", 1_000, True),
        Task("low-ok", 1_000, False),
        Task("same-miss", 500_000, True),
        Task("high-miss", 1_000_000, True),
    ]
    assert [t.name for t in tasks_to_reset(tasks, 500_000)] == ["low-miss"]


# -- time slice, QoS, priority -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("p95_s", "tokens", "slice_s"),
    [
        (0.010, None, 0.015),  # exactly 10 ms is not above
        (0.0100001, None, 0.025),
        (None, 4096, 0.015),  # exactly 4096 tokens is not above
        (None, 4097, 0.010),
        (0.005, 8192, 0.010),
        (0.020, 8192, 0.025),  # both hold: the P95 rule, listed first, wins
        (None, None, 0.015),
    ],
)
def test_time_slice(p95_s: float | None, tokens: float | None, slice_s: float) -> None:
    assert time_slice(p95_s, tokens, S).slice_s == slice_s


def test_time_slice_names_missing_inputs() -> None:
    assert time_slice(None, None, S).rule == "default (p95, sequence length not measured)"
    assert time_slice(0.002, 100, S).rule == "default"


def test_kubernetes_qos_mapping() -> None:
    frame = pl.DataFrame({"qos": ["Guaranteed", "Burstable", "BestEffort"], "mem": [80 * GIB] * 3})
    got = frame.select(class_rules.gpu_sharing(pl.col("qos"), pl.col("mem"), S)).rows()
    assert got == [(True, 1.0, 80 * GIB), (False, 0.6, 48 * GIB), (False, None, None)]


def test_priority_classes_are_the_specs() -> None:
    assert {c.name: c.value for c in S.priority_classes} == {
        "ultra-low-latency": 1_000_000,
        "throughput-guaranteed": 500_000,
        "best-effort": 1_000,
    }
    assert S.namespace_sla_p99_s == {"finance": 0.015, "medical": 0.120, "government": 0.300}
    # The SLAs are configuration: none by default, so no namespace misses one.
    assert ClassSettings().namespace_sla_p99_s == {}


@pytest.mark.parametrize(
    ("current", "rate", "proposed"),
    [
        ("ultra-low-latency", 0.05, "ultra-low-latency"),  # exactly 5% is not above
        ("ultra-low-latency", 0.0501, "throughput-guaranteed"),
        ("throughput-guaranteed", 0.2, "best-effort"),
        ("best-effort", 0.9, "best-effort"),  # already the lowest
        ("custom", 0.9, None),  # not one of the spec's classes: no proposal
        ("custom", None, "custom"),
    ],
)
def test_priority_by_sla_violation(current: str, rate: float | None, proposed: str | None) -> None:
    assert recommend_priority(current, rate, None, S).proposed == proposed


@pytest.mark.parametrize(
    ("fragmentation", "policy"),
    [(0.70, NO_PREEMPT), (0.7000001, PREEMPT), (0.2, NO_PREEMPT), (None, None)],
)
def test_preemption_by_fragmentation(fragmentation: float | None, policy: str | None) -> None:
    got = recommend_priority("best-effort", 0.0, fragmentation, S)
    assert got.preemption_policy == policy


def test_sla_violation_rate_counts_slow_and_failed_requests() -> None:
    # [10, 15, 16, 30] ms against 15 ms: two slow, one failed, of five.
    rate = class_rules.sla_violation_ratio(pl.lit(2), pl.lit(1), pl.lit(4))
    assert pl.select(rate).item() == pytest.approx(3 / 5)
    assert (
        pl.select(class_rules.sla_violation_ratio(pl.lit(0), pl.lit(0), pl.lit(0))).item() is None
    )


# -- applied to pods -----------------------------------------------------------------------------


def pods_frame() -> pl.DataFrame:
    return pl.DataFrame(
        {
            "pod_uid": ["u1", "u2", "u3", "u4"],
            "namespace": ["finance", "finance", "ml", "ml"],
            "pod": ["chat-1", "chat-2", "train-0", "web-0"],
            "workload": ["chat", "chat", "train", "web"],
            "node": ["n1", "n1", "n2", "n2"],
            "qos_class": ["Guaranteed", "Guaranteed", "Burstable", "BestEffort"],
            "priority_class": ["ultra-low-latency"] * 2 + ["best-effort", None],
            "gpu_request": [1, 1, 2, 0],
        }
    )


def test_peaks_prefer_process_memory_and_flag_shared_gpus() -> None:
    processes = pl.DataFrame(
        {
            "ts": [T0, T0, T0 + timedelta(seconds=1)],
            "gpu_uuid": ["G1", "G1", "G1"],
            "pod_uid": ["u1", "u1", "u1"],
            "used_memory_bytes": [GIB, GIB, 3 * GIB],  # two processes at T0: 2 GiB, then 3 GiB
        }
    )
    samples = pl.DataFrame(
        {
            "ts": [T0, T0, T0, T0],
            "gpu_uuid": ["G1", "G3", "G4", "G3"],
            "namespace": ["finance", "ml", "ml", "other"],
            "pod": ["chat-1", "train-0", "train-0", "noisy"],
            "fb_used_bytes": [40 * GIB, 5 * GIB, 4 * GIB, 5 * GIB],
        }
    )
    peaks = {
        (r["namespace"], r["pod"]): r
        for r in pod_memory_peaks(processes, samples, pods_frame()).iter_rows(named=True)
    }
    chat = peaks[("finance", "chat-1")]
    assert (chat["peak_gpu_memory_bytes"], chat["memory_source"]) == (3 * GIB, "gpu_processes")
    train = peaks[("ml", "train-0")]
    assert train["peak_gpu_memory_bytes"] == 5 * GIB
    assert train["peak_total_gpu_memory_bytes"] == 9 * GIB
    assert (train["memory_source"], train["shared_gpu"]) == ("gpu_samples", True)


def test_class_report_per_pod_and_workload() -> None:
    memory = pl.DataFrame(
        {
            "namespace": ["finance", "finance", "ml"],
            "pod": ["chat-1", "chat-2", "train-0"],
            "peak_gpu_memory_bytes": [2 * GIB - 1, 6 * GIB, 20 * GIB],
            "peak_total_gpu_memory_bytes": [2 * GIB - 1, 6 * GIB, 40 * GIB],
            "memory_source": ["gpu_processes"] * 3,
            "shared_gpu": [False] * 3,
        }
    )
    latencies = [0.004, 0.006, 0.008, 0.012, 0.030]
    requests = pl.DataFrame(
        {
            "namespace": ["finance"] * 6,
            "pod": ["chat-1"] * 5 + ["chat-2"],
            "latency_s": [*latencies, 0.001],
            "ok": [True] * 5 + [False],
            "prompt_tokens": [100, 200, 5000, 300, 400, None],
            "output_tokens": [10, None, 10, 10, 10, None],
        }
    )
    kwargs = {"gpu_memory_bytes": {"n2": 80 * GIB}, "fragmentation_ratio": 0.8}
    per_pod = {w.name: w for w in class_report(pods_frame(), memory, requests, S, **kwargs)}
    assert set(per_pod) == {"chat-1", "chat-2", "train-0"}  # web-0 has no GPU
    chat = per_pod["chat-1"]
    assert (chat.memory_class, chat.fitting_tier) == ("L1", "bronze")
    assert chat.requests == 5
    assert chat.p95_latency_s == pytest.approx(float(np.quantile(latencies, 0.95)))
    assert chat.time_slice.slice_s == 0.025  # P95 26.4 ms > 10 ms
    assert chat.sla_p99_s == 0.015
    assert chat.sla_violation_rate == pytest.approx(1 / 5)  # 30 ms > 15 ms
    assert chat.priority.proposed == "throughput-guaranteed"
    assert chat.priority.preemption_policy == PREEMPT
    assert chat.sharing.exclusive
    train = per_pod["train-0"]
    assert (train.memory_class, train.sharing.memory_limit_bytes) == ("L3", 48 * GIB)
    assert train.sla_violation_rate is None  # namespace ml has no SLA
    per_workload = {
        w.name: w for w in class_report(pods_frame(), memory, requests, S, by="workload", **kwargs)
    }
    chat_wl = per_workload["chat"]
    assert (chat_wl.pods, chat_wl.peak_gpu_memory_bytes, chat_wl.memory_class) == (2, 6 * GIB, "L2")
    assert chat_wl.requests == 6
    assert chat_wl.sla_violation_rate == pytest.approx(2 / 6)  # one slow, one failed
