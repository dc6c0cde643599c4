"""A micro-batching run of the simulated server: one model, Poisson arrivals, one setting.

The check of the batching estimate (:mod:`sits_observe.analytics.serving.batching`,
docs/analytics/batching.md) runs :class:`~.server.InferenceServer` with requests that take one
step each (one output token, a negligible prefill), on a step curve of the calibrated shape
scaled to a sub-10 ms step (:func:`scaled_profile`), with and without a batching window, and
measures what the estimate predicts: P99 latency, throughput, GPU busy ratio, mean batch.

Deterministic under ``seed``; the server advances in ``tick_s`` steps, so every time it
measures is exact to one tick.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sits_observe.analytics.serving.step_profiles import GpuLatencyProfile
from sits_observe.lab.cluster.serving.server import InferenceServer

#: Prefill of a one-step request: far below any step, so it ends inside the first step.
_NEGLIGIBLE_PREFILL_MS = 1e-6


def scaled_profile(base: GpuLatencyProfile, step_at_1_s: float) -> GpuLatencyProfile:
    """``base``'s decode-step curve scaled so that a batch of one takes ``step_at_1_s``."""
    scale = step_at_1_s * 1000.0 / base.decode_step_ms[0]
    return GpuLatencyProfile(
        f"{base.name} x{scale:.3g}",
        base.prefill_tokens,
        tuple(_NEGLIGIBLE_PREFILL_MS for _ in base.prefill_tokens),
        base.decode_batch,
        tuple(ms * scale for ms in base.decode_step_ms),
    )


@dataclass(frozen=True)
class BatchingRun:
    """What one run measured (seconds, requests per second, ratio 0-1)."""

    p99_s: float
    throughput_rps: float
    gpu_busy_ratio: float
    mean_batch: float
    requests: int


def run_batching(
    profile: GpuLatencyProfile,
    *,
    load_rps: float,
    window_s: float,
    max_batch: int,
    duration_s: float = 10.0,
    warmup_s: float = 1.0,
    tick_s: float = 5e-5,
    seed: int = 0,
) -> BatchingRun:
    """Poisson arrivals at ``load_rps`` for ``duration_s``; requests finished after
    ``warmup_s`` count (throughput over the counted span)."""
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1.0 / load_rps, int(load_rps * duration_s * 1.2) + 10))
    arrivals = arrivals[arrivals < duration_s]
    server = InferenceServer(
        "batching",
        profile,
        tensor_parallel=1,
        kv_capacity_bytes=10**15,
        max_batch=max_batch,
        batch_window_s=window_s,
        join_mid_step=False,
    )
    ticks = round(duration_s / tick_s)
    next_arrival = 0
    latencies: list[float] = []
    busy_at_warmup = steps_at_warmup = done_at_warmup = None
    for i in range(1, ticks + 1):
        now = i * tick_s
        while next_arrival < len(arrivals) and arrivals[next_arrival] <= now:
            server.submit(float(arrivals[next_arrival]), 1, 1)
            next_arrival += 1
        server.advance(now, tick_s)
        finished = server.take_finished()
        if now >= warmup_s:
            latencies.extend(r.latency_s for r in finished)
            if busy_at_warmup is None:
                busy_at_warmup, steps_at_warmup = server.busy_s_total, server.steps_total
                done_at_warmup = server.success_total
    assert busy_at_warmup is not None and steps_at_warmup is not None
    assert done_at_warmup is not None
    span_s = duration_s - warmup_s
    steps = server.steps_total - steps_at_warmup
    done = server.success_total - done_at_warmup
    return BatchingRun(
        p99_s=float(np.quantile(latencies, 0.99)) if latencies else float("nan"),
        throughput_rps=len(latencies) / span_s,
        gpu_busy_ratio=(server.busy_s_total - busy_at_warmup) / span_s,
        mean_batch=done / steps if steps else float("nan"),
        requests=len(latencies),
    )
