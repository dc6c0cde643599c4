"""Batching estimate against the simulated server, anchored on the documents' figures.

The documents (SPEC: micro-batching of sub-10 ms requests) report P99 9.8 -> 9.2 ms,
1,240 -> 2,870 QPS and GPU 31 % -> 68 %. Their unbatched 1,240 QPS is read here as the
unbatched capacity (one step 1 / 1,240 s = 0.806 ms on the calibrated H100 shape) and 2,870
QPS as the offered load. :func:`sits_observe.lab.cluster.serving.batching_run.run_batching` runs the
simulator's server at that load for each setting below; the estimate
(:func:`sits_observe.analytics.serving.batching.estimate_window`) is printed beside it with the
relative error. Also a grid of loads (``--part grid``) for the bound in
docs/analytics/batching.md.

    .venv/bin/python bench/bench_batching.py [--part anchor|grid|all] [--duration-s 6]
"""

from __future__ import annotations

import argparse

from sits_observe.analytics.serving.batching import BatchingSetting, StepTime, estimate_window
from sits_observe.analytics.serving.step_profiles import H100
from sits_observe.lab.cluster.serving.batching_run import run_batching, scaled_profile

#: The documents' unbatched throughput, read as the unbatched capacity: one step, seconds.
ANCHOR_STEP_S = 1 / 1240
#: The documents' batched throughput, read as the offered load.
ANCHOR_LOAD_RPS = 2870.0
ANCHOR_SETTINGS = ((0.0, 1), (0.0, 8), (0.0005, 8), (0.001, 8), (0.002, 16))
GRID_LOADS = (300.0, 700.0, 2000.0, 4000.0)
GRID_SETTINGS = ((0.0, 1), (0.0, 8), (0.0005, 8), (0.001, 8), (0.002, 16))


def compare(
    step_s: float, load_rps: float, window_s: float, max_batch: int, duration_s: float
) -> str:
    """One line: the setting, the simulator's figures, the estimate's."""
    sim = run_batching(
        scaled_profile(H100, step_s),
        load_rps=load_rps,
        window_s=window_s,
        max_batch=max_batch,
        duration_s=duration_s,
    )
    est = estimate_window(
        load_rps, BatchingSetting(window_s=window_s, max_batch=max_batch), StepTime(step_s)
    )
    return (
        f"| {window_s * 1e3:g} | {max_batch} | {load_rps:,.0f} | {sim.p99_s * 1e3:.2f} | "
        f"{est.p99_s * 1e3:.2f} | {sim.throughput_rps:,.0f} | {est.throughput_rps:,.0f} | "
        f"{sim.gpu_busy_ratio:.2f} | {est.gpu_busy_ratio:.2f} | {sim.mean_batch:.2f} | "
        f"{est.batch_size:.2f} |"
    )


HEADER = (
    "| window ms | max batch | load/s | sim P99 ms | est P99 ms | sim req/s | est req/s | "
    "sim GPU busy | est GPU busy | sim batch | est batch |\n" + "|---" * 11 + "|"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("anchor", "grid", "all"), default="all")
    parser.add_argument("--duration-s", type=float, default=6.0)
    args = parser.parse_args()
    if args.part in ("anchor", "all"):
        print(
            f"anchor: step at batch 1 {ANCHOR_STEP_S * 1e3:.3f} ms, load {ANCHOR_LOAD_RPS:,.0f}/s"
        )
        print(HEADER)
        for w, m in ANCHOR_SETTINGS:
            print(compare(ANCHOR_STEP_S, ANCHOR_LOAD_RPS, w, m, args.duration_s), flush=True)
    if args.part in ("grid", "all"):
        print("\ngrid: step at batch 1 1 ms")
        print(HEADER)
        for w, m in GRID_SETTINGS:
            for load in GRID_LOADS:
                print(compare(0.001, load, w, m, args.duration_s), flush=True)


if __name__ == "__main__":
    main()
