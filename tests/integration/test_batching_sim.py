"""The batching estimate against the simulator's server (the check of
docs/analytics/batching.md): the server runs one-step requests on the calibrated H100 step
shape, Poisson arrivals, with and without a batching window, and the measured P99, throughput
and GPU busy ratio must lie within the bounds the page states of the estimate.

The anchor is the documents' micro-batching figures (SPEC): 1,240 QPS unbatched read as the
unbatched capacity (one step 1 / 1,240 s), 2,870 QPS as the load.
"""

from __future__ import annotations

import pytest

from sits_observe.analytics.serving.batching import (
    BatchingEstimate,
    BatchingSetting,
    StepTime,
    estimate_window,
)
from sits_observe.analytics.serving.step_profiles import H100
from sits_observe.lab.cluster.serving.batching_run import BatchingRun, run_batching, scaled_profile

STEP_S = 1 / 1240
LOAD_RPS = 2870.0
#: The bounds docs/analytics/batching.md states for batched settings (max batch > 1).
P99_RELATIVE = 0.10
THROUGHPUT_RELATIVE = 0.03
BUSY_ABSOLUTE = 0.16


def _both(window_s: float, max_batch: int) -> tuple[BatchingRun, BatchingEstimate]:
    sim = run_batching(
        scaled_profile(H100, STEP_S),
        load_rps=LOAD_RPS,
        window_s=window_s,
        max_batch=max_batch,
        duration_s=3.0,
        warmup_s=0.5,
    )
    est = estimate_window(
        LOAD_RPS, BatchingSetting(window_s=window_s, max_batch=max_batch), StepTime(STEP_S)
    )
    return sim, est


def test_unbatched_saturates_at_the_step_rate() -> None:
    sim, est = _both(0.0, 1)
    assert est.saturated
    assert sim.throughput_rps == pytest.approx(1240, rel=THROUGHPUT_RELATIVE)
    assert sim.gpu_busy_ratio > 0.99
    assert sim.p99_s > 0.1  # the queue grows for the whole run: no bounded P99


@pytest.mark.parametrize(
    ("window_s", "max_batch"), [(0.0, 8), (0.0005, 8), (0.001, 8), (0.002, 16)]
)
def test_batched_settings_meet_the_stated_bounds(window_s: float, max_batch: int) -> None:
    sim, est = _both(window_s, max_batch)
    assert not est.saturated
    assert sim.p99_s == pytest.approx(est.p99_s, rel=P99_RELATIVE)
    assert sim.throughput_rps == pytest.approx(est.throughput_rps, rel=THROUGHPUT_RELATIVE)
    assert abs(sim.gpu_busy_ratio - est.gpu_busy_ratio) <= BUSY_ABSOLUTE


def test_the_window_raises_throughput_as_the_documents_say() -> None:
    # Documents: 1,240 -> 2,870 QPS (x 2.31) with a batching window.
    plain, _ = _both(0.0, 1)
    windowed, est = _both(0.0005, 8)
    # The estimate: the whole load instead of the unbatched capacity, LOAD_RPS / 1240.
    assert est.throughput_rps / (1 / STEP_S) == pytest.approx(2870 / 1240)
    assert windowed.throughput_rps / plain.throughput_rps == pytest.approx(
        2870 / 1240, rel=THROUGHPUT_RELATIVE * 2
    )
