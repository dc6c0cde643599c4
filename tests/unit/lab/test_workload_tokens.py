"""Arrivals draw their token counts from the load profile's token shape (Azure by default,
Mooncake's long-context conversations as the option), and a server's capacity follows it."""

from __future__ import annotations

import numpy as np
import pytest

from sits_observe.analytics.serving.step_profiles import A100, AZURE_CONV, MOONCAKE_CONV, TokenShape
from sits_observe.lab.cluster.serving.server import InferenceServer
from sits_observe.lab.cluster.serving.workload import DEMO_LOAD, ArrivalGenerator, LoadProfile


@pytest.mark.parametrize("tokens", [AZURE_CONV, MOONCAKE_CONV], ids=lambda t: t.name)
def test_arrivals_follow_the_token_shape(tokens: TokenShape) -> None:
    profile = LoadProfile(base_rps=50.0, low=1, high=1, tokens=tokens)
    arrivals = ArrivalGenerator(profile, np.random.default_rng(3)).between(0.0, 400.0)
    prompts = np.array([a.prompt_tokens for a in arrivals])
    outputs = np.array([a.output_tokens for a in arrivals])
    median = tokens.probabilities.index(0.5)
    assert np.median(prompts) == pytest.approx(tokens.prompt_tokens[median], rel=0.05)
    assert np.median(outputs) == pytest.approx(tokens.output_tokens[median], rel=0.05)
    assert prompts.max() <= tokens.prompt_tokens[-1] and prompts.min() >= 1


def test_long_prompts_lower_a_server_s_capacity() -> None:
    azure = InferenceServer("m", A100, tensor_parallel=4, kv_capacity_bytes=10**15)
    mooncake = InferenceServer(
        "m", A100, tensor_parallel=4, kv_capacity_bytes=10**15, tokens=MOONCAKE_CONV
    )
    # Mooncake's prompts (mean ~14,000 tokens) cost ten times Azure's (~1,250) to prefill.
    assert mooncake.capacity_rps() < azure.capacity_rps() / 5


def test_the_demo_load_crosses_capacity_once_per_cycle() -> None:
    ratios = [DEMO_LOAD.load_ratio(t) for t in np.arange(0.0, DEMO_LOAD.period_s, 1.0)]
    above = np.array(ratios) > 1.0
    assert above.any() and np.count_nonzero(np.diff(above.astype(int)) == 1) == 1
    assert 0.05 < above.mean() < 0.15  # about 40 s of the 6 minutes past capacity
