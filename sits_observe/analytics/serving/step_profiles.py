"""Measured numbers the simulated cluster is calibrated on.

Latency: Splitwise (Patel et al., ISCA 2024) measured Llama2-70B on DGX-A100 and DGX-H100
(``perf_model.csv`` in the splitwise-sim repository, commit 8f99e7dc). :data:`H100` and
:data:`A100` are that file's rows at tensor parallelism 4 (what the simulated servers run on
8-GPU nodes), reduced by :func:`latency_profile_from_splitwise`, which
tests/unit/analytics/test_step_profiles.py runs on the file to check every constant below.
The file holds two sweeps: prompt size at batch 1 (128-8,192 tokens) and batch size at
prompt 512 (1-64). They agree that prefill time depends on the total prompt tokens in the
batch (prompt 1,024 x batch 1 and prompt 512 x batch 2 take the same time within 2 %), so
prefill is a function of tokens; where both sweeps measured the same token count the two
medians are averaged. Decode time per step is a function of the running batch (the output
length moves it < 5 %). Each point is the median of its repetitions.

Load: :data:`AZURE_CONV` is the Azure LLM inference trace (conversation, 2023; Patel et al.),
first 10,000 rows, as quantile tables of prompt and output tokens; the simulator draws from
them by inverse-CDF interpolation (:mod:`sits_observe.lab.cluster.serving.workload`). A log-normal
fit (:data:`PROMPT_TOKENS_LOG_MEAN` ...) has the trace's log-mean and log-sd but not its shape:
prompts are bimodal (40 % near 400 tokens, 45 % near 1,000-1,300, 10 % at the 4,096-token
context limit), and the fit puts the output P95 at 679 tokens where the trace has 461
(docs/evidence/inference-calibration.md). Arrivals average 5.6 per second with an
inter-arrival coefficient of variation of 1.07 (close to Poisson). :data:`MOONCAKE_CONV` is
the Mooncake conversation trace (FAST 2025), first 2,000 rows: long-context prompts (median
7,963 tokens, P95 47,621), for a bursty long-context load.

KV cache: Llama2-70B has 80 layers and 8 KV heads of dimension 128 (grouped-query
attention), so one token's keys and values take 2 x 80 x 8 x 128 x 2 bytes = 327,680 bytes
in fp16, split across the tensor-parallel GPUs.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

import numpy as np
import polars as pl


@dataclass(frozen=True)
class GpuLatencyProfile:
    """Prefill and decode times of one GPU type, as measured points to interpolate."""

    name: str
    prefill_tokens: tuple[float, ...]
    prefill_ms: tuple[float, ...]
    decode_batch: tuple[float, ...]
    decode_step_ms: tuple[float, ...]

    def prefill_s(self, tokens: float) -> float:
        """Seconds to prefill ``tokens`` prompt tokens (log-log interpolation, clamped)."""
        return _loglog(tokens, self.prefill_tokens, self.prefill_ms) / 1000.0

    def decode_step_s(self, batch: float) -> float:
        """Seconds for one decode step with ``batch`` running requests."""
        return _loglog(max(batch, 1.0), self.decode_batch, self.decode_step_ms) / 1000.0


def _loglog(x: float, xs: tuple[float, ...], ys: tuple[float, ...]) -> float:
    """Linear interpolation in log-log space, clamped to the measured range (scalar math: the
    simulator calls it every step)."""
    x = min(max(x, xs[0]), xs[-1])
    i = bisect.bisect_right(xs, x) - 1
    if i >= len(xs) - 1:
        return float(ys[-1])
    w = math.log(x / xs[i]) / math.log(xs[i + 1] / xs[i])
    return float(math.exp(math.log(ys[i]) + w * math.log(ys[i + 1] / ys[i])))


_TOKENS = (128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)
_BATCH = (1, 2, 4, 8, 16, 32, 64)

H100 = GpuLatencyProfile(
    "NVIDIA H100 80GB HBM3",
    _TOKENS,
    (49.1, 51.0, 59.7, 104.6, 198.0, 452.9, 914.0, 1726.1, 3520.5),
    _BATCH,
    (29.4, 30.0, 29.9, 31.4, 32.8, 36.9, 52.4),
)

A100 = GpuLatencyProfile(
    "NVIDIA A100-SXM4-80GB",
    _TOKENS,
    (63.7, 78.6, 127.0, 240.5, 487.4, 1099.1, 2585.6, 5131.7, 10947.8),
    _BATCH,
    (44.5, 45.0, 45.1, 45.8, 48.5, 52.3, 72.9),
)

PROFILES = {"h100": H100, "a100": A100}
#: The Splitwise ``hardware`` value each profile comes from, and the tensor parallelism.
SPLITWISE_HARDWARE = {"h100": "h100-80gb", "a100": "a100-80gb"}
SPLITWISE_TENSOR_PARALLEL = 4
#: The prompt size of Splitwise's batch sweep.
_SWEEP_PROMPT_TOKENS = 512


def latency_profile_from_splitwise(
    rows: pl.DataFrame, hardware: str, tensor_parallel: int, name: str
) -> GpuLatencyProfile:
    """The profile of ``hardware`` at ``tensor_parallel`` from Splitwise's ``perf_model.csv``
    rows (columns ``hardware``, ``tensor_parallel``, ``prompt_size``, ``batch_size``,
    ``prompt_time``, ``token_time``; times in ms), reduced as the module docstring says."""
    mine = rows.filter(
        (pl.col("hardware") == hardware) & (pl.col("tensor_parallel") == tensor_parallel)
    )
    if mine.is_empty():
        raise ValueError(
            f"no Splitwise rows for hardware {hardware!r} at tensor parallel {tensor_parallel}"
        )
    by_prompt = (
        mine.filter(pl.col("batch_size") == 1)
        .group_by("prompt_size")
        .agg(pl.col("prompt_time").median())
    )
    by_batch = (
        mine.filter(pl.col("prompt_size") == _SWEEP_PROMPT_TOKENS)
        .group_by("batch_size")
        .agg(pl.col("prompt_time").median(), pl.col("token_time").median())
        .sort("batch_size")
    )
    prefill: dict[int, list[float]] = {}
    for tokens, ms in by_prompt.iter_rows():
        prefill.setdefault(int(tokens), []).append(float(ms))
    for batch, ms, _ in by_batch.iter_rows():
        if batch > 1:
            prefill.setdefault(int(batch) * _SWEEP_PROMPT_TOKENS, []).append(float(ms))
    tokens = sorted(prefill)
    return GpuLatencyProfile(
        name,
        tuple(float(t) for t in tokens),
        tuple(round(float(np.mean(prefill[t])), 1) for t in tokens),
        tuple(float(b) for b in by_batch["batch_size"]),
        tuple(round(float(ms), 1) for ms in by_batch["token_time"]),
    )


@dataclass(frozen=True)
class TokenShape:
    """Prompt and output lengths of a trace as quantile tables: ``prompt_tokens[i]`` and
    ``output_tokens[i]`` are the trace's ``probabilities[i]`` quantiles (observed values)."""

    name: str
    probabilities: tuple[float, ...]
    prompt_tokens: tuple[int, ...]
    output_tokens: tuple[int, ...]

    def prompt_at(self, u: np.ndarray) -> np.ndarray:
        """Prompt tokens at cumulative probabilities ``u`` (inverse CDF, linear in between)."""
        tokens: np.ndarray = np.rint(np.interp(u, self.probabilities, self.prompt_tokens))
        return tokens.astype(int)

    def output_at(self, u: np.ndarray) -> np.ndarray:
        """Output tokens at cumulative probabilities ``u``."""
        tokens: np.ndarray = np.rint(np.interp(u, self.probabilities, self.output_tokens))
        return tokens.astype(int)

    def mean_output_tokens(self) -> float:
        """Mean output length of the interpolated distribution."""
        return float(np.mean(self.output_at(_GRID)))

    def prompt_grid(self) -> np.ndarray:
        """Prompt lengths at evenly spaced probabilities: a sample to average a cost over."""
        return self.prompt_at(_GRID)


#: Evenly spaced probabilities (bin midpoints) to average over a token shape.
_GRID = (np.arange(2_000) + 0.5) / 2_000
#: The probabilities of the quantile tables: every 5 %, then P99, P99.9 and the maximum.
TOKEN_PROBABILITIES = (*(round(0.05 * i, 2) for i in range(20)), 0.99, 0.999, 1.0)


def token_quantiles(tokens: np.ndarray) -> tuple[int, ...]:
    """The quantile table of ``tokens`` at :data:`TOKEN_PROBABILITIES` (observed values)."""
    return tuple(int(v) for v in np.quantile(tokens, TOKEN_PROBABILITIES, method="inverted_cdf"))


# fmt: off
AZURE_CONV = TokenShape(
    "azure-conv-2023",
    TOKEN_PROBABILITIES,
    (2, 181, 307, 379, 390, 398, 406, 427, 954, 1009, 1033, 1055, 1081, 1106, 1142, 1203, 1320,
     2221, 4076, 4086, 4123, 5244, 14050),
    (7, 38, 50, 60, 71, 80, 88, 93, 101, 111, 136, 162, 201, 375, 391, 396, 403, 414, 427,
     461, 611, 939, 1000),
)
MOONCAKE_CONV = TokenShape(
    "mooncake-conv-2025",
    TOKEN_PROBABILITIES,
    (891, 901, 1020, 1385, 1845, 2638, 3907, 4863, 5780, 6726, 7963, 9199, 10746, 12184,
     14854, 17045, 19875, 24378, 29448, 47621, 98812, 121924, 123192),
    (1, 10, 25, 50, 107, 165, 225, 271, 310, 340, 363, 388, 410, 435, 460, 485, 517, 556,
     602, 689, 1059, 2000, 2000),
)
# fmt: on
TOKEN_SHAPES = {"azure": AZURE_CONV, "mooncake": MOONCAKE_CONV}

#: Azure conversation trace (2023), first 10,000 rows: log-normal fits (kept for comparison:
#: the simulator draws from :data:`AZURE_CONV`).
PROMPT_TOKENS_LOG_MEAN = 6.71
PROMPT_TOKENS_LOG_SD = 0.97
OUTPUT_TOKENS_LOG_MEAN = 5.03
OUTPUT_TOKENS_LOG_SD = 0.91
AZURE_MEAN_ARRIVALS_PER_S = 5.6
MAX_PROMPT_TOKENS = 14_050
MAX_OUTPUT_TOKENS = 1_000

#: Llama2-70B fp16 KV cache per token over all GPUs (see module docstring).
KV_BYTES_PER_TOKEN = 2 * 80 * 8 * 128 * 2
#: Llama2-70B fp16 weights.
WEIGHT_BYTES = 70 * 10**9 * 2

GIB = 1024**3
MIB = 1024**2

#: Framebuffer of the simulated cards (MiB, as dcgm-exporter reports it) and the part the
#: driver reserves: what nvidia-smi shows for the 80 GB H100 SXM and A100 SXM cards.
GPU_FB_TOTAL_MIB = {"h100": 81_559, "a100": 81_920}
GPU_FB_RESERVED_MIB = {"h100": 549, "a100": 512}

#: The ``nvidia.com/gpu.product`` label NVIDIA's GPU feature discovery puts on each card's nodes.
GPU_PRODUCTS = {"h100": "NVIDIA-H100-80GB-HBM3", "a100": "NVIDIA-A100-SXM4-80GB"}
