"""Request arrivals shaped like the Azure LLM conversation trace, under a load profile.

Arrivals are a non-homogeneous Poisson process (the Azure trace's inter-arrival coefficient
of variation is 1.07, close to Poisson's 1.0). Prompt and output lengths are log-normal with
the trace's fitted parameters (:mod:`.calibration`), truncated at the trace's maxima. The rate
follows a triangle wave between ``low`` and ``high`` times the base rate, so that one demo run
sweeps a model server from idle past its knee and back.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sits_observe.simulator.calibration import (
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
    times ``base_rps``. The defaults sweep a Llama2-70B server (about 5 requests/s at a full
    batch of 64 with Azure-shaped requests) from a quarter load to twice its capacity."""

    base_rps: float = 4.0
    low: float = 0.25
    high: float = 1.8
    period_s: float = 240.0

    def rate_rps(self, t_s: float) -> float:
        """Arrival rate at simulated time ``t_s``."""
        phase = (t_s % self.period_s) / self.period_s
        tri = 2 * phase if phase < 0.5 else 2 * (1 - phase)
        return self.base_rps * (self.low + (self.high - self.low) * tri)


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

    def between(self, start_s: float, end_s: float) -> list[Arrival]:
        """Arrivals in ``[start_s, end_s)`` (rate taken at the interval's midpoint)."""
        span = end_s - start_s
        if span <= 0:
            return []
        n = int(self.rng.poisson(self.profile.rate_rps((start_s + end_s) / 2) * span))
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
