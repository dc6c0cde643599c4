"""The simulated server against the measurements it is calibrated on.

Checks against ``shared/data/traces/splitwise-perf-model/perf_model_llama2-70b.csv``
(Splitwise, measured Llama2-70B on DGX-A100 / DGX-H100), read at test time so that a wrong
constant or a wrong server model fails here, not only a drift of the constants:

- a burst of ``b`` requests of 512 prompt / 128 output tokens on an idle server (Splitwise's
  batch sweep): TTFT within 15 % of ``prompt_time``, time per output token and end-to-end
  latency within 10 % of ``token_time`` and ``e2e_time``;
- one request at a time (a low load): TTFT within 15 % and time per output token within 10 %;
- at half of capacity, time per output token within 10 % of the measured decode step at the
  run's mean batch, stretched by the share of GPU time the arrivals' prefill takes
  (``rate x (prompt_time - token_time)`` at batch 1): prefill runs in the same steps as
  decode, as on a real server with chunked prefill.

Skips where the file is absent.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from sits_observe.analytics.serving.step_profiles import A100, H100, GpuLatencyProfile, TokenShape
from sits_observe.lab.cluster.serving import fidelity

pytestmark = pytest.mark.shared_data

PERF_MODEL = Path("traces") / "splitwise-perf-model" / "perf_model_llama2-70b.csv"
#: The tolerances the evidence page states (docs/evidence/inference-calibration.md).
TTFT_RELATIVE = 0.15
TBT_RELATIVE = 0.10
E2E_RELATIVE = 0.10
#: Splitwise's request shape: 512 prompt tokens, 128 output tokens.
SPLITWISE_SHAPE = TokenShape("splitwise", (0.0, 1.0), (512, 512), (128, 128))
GPUS = [pytest.param(H100, "h100-80gb", id="h100"), pytest.param(A100, "a100-80gb", id="a100")]


@pytest.fixture
def rows(shared_data: Path) -> pl.DataFrame:
    return pl.read_csv(shared_data / PERF_MODEL)


@pytest.mark.parametrize(("profile", "hardware"), GPUS)
@pytest.mark.parametrize("batch", [1, 4, 16, 64])
def test_a_burst_matches_splitwise_s_batch_sweep(
    rows: pl.DataFrame, profile: GpuLatencyProfile, hardware: str, batch: int
) -> None:
    ttft_ms, tbt_ms, e2e_ms = fidelity.splitwise_point(rows, hardware, batch=batch)
    sim = fidelity.burst(profile, batch)
    # The measurement prefilled the whole batch before the first token: the last request's
    # TTFT, the slowest request's end-to-end latency.
    assert sim.ttft_ms.max() == pytest.approx(ttft_ms, rel=TTFT_RELATIVE)
    assert sim.e2e_ms.max() == pytest.approx(e2e_ms, rel=E2E_RELATIVE)
    if batch <= 16:  # past 16 x 512 tokens the prefill takes two chunks; decode overlaps one
        assert np.median(sim.tpot_ms) == pytest.approx(tbt_ms, rel=TBT_RELATIVE)


@pytest.mark.parametrize(("profile", "hardware"), GPUS)
def test_one_request_at_a_time_sees_the_measured_prefill_and_decode_step(
    rows: pl.DataFrame, profile: GpuLatencyProfile, hardware: str
) -> None:
    ttft_ms, tbt_ms, _ = fidelity.splitwise_point(rows, hardware)
    run = fidelity.steady(profile, SPLITWISE_SHAPE, rate_rps=0.03, duration_s=900, warmup_s=0)
    assert np.median(run.latencies.ttft_ms) == pytest.approx(ttft_ms, rel=TTFT_RELATIVE)
    assert np.median(run.latencies.tpot_ms) == pytest.approx(tbt_ms, rel=TBT_RELATIVE)


@pytest.mark.parametrize(("profile", "hardware"), GPUS)
def test_at_half_capacity_decode_shares_the_gpu_with_prefill(
    rows: pl.DataFrame, profile: GpuLatencyProfile, hardware: str
) -> None:
    rate_rps = 0.5 * fidelity.server(profile, SPLITWISE_SHAPE).capacity_rps()
    run = fidelity.steady(profile, SPLITWISE_SHAPE, rate_rps=rate_rps, duration_s=420)
    ttft_ms, tbt_ms, _ = fidelity.splitwise_point(rows, hardware)
    prefill_share = rate_rps * (ttft_ms - tbt_ms) / 1000
    expected_ms = fidelity.splitwise_decode_ms(rows, hardware, run.mean_batch) / (1 - prefill_share)
    assert run.throughput_rps == pytest.approx(rate_rps, rel=0.05)
    assert np.median(run.latencies.tpot_ms) == pytest.approx(expected_ms, rel=TBT_RELATIVE)
