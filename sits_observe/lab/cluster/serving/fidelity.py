"""How close the simulated server comes to the measurements it is calibrated on.

Two runs of :class:`~.server.InferenceServer`, both deterministic under a seed:

- :func:`burst` replays Splitwise's batch sweep (Patel et al., ISCA 2024, ``perf_model.csv``):
  ``batch`` requests of ``prompt_tokens`` / ``output_tokens`` reach an idle server at once, as
  the measurement sent them. Its TTFT (the last request's: the batch's prefill), time per
  output token and end-to-end latency sit beside the file's ``prompt_time``, ``token_time``
  and ``e2e_time`` at that batch size (:func:`splitwise_point`).
- :func:`steady` runs Poisson arrivals at a fixed rate and returns the finished requests'
  records after a warm-up, with the mean running batch: what the simulator gives at a load.

docs/evidence/inference-calibration.md prints both (bench/bench_inference_calibration.py) and
tests/unit/lab/test_inference_calibration.py holds the simulator to the measurements.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from sits_observe.analytics.serving.step_profiles import AZURE_CONV, GpuLatencyProfile, TokenShape
from sits_observe.lab.cluster.serving.server import InferenceServer, RequestRecord

#: A server with room for every token: KV-cache capacity plays no part in these runs.
_KV_BYTES = 10**15


@dataclass(frozen=True)
class Latencies:
    """TTFT, time per output token and end-to-end latency of one run, milliseconds."""

    ttft_ms: np.ndarray
    tpot_ms: np.ndarray
    e2e_ms: np.ndarray

    @classmethod
    def of(cls, records: list[RequestRecord]) -> Latencies:
        """The three latencies of ``records`` (TPOT of requests with more than one token)."""
        return cls(
            np.array([r.ttft_s * 1000 for r in records]),
            np.array([r.inter_token_s * 1000 for r in records if r.output_tokens > 1]),
            np.array([r.latency_s * 1000 for r in records]),
        )


@dataclass(frozen=True)
class SteadyRun:
    """What :func:`steady` measured: the latencies, the mean running batch (tokens decoded
    per step) and the completed requests per second over the counted span."""

    latencies: Latencies
    mean_batch: float
    throughput_rps: float


def server(profile: GpuLatencyProfile, tokens: TokenShape = AZURE_CONV) -> InferenceServer:
    """A Llama2-70B-like server of ``profile`` at tensor parallel 4, max batch 64, serving
    ``tokens``-shaped requests."""
    return InferenceServer(
        "llama2-70b", profile, tensor_parallel=4, kv_capacity_bytes=_KV_BYTES, tokens=tokens
    )


def burst(
    profile: GpuLatencyProfile,
    batch: int,
    *,
    prompt_tokens: int = 512,
    output_tokens: int = 128,
    tick_s: float = 0.001,
) -> Latencies:
    """``batch`` identical requests reach an idle server together; their latencies."""
    srv = server(profile)
    for _ in range(batch):
        srv.submit(0.0, prompt_tokens, output_tokens)
    records: list[RequestRecord] = []
    t = 0.0
    while len(records) < batch:
        t += tick_s
        srv.advance(t, tick_s)
        records.extend(srv.take_finished())
    return Latencies.of(records)


def steady(
    profile: GpuLatencyProfile,
    tokens: TokenShape,
    *,
    rate_rps: float,
    duration_s: float = 900.0,
    warmup_s: float = 120.0,
    seed: int = 0,
    tick_s: float = 0.01,
) -> SteadyRun:
    """Poisson arrivals at ``rate_rps`` of ``tokens``-shaped requests for ``duration_s``;
    requests that arrive after ``warmup_s`` count."""
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1.0 / rate_rps, int(rate_rps * duration_s * 1.3) + 10))
    arrivals = arrivals[arrivals < duration_s]
    prompts = np.maximum(tokens.prompt_at(rng.random(len(arrivals))), 1)
    outputs = np.maximum(tokens.output_at(rng.random(len(arrivals))), 1)
    srv = server(profile, tokens)
    records: list[RequestRecord] = []
    marks: list[tuple[int, int]] = []  # (steps, decoded tokens) at warmup_s and duration_s
    t, i = 0.0, 0
    while i < len(arrivals) or srv.running or srv.waiting:
        t += tick_s
        while i < len(arrivals) and arrivals[i] <= t:
            srv.submit(float(arrivals[i]), int(prompts[i]), int(outputs[i]))
            i += 1
        srv.advance(t, tick_s)
        records.extend(srv.take_finished())
        if len(marks) < 2 and t >= (warmup_s, duration_s)[len(marks)]:
            marks.append((srv.steps_total, srv.decoded_tokens_total))
    while len(marks) < 2:  # the last request finished before duration_s
        marks.append((srv.steps_total, srv.decoded_tokens_total))
    counted = [r for r in records if r.finished_at_s - r.latency_s >= warmup_s]
    (steps_0, decoded_0), (steps_1, decoded_1) = marks
    done = sum(1 for r in records if warmup_s <= r.finished_at_s < duration_s)
    return SteadyRun(
        Latencies.of(counted),
        (decoded_1 - decoded_0) / max(steps_1 - steps_0, 1),
        done / (duration_s - warmup_s),
    )


def splitwise_point(
    rows: pl.DataFrame,
    hardware: str,
    *,
    tensor_parallel: int = 4,
    prompt_tokens: int = 512,
    batch: int = 1,
    output_tokens: int = 128,
) -> tuple[float, float, float]:
    """Splitwise's median ``prompt_time``, ``token_time`` and ``e2e_time`` (ms) at one point."""
    point = rows.filter(
        (pl.col("hardware") == hardware)
        & (pl.col("tensor_parallel") == tensor_parallel)
        & (pl.col("prompt_size") == prompt_tokens)
        & (pl.col("batch_size") == batch)
        & (pl.col("token_size") == output_tokens)
    )
    if point.is_empty():
        raise ValueError(
            f"Splitwise has no row for {hardware} TP {tensor_parallel}, prompt {prompt_tokens}, "
            f"batch {batch}, {output_tokens} output tokens"
        )
    return (
        float(point["prompt_time"].median()),  # type: ignore[arg-type]
        float(point["token_time"].median()),  # type: ignore[arg-type]
        float(point["e2e_time"].median()),  # type: ignore[arg-type]
    )


def splitwise_decode_ms(rows: pl.DataFrame, hardware: str, batch: float) -> float:
    """Splitwise's measured decode step (ms) at a running ``batch`` of TP 4, prompt 512:
    log-log interpolated between the measured batch sizes (1, 2, 4, ..., 64)."""
    sizes = (1, 2, 4, 8, 16, 32, 64)
    ms = [splitwise_point(rows, hardware, batch=b)[1] for b in sizes]
    x = np.log(np.clip(batch, sizes[0], sizes[-1]))
    return float(np.exp(np.interp(x, np.log(sizes), np.log(ms))))
