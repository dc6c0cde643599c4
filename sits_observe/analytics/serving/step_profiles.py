"""Measured numbers the simulated cluster is calibrated on.

Latency: Splitwise (Patel et al., ISCA 2024) measured Llama2-70B on DGX-A100 and DGX-H100
(``perf_model.csv`` in the splitwise-sim repository, commit 8f99e7dc). The points below are
the medians of its five repetitions at tensor parallelism 4. Its two sweeps agree that
prefill time depends on the total prompt tokens in the batch (prompt 1,024 x batch 1 and
prompt 512 x batch 2 take the same time within 2%), so prefill is a function of tokens;
decode time per step is a function of the running batch (context length moves it < 5%).
Where both sweeps measured the same token count, the two medians are averaged.

Load: the Azure LLM inference trace (conversation, 2023; Patel et al. / Stojkovic et al.)
has log-normal prompt and output lengths; on its first 10,000 rows the log-mean and log-sd
are 6.71 / 0.97 (prompt tokens) and 5.03 / 0.91 (output tokens), arrivals average 5.6 per
second with an inter-arrival coefficient of variation of 1.07 (close to Poisson).

KV cache: Llama2-70B has 80 layers and 8 KV heads of dimension 128 (grouped-query
attention), so one token's keys and values take 2 x 80 x 8 x 128 x 2 bytes = 327,680 bytes
in fp16, split across the tensor-parallel GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


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
    lx = np.log(np.clip(x, xs[0], xs[-1]))
    return float(np.exp(np.interp(lx, np.log(xs), np.log(ys))))


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

#: Azure conversation trace (2023), first 10,000 rows: log-normal fits.
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
