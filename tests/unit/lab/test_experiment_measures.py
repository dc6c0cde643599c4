"""The experiment's measures on hand-made timelines: time weighting, waits, FGD, spreads."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sits_observe.analytics.fragmentation.fgd.model import PodShape
from sits_observe.lab.experiment.measures import (
    ClusterSamples,
    PodTimes,
    RunMeasures,
    RunTimeline,
    check_target,
    quantile,
    run_measures,
    spread,
    target_workload,
    time_weighted_mean,
    wait_stats,
)

WHOLE = PodShape(1000, 1, 1000)
HALF = PodShape(1000, 1, 500)
CPU = PodShape(4000, 0, 0)


def test_time_weighted_mean_holds_each_value_until_the_next_sample() -> None:
    t = np.array([0.0, 10.0, 40.0])
    v = np.array([0.0, 1.0, 0.5])
    # 0 for 10 s, 1 for 30 s, 0.5 for the last 20 s (until the end at 60 s).
    assert time_weighted_mean(t, v, 60.0) == pytest.approx((0 * 10 + 1 * 30 + 0.5 * 20) / 60)
    # The plain mean of the samples would be 0.5: the weighting matters.
    assert time_weighted_mean(t, v, 60.0) != pytest.approx(float(v.mean()))


def test_time_weighted_mean_gives_nan_samples_no_weight_and_empty_input_nan() -> None:
    t = np.array([0.0, 10.0, 20.0])
    v = np.array([1.0, np.nan, 3.0])
    assert time_weighted_mean(t, v, 30.0) == pytest.approx((1 * 10 + 3 * 10) / 20)
    assert math.isnan(time_weighted_mean(np.array([]), np.array([]), 10.0))
    # A single sample at the very end has no span: its value is the answer.
    assert time_weighted_mean(np.array([5.0]), np.array([0.25]), 5.0) == 0.25


def test_time_weighted_mean_refuses_unordered_or_mismatched_samples() -> None:
    with pytest.raises(ValueError, match="must not decrease"):
        time_weighted_mean(np.array([10.0, 0.0]), np.array([1.0, 2.0]), 20.0)
    with pytest.raises(ValueError, match="differ in shape"):
        time_weighted_mean(np.array([0.0]), np.array([1.0, 2.0]), 20.0)


def test_wait_stats_count_waiting_and_never_scheduled_gpu_pods() -> None:
    pods = [
        PodTimes("training/a", WHOLE, arrived_s=0.0, bound_s=0.0),  # bound in its own pass
        PodTimes("training/b", HALF, arrived_s=10.0, bound_s=40.0),  # waited 30 s
        PodTimes("training/c", WHOLE, arrived_s=20.0, bound_s=None),  # never: 80 s at the end
        PodTimes("training/prep", CPU, arrived_s=0.0, bound_s=None),  # CPU-only: left out
    ]
    stats = wait_stats(pods, end_s=100.0)
    assert (stats.gpu_pods, stats.waited, stats.unscheduled) == (3, 1, 1)
    # Waits 0, 30 and 80 (the never-bound pod counts until the end); linear P95 at rank 1.9.
    assert stats.p95_s == pytest.approx(30 + 0.9 * (80 - 30))


def test_leaving_a_pod_unscheduled_never_lowers_the_p95_wait() -> None:
    bound = [PodTimes(f"p{i}", WHOLE, 0.0, float(i)) for i in range(20)]
    late = [*bound[:-1], PodTimes("p19", WHOLE, 0.0, None)]
    assert wait_stats(late, 1000.0).p95_s > wait_stats(bound, 1000.0).p95_s


def test_quantile_of_nothing_is_nan() -> None:
    assert math.isnan(quantile(np.array([]), 0.95))
    assert quantile(np.array([1.0, 2.0, 3.0, np.nan]), 0.5) == 2.0


def _timeline(**over: object) -> RunTimeline:
    """One node with two GPUs: all free at 0 s, GPU 0 half taken from 60 s, until 120 s."""
    gpu = np.array([[[1000, 1000]], [[500, 1000]]], dtype=np.int64)
    cpu = np.array([[64_000], [63_000]], dtype=np.int64)
    values: dict[str, object] = {
        "arm": "kube-default",
        "seed": 0,
        "end_s": 120.0,
        "node_names": ("n1",),
        "gpu_models": ("NVIDIA-A100",),
        "gpu_count": np.array([2], dtype=np.int64),
        "cpu_capacity_milli": np.array([64_000], dtype=np.int64),
        "samples": ClusterSamples(np.array([0.0, 60.0]), gpu, cpu),
        "pods": (
            PodTimes("training/w1", WHOLE, 0.0, 0.0),
            PodTimes("training/w2", WHOLE, 5.0, 50.0),
            PodTimes("training/h", HALF, 60.0, None),
        ),
        "util_t_s": np.array([0.0, 30.0, 90.0]),
        "util_ratio": np.array([0.0, 0.6, 0.9]),
        "latencies_s": np.linspace(1.0, 100.0, 100),
        "ttfts_s": np.linspace(0.1, 2.0, 20),
        "pod_start_s": np.array([2.0, 4.0, 6.0, 8.0]),
        "quota_rejections": 7,
        "controller_applied": (("quota-gpu", 2), ("time-slice", 1)),
    }
    values.update(over)
    return RunTimeline(**values)  # type: ignore[arg-type]


def test_run_measures_of_a_hand_made_timeline() -> None:
    m = run_measures(_timeline())
    # Allocation: 0 for 60 s, 500 of 2000 milli for 60 s.
    assert m.gpu_allocation_ratio == pytest.approx(0.125)
    # Utilisation: 0 for 30 s, 0.6 for 60 s, 0.9 for 30 s.
    assert m.gpu_utilisation_ratio == pytest.approx((0.6 * 60 + 0.9 * 30) / 120)
    # M: two whole-GPU pods and one half (weights 2/3 and 1/3). From 60 s GPU 0 has 500 milli
    # free: whole-GPU pods cannot use it (F = 2/3 x 500), the half can. Idle = 1500 milli.
    frag_gpus = 2 / 3 * 500 / 1000
    assert m.frag_gpus == pytest.approx(frag_gpus / 2)
    assert m.frag_ratio == pytest.approx((2 / 3 * 500 / 1500) / 2)
    assert (m.gpu_pods, m.gpu_pods_waited, m.gpu_pods_unscheduled) == (3, 1, 1)
    assert m.latency_p50_s == pytest.approx(50.5)
    assert m.latency_p99_s == pytest.approx(99.01)
    assert m.requests == 100
    assert m.ttft_p50_s == pytest.approx(1.05)
    assert m.ttft_p95_s == pytest.approx(0.1 + 0.95 * 1.9)
    assert m.pod_start_p95_s == pytest.approx(6 + 0.85 * 2)
    assert (m.quota_rejections, m.controller_applied) == (7, 3)


def test_an_empty_cluster_is_not_fragmented_and_no_arrivals_means_no_measure() -> None:
    m = run_measures(_timeline(samples=_timeline().samples, pods=()))
    assert math.isnan(m.frag_ratio) and math.isnan(m.wait_p95_s)
    assert m.gpu_pods == 0
    empty = ClusterSamples(
        np.array([0.0]), np.array([[[1000, 1000]]]), np.array([[64_000]], dtype=np.int64)
    )
    assert run_measures(_timeline(samples=empty)).frag_ratio == 0.0


def test_target_workload_is_the_arrivals_typical_pods() -> None:
    workload = target_workload(_timeline().pods)
    assert workload is not None
    assert {p.shape: p.weight for p in workload.pods} == pytest.approx({WHOLE: 2 / 3, HALF: 1 / 3})
    assert target_workload(()) is None


def _measures(**over: float) -> RunMeasures:
    base = dict.fromkeys(
        (
            "gpu_allocation_ratio",
            "gpu_utilisation_ratio",
            "frag_ratio",
            "frag_gpus",
            "wait_p95_s",
            "latency_p50_s",
            "latency_p95_s",
            "latency_p99_s",
            "ttft_p50_s",
            "ttft_p95_s",
            "pod_start_p95_s",
        ),
        0.5,
    )
    counts = dict.fromkeys(
        (
            "gpu_pods",
            "gpu_pods_waited",
            "gpu_pods_unscheduled",
            "requests",
            "quota_rejections",
            "controller_applied",
        ),
        10,
    )
    values: dict[str, float] = {**base, **counts, **over}
    return RunMeasures(**values)  # type: ignore[arg-type]


def test_spread_is_mean_and_range_over_seeds_without_nans() -> None:
    runs = [_measures(frag_ratio=0.2), _measures(frag_ratio=0.4), _measures(frag_ratio=0.9)]
    s = spread(runs)
    assert (s["frag_ratio"].mean, s["frag_ratio"].low, s["frag_ratio"].high) == pytest.approx(
        (0.5, 0.2, 0.9)
    )
    s = spread([_measures(latency_p95_s=float("nan")), _measures(latency_p95_s=2.0)])
    assert (s["latency_p95_s"].mean, s["latency_p95_s"].low) == (2.0, 2.0)
    assert math.isnan(spread([_measures(wait_p95_s=float("nan"))])["wait_p95_s"].mean)


def test_the_target_needs_all_three_on_the_seed() -> None:
    default = _measures(frag_ratio=0.4, gpu_pods_waited=10, gpu_pods_unscheduled=2)
    better = _measures(frag_ratio=0.3, gpu_pods_waited=8, gpu_pods_unscheduled=2)
    assert check_target(3, default, better).met
    # Fewer waiting pods but more unscheduled ones: the sum is what counts.
    worse = _measures(frag_ratio=0.3, gpu_pods_waited=5, gpu_pods_unscheduled=8)
    check = check_target(3, default, worse)
    assert (check.frag_lower, check.waiting_lower, check.met) == (True, False, False)
    # An equal P95 is no worse; a higher one, or none measured, is.
    assert check_target(0, default, _measures(frag_ratio=0.3, gpu_pods_waited=1)).p95_no_worse
    slower = _measures(frag_ratio=0.3, gpu_pods_waited=1, latency_p95_s=0.6)
    assert not check_target(0, default, slower).p95_no_worse
    unmeasured = _measures(frag_ratio=0.3, gpu_pods_waited=1, latency_p95_s=float("nan"))
    assert not check_target(0, default, unmeasured).p95_no_worse
