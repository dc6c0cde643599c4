"""Request arrivals shaped like the Azure LLM conversation trace, under a load profile.

Arrivals are a non-homogeneous Poisson process (the Azure trace's inter-arrival coefficient
of variation is 1.07, close to Poisson's 1.0). Prompt and output lengths are log-normal with
the trace's fitted parameters (:mod:`.calibration`), truncated at the trace's maxima. The rate
follows a triangle wave between ``low`` and ``high`` times the base rate, so that one demo run
sweeps a model server from idle past its knee and back.

By default the base rate is each server's own capacity
(:meth:`~sits_observe.lab.cluster.server.InferenceServer.capacity_rps`, what a full batch
sustains), as a gateway that balances by outstanding requests loads each replica in proportion
to its speed: the H100 and A100 servers then cross their knees at the same moment. The default
wave goes from 10 % to 180 % of capacity and back every 6 minutes: it reaches capacity after
95 s, peaks at 3 minutes (queues build) and falls below capacity again after 4.4 minutes
(queues drain); its mean (95 %) stays under capacity, so the queues empty every cycle. Measured
on the default demo's two servers alone over one cycle (10 s windows, 1 rps bins, seeds 1-10,
tests/integration/test_demo_heatmap.py): ``heatmap`` finds a knee at 2-7 rps and, at a P95
SLO of 60 s, a safe maximum of 5-7 rps (docs/demo.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sits_observe.analytics.serving.step_profiles import (
    MAX_OUTPUT_TOKENS,
    MAX_PROMPT_TOKENS,
    OUTPUT_TOKENS_LOG_MEAN,
    OUTPUT_TOKENS_LOG_SD,
    PROMPT_TOKENS_LOG_MEAN,
    PROMPT_TOKENS_LOG_SD,
)


@dataclass(frozen=True)
class LoadProfile:
    """Request rate per model server over time: a triangle wave between ``low`` and ``high``
    times the base rate, ``base_rps`` or (None, the default) the server's own capacity. A
    Llama2-70B server sustains about 5.3 (H100) / 3.8 (A100) requests/s at a full batch of 64
    with Azure-shaped requests."""

    base_rps: float | None = None
    low: float = 0.1
    high: float = 1.8
    period_s: float = 360.0

    def rate_rps(self, t_s: float, capacity_rps: float | None = None) -> float:
        """Arrival rate at simulated time ``t_s`` for a server of ``capacity_rps``."""
        base = self.base_rps if self.base_rps is not None else capacity_rps
        if base is None:
            raise ValueError("a capacity-relative load profile needs the server's capacity_rps")
        return base * self.load_ratio(t_s)

    def load_ratio(self, t_s: float) -> float:
        """The wave's multiple of the base rate at ``t_s``."""
        phase = (t_s % self.period_s) / self.period_s
        tri = 2 * phase if phase < 0.5 else 2 * (1 - phase)
        return self.low + (self.high - self.low) * tri


@dataclass(frozen=True)
class Arrival:
    """One request: when it arrives and its token counts."""

    at_s: float
    prompt_tokens: int
    output_tokens: int


class ArrivalGenerator:
    """Draws arrivals interval by interval from a seeded generator."""

    def __init__(self, profile: LoadProfile, rng: np.random.Generator) -> None:
        self.profile = profile
        self.rng = rng

    def between(
        self, start_s: float, end_s: float, capacity_rps: float | None = None
    ) -> list[Arrival]:
        """Arrivals in ``[start_s, end_s)`` for a server of ``capacity_rps`` (rate taken at the
        interval's midpoint)."""
        span = end_s - start_s
        if span <= 0:
            return []
        rate = self.profile.rate_rps((start_s + end_s) / 2, capacity_rps)
        n = int(self.rng.poisson(rate * span))
        if n == 0:
            return []
        times = np.sort(self.rng.uniform(start_s, end_s, n))
        prompts = self.rng.lognormal(PROMPT_TOKENS_LOG_MEAN, PROMPT_TOKENS_LOG_SD, n)
        outputs = self.rng.lognormal(OUTPUT_TOKENS_LOG_MEAN, OUTPUT_TOKENS_LOG_SD, n)
        prompts = np.clip(np.rint(prompts), 1, MAX_PROMPT_TOKENS).astype(int)
        outputs = np.clip(np.rint(outputs), 1, MAX_OUTPUT_TOKENS).astype(int)
        return [
            Arrival(float(t), int(p), int(o))
            for t, p, o in zip(times, prompts, outputs, strict=True)
        ]
