"""Request arrivals shaped like the Azure LLM conversation trace, under a load profile.

Arrivals are a non-homogeneous Poisson process (the Azure trace's inter-arrival coefficient
of variation is 1.07, close to Poisson's 1.0). Prompt and output lengths are drawn from the
trace's quantile tables (:data:`~sits_observe.analytics.serving.step_profiles.AZURE_CONV`, or
the long-context :data:`~sits_observe.analytics.serving.step_profiles.MOONCAKE_CONV`) by
inverse-CDF interpolation. The rate follows a triangle wave between ``low`` and ``high`` times
the base rate.

By default the base rate is each server's own capacity
(:meth:`~sits_observe.lab.cluster.serving.server.InferenceServer.capacity_rps`, what a full batch
sustains, prefill included), as a gateway that balances by outstanding requests loads each
replica in proportion to its speed: the H100 and A100 servers then cross their knees at the
same moment. The default wave (:data:`DEMO_LOAD`) goes from 10 % to 110 % of capacity and back
every 6 minutes: a server runs under capacity most of the cycle, where a request takes seconds
(the measured step times), crosses it once, for 40 s around the peak at 3 minutes, and drains
the short queue that builds there; a wave that stays past capacity longer builds queues that
make latencies minutes long (docs/evidence/inference-calibration.md). Measured on the default
demo's two servers alone over one cycle (tests/integration/test_demo_heatmap.py):
``heatmap`` finds a knee and a safe maximum at the demo's SLO (docs/demo.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sits_observe.analytics.serving.step_profiles import AZURE_CONV, TokenShape


@dataclass(frozen=True)
class LoadProfile:
    """Request rate per model server over time: a triangle wave between ``low`` and ``high``
    times the base rate, ``base_rps`` or (None, the default) the server's own capacity, with
    requests of the ``tokens`` shape. A Llama2-70B server at tensor parallel 4 sustains about
    3.4 (H100) / 1.9 (A100) Azure-shaped requests/s at a full batch of 64, prefill included."""

    base_rps: float | None = None
    low: float = 0.1
    high: float = 1.1
    period_s: float = 360.0
    tokens: TokenShape = AZURE_CONV

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
        # Prompt and output drawn apart: the trace's rank correlation between them is 0.03.
        prompts = np.maximum(self.profile.tokens.prompt_at(self.rng.random(n)), 1)
        outputs = np.maximum(self.profile.tokens.output_at(self.rng.random(n)), 1)
        return [
            Arrival(float(t), int(p), int(o))
            for t, p, o in zip(times, prompts, outputs, strict=True)
        ]


#: The demo's and the experiment's load: the defaults of :class:`LoadProfile` (module docstring).
DEMO_LOAD = LoadProfile()
