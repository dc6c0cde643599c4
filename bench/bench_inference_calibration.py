"""The simulated Llama2-70B server beside the Splitwise measurements it is calibrated on.

Prints the tables of docs/evidence/inference-calibration.md:

1. Splitwise's batch sweep replayed: ``b`` requests of 512 prompt / 128 output tokens reach an
   idle server together; the simulator's TTFT (last request), time per output token (median)
   and end-to-end latency (slowest) beside the measured ``prompt_time``, ``token_time`` and
   ``e2e_time`` at that batch, and the ratio sim / measured.
2. Poisson load at 50 % and 90 % of capacity, Splitwise-shaped requests: P50 / P95 of TTFT,
   time per output token and end-to-end latency, beside the measured figures at the run's mean
   batch (TTFT: ``prompt_time`` at batch 1; TBT: ``token_time`` interpolated at the mean batch;
   e2e: TTFT + 127 x TBT), and the ratio of the P50 to them.
3. The same loads with Azure-conversation-shaped requests (the demo's): the simulator alone,
   since no measurement holds that mix.

Usage: ``python bench/bench_inference_calibration.py [--data ../shared/data]``.
"""

from __future__ import annotations

import argparse
import platform
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import polars as pl

from sits_observe.analytics.serving.step_profiles import (
    A100,
    AZURE_CONV,
    H100,
    SPLITWISE_HARDWARE,
    TokenShape,
)
from sits_observe.lab.cluster.serving import fidelity

PERF_MODEL = Path("traces") / "splitwise-perf-model" / "perf_model_llama2-70b.csv"
SPLITWISE_SHAPE = TokenShape("splitwise", (0.0, 1.0), (512, 512), (128, 128))
GPUS = {"h100": H100, "a100": A100}


def _q(values: np.ndarray) -> tuple[float, float]:
    return float(np.percentile(values, 50)), float(np.percentile(values, 95))


def burst_table(rows: pl.DataFrame) -> list[str]:
    out = [
        "| GPU | batch | TTFT sim / measured ms | ratio | TBT sim / measured ms | ratio "
        "| e2e sim / measured s | ratio |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for kind, profile in GPUS.items():
        for batch in (1, 2, 4, 8, 16, 32, 64):
            ttft, tbt, e2e = fidelity.splitwise_point(rows, SPLITWISE_HARDWARE[kind], batch=batch)
            sim = fidelity.burst(profile, batch)
            s_ttft, s_tbt, s_e2e = (
                sim.ttft_ms.max(),
                float(np.median(sim.tpot_ms)),
                sim.e2e_ms.max(),
            )
            out.append(
                f"| {kind.upper()} | {batch} | {s_ttft:,.0f} / {ttft:,.0f} | {s_ttft / ttft:.2f} "
                f"| {s_tbt:.1f} / {tbt:.1f} | {s_tbt / tbt:.2f} "
                f"| {s_e2e / 1000:.2f} / {e2e / 1000:.2f} | {s_e2e / e2e:.2f} |"
            )
    return out


def load_table(rows: pl.DataFrame, tokens: TokenShape, *, measured: bool) -> list[str]:
    head = (
        "| GPU | load | rps | mean batch | TTFT P50 / P95 ms | TBT P50 / P95 ms | e2e P50 / P95 s |"
    )
    rule = "|---|---:|---:|---:|---:|---:|---:|"
    if measured:
        head += (
            " measured TTFT / TBT ms, e2e s | ratio P50 TTFT / TBT / e2e "
            "| TBT with prefill share ms | ratio P50 TBT / e2e |"
        )
        rule += "---:|---:|---:|---:|"
    out = [head, rule]
    for kind, profile in GPUS.items():
        capacity = fidelity.server(profile, tokens).capacity_rps()
        for load in (0.5, 0.9):
            run = fidelity.steady(profile, tokens, rate_rps=load * capacity, duration_s=900)
            lat = run.latencies
            (t50, t95), (b50, b95), (e50, e95) = _q(lat.ttft_ms), _q(lat.tpot_ms), _q(lat.e2e_ms)
            line = (
                f"| {kind.upper()} | {load:.0%} | {load * capacity:.2f} | {run.mean_batch:.1f} "
                f"| {t50:,.0f} / {t95:,.0f} | {b50:.1f} / {b95:.1f} "
                f"| {e50 / 1000:.2f} / {e95 / 1000:.2f} |"
            )
            if measured:
                hw = SPLITWISE_HARDWARE[kind]
                m_ttft, m_tbt_1, _ = fidelity.splitwise_point(rows, hw)
                m_tbt = fidelity.splitwise_decode_ms(rows, hw, run.mean_batch)
                m_e2e = m_ttft + 127 * m_tbt
                # Prefill runs in the same steps: it takes rate x (prefill - one forward pass)
                # of the GPU's time, and the decode steps stretch by that share.
                shared = m_tbt / (1 - load * capacity * (m_ttft - m_tbt_1) / 1000)
                s_e2e = m_ttft + 127 * shared
                line += (
                    f" {m_ttft:,.0f} / {m_tbt:.1f}, {m_e2e / 1000:.2f} "
                    f"| {t50 / m_ttft:.2f} / {b50 / m_tbt:.2f} / {e50 / m_e2e:.2f} "
                    f"| {shared:.1f} | {b50 / shared:.2f} / {e50 / s_e2e:.2f} |"
                )
            out.append(line)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("..") / "shared" / "data")
    args = parser.parse_args()
    rows = pl.read_csv(args.data / PERF_MODEL)
    print(f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {platform.processor() or platform.machine()}")
    print("\n## Splitwise's batch sweep replayed (512 prompt / 128 output tokens, TP 4)\n")
    print("\n".join(burst_table(rows)))
    print("\n## Poisson load, Splitwise-shaped requests (512 / 128)\n")
    print("\n".join(load_table(rows, SPLITWISE_SHAPE, measured=True)))
    print("\n## Poisson load, Azure-conversation-shaped requests (the demo's)\n")
    print("\n".join(load_table(rows, AZURE_CONV, measured=False)))


if __name__ == "__main__":
    main()
