"""Heatmap + per-window P50/P95/P99 over 10 million requests: sits_observe vs pandas vs buckets.

Data (generated once with numpy into a DuckDB file through ``Store.append``, not timed): one
model served by 8 pods for 2 hours under a linear load ramp from 50 to 2,750 requests/s
(arrivals drawn from that non-homogeneous Poisson intensity by inverting its integral), so
10,000,000 requests. Latency grows with the load like a queue: a log-normal service time
(median 0.25 s, sigma 0.35) times 1 / (1 - rate / 3,000). The stored ``ts`` is the completion
time (arrival + latency); requests still running at the end of the 2 h are not in the log;
rows are in arrival order, so ``ts`` is not sorted. 0.1 % of the requests failed
(``ok = false``) and are left out everywhere.

Timed, each run in a fresh child process (so peak RSS is that run's alone), the store opened
and the libraries imported before the clock starts:

- ``sits``: :func:`sits_observe.analytics.heatmap.grid.compute_heatmaps` with 1 s windows, 100 ms
  latency bins, 10 requests/s throughput bins and a 1 s SLO: windows with exact P50/P95/P99,
  cells, per-throughput-bin quantiles, knee and safe maximum. All in DuckDB.
- ``pandas``: the same output written plainly with pandas (``groupby().quantile()``,
  ``groupby().size()``, ``map``) on a DataFrame read from the same DuckDB file; the read is
  timed separately ("load") from the computation.
- ``buckets``: what a Prometheus-based tool would show instead: per-window counts in vLLM's
  ``e2e_request_latency_seconds`` buckets and ``histogram_quantile`` for P50/P95/P99
  (sits_observe.collectors.histogram, PromQL's rule), whose error against the exact per-window
  quantiles is reported.

The outputs are compared: windows (count, throughput, quantiles within 1e-12 relative),
cells (equal) and per-bin quantiles must agree between sits and pandas. Peak memory: the child's
peak RSS (``VmHWM``) and its RSS before the timed call, and DuckDB's own buffer memory sampled every
10 ms in a separate run (``duckdb_memory()``). ``--record`` writes the figures into
docs/benchmarks.md between the heatmap-bench markers (appending the section when absent).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- heatmap-bench:begin -->", "<!-- heatmap-bench:end -->"
SECTION = "## Heatmap: 10 million requests"

DURATION_S = 7200.0
RATE_FROM, RATE_TO, CAPACITY = 50.0, 2750.0, 3000.0
START_US = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z
PODS = 8
WINDOW_S, LATENCY_BIN_MS, THROUGHPUT_BIN_RPS, SLO_MS = 1.0, 100.0, 10.0, 1000.0


# -- data -------------------------------------------------------------------------------


def generate(path: Path, requests: int, seed: int = 11) -> None:
    """Write exactly ``requests`` synthetic requests (module docstring) into ``path``.

    Arrivals are drawn on the ramp (inverting the integrated intensity); a request is kept
    when it completed within the 2 h, as a log cut at the end of a test would hold it (no
    drain of slow requests with nothing arriving behind them); 1 % extra arrivals are drawn
    and the surplus thinned at random, which keeps the arrivals Poisson.
    """
    from sits_observe.store import Store

    rng = np.random.default_rng(seed)
    slope = (RATE_TO - RATE_FROM) / DURATION_S
    total = RATE_FROM * DURATION_S + slope * DURATION_S**2 / 2
    drawn = int(requests * 1.01) + 1000
    arrival_s = (-RATE_FROM + np.sqrt(RATE_FROM**2 + 2 * slope * rng.random(drawn) * total)) / slope
    arrival_s.sort()
    rate = RATE_FROM + slope * arrival_s
    latency_s = 0.25 * rng.lognormal(0.0, 0.35, drawn) / (1.0 - rate / CAPACITY)
    done_s = arrival_s + latency_s
    kept = np.flatnonzero(done_s <= DURATION_S)
    if len(kept) < requests:
        raise SystemExit(f"only {len(kept)} requests completed; raise the oversampling")
    kept = np.sort(rng.choice(kept, size=requests, replace=False))
    ts_us = START_US + np.rint(done_s[kept] * 1e6).astype(np.int64)
    latency_s = latency_s[kept]
    ok = rng.random(requests) >= 0.001
    pods = np.array([f"llama-3-8b-{i}" for i in range(PODS)])
    pod = pods[rng.integers(0, PODS, requests)]
    with Store.open(path) as store:
        chunk = 2_000_000
        for first in range(0, requests, chunk):
            part = slice(first, min(first + chunk, requests))
            n = part.stop - part.start
            table = pa.table(
                {
                    "ts": pa.array(ts_us[part].astype("datetime64[us]")),
                    "model": pa.array(np.full(n, "llama-3-8b")),
                    "latency_s": latency_s[part],
                    "ok": ok[part],
                    "status": pa.array(np.where(ok[part], "200", "503")),
                    "pod": pa.array(pod[part]),
                    "source": pa.array(np.full(n, "bench")),
                }
            )
            store.append("requests", table)


# -- children ---------------------------------------------------------------------------


def child_sits(db: Path, out: Path, sample_duckdb: bool, evidence: bool = True) -> dict[str, Any]:
    from sits_observe.analytics.heatmap.grid import compute_heatmaps, heatmap_settings
    from sits_observe.store import Store

    settings = heatmap_settings(
        window_s=WINDOW_S,
        latency_bin_ms=LATENCY_BIN_MS,
        throughput_bin_rps=THROUGHPUT_BIN_RPS,
        slo_ms=SLO_MS,
    )
    store = Store.open(db, read_only=True)
    rss_before = _rss_mb()
    peak = {"duckdb_mb": 0.0}
    stop = threading.Event()
    sampler = None
    if sample_duckdb:
        sampler = threading.Thread(target=_sample_duckdb, args=(store, stop, peak), daemon=True)
        sampler.start()
    cpu_started, started = _cpu_s(), time.perf_counter()
    [h] = compute_heatmaps(store, settings, evidence=evidence)
    wall_s, cpu_s = time.perf_counter() - started, _cpu_s() - cpu_started
    stop.set()
    if sampler is not None:
        sampler.join()
    if not evidence:
        return {
            "wall_s": wall_s,
            "cpu_s": cpu_s,
            "rss_before_mb": rss_before,
            "peak_rss_mb": _peak_rss_mb(),
        }
    pq.write_table(h.windows, out / "sits_windows.parquet")
    pq.write_table(
        h.cells.select(["latency_bin", "throughput_bin", "count"]), out / "sits_cells.parquet"
    )
    bins = pa.Table.from_pylist([b.__dict__ for b in h.bins])
    pq.write_table(bins, out / "sits_bins.parquet")
    return {
        "wall_s": wall_s,
        "cpu_s": cpu_s,
        "rss_before_mb": rss_before,
        "peak_rss_mb": _peak_rss_mb(),
        "duckdb_peak_mb": peak["duckdb_mb"],
        "requests": h.requests,
        "windows": h.windows.num_rows,
        "cells": h.cells.num_rows,
        "knee_rps": None if h.knee.value is None else h.knee.value.throughput_lo_rps,
        "safe_max_rps": None
        if h.safe_max is None or h.safe_max.value is None
        else h.safe_max.value.throughput_lo_rps,
    }


def _sample_duckdb(store: Any, stop: threading.Event, peak: dict[str, float]) -> None:
    cur = store.cursor()
    while not stop.wait(0.01):
        used = cur.execute("SELECT sum(memory_usage_bytes) FROM duckdb_memory()").fetchone()[0]
        peak["duckdb_mb"] = max(peak["duckdb_mb"], float(used or 0) / 2**20)


def child_pandas(db: Path, out: Path) -> dict[str, Any]:
    import duckdb

    con = duckdb.connect(str(db), read_only=True)
    rss_before = _rss_mb()
    started = time.perf_counter()
    df = con.sql("SELECT ts, latency_s FROM requests WHERE ok").df()
    load_s = time.perf_counter() - started
    cpu_started, started = _cpu_s(), time.perf_counter()
    window_us = int(WINDOW_S * 1e6)
    df["w"] = df["ts"].astype("datetime64[us]").astype("int64") // window_us
    by_window = df.groupby("w")["latency_s"]
    windows = by_window.quantile([0.5, 0.95, 0.99]).unstack()
    windows.columns = ["p50_s", "p95_s", "p99_s"]
    windows["count"] = by_window.size()
    windows["throughput_rps"] = windows["count"] / WINDOW_S
    windows["throughput_bin"] = (windows["throughput_rps"] // THROUGHPUT_BIN_RPS).astype("int64")
    df["tb"] = df["w"].map(windows["throughput_bin"])
    df["lb"] = np.floor(df["latency_s"] * 1e6 + 0.5).astype("int64") // int(LATENCY_BIN_MS * 1000)
    cells = df.groupby(["lb", "tb"]).size().rename("count").reset_index()
    map_s, map_cpu_s = time.perf_counter() - started, _cpu_s() - cpu_started
    by_bin = df.groupby("tb")["latency_s"]
    bins = by_bin.quantile([0.5, 0.95, 0.99]).unstack()
    bins.columns = ["p50_s", "p95_s", "p99_s"]
    bins["requests"] = by_bin.size()
    wall_s, cpu_s = time.perf_counter() - started, _cpu_s() - cpu_started
    windows.reset_index().to_parquet(out / "pandas_windows.parquet")
    cells.to_parquet(out / "pandas_cells.parquet")
    bins.reset_index().to_parquet(out / "pandas_bins.parquet")
    return {
        "wall_s": wall_s,
        "cpu_s": cpu_s,
        "map_s": map_s,
        "map_cpu_s": map_cpu_s,
        "load_s": load_s,
        "rss_before_mb": rss_before,
        "peak_rss_mb": _peak_rss_mb(),
        "requests": len(df),
    }


def child_buckets(db: Path, out: Path) -> dict[str, Any]:
    from sits_observe.collectors import histogram
    from sits_observe.lab.cluster.serving.server import E2E_BUCKETS_S
    from sits_observe.store import Store

    store = Store.open(db, read_only=True)
    window_us = int(WINDOW_S * 1e6)
    case = " ".join(f"WHEN latency_s <= {le!r} THEN {i}" for i, le in enumerate(E2E_BUCKETS_S))
    started = time.perf_counter()
    counts = store.query(
        f"SELECT epoch_us(ts) // {window_us} AS w, "
        f"CASE {case} ELSE {len(E2E_BUCKETS_S)} END AS b, count(*) AS n "
        "FROM requests WHERE ok GROUP BY ALL ORDER BY w, b"
    )
    w = counts.column("w").to_numpy()
    b = counts.column("b").to_numpy()
    n = counts.column("n").to_numpy()
    windows, _first = np.unique(w, return_index=True)
    dense = np.zeros((len(windows), len(E2E_BUCKETS_S) + 1))
    dense[np.searchsorted(windows, w), b] = n
    cumulative = np.cumsum(dense, axis=1)
    bounds = (*E2E_BUCKETS_S, float("inf"))
    estimates = np.full((len(windows), 3), np.nan)
    overflow = 0
    for i in range(len(windows)):
        hist = histogram.Histogram(bounds, tuple(cumulative[i]), 0.0, float(cumulative[i, -1]))
        for j, q in enumerate((0.5, 0.95, 0.99)):
            estimate = histogram.quantile(q, hist)
            if estimate is not None:
                estimates[i, j] = estimate.value
                overflow += estimate.in_overflow
    wall_s = time.perf_counter() - started
    table = pa.table(
        {"w": windows, "p50_s": estimates[:, 0], "p95_s": estimates[:, 1], "p99_s": estimates[:, 2]}
    )
    pq.write_table(table, out / "buckets_windows.parquet")
    return {"wall_s": wall_s, "peak_rss_mb": _peak_rss_mb(), "overflow": overflow}


def _cpu_s() -> float:
    """User + system CPU seconds of this process, all threads."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _rss_mb() -> float:
    import psutil

    return float(psutil.Process().memory_info().rss) / 2**20


def _peak_rss_mb() -> float:
    """VmHWM: this process's peak RSS. (``ru_maxrss`` would not do: Linux keeps it across
    ``execve``, so a child would report the parent's peak from before it started.)"""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024  # kB
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# -- parent -----------------------------------------------------------------------------


def run_child(kind: str, db: Path, out: Path, *extra: str) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child", kind, "--db", str(db), "--out", str(out), *extra]
    done = subprocess.run(cmd, check=True, capture_output=True, text=True)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def compare(out: Path) -> dict[str, Any]:
    """Check that sits and pandas produced the same output; returns what was compared."""
    sw = pq.read_table(out / "sits_windows.parquet").to_pandas()
    pw = pq.read_table(out / "pandas_windows.parquet").to_pandas()
    assert len(sw) == len(pw), (len(sw), len(pw))
    assert (sw["count"].to_numpy() == pw["count"].to_numpy()).all()
    assert np.array_equal(sw["throughput_rps"].to_numpy(), pw["throughput_rps"].to_numpy())
    worst = 0.0
    for column in ("p50_s", "p95_s", "p99_s"):
        a, b = sw[column].to_numpy(), pw[column].to_numpy()
        worst = max(worst, float(np.max(np.abs(a - b) / np.abs(b))))
    assert worst <= 1e-12, worst
    sc = pq.read_table(out / "sits_cells.parquet").to_pandas()
    pc_ = pq.read_table(out / "pandas_cells.parquet").to_pandas()
    key = ["throughput_bin", "latency_bin"]
    sc = sc.sort_values(key).reset_index(drop=True)
    pc_ = pc_.rename(columns={"lb": "latency_bin", "tb": "throughput_bin"})
    pc_ = pc_.sort_values(key).reset_index(drop=True)
    assert (sc[[*key, "count"]].to_numpy() == pc_[[*key, "count"]].to_numpy()).all()
    sb = pq.read_table(out / "sits_bins.parquet").to_pandas()
    pb = pq.read_table(out / "pandas_bins.parquet").to_pandas()
    assert (sb["requests"].to_numpy() == pb["requests"].to_numpy()).all()
    bins_worst = float(np.max(np.abs(sb["p95_s"].to_numpy() - pb["p95_s"].to_numpy())))
    assert bins_worst <= 1e-12 * float(pb["p95_s"].max())
    return {
        "windows": len(sw),
        "cells": len(sc),
        "bins": len(sb),
        "max_rel_diff": worst,
        "cell_counts_equal": True,
    }


def bucket_errors(out: Path) -> dict[str, dict[str, float]]:
    """Median and max absolute error of the bucket estimates vs the exact window quantiles."""
    exact = pq.read_table(out / "sits_windows.parquet").to_pandas()
    estimate = pq.read_table(out / "buckets_windows.parquet").to_pandas()
    assert len(exact) == len(estimate)
    errors = {}
    for column in ("p50_s", "p95_s", "p99_s"):
        diff = np.abs(estimate[column].to_numpy() - exact[column].to_numpy())
        rel = diff / exact[column].to_numpy()
        errors[column] = {
            "median_abs_s": float(np.median(diff)),
            "max_abs_s": float(np.max(diff)),
            "median_rel": float(np.median(rel)),
            "max_rel": float(np.max(rel)),
        }
    return errors


def report(args: argparse.Namespace, db: Path, out: Path) -> str:
    bare = [run_child("sits", db, out, "--map-only") for _ in range(args.runs)]
    for i, r in enumerate(bare):
        print(
            f"sits map only, run {i + 1}: {r['wall_s']:.3f} s, peak RSS {r['peak_rss_mb']:.0f} MB"
        )
    sits = [run_child("sits", db, out) for _ in range(args.runs)]
    for i, r in enumerate(sits):
        print(f"sits run {i + 1}: {r['wall_s']:.3f} s, peak RSS {r['peak_rss_mb']:.0f} MB")
    duck = run_child("sits", db, out, "--sample-duckdb")
    print(
        f"sits run with DuckDB memory sampling: peak buffer memory {duck['duckdb_peak_mb']:.0f} MB"
    )
    pandas = [run_child("pandas", db, out) for _ in range(args.pandas_runs)]
    for i, r in enumerate(pandas):
        print(
            f"pandas run {i + 1}: load {r['load_s']:.2f} s + compute {r['wall_s']:.2f} s, "
            f"peak RSS {r['peak_rss_mb']:.0f} MB"
        )
    buckets = run_child("buckets", db, out)
    print(f"bucket estimate: {buckets['wall_s']:.3f} s")
    checked = compare(out)
    errors = bucket_errors(out)
    s_wall = statistics.median(r["wall_s"] for r in sits)
    p_wall = statistics.median(r["wall_s"] for r in pandas)
    b_wall = statistics.median(r["wall_s"] for r in bare)
    b_rss = statistics.median(r["peak_rss_mb"] for r in bare)
    p_map = statistics.median(r["map_s"] for r in pandas)
    b_cpu = statistics.median(r["cpu_s"] for r in bare)
    s_cpu = statistics.median(r["cpu_s"] for r in sits)
    p_cpu = statistics.median(r["cpu_s"] for r in pandas)
    p_map_cpu = statistics.median(r["map_cpu_s"] for r in pandas)
    p_load = statistics.median(r["load_s"] for r in pandas)
    s_rss = statistics.median(r["peak_rss_mb"] for r in sits)
    s_base = statistics.median(r["rss_before_mb"] for r in sits)
    p_rss = statistics.median(r["peak_rss_mb"] for r in pandas)
    p_base = statistics.median(r["rss_before_mb"] for r in pandas)
    first = sits[0]
    lines = [
        SECTION,
        "",
        BEGIN,
        f"Date {datetime.now(UTC).date()}; machine: {os.cpu_count()} cores, "
        f"{_mem_gib():.0f} GiB, {platform.system()} {platform.machine()}, Python "
        f"{platform.python_version()}; sits median of {len(sits)} runs, pandas "
        f"{'median of ' + str(len(pandas)) + ' runs' if len(pandas) > 1 else '1 run'}, each run "
        "in a fresh process.",
        f"Input: {first['requests']:,} successful requests ({args.requests:,} stored, 0.1 % "
        "failed) of "
        "one model on 8 pods over 2 h, load ramp 50 -> 2,750 requests/s, latency "
        "log-normal x 1 / (1 - rate / 3,000); completion timestamps unsorted. Heatmap: 1 s "
        f"windows ({first['windows']:,}), 100 ms x 10 requests/s bins ({first['cells']:,} "
        "cells), SLO 1 s.",
        "",
        "| what is timed | wall s | pandas / sits (wall) | CPU s | pandas / sits (CPU) "
        "| peak RSS MB (RSS before the call) |",
        "|---|---:|---:|---:|---:|---:|",
        f"| **map**: sits_observe `compute_heatmaps(evidence=False)`: windows with exact "
        f"P50/P95/P99 + cells (DuckDB) | {b_wall:.3f} | | {b_cpu:.2f} | | {b_rss:.0f} |",
        f"| **map**: pandas, same output, compute only | {p_map:.3f} | {p_map / b_wall:.1f}x | "
        f"{p_map_cpu:.2f} | {p_map_cpu / b_cpu:.1f}x | |",
        f"| **full**: sits_observe `compute_heatmaps` (map + exact per-throughput-bin "
        f"P50/P95/P99, knee, safe max) | {s_wall:.3f} | | {s_cpu:.2f} | | "
        f"{s_rss:.0f} ({s_base:.0f}) |",
        f"| **full**: pandas, same output, compute only | {p_wall:.3f} | "
        f"{p_wall / s_wall:.1f}x | {p_cpu:.2f} | {p_cpu / s_cpu:.1f}x | "
        f"{p_rss:.0f} ({p_base:.0f}) |",
        f"| **full**: pandas, read from DuckDB + compute | {p_load + p_wall:.3f} | "
        f"{(p_load + p_wall) / s_wall:.1f}x | | | |",
        f"| bucket estimate (vLLM e2e buckets per window in DuckDB + `histogram_quantile`) "
        f"| {buckets['wall_s']:.3f} | | | | {buckets['peak_rss_mb']:.0f} |",
        "",
        f"DuckDB's own buffer memory (sampled every 10 ms in a separate run): peak "
        f"{duck['duckdb_peak_mb']:.0f} MB. Knee: {_rps(first['knee_rps'])}; safe maximum at "
        f"a 1 s P95 SLO: {_rps(first['safe_max_rps'])}.",
        "",
        f"Agreement: sits and pandas give the same {checked['windows']:,} windows (counts and "
        f"throughputs equal, quantiles within {checked['max_rel_diff']:.1e} relative), the same "
        f"{checked['cells']:,} cell counts and the same {checked['bins']} per-bin request counts "
        "and P95s.",
        "",
        "Error of the bucket estimate against the exact per-window quantiles (vLLM's 21 "
        f"`e2e_request_latency_seconds` bounds; {buckets['overflow']} estimates fell in +Inf):",
        "",
        "| quantile | median abs error s | max abs error s | median rel error | max rel error |",
        "|---|---:|---:|---:|---:|",
    ]
    for column, e in errors.items():
        lines.append(
            f"| {column[:-2].upper()} | {e['median_abs_s']:.4f} | {e['max_abs_s']:.4f} | "
            f"{e['median_rel']:.1%} | {e['max_rel']:.1%} |"
        )
    lines += [
        "",
        "Wall seconds of every run: sits map "
        + ", ".join(f"{r['wall_s']:.3f}" for r in bare)
        + "; sits full "
        + ", ".join(f"{r['wall_s']:.3f}" for r in sits)
        + "; pandas map "
        + ", ".join(f"{r['map_s']:.2f}" for r in pandas)
        + "; pandas full "
        + ", ".join(f"{r['wall_s']:.2f}" for r in pandas)
        + "; pandas load "
        + ", ".join(f"{r['load_s']:.2f}" for r in pandas)
        + ".",
        "",
        f"Command: `.venv/bin/python bench/bench_heatmap.py --runs {args.runs} "
        f"--pandas-runs {args.pandas_runs} --record` (generating the 10 M-row file first takes "
        "about a minute and is not timed).",
        END,
    ]
    return "\n".join(lines)


def _rps(value: float | None) -> str:
    return "none" if value is None else f"{value:g} requests/s"


def _mem_gib() -> float:
    import psutil

    return float(psutil.virtual_memory().total) / 2**30


def write_docs(section: str) -> None:
    text = DOCS.read_text()
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
        body = section.split(BEGIN, 1)[1].rsplit(END, 1)[0]
        text = head + BEGIN + body + END + tail
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    DOCS.write_text(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=10_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--pandas-runs", type=int, default=1)
    parser.add_argument("--db", type=Path, help="reuse (or create) this DuckDB file")
    parser.add_argument("--record", action="store_true", help="write docs/benchmarks.md")
    parser.add_argument("--child", choices=("sits", "pandas", "buckets"), help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--sample-duckdb", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--map-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        if args.child == "sits":
            result = child_sits(args.db, args.out, args.sample_duckdb, not args.map_only)
        elif args.child == "pandas":
            result = child_pandas(args.db, args.out)
        else:
            result = child_buckets(args.db, args.out)
        print(json.dumps(result))
        return
    with tempfile.TemporaryDirectory(prefix="sits-heatmap-bench-") as tmp:
        db = args.db or Path(tmp) / "requests.duckdb"
        if not db.exists():
            print(f"generating {args.requests:,} requests into {db} ...")
            started = time.perf_counter()
            generate(db, args.requests)
            print(f"generated in {time.perf_counter() - started:.1f} s")
        section = report(args, db, Path(tmp))
    print()
    print(section)
    if args.record:
        write_docs(section)
        print(f"\nrecorded in {DOCS}")


if __name__ == "__main__":
    main()
