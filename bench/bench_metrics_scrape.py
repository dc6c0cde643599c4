"""Benchmark: ``/metrics`` of ``sits-observe serve`` for a 1,000-node x 8-GPU fleet.

Fills a DuckDB file with five minutes of a synthetic fleet (inventory, one GPU sample per GPU
every 15 s, one cgroup sample per busy GPU, requests of 20 models, histogram windows,
controller decisions), then measures, with medians:

- the fast pass (every fast signal computed from the store: a cache miss, ``cache_s`` 0);
- the slow pass (heatmap knee, memory classes, DBSCAN trends; run in the background in the
  service, timed inline here);
- a scrape served from the cache (what Prometheus sees between passes) and its body size;
- the peer: the very same samples held in prometheus_client's plain ``Gauge`` /
  ``Counter`` objects (what a hand-written exporter that sets its gauges after each pass
  would serve), serialised by the same ``generate_latest``.

Run: ``.venv/bin/python bench/bench_metrics_scrape.py [--nodes 1000] [--runs 5]``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from sits_observe.collectors.exposition import parse_exposition
from sits_observe.store import Store
from sits_observe.surfaces.service.exporter import DerivedSignals, ExporterSettings

NOW = datetime(2026, 11, 1, 12, 0)
GIB = 1024**3
TS = pa.timestamp("us")


def fill(store: Store, nodes: int, seed: int = 7) -> None:
    """Five minutes of a fleet of ``nodes`` x 8 GPUs, half of the GPUs busy."""
    rng = np.random.default_rng(seed)
    names = [f"node-{i:05d}" for i in range(nodes)]
    gpus = nodes * 8
    store.append(
        "nodes",
        pa.table(
            {
                "ts": pa.array([NOW] * nodes, TS),
                "node": names,
                "gpu_allocatable": pa.array([8] * nodes, pa.int32()),
                "gpu_memory_bytes": [80 * GIB] * nodes,
                "cpu_allocatable_milli": [128_000] * nodes,
                "ready": [True] * nodes,
            }
        ),
    )
    busy = rng.random(gpus) < 0.5
    pods = [f"p{g}" if busy[g] else None for g in range(gpus)]
    namespaces = [f"ns-{g % 50}" if busy[g] else None for g in range(gpus)]
    idx = np.flatnonzero(busy)
    start = NOW - timedelta(seconds=600)
    store.append(
        "pods",
        pa.table(
            {
                "ts": pa.array([NOW] * idx.size, TS),
                "pod_uid": [f"u{g}" for g in idx],
                "namespace": [namespaces[g] for g in idx],
                "pod": [pods[g] for g in idx],
                "workload": [f"w{g % 400}" for g in idx],
                "node": [names[g // 8] for g in idx],
                "phase": ["Running"] * idx.size,
                "gpu_request": pa.array([1] * idx.size, pa.int32()),
                "cpu_request_milli": [8000] * idx.size,
                "created_at": pa.array([start] * idx.size, TS),
                "scheduled_at": pa.array([start + timedelta(seconds=1)] * idx.size, TS),
                "initialized_at": pa.array([start + timedelta(seconds=2)] * idx.size, TS),
                "containers_ready_at": pa.array([start + timedelta(seconds=9)] * idx.size, TS),
                "ready_at": pa.array([start + timedelta(seconds=10)] * idx.size, TS),
            }
        ),
    )
    for k in range(20):  # one sample per GPU every 15 s, cgroup samples 1 s later
        at = NOW - timedelta(seconds=300 - 15 * k)
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


def timed(fn: Callable[[], object], runs: int) -> list[float]:
    """Wall seconds of each of ``runs`` calls."""
    out = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        out.append(time.perf_counter() - started)
    return out


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, Store.open(Path(tmp) / "b.duckdb") as store:
        started = time.perf_counter()
        fill(store, args.nodes)
        print(f"fleet {args.nodes} nodes x 8 GPUs written in {time.perf_counter() - started:.1f} s")
        settings = ExporterSettings(cache_s=0, slow_cache_s=0)
        fast = DerivedSignals(store, settings, clock=lambda: NOW, spawn=lambda job: None)
        fast_s = timed(lambda: list(fast.collect()), args.runs)
        slow_collector = DerivedSignals(store, settings, clock=lambda: NOW, spawn=lambda j: j())
        both_s = timed(lambda: list(slow_collector.collect()), max(2, args.runs // 2))

        cached = DerivedSignals(
            store,
            ExporterSettings(cache_s=3600, slow_cache_s=3600),
            clock=lambda: NOW,
            spawn=lambda j: j(),
        )
        registry = CollectorRegistry()
        registry.register(cached)
        body = generate_latest(registry)
        scrape_s = timed(lambda: generate_latest(registry), args.runs * 4)
        peer = plain_registry(body)
        peer_body = generate_latest(peer)
        peer_s = timed(lambda: generate_latest(peer), args.runs * 4)
        expo = parse_exposition(body.decode())
        errors = sum(s.value for s in expo.samples if s.name == "sits_exporter_errors_total")

    med = statistics.median
    fast_med, both_med = med(fast_s), med(both_s)
    print(f"series {len(expo.samples):,}; exporter errors {errors:g}")
    print("| what | median | runs |")
    print("|---|---:|---:|")
    print(f"| fast pass (cache miss) | {fast_med * 1000:.0f} ms | {len(fast_s)} |")
    print(f"| fast + slow pass | {both_med * 1000:.0f} ms | {len(both_s)} |")
    print(f"| slow pass alone (difference) | {(both_med - fast_med) * 1000:.0f} ms | |")
    print(f"| cached scrape, sits exporter | {med(scrape_s) * 1000:.1f} ms | {len(scrape_s)} |")
    print(f"| cached scrape, plain Gauges (peer) | {med(peer_s) * 1000:.1f} ms | {len(peer_s)} |")
    print(f"| body, sits exporter | {len(body) / 1e6:.2f} MB | |")
    print(f"| body, plain Gauges (peer) | {len(peer_body) / 1e6:.2f} MB | |")
    print(f"ratio cached scrape sits / peer: {med(scrape_s) / med(peer_s):.2f}x")
    families: dict[str, int] = {}
    for s in expo.samples:
        families[s.name] = families.get(s.name, 0) + 1
    top = sorted(families.items(), key=lambda kv: -kv[1])[:6]
    print("largest families: " + ", ".join(f"{k} {v:,}" for k, v in top))


if __name__ == "__main__":
    main()
