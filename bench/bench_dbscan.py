"""DBSCAN benchmark: one week of per-GPU trend features for 8,000 GPUs.

Input (generated with numpy, not timed): one-minute framebuffer-occupancy series for
``--gpus`` GPUs over ``--days`` days (default 8,000 x 7 x 1,440 = 80,640,000 points) in the
long format :func:`read_occupancy_series` hands to feature extraction: ``codes`` (int64),
``t_s`` (float64, epoch seconds), ``values`` (float64). The fleet mixes known shapes:
30% steady, 10% leaking, 20% saw-tooth, 25% daily cycle, 13% idle, 2% random walks.
Series are generated ``--chunk-gpus`` GPUs at a time into preallocated arrays.

What is timed (median of ``--runs``; each stage separately, then their sum):

- sits_observe: ``series_features`` (vectorised, whole series ~250,000 points at a time) over
  all points -> ``scale_features`` (StandardScaler with floors) -> ``choose_eps`` (k-distance
  knee, k = min_samples = 10) -> scikit-learn ``DBSCAN``. This is ``cluster_trends`` minus the
  DuckDB read.
- peer, features: a per-GPU Python loop computing the same five features one series at a
  time with numpy (``np.linalg.lstsq`` on the explicit design, ``np.diff`` for drops); its
  matrix must equal the vectorised one (checked, untimed).
- peer, clustering: scikit-learn ``KMeans`` (k = the number of DBSCAN clusters found,
  ``n_init=3``) on the same scaled features.

Peak memory: a separate run of each stage under ``tracemalloc`` (tracing slows Python
loops, so it is never in the timed runs): the peak of traced allocations during the stage
above what was allocated when it started (the 1.9 GB input arrays are not counted; numpy
and scikit-learn report their buffers to tracemalloc). The process peak RSS is printed too.

Run: ``.venv/bin/python bench/bench_dbscan.py [--runs 3] [--gpus 8000] [--days 7] [--record]``.
``--record`` writes the figures between the ``dbscan-bench`` markers of docs/benchmarks.md
(appending the section at the end the first time).
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import resource
import statistics
import time
import tracemalloc
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import sklearn
from sklearn.cluster import DBSCAN, KMeans

from sits_observe.analytics.trends.clusters import (
    TrendSettings,
    choose_eps,
    cluster_features,
    resolution_eps,
    scale_features,
)
from sits_observe.analytics.trends.features import series_features

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "benchmarks.md"
HEADING = "## DBSCAN: one week of per-GPU features for 8,000 GPUs"
BEGIN, END = "<!-- dbscan-bench:begin -->", "<!-- dbscan-bench:end -->"
DAY0 = 1_767_225_600.0  # 2026-01-01 00:00 UTC
MIN_SAMPLES = 10
SHAPES = (("steady", 0.30), ("leaking", 0.10), ("saw-tooth", 0.20), ("daily", 0.25))
SHAPES += (("idle", 0.13), ("random walk", 0.02))


# -- input ------------------------------------------------------------------------------


def generate(gpus: int, days: int, chunk_gpus: int, seed: int = 11) -> tuple[Any, ...]:
    """Long-format series of the fleet (see module docstring); also each GPU's shape."""
    rng = np.random.default_rng(seed)
    t = DAY0 + np.arange(0.0, days * 86400.0, 60.0)
    th = (t - DAY0) / 3600.0
    day_angle = 2 * np.pi * (t % 86400) / 86400
    names = [s for s, _ in SHAPES]
    shape = rng.choice(len(SHAPES), size=gpus, p=[p for _, p in SHAPES])
    n = gpus * t.size
    codes = np.repeat(np.arange(gpus, dtype=np.int64), t.size)
    t_s = np.empty(n)
    values = np.empty(n)
    for a in range(0, gpus, chunk_gpus):
        b = min(gpus, a + chunk_gpus)
        s = shape[a:b, None]
        g = b - a
        level = rng.uniform(0.3, 0.6, (g, 1))
        level = np.where(s == 4, rng.uniform(0, 0.01, (g, 1)), level)
        level = np.where(s == 1, rng.uniform(0.05, 0.15, (g, 1)), level)
        x = level + rng.normal(0, 0.003, (g, t.size))
        x += (s == 1) * rng.uniform(0.003, 0.005, (g, 1)) * th  # 0.3-0.5 pp per hour
        period = rng.uniform(1.5, 3.0, (g, 1))
        tooth = ((th + rng.uniform(0, 3, (g, 1))) % period) / period
        x += (s == 2) * (0.4 * tooth - 0.2)
        swing = rng.uniform(0.15, 0.3, (g, 1))
        x += (s == 3) * swing * np.sin(day_angle + rng.normal(0, 0.3, (g, 1)))
        walk = np.cumsum(rng.normal(0, 0.004, (g, t.size)), axis=1)
        x = np.where(s == 5, np.clip(0.5 + walk, 0, 1), x)
        t_s[a * t.size : b * t.size] = np.tile(t, g)
        values[a * t.size : b * t.size] = x.ravel()
    return codes, t_s, values, [names[i] for i in shape]


# -- the peer's features -----------------------------------------------------------------


def loop_features(codes: np.ndarray, t_s: np.ndarray, values: np.ndarray) -> np.ndarray:
    """The same five features, one GPU at a time (the straightforward implementation)."""
    starts = np.flatnonzero(np.r_[True, codes[1:] != codes[:-1]])
    ends = np.r_[starts[1:], codes.size]
    rows = []
    for a, b in zip(starts, ends, strict=True):
        t, x = t_s[a:b], values[a:b]
        t_h = (t - t[0]) / 3600.0
        span_h = t_h[-1]
        cols = [np.ones_like(t_h), t_h - t_h.mean()]
        if span_h >= 24:
            angle = 2 * np.pi * np.mod(t, 86400) / 86400
            cols += [np.cos(angle), np.sin(angle)]
        design = np.column_stack(cols)
        coef, *_ = np.linalg.lstsq(design, x, rcond=None)
        resid = x - design @ coef
        amplitude = float(np.hypot(coef[2], coef[3])) if span_h >= 24 else 0.0
        drops = int(np.sum(np.diff(x) <= -0.05))
        rows.append([x.mean(), coef[1], np.sqrt(np.mean(resid**2)), amplitude, drops / span_h])
    return np.array(rows)


# -- measurement ------------------------------------------------------------------------


@dataclass
class Stage:
    name: str
    seconds: list[float]
    peak_bytes: int = 0

    @property
    def median_s(self) -> float:
        return statistics.median(self.seconds)


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    gc.collect()
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def traced_peak(fn: Callable[[], Any]) -> int:
    """Peak traced bytes during ``fn`` above what was allocated when it started."""
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak - base


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--gpus", type=int, default=8000)
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--chunk-gpus", type=int, default=250)
    parser.add_argument("--record", action="store_true")
    args = parser.parse_args()

    t0 = time.perf_counter()
    codes, t_s, values, truth = generate(args.gpus, args.days, args.chunk_gpus)
    points = int(values.size)
    print(f"generated {args.gpus} GPUs x {args.days} d = {points:,} points "
          f"({(codes.nbytes + t_s.nbytes + values.nbytes) / 2**30:.2f} GiB) "
          f"in {time.perf_counter() - t0:.1f} s (not timed)")  # fmt: skip

    feats = series_features(codes, t_s, values)
    scaled = scale_features(feats.matrix)
    floor = resolution_eps(feats.matrix)
    eps = choose_eps(scaled, MIN_SAMPLES, min_eps=floor)
    labels = DBSCAN(eps=eps.eps, min_samples=MIN_SAMPLES).fit_predict(scaled)
    k = len(set(labels.tolist()) - {-1})

    stages = {
        "features (vectorised)": lambda: series_features(codes, t_s, values),
        "scaling": lambda: scale_features(feats.matrix),
        "eps (k-distance knee)": lambda: choose_eps(
            scaled, MIN_SAMPLES, min_eps=resolution_eps(feats.matrix)
        ),
        "DBSCAN": lambda: DBSCAN(eps=eps.eps, min_samples=MIN_SAMPLES).fit_predict(scaled),
        "peer: features (per-GPU loop)": lambda: loop_features(codes, t_s, values),
        "peer: KMeans": lambda: KMeans(n_clusters=max(k, 1), n_init=3, random_state=0).fit(scaled),
    }
    results = {name: Stage(name, []) for name in stages}
    load_before = os.getloadavg()[0]
    for run in range(args.runs):
        for name, fn in stages.items():
            seconds, _ = timed(fn)
            results[name].seconds.append(seconds)
        done = ", ".join(f"{n} {s.seconds[-1]:.3f} s" for n, s in results.items())
        print(f"run {run + 1}: {done}")
    load_after = os.getloadavg()[0]
    for name, fn in stages.items():
        results[name].peak_bytes = traced_peak(fn)

    reference = loop_features(codes, t_s, values)
    same = bool(np.allclose(reference, feats.matrix, rtol=1e-6, atol=1e-9))
    result = cluster_features(
        feats, tuple(str(i) for i in range(args.gpus)), ("",) * args.gpus,
        settings=TrendSettings(min_samples=MIN_SAMPLES),
    )  # fmt: skip
    agreement = purity(result, truth)
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    load = (load_before, load_after)
    report = render(args, points, results, eps, k, result, same, agreement, rss_mb, load)
    print(report)
    if args.record:
        record(report)
        print(f"recorded in {DOCS}")


def purity(result: Any, truth: list[str]) -> str:
    """How the clusters line up with the generated shapes, in words."""
    parts = []
    for c in result.clusters:
        shapes = Counter(truth[int(m.key)] for m in c.members)
        top, count = shapes.most_common(1)[0]
        share = 100 * count / len(c.members)
        parts.append(f"'{', '.join(c.words)}' {len(c.members)} ({share:.0f}% {top})")
    noise = Counter(truth[int(c.members[0].key)] for c in result.noise)
    parts.append(f"noise {len(result.noise)} ({dict(noise)})")
    return "; ".join(parts)


def render(
    args: argparse.Namespace,
    points: int,
    results: dict[str, Stage],
    eps: Any,
    k: int,
    result: Any,
    same: bool,
    agreement: str,
    rss_mb: float,
    load: tuple[float, float],
) -> str:
    sits = ["features (vectorised)", "scaling", "eps (k-distance knee)", "DBSCAN"]
    total = sum(results[n].median_s for n in sits)
    peer_total = (
        results["peer: features (per-GPU loop)"].median_s
        + sum(results[n].median_s for n in sits[1:3])
        + results["peer: KMeans"].median_s
    )
    lines = [
        f"Date {datetime.now(UTC):%Y-%m-%d}; machine: {platform.machine()}, "
        f"{_cores()} cores, Python {platform.python_version()}, numpy {np.__version__}, "
        f"scikit-learn {sklearn.__version__}; median of {args.runs} runs; 1-minute load "
        f"average {load[0]:.1f} before and {load[1]:.1f} after the timed runs (the machine is "
        "shared with other jobs, so absolute times vary by up to 2x between sessions; the "
        "ratios hold better).",
        f"Input: {args.gpus:,} GPUs x {args.days} days of one-minute occupancy = {points:,} "
        f"points in long format (int64 code, float64 time, float64 value: "
        f"{points * 24 / 2**30:.2f} GiB), generated with numpy, not timed.",
        "",
        "| stage | median s | peak traced MB above input | runs, s |",
        "|---|---:|---:|---|",
    ]
    for name, stage in results.items():
        runs = ", ".join(f"{s:.3f}" for s in stage.seconds)
        lines.append(f"| {name} | {stage.median_s:.3f} | {stage.peak_bytes / 2**20:.0f} | {runs} |")
    ratio_features = (
        results["peer: features (per-GPU loop)"].median_s
        / results["features (vectorised)"].median_s
    )
    lines += [
        f"| **sits_observe total** (features + scaling + eps + DBSCAN) | **{total:.3f}** | | |",
        f"| peer total (loop features + scaling + eps + KMeans) | {peer_total:.3f} | | |",
        "",
        f"Ratio: features, per-GPU loop / vectorised = {ratio_features:.1f}x; "
        f"total, peer / sits_observe = {peer_total / total:.1f}x; KMeans / DBSCAN = "
        f"{results['peer: KMeans'].median_s / results['DBSCAN'].median_s:.2f}x. "
        f"Feature throughput {points / results['features (vectorised)'].median_s / 1e6:.1f} M "
        "points/s.",
        "",
        f"Outcome: eps {eps.eps:.3f} ({eps.source}; knee strength {eps.knee_strength:.2f}, "
        f"k = min_samples = {MIN_SAMPLES}); {k} clusters: {agreement}. The loop's feature "
        f"matrix equals the vectorised one: {'yes' if same else 'NO'} (rtol 1e-6). "
        f"Process peak RSS {rss_mb:,.0f} MB (input arrays, both feature paths and the "
        "generator's temporaries).",
        "",
        "What is timed: `series_features` over the whole input (it works through whole "
        "series about 250,000 points at a time, so its temporaries stay in cache), "
        "`scale_features`, `choose_eps` (a scikit-learn NearestNeighbors query for the "
        "k-distance curve, the knee, the resolution floor) and scikit-learn "
        f"`DBSCAN.fit_predict` on the {args.gpus:,} x 5 scaled matrix: `cluster_trends` "
        "without the DuckDB read and bucketing, which this benchmark does not include. "
        "Peers: the same "
        "features computed one GPU at a time in a Python loop, and `KMeans` (k = DBSCAN's "
        "cluster count, n_init 3) in place of DBSCAN. Peak memory is tracemalloc's peak "
        "during each stage in a separate, untimed run.",
        "",
        f"Command: `.venv/bin/python bench/bench_dbscan.py --runs {args.runs} --record`.",
    ]
    return "\n".join(lines)


def _cores() -> int:
    return len(os.sched_getaffinity(0))


def record(report: str) -> None:
    text = DOCS.read_text()
    block = f"{BEGIN}\n{report}\n{END}"
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        tail = rest.split(END, 1)[1]
        text = head + block + tail
    else:
        text = text.rstrip("\n") + f"\n\n{HEADING}\n\n{block}\n"
    DOCS.write_text(text)


if __name__ == "__main__":
    main()
