"""The batching estimate on step curves whose values are known by hand.

``FLAT``: every batch takes 1 ms (log-log interpolation of a constant is the constant).
``ROOT``: ``t(b) = sqrt(b)`` seconds (points on a power law interpolate exactly in log-log).
"""

from __future__ import annotations

import math

import pytest

from sits_observe.analytics.serving.batching import (
    BatchingSetting,
    ObservedBatching,
    StepTime,
    estimate_max_seqs,
    estimate_window,
    recommend,
)
from sits_observe.analytics.serving.step_profiles import GpuLatencyProfile

_TOKENS = (128.0, 256.0)
_ONES = (1.0, 1.0)
FLAT = GpuLatencyProfile("flat", _TOKENS, _ONES, (1.0, 64.0), (1.0, 1.0))
ROOT = GpuLatencyProfile("root", _TOKENS, _ONES, (1.0, 4.0, 16.0, 64.0), (1e3, 2e3, 4e3, 8e3))
STEP = StepTime(0.001, FLAT)


def test_a_window_fills_the_batch_and_every_request_waits() -> None:
    # w' = min(0.5 ms, 7 / 1000) = 0.5 ms; b = max(1 + 1000 x 0.0005, 1000 x 0.001) = 1.5;
    # busy = 1000 x 0.001 / 1.5; D = max(0.5 ms, 1 ms) = 1 ms, p = 1: P99 = 1 + 0.99 ms.
    e = estimate_window(1000.0, BatchingSetting(window_s=0.0005, max_batch=8), STEP)
    assert e.batch_size == pytest.approx(1.5)
    assert e.capacity_rps == pytest.approx(8000.0)
    assert e.gpu_busy_ratio == pytest.approx(1 / 1.5)
    assert e.p99_s == pytest.approx(0.00199)
    assert e.throughput_rps == 1000.0 and not e.saturated


def test_without_a_window_only_requests_finding_the_gpu_busy_wait() -> None:
    # b = 1, busy = p = 0.5: wait = 1 ms x (1 - 0.01 / 0.5) = 0.98 ms.
    e = estimate_window(500.0, BatchingSetting(window_s=0.0, max_batch=8), STEP)
    assert e.batch_size == pytest.approx(1.0)
    assert e.p99_s == pytest.approx(0.00198)
    assert e.gpu_busy_ratio == pytest.approx(0.5)


def test_unbatched_is_md1() -> None:
    # rho = 0.5: 1 ms + 1 ms / (2 x 0.5) x ln(50).
    e = estimate_window(500.0, BatchingSetting(window_s=0.002, max_batch=1), STEP)
    assert e.p99_s == pytest.approx(0.001 + 0.001 * math.log(50.0))
    assert e.batch_size == 1.0


def test_at_capacity_the_p99_is_unbounded() -> None:
    e = estimate_window(1000.0, BatchingSetting(max_batch=1), STEP)
    assert e.saturated and math.isinf(e.p99_s)
    assert e.throughput_rps == pytest.approx(1000.0) and e.gpu_busy_ratio == 1.0


def test_the_cap_shortens_the_window() -> None:
    # m = 2 at 1500/s: w' = min(1 ms, 1 / 1500 s); b = max(1 + 1, 1.5) = 2.
    e = estimate_window(1500.0, BatchingSetting(window_s=0.001, max_batch=2), STEP)
    assert e.batch_size == pytest.approx(2.0)
    assert e.gpu_busy_ratio == pytest.approx(0.75)
    # D = max(0.67 ms, 1 ms) = 1 ms: P99 = 1 ms + 0.99 ms.
    assert e.p99_s == pytest.approx(0.00199)


def test_max_num_seqs_reproduces_the_observed_window_and_scales_the_step() -> None:
    # Residence b0 / x0 = 2 s at t(10); t(b) = sqrt(b): time in batch 2 sqrt(b / 10).
    observed = ObservedBatching(batch_size=10.0, throughput_rps=5.0, p99_s=4.0)
    same = estimate_max_seqs(observed, BatchingSetting(max_batch=64), ROOT)
    assert same.batch_size == pytest.approx(10.0)  # b = 5 x 2 sqrt(b / 10) -> b = 10
    assert same.p99_s == pytest.approx(4.0)
    assert same.capacity_rps == pytest.approx(64 / (2 * math.sqrt(6.4)))
    small = estimate_max_seqs(observed, BatchingSetting(max_batch=8), ROOT)
    # capacity 8 / (2 sqrt(0.8)) = 4.47/s < the observed 5/s
    assert small.saturated and math.isinf(small.p99_s)


def test_recommend_takes_the_lowest_p99_with_headroom_and_the_least_change() -> None:
    settings = [BatchingSetting(window_s=w, max_batch=m) for w in (0.0, 0.001) for m in (1, 8, 16)]
    estimates = [estimate_window(500.0, s, STEP) for s in settings]
    chosen = recommend(estimates, p99_limit_s=0.01, headroom_ratio=0.3)
    assert chosen is not None
    # m = 1: P99 1 + ln(50) ms; m = 8 and 16 without a window 1.98 ms, with one 1.99 ms:
    # the lowest P99, ties to the smaller batch.
    assert chosen.setting == BatchingSetting(window_s=0.0, max_batch=8)
    assert recommend(estimates, p99_limit_s=0.0015, headroom_ratio=0.3) is None
    # 20x headroom: only m = 16 has it (8000 / 500 = 16 < 21 <= 16000 / 500 = 32).
    roomy = recommend(estimates, p99_limit_s=0.01, headroom_ratio=20.0)
    assert roomy is not None and roomy.setting.max_batch == 16
    # 40x: none has it, so the most capacity.
    tight = recommend(estimates, p99_limit_s=0.01, headroom_ratio=40.0)
    assert tight is not None and tight.capacity_rps == pytest.approx(16000.0)


def test_the_step_curve_extends_past_the_measured_batches() -> None:
    # ROOT ends at 64 with slope 0.5: t(256) = sqrt(256) = 16 s.
    assert StepTime(1.0, ROOT)(256.0) == pytest.approx(16.0)
    assert StepTime(1.0, ROOT)(16.0) == pytest.approx(4.0)


def test_settings_are_bounded() -> None:
    with pytest.raises(ValueError):
        BatchingSetting(window_s=-0.001)
    with pytest.raises(ValueError):
        BatchingSetting(max_batch=0)
