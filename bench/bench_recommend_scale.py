"""GPU memory right-sizing at fleet scale: 1,000 nodes x 8 GPUs, 10,000 pods, one week.

Data (generated once with numpy into a Parquet file, not timed): 8,000 GPUs sampled once a
minute for 7 days (80.6 million framebuffer samples). GPUs 0-5,999 hold one pod all week;
GPUs 6,000-7,999 hold two pods in turn (3.5 days each): 10,000 pods in 1,000 workloads of 10
pods. A workload has a base size (1-70 GiB); each sample is the base x a daily cycle x noise,
plus rare bursts (0.5 % of minutes, up to +30 %).

Timed, each in a fresh child process (peak RSS = VmHWM of that run; the Parquet file read and
the libraries imported before the clock starts):

- ``sits``: :func:`sits_observe.analytics.rightsizing.memory.recommend_frame` by workload: 15-minute
  peaks per pod, the decaying histogram (half-life 24 h, 5 % buckets) and P50 / P95 / P99 per
  workload with the bounds and confidence;
- ``pandas``: the same per-workload percentiles written plainly in pandas: ``groupby().max()``
  for the peaks (per pod and 15-minute interval since the epoch), the same decay weights, and
  the exact weighted percentile per workload (sort, ``groupby().cumsum()``, first value
  reaching q x total).

The two must agree: every sits answer lies between the exact weighted percentile and one
bucket above it (x 1.05 + the 10 MB first bucket), the histogram's documented resolution.
``--record`` writes the figures into docs/benchmarks.md between the recommend-scale markers.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from _docs import write_block

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- recommend-scale-bench:begin -->", "<!-- recommend-scale-bench:end -->"
HEADING = "## GPU memory right-sizing: 10,000 pods, one week"
GIB = float(1 << 30)
QUANTILES = (0.5, 0.95, 0.99)
INTERVAL_S, HALF_LIFE_S = 900.0, 86_400.0


def generate(path: Path, gpus: int, pods: int, days: float, step_s: float, seed: int = 3) -> int:
    """Write the fleet's samples to ``path`` (see the module docstring); returns the rows."""
    rng = np.random.default_rng(seed)
    t = np.arange(0.0, days * 86_400.0, step_s)
    workloads = max(pods // 10, 1)
    base = rng.uniform(1.0, 70.0, workloads) * GIB
    shared = pods - gpus  # GPUs that hold two pods in turn
    writer = None
    rows = 0
    for start in range(0, gpus, 500):
        g = np.arange(start, min(start + 500, gpus))
        second = g >= gpus - shared
        pod = np.where(
            second[:, None] & (t[None, :] >= t[-1] / 2),
            gpus + (g - (gpus - shared))[:, None],
            g[:, None],
        )
        workload = pod % workloads
        cycle = 1 + 0.15 * np.sin(2 * np.pi * t[None, :] / 86_400.0 + workload)
        noise = rng.normal(1.0, 0.03, pod.shape)
        burst = np.where(rng.random(pod.shape) < 0.005, 1 + rng.uniform(0, 0.3, pod.shape), 1.0)
        used = base[workload] * cycle * noise * burst
        table = pa.table(
            {
                "workload": workload.ravel().astype(np.int32),
                "series": pod.ravel().astype(np.int32),
                "ts_s": np.broadcast_to(t, pod.shape).ravel(),
                "fb_used_bytes": used.ravel(),
            }
        )
        writer = writer or pq.ParquetWriter(path, table.schema)
        writer.write_table(table)
        rows += table.num_rows
    assert writer is not None
    writer.close()
    return rows


def _peak_rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def child_sits(data: Path, out: Path) -> dict[str, Any]:
    import polars as pl

    from sits_observe.analytics.rightsizing.memory import RightsizingSettings, recommend_frame

    frame = pl.read_parquet(data)
    settings = RightsizingSettings(
        peak_interval_s=INTERVAL_S,
        half_life_s=HALF_LIFE_S,
        lower_percentile_ratio=QUANTILES[0],
        target_percentile_ratio=QUANTILES[1],
        upper_percentile_ratio=QUANTILES[2],
        margin_ratio=0.0,
    )
    before = _rss_mb()
    started = time.perf_counter()
    result = recommend_frame(frame, settings, by=["workload"])
    wall_s = time.perf_counter() - started
    # Margin 0: target = the P95 answer; the bounds carry the confidence factors, so the P50
    # and P99 answers are compared through a second call without them.
    plain = settings.model_copy(
        update={"upper_confidence_multiplier": 0.0, "lower_confidence_multiplier": 0.0}
    )
    check = recommend_frame(frame, plain, by=["workload"]).select(
        "workload", "lower_bytes", "target_bytes", "upper_bytes"
    )
    check.write_parquet(out / "sits.parquet")
    return {
        "wall_s": wall_s,
        "rss_before_mb": before,
        "peak_rss_mb": _peak_rss_mb(),
        "rows": frame.height,
        "workloads": result.height,
    }


def child_pandas(data: Path, out: Path) -> dict[str, Any]:
    import pandas as pd

    df = pd.read_parquet(data)
    before = _rss_mb()
    started = time.perf_counter()
    df["k"] = (df["ts_s"] // INTERVAL_S).astype("int64")
    peaks = df.groupby(["workload", "series", "k"], sort=False)["fb_used_bytes"].max()
    peaks = peaks.rename("peak").reset_index()
    peaks["at"] = (peaks["k"] + 1) * INTERVAL_S
    newest = peaks.groupby("workload")["at"].transform("max")
    peaks["w"] = np.exp2((peaks["at"] - newest) / HALF_LIFE_S)
    peaks = peaks.sort_values(["workload", "peak"], kind="stable")
    peaks["cum"] = peaks.groupby("workload")["w"].cumsum()
    total = peaks.groupby("workload")["w"].transform("sum")
    answers = {}
    for q in QUANTILES:
        reached = peaks[peaks["cum"] >= q * total * (1 - 1e-12)]
        answers[q] = reached.groupby("workload")["peak"].first()
    result = pd.DataFrame(answers)
    wall_s = time.perf_counter() - started
    result.columns = [f"q{q}" for q in QUANTILES]
    result.reset_index().to_parquet(out / "pandas.parquet")
    return {
        "wall_s": wall_s,
        "rss_before_mb": before,
        "peak_rss_mb": _peak_rss_mb(),
        "rows": len(df),
        "workloads": len(result),
    }


def compare(out: Path) -> dict[str, Any]:
    """Every sits answer within [exact, exact x 1.05 + 1e7]."""
    sits = pq.read_table(out / "sits.parquet").to_pandas().set_index("workload").sort_index()
    exact = pq.read_table(out / "pandas.parquet").to_pandas().set_index("workload").sort_index()
    assert list(sits.index) == list(exact.index)
    worst = 0.0
    for column, q in zip(("lower_bytes", "target_bytes", "upper_bytes"), QUANTILES, strict=True):
        a, e = sits[column].to_numpy(), exact[f"q{q}"].to_numpy()
        assert (a >= e * (1 - 1e-9)).all(), f"P{q}: an answer below the exact percentile"
        assert (a <= e * 1.05 * (1 + 1e-9) + 1e7).all(), f"P{q}: an answer past one bucket"
        worst = max(worst, float(np.max(a / e - 1)))
    return {"workloads": len(sits), "max_above_exact": worst}


def run_child(kind: str, data: Path, out: Path) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child", kind, "--data", str(data), "--out", str(out)]
    done = subprocess.run(cmd, check=True, capture_output=True, text=True)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gpus", type=int, default=8000)
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--days", type=float, default=7.0)
    parser.add_argument("--step-s", type=float, default=60.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--record", action="store_true")
    parser.add_argument("--child", choices=("sits", "pandas"))
    parser.add_argument("--data", type=Path)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.child:
        child = child_sits if args.child == "sits" else child_pandas
        print(json.dumps(child(args.data, args.out)))
        return
    if not args.gpus <= args.pods <= 2 * args.gpus:
        sys.exit("--pods must be between --gpus and 2 x --gpus (a GPU holds one or two pods)")
    with tempfile.TemporaryDirectory() as tmp:
        data, out = Path(tmp) / "fleet.parquet", Path(tmp)
        started = time.perf_counter()
        rows = generate(data, args.gpus, args.pods, args.days, args.step_s)
        gen_s = time.perf_counter() - started
        runs: dict[str, list[dict[str, Any]]] = {"sits": [], "pandas": []}
        for _ in range(args.runs):
            for kind in ("sits", "pandas"):
                runs[kind].append(run_child(kind, data, out))
        checked = compare(out)
    text = report(args, rows, gen_s, runs, checked)
    print(text)
    if args.record:
        record(text)


def report(
    args: argparse.Namespace,
    rows: int,
    gen_s: float,
    runs: dict[str, list[dict[str, Any]]],
    checked: dict[str, Any],
) -> str:
    def med(kind: str, key: str) -> float:
        return float(np.median([r[key] for r in runs[kind]]))

    s_wall, p_wall = med("sits", "wall_s"), med("pandas", "wall_s")
    lines = [
        f"Date {datetime.now(UTC):%Y-%m-%d}; machine: {_machine()}; median of {args.runs} runs "
        "(sits and pandas interleaved, each in a fresh process).",
        f"Input: {args.gpus:,} GPUs ({args.gpus // 8:,} nodes x 8), {args.pods:,} pods in "
        f"{checked['workloads']:,} workloads, {args.days:g} days at one sample per "
        f"{args.step_s:g} s "
        f"= {rows:,} samples (generated in {gen_s:.0f} s, not timed).",
        "",
        "| what is timed | wall s | peak RSS MB | RSS before MB |",
        "|---|---:|---:|---:|",
        f"| sits_observe `recommend_frame` (15 min peaks, decaying histogram, P50/P95/P99, bounds) "
        f"| {s_wall:.2f} | {med('sits', 'peak_rss_mb'):,.0f} | "
        f"{med('sits', 'rss_before_mb'):,.0f} |",
        f"| pandas, the same per-workload percentiles (exact, no buckets) | {p_wall:.2f} | "
        f"{med('pandas', 'peak_rss_mb'):,.0f} | {med('pandas', 'rss_before_mb'):,.0f} |",
        "",
        f"Ratio pandas / sits, wall: {p_wall / s_wall:.2f}x. Agreement: every sits answer of the "
        f"{checked['workloads']:,} workloads lies between pandas' exact weighted percentile and "
        "one "
        f"bucket above it (at most {checked['max_above_exact']:.2%} above).",
        "What is timed is the analytics core the `recommend` command's right-sizing rows call "
        "(the command's rows come with the reports layer); RSS before = the samples loaded.",
        "Wall seconds of every run: sits "
        + ", ".join(f"{r['wall_s']:.2f}" for r in runs["sits"])
        + "; pandas "
        + ", ".join(f"{r['wall_s']:.2f}" for r in runs["pandas"])
        + ".",
        "",
        f"Command: `.venv/bin/python bench/bench_recommend_scale.py --runs {args.runs} --record`.",
    ]
    return "\n".join(lines)


def _machine() -> str:
    cores = subprocess.run(["nproc"], capture_output=True, text=True, check=True).stdout.strip()
    system = f"{platform.system()} {platform.machine()}"
    return f"{cores} cores, {system}, Python {platform.python_version()}"


def record(text: str) -> None:
    write_block(DOCS, BEGIN, END, text, HEADING)


if __name__ == "__main__":
    main()
