"""Batching advice: what a batching window or a batch-size cap would do to P99, throughput
and GPU use, from a queueing model over the calibrated batch step time.

Two serving styles, one step-time curve.

Step time. A batch of ``b`` requests costs ``t(b)`` seconds of GPU. The shape of ``t`` is the
simulator's calibrated decode step (:mod:`sits_observe.analytics.serving.step_profiles`: Splitwise's
Llama2-70B measurements, H100 by default: 29.4 ms at batch 1, 31.4 ms at 8, 52.4 ms at 64), a
memory-bound curve in which a larger batch costs little more than a small one. Its scale is the
server's own: ``t(b) = t1 * shape(b) / shape(1)`` with ``t1`` the step at batch 1, which the
caller gives (a measured mean latency of an unbatched server, or the simulator's own curve).
Past the largest measured batch (64) the curve goes on with its last log-log slope (0.51 on
H100: the step about doubles from 64 to 256), an EXTRAPOLATION. ASSUMPTION: the served
model's step grows with the batch as the calibrated one does.

Dispatch batching (:func:`estimate_window`: Triton's dynamic batcher, micro-batching of
sub-10 ms requests; one step per request). Requests arrive as a Poisson stream of ``lambda``
per second. When the GPU is free and requests wait, a batch starts once ``max_batch`` wait or
the oldest has waited ``window_s``. Then, in steady state:

- capacity ``C = m / t(m)`` (a full batch never waits for the window); at ``lambda >= C`` the
  queue grows without bound: throughput ``C``, GPU busy 1, P99 unbounded (``inf``);
- batch size ``b`` is the least fixed point of ``b = clamp(max(1 + lambda * w', lambda *
  t(b)), 1, m)``: a batch holds the request that opened the window plus those arriving in it
  (``w' = min(w, (m - 1) / lambda)``, the window the cap lets run), or the requests that
  arrived while the previous batch ran, whichever is more;
- throughput ``lambda``; GPU busy ratio ``lambda * t(b) / b`` (batches per second times their
  step);
- a request waits ``Uniform(0, D)`` with ``D = max(w', t(b))`` with probability ``p`` (``p =
  1`` with a window: every request waits for its batch to close; without one ``p`` is the GPU
  busy ratio, the chance an arrival finds a batch running), else not at all; so the P99 is
  ``t(b) + D * max(0, 1 - 0.01 / p)``. The model keeps at most one batch ahead of a request,
  which holds while batches absorb the queue (``m > 1``; the simulator check,
  docs/analytics/batching.md, states how far);
- unbatched (``m = 1``) a queue does build: the P99 is the M/D/1 one, the wait tail taken as
  exponential with ``P(wait > 0) = rho`` and conditional mean ``t / (2 (1 - rho))``
  (Pollaczek-Khinchine for a deterministic service), ``t + t / (2 (1 - rho)) * ln(rho /
  0.01)``; it errs high (+11 % at ``rho = 0.3``, +5 % at 0.7 against the simulator).

Continuous batching (:func:`estimate_max_seqs`: vLLM's ``max_num_seqs``; a request runs for
many steps, joining and leaving the running batch at step boundaries). From an observed window
(mean running batch ``b0``, throughput ``X0``, P99 ``P0``): a request's time in the batch is
``b0 / X0`` (Little's law) at step ``t(b0)``, so at batch ``b`` it is ``(b0 / X0) * t(b) /
t(b0)``. With cap ``m``: capacity ``m / ((b0 / X0) * t(m) / t(b0))``; the batch at load
``lambda = X0`` is the fixed point of ``b = lambda * (b0 / X0) * t(b) / t(b0)`` (clamped to
``m``); the P99 scales as the step, ``P0 * t(b) / t(b0)``; above capacity it is unbounded.
GPU busy ratio: the share of time a batch runs, ``min(1, lambda * time in batch)`` (a server
that always has a request running is busy 1 whatever the cap).
ASSUMPTION: the load is the observed throughput (a server that already queues has more load
than it shows: the report flags it).

All times in seconds, rates per second, ratios 0-1.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from sits_observe.analytics.serving.step_profiles import PROFILES, GpuLatencyProfile

#: The quantile the estimates give.
P99 = 0.99
#: Fixed-point iterations for the batch size: the sequence rises monotonically to the least
#: fixed point, which it meets to 1e-9 within a few dozen steps for every calibrated curve.
_MAX_ITERATIONS = 200
_TOLERANCE = 1e-9


class BatchingSetting(BaseModel):
    """One batching configuration of a server."""

    model_config = ConfigDict(frozen=True)

    window_s: float = Field(
        0.0, ge=0.0, le=1.0, description="batching window: longest wait for a batch, seconds"
    )
    max_batch: int = Field(
        1, ge=1, le=4096, description="largest batch (Triton max_batch_size, vLLM max_num_seqs)"
    )


@dataclass(frozen=True)
class StepTime:
    """``t(b)``: seconds one batch of ``b`` takes, the calibrated shape at a given scale."""

    step_at_1_s: float
    profile: GpuLatencyProfile = PROFILES["h100"]

    def __post_init__(self) -> None:
        if not (self.step_at_1_s > 0 and math.isfinite(self.step_at_1_s)):
            raise ValueError(f"step_at_1_s must be positive and finite, not {self.step_at_1_s}")

    def __call__(self, batch: float) -> float:
        return self.step_at_1_s * self.shape(batch)

    def shape(self, batch: float) -> float:
        """``t(b) / t(1)`` of the calibrated curve; past its largest measured batch, the last
        segment's log-log slope carries on (an extrapolation: the curve is clamped there)."""
        p = self.profile
        base = p.decode_step_s(1.0)
        last_b = p.decode_batch[-1]
        if batch <= last_b:
            return p.decode_step_s(batch) / base
        slope = math.log(p.decode_step_ms[-1] / p.decode_step_ms[-2]) / math.log(
            last_b / p.decode_batch[-2]
        )
        return float(p.decode_step_s(last_b) / base * (batch / last_b) ** slope)


@dataclass(frozen=True)
class BatchingEstimate:
    """What one setting would give at one load (see the module docstring)."""

    setting: BatchingSetting
    load_rps: float
    batch_size: float
    throughput_rps: float
    capacity_rps: float
    p99_s: float
    gpu_busy_ratio: float

    @property
    def saturated(self) -> bool:
        """True when the load reaches the capacity (the queue grows, the P99 is unbounded)."""
        return self.load_rps >= self.capacity_rps


def _fixed_point(update: Callable[[float], float], cap: float) -> float:
    b = 1.0
    for _ in range(_MAX_ITERATIONS):
        nxt = min(max(update(b), 1.0), cap)
        if abs(nxt - b) < _TOLERANCE:
            return nxt
        b = nxt
    return b


def estimate_window(load_rps: float, setting: BatchingSetting, step: StepTime) -> BatchingEstimate:
    """Dispatch batching (one step per request) at ``load_rps``: see the module docstring."""
    if not (load_rps >= 0 and math.isfinite(load_rps)):
        raise ValueError(f"load_rps must be finite and >= 0, not {load_rps}")
    m = setting.max_batch
    capacity = m / step(m)
    if load_rps >= capacity:
        return BatchingEstimate(setting, load_rps, m, capacity, capacity, math.inf, 1.0)
    if load_rps == 0:
        return BatchingEstimate(setting, 0.0, 1.0, 0.0, capacity, step(1), 0.0)
    window = min(setting.window_s, (m - 1) / load_rps)
    b = _fixed_point(lambda b: max(1 + load_rps * window, load_rps * step(b)), m)
    busy = load_rps * step(b) / b
    if m == 1:
        return BatchingEstimate(
            setting, load_rps, 1.0, load_rps, capacity, _md1_p99(step(1), busy), busy
        )
    longest_wait = max(window, step(b))
    p_wait = 1.0 if window > 0 else busy
    wait = longest_wait * max(0.0, 1.0 - (1.0 - P99) / p_wait) if p_wait > 0 else 0.0
    return BatchingEstimate(setting, load_rps, b, load_rps, capacity, step(b) + wait, busy)


def _md1_p99(step_s: float, busy: float) -> float:
    """P99 of an unbatched server (M/D/1): ``t + t / (2 (1 - rho)) * ln(rho / 0.01)``."""
    if busy <= 1.0 - P99:
        return step_s
    return step_s + step_s / (2.0 * (1.0 - busy)) * math.log(busy / (1.0 - P99))


@dataclass(frozen=True)
class ObservedBatching:
    """What a server showed over a window: mean running batch, throughput, P99."""

    batch_size: float
    throughput_rps: float
    p99_s: float


def estimate_max_seqs(
    observed: ObservedBatching, setting: BatchingSetting, profile: GpuLatencyProfile
) -> BatchingEstimate:
    """Continuous batching with cap ``setting.max_batch``, from an observed window (the
    window is ignored: requests join at step boundaries). See the module docstring."""
    b0, x0 = observed.batch_size, observed.throughput_rps
    if not (b0 > 0 and x0 > 0 and observed.p99_s > 0):
        raise ValueError(f"need a positive batch, throughput and P99, not {observed}")
    step = StepTime(1.0, profile).shape
    residence_s = b0 / x0  # Little's law: time in the batch at step t(b0)

    def time_in_batch(b: float) -> float:
        return residence_s * step(b) / step(b0)

    m = setting.max_batch
    capacity = m / time_in_batch(m)
    if x0 >= capacity:
        return BatchingEstimate(setting, x0, m, capacity, capacity, math.inf, 1.0)
    b = _fixed_point(lambda b: x0 * time_in_batch(b), m)
    p99 = observed.p99_s * step(b) / step(b0)
    busy = min(1.0, x0 * time_in_batch(b))  # mean running batch before the clamp at 1
    return BatchingEstimate(setting, x0, b, x0, capacity, p99, busy)


def recommend(
    estimates: Sequence[BatchingEstimate],
    *,
    p99_limit_s: float,
    headroom_ratio: float,
    queueing: bool = False,
) -> BatchingEstimate | None:
    """The setting to use, among those not saturated whose P99 is within ``p99_limit_s``:
    of those whose capacity is at least the load x (1 + ``headroom_ratio``), the lowest P99
    (ties to the smaller batch, then the shorter window: the least change that does it); when
    none has that headroom, the most capacity. A ``queueing`` server (requests wait) serves
    less than its load, which the observed throughput then only bounds from below: the most
    capacity, so the advice does not stop at a headroom over a load it never saw. None when
    no setting meets the limit."""
    fits = [e for e in estimates if not e.saturated and e.p99_s <= p99_limit_s]
    roomy = [e for e in fits if e.capacity_rps >= e.load_rps * (1.0 + headroom_ratio)]
    if queueing:
        roomy = []
    if roomy:
        return min(roomy, key=lambda e: (e.p99_s, e.setting.max_batch, e.setting.window_s))
    if not fits:
        return None
    return max(fits, key=lambda e: (e.capacity_rps, -e.p99_s))
