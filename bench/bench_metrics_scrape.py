"""Benchmark: ``/metrics`` of ``sits-observe serve`` for a 1,000-node x 8-GPU fleet.

Fills a DuckDB file with five minutes of a synthetic fleet (inventory, one GPU sample per GPU
every 15 s, one cgroup sample per busy GPU, requests of 20 models, histogram windows,
controller decisions), then measures, with medians:

- the fast pass from scratch (a collector with no past: every fast signal built, every family
  rendered to text; the service's first scrape waits for it);
- the slow pass from scratch (heatmap knee, memory classes, DBSCAN trends, idle GPUs; always
  in the background);
- incremental fast passes, the service's steady state (every later pass runs in the
  background while scrapes serve the previous text): after one new tick of samples of every
  GPU with the clock 15 s on (the fleet's normal case: every node's rows changed); the same
  with a new inventory snapshot too (the kube collector's is every 30 s, so every other pass
  of a 15 s cache sees one), once repeating every row and once with 1% of the pods changed
  (FGD keeps its text only when the rows it reads are the same); after the clock moved 15 s
  with no new row (samples leave the windows); and with neither (what a pass costs when
  nothing changed). Each case also prints the CPU of every signal it rebuilt (builder and
  text, median);
- a scrape served from the passes' cached text (``metrics_text``, what ``/metrics`` does),
  against the same families written again by ``generate_latest`` on every scrape (the
  exporter before the text cache) and against the peer: the very same samples held in
  prometheus_client's plain ``Gauge`` / ``Counter`` objects (a hand-written exporter that sets
  its gauges after each pass), serialised by the same ``generate_latest``;
- the number of series of every family.

Run: ``.venv/bin/python bench/bench_metrics_scrape.py [--nodes 1000] [--runs 5] [--record]``;
``--record`` rewrites the block of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from _docs import write_block
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.core import Metric

from sits_observe.collectors.exposition import parse_exposition
from sits_observe.store import Store
from sits_observe.surfaces.service.exporter.cache import Built, Inputs, SignalCache
from sits_observe.surfaces.service.exporter.exporter import (
    DerivedSignals,
    ExporterSettings,
    metrics_text,
)
from sits_observe.surfaces.service.exporter.registry import REGISTRY
from sits_observe.surfaces.service.metrics import ServiceMetrics

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- metrics-scrape-bench:begin -->", "<!-- metrics-scrape-bench:end -->"
NOW = datetime(2026, 11, 1, 12, 0)
GIB = 1024**3
TS = pa.timestamp("us")


def inventory(
    store: Store, names: list[str], busy: np.ndarray, at: datetime, changed: int = 0
) -> None:
    """One inventory snapshot at ``at``: every node, and a pod on each busy GPU (the same
    rows at every call: each version continues, only a snapshot time is added), except the
    first ``changed`` pods, whose CPU request differs at every call (a new version each)."""
    nodes = len(names)
    store.append(
        "nodes",
        pa.table(
            {
                "ts": pa.array([at] * nodes, TS),
                "node": names,
                "gpu_allocatable": pa.array([8] * nodes, pa.int32()),
                "gpu_memory_bytes": [80 * GIB] * nodes,
                "cpu_allocatable_milli": [128_000] * nodes,
                "ready": [True] * nodes,
            }
        ),
    )
    idx = np.flatnonzero(busy)
    start = NOW - timedelta(seconds=600)
    store.append(
        "pods",
        pa.table(
            {
                "ts": pa.array([at] * idx.size, TS),
                "pod_uid": [f"u{g}" for g in idx],
                "namespace": [f"ns-{g % 50}" for g in idx],
                "pod": [f"p{g}" for g in idx],
                "workload": [f"w{g % 400}" for g in idx],
                "node": [names[g // 8] for g in idx],
                "phase": ["Running"] * idx.size,
                "gpu_request": pa.array([1] * idx.size, pa.int32()),
                "cpu_request_milli": [
                    8000 + (int(at.timestamp()) % 97 if k < changed else 0) for k in range(idx.size)
                ],
                "created_at": pa.array([start] * idx.size, TS),
                "scheduled_at": pa.array([start + timedelta(seconds=1)] * idx.size, TS),
                "initialized_at": pa.array([start + timedelta(seconds=2)] * idx.size, TS),
                "containers_ready_at": pa.array([start + timedelta(seconds=9)] * idx.size, TS),
                "ready_at": pa.array([start + timedelta(seconds=10)] * idx.size, TS),
            }
        ),
    )


def fill(store: Store, nodes: int, seed: int = 7) -> tuple[list[str], np.ndarray]:
    """Five minutes of a fleet of ``nodes`` x 8 GPUs, half of the GPUs busy; returns the
    node names and which GPUs are busy (for :func:`tick`)."""
    rng = np.random.default_rng(seed)
    names = [f"node-{i:05d}" for i in range(nodes)]
    busy = rng.random(nodes * 8) < 0.5
    inventory(store, names, busy, NOW)
    for k in range(20):  # one sample per GPU every 15 s, cgroup samples 1 s later
        tick(store, names, busy, NOW - timedelta(seconds=300 - 15 * k), rng)
    n = 200_000
    store.append(
        "requests",
        pa.table(
            {
                "ts": pa.array(
                    [NOW - timedelta(microseconds=int(x)) for x in rng.uniform(0, 3.6e9, n)], TS
                ),
                "model": [f"model-{m}" for m in rng.integers(0, 20, n)],
                "latency_s": rng.gamma(2.0, 0.4, n),
                "ok": rng.random(n) > 0.01,
                "node": [names[int(i)] for i in rng.integers(0, nodes, n)],
            }
        ),
    )
    store.append(
        "server_windows",
        pa.table(
            {
                "ts": pa.array([NOW - timedelta(seconds=15 * (k % 20)) for k in range(400)], TS),
                "window_s": [15.0] * 400,
                "model": [f"model-{k % 20}" for k in range(400)],
                "completed": [50.0] * 400,
                "latency_p50_s": [0.7] * 400,
                "latency_p95_s": [1.9] * 400,
                "latency_p99_s": [2.6] * 400,
                "estimate": [True] * 400,
            }
        ),
    )
    store.append(
        "decisions",
        pa.table(
            {
                "ts": pa.array([NOW - timedelta(seconds=k) for k in range(150)], TS),
                "kind": ["ResourceQuota"] * 150,
                "namespace": [f"ns-{k % 50}" for k in range(150)],
                "name": ["sits"] * 150,
                "action": [("quota-gpu", "quota-cpu", "quota-memory")[k // 50] for k in range(150)],
                "current": ["8"] * 150,
                "proposed": ["12"] * 150,
                "outcome": ["recommended"] * 150,
            }
        ),
    )

    return names, busy


def tick(
    store: Store, names: list[str], busy: np.ndarray, at: datetime, rng: np.random.Generator
) -> None:
    """One sample of every GPU at ``at`` and one cgroup sample of each busy one 1 s later."""
    gpus = busy.size
    pods = [f"p{g}" if busy[g] else None for g in range(gpus)]
    namespaces = [f"ns-{g % 50}" if busy[g] else None for g in range(gpus)]
    idx = np.flatnonzero(busy)
    used = np.where(busy, rng.uniform(20, 75, gpus), 1.0)
    store.append(
        "gpu_samples",
        pa.table(
            {
                "ts": pa.array([at] * gpus, TS),
                "node": [n for n in names for _ in range(8)],
                "gpu_uuid": [f"GPU-{g}" for g in range(gpus)],
                "namespace": namespaces,
                "pod": pods,
                "container": ["main" if p else None for p in pods],
                "fb_used_bytes": (used * GIB).astype(np.int64),
                "fb_free_bytes": ((80 - used) * GIB).astype(np.int64),
                "fb_total_bytes": [80 * GIB] * gpus,
                "dram_active_ratio": rng.uniform(0, 0.9, gpus),
                "source": ["dcgm"] * gpus,
            }
        ),
    )
    store.append(
        "container_samples",
        pa.table(
            {
                "ts": pa.array([at + timedelta(seconds=1)] * idx.size, TS),
                "node": [names[g // 8] for g in idx],
                "container_id": [f"c{g}" for g in idx],
                "namespace": [namespaces[g] for g in idx],
                "pod": [pods[g] for g in idx],
                "container": ["main"] * idx.size,
                "memory_current_bytes": (rng.uniform(1, 16, idx.size) * GIB).astype(np.int64),
            }
        ),
    )


@dataclass
class Timing:
    """Wall and process CPU seconds (every thread: DuckDB's too) of each run."""

    wall_s: list[float] = field(default_factory=list)
    cpu_s: list[float] = field(default_factory=list)

    def run(self, fn: Callable[[], object]) -> None:
        wall, cpu = time.perf_counter(), time.process_time()
        fn()
        self.wall_s.append(time.perf_counter() - wall)
        self.cpu_s.append(time.process_time() - cpu)

    def cell(self, digits: int = 0) -> str:
        """``median wall (median CPU)`` in ms."""
        med = statistics.median
        return f"{med(self.wall_s) * 1000:.{digits}f} ms ({med(self.cpu_s) * 1000:.{digits}f} ms)"


def timed(fn: Callable[[], object], runs: int) -> Timing:
    """:class:`Timing` of ``runs`` calls of ``fn``."""
    timing = Timing()
    for _ in range(runs):
        timing.run(fn)
    return timing


def plain_registry(body: bytes) -> CollectorRegistry:
    """The same samples in plain prometheus_client metrics (the peer)."""
    expo = parse_exposition(body.decode())
    registry = CollectorRegistry()
    made: dict[str, Gauge | Counter] = {}
    for s in expo.samples:
        base = s.name.removesuffix("_total")
        kind = expo.types.get(s.name) or expo.types.get(base, "gauge")
        names = tuple(k for k, _ in s.labels)
        key = s.name
        if key not in made:
            cls = Counter if kind == "counter" else Gauge
            made[key] = cls(base if cls is Counter else s.name, "peer", names, registry=registry)
        metric = made[key]
        child = metric.labels(*(v for _, v in s.labels)) if names else metric
        if isinstance(child, Counter):
            child.inc(s.value)
        else:
            child.set(s.value)
    return registry


class Clock:
    """The exporter's wall clock and monotonic clock, moved together."""

    def __init__(self) -> None:
        self.at = NOW
        self.mono_s = 0.0

    def now(self) -> datetime:
        return self.at

    def monotonic(self) -> float:
        return self.mono_s


class TimedCache(SignalCache):
    """The exporter's cache, recording the CPU seconds of each signal it rebuilds (builder and
    text), by signal name."""

    def __init__(self) -> None:
        super().__init__()
        self.seconds: dict[str, list[float]] = {}

    def build(self, name: str, inputs: Inputs, make: Callable[[], list[Metric]]) -> Built:
        started = time.process_time()
        try:
            return super().build(name, inputs, make)
        finally:
            self.seconds.setdefault(name, []).append(time.process_time() - started)


def inline(job: Callable[[], None]) -> None:
    job()


def from_scratch(store: Store, settings: ExporterSettings, **kw: Any) -> DerivedSignals:
    """A collector with no past (its first :meth:`passes` builds every signal)."""
    return DerivedSignals(store, settings, clock=lambda: NOW, **kw)


def incremental(
    store: Store, names: list[str], busy: np.ndarray, runs: int
) -> dict[str, tuple[Timing, float]]:
    """Seconds of incremental fast passes in three cases, and the share of signals reused."""
    clock = Clock()
    derived = DerivedSignals(
        store,
        ExporterSettings(cache_s=15, slow_cache_s=86_400),
        clock=clock.now,
        monotonic=clock.monotonic,
        spawn=inline,
        signals=[s for s in REGISTRY if not s.slow],
    )
    cache = TimedCache()
    derived.cache = cache
    derived.passes()
    rng = np.random.default_rng(99)
    out: dict[str, tuple[Timing, float]] = {}

    def case(
        name: str, *, new_rows: bool, clock_s: float, snapshot: bool = False, changed: int = 0
    ) -> None:
        seconds = Timing()
        reused, built = derived.cache.reused, derived.cache.rebuilt
        cache.seconds.clear()
        for _ in range(runs):
            clock.at += timedelta(seconds=clock_s)
            if new_rows:
                tick(store, names, busy, clock.at - timedelta(seconds=2), rng)
            if snapshot:
                inventory(store, names, busy, clock.at - timedelta(seconds=1), changed)
            clock.mono_s += 15
            seconds.run(derived.passes)  # due: the pass runs (inline here, a thread in serve)
        share = (derived.cache.reused - reused) / max(
            1, derived.cache.reused - reused + derived.cache.rebuilt - built
        )
        out[name] = (seconds, share)
        builders = sorted(cache.seconds.items(), key=lambda kv: -statistics.median(kv[1]))
        print(
            f"{name}: CPU of each rebuilt signal (median ms, build and text): "
            + ", ".join(f"{n} {statistics.median(v) * 1000:.0f}" for n, v in builders)
        )

    case("new tick of every GPU, clock +15 s", new_rows=True, clock_s=15)
    case(
        "new tick of every GPU and a new inventory snapshot, clock +15 s",
        new_rows=True,
        clock_s=15,
        snapshot=True,
    )
    changed = max(1, int(busy.sum()) // 100)
    case(
        f"new tick of every GPU and a new inventory snapshot with {changed} of the "
        f"{int(busy.sum()):,} pods changed, clock +15 s",
        new_rows=True,
        clock_s=15,
        snapshot=True,
        changed=changed,
    )
    case("no new row, clock +15 s", new_rows=False, clock_s=15)
    case("nothing changed", new_rows=False, clock_s=0)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--record", action="store_true", help="write docs/benchmarks.md")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, Store.open(Path(tmp) / "b.duckdb") as store:
        started = time.perf_counter()
        names, busy = fill(store, args.nodes)
        print(f"fleet {args.nodes} nodes x 8 GPUs written in {time.perf_counter() - started:.1f} s")
        settings = ExporterSettings()
        fast_s = timed(
            lambda: from_scratch(store, settings, spawn=lambda j: None).passes(), args.runs
        )
        slow_only = [s for s in REGISTRY if s.slow]
        slow_s = timed(
            lambda: from_scratch(store, settings, spawn=inline, signals=slow_only).passes(),
            max(2, args.runs // 2),
        )

        cached = from_scratch(store, settings, spawn=inline)
        registry = ServiceMetrics().registry
        registry.register(cached)
        body = metrics_text(registry, cached)
        scrape_s = timed(lambda: metrics_text(registry, cached), args.runs * 4)
        written_s = timed(lambda: generate_latest(registry), args.runs * 4)
        mine = cached.exposition()
        peer = plain_registry(mine)
        peer_body = generate_latest(peer)
        peer_s = timed(lambda: generate_latest(peer), args.runs * 4)
        expo = parse_exposition(mine.decode())
        errors = sum(s.value for s in expo.samples if s.name == "sits_exporter_errors_total")
        steady = incremental(store, names, busy, args.runs)

    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    lines = [
        f"Date {datetime.now(UTC):%Y-%m-%d}; machine: {os.cpu_count()} cores, "
        f"{platform.system()} {platform.machine()}, Python {platform.python_version()}, load "
        f"average {load} at the end (other jobs share the cores); {args.nodes:,} nodes x 8 "
        f"GPUs; {len(expo.samples):,} exporter series, exporter errors {errors:g}. Median wall "
        "time, and in brackets the process's CPU time (every thread, DuckDB's included).",
        "",
        "| what | median wall (CPU) | runs |",
        "|---|---:|---:|",
        f"| fast pass from scratch (first scrape) | {fast_s.cell()} | {len(fast_s.wall_s)} |",
        f"| slow pass from scratch (background) | {slow_s.cell()} | {len(slow_s.wall_s)} |",
    ]
    for name, (seconds, share) in steady.items():
        lines.append(
            f"| incremental fast pass (background), {name}: {share:.0%} of the signals reused "
            f"| {seconds.cell()} | {len(seconds.wall_s)} |"
        )
    lines += [
        f"| scrape served from the cached text (`/metrics`) | {scrape_s.cell(digits=1)} "
        f"| {len(scrape_s.wall_s)} |",
        f"| scrape writing the same families again (before the text cache) "
        f"| {written_s.cell(digits=1)} | {len(written_s.wall_s)} |",
        f"| scrape of plain Gauges with the same samples (peer) | {peer_s.cell(digits=1)} "
        f"| {len(peer_s.wall_s)} |",
        f"| body: `/metrics` / exporter part / peer | {len(body) / 1e6:.2f} / "
        f"{len(mine) / 1e6:.2f} / {len(peer_body) / 1e6:.2f} MB | |",
        "",
        f"Command: `.venv/bin/python bench/bench_metrics_scrape.py --nodes {args.nodes} "
        f"--runs {args.runs} --record`.",
    ]
    text = "\n".join(lines)
    print(text)
    families: dict[str, int] = {}
    for s in expo.samples:
        families[s.name] = families.get(s.name, 0) + 1
    print("\nseries per family:")
    for name, count in sorted(families.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"  {name} {count:,}")
    if args.record:
        write_block(DOCS, BEGIN, END, text, "## `/metrics` scrape for a 1,000-node x 8-GPU fleet")
        print(f"\nrecorded in {DOCS}")


if __name__ == "__main__":
    main()
