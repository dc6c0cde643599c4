"""Incremental passes of the exporter: the same text as a pass from scratch, and the previous
complete text served while a pass runs.

Every comparison is between a collector that has run before (it reuses the signals whose rows
did not change) and a new collector on the same DuckDB file at the same time (it builds every
signal). Their ``/metrics`` texts must be byte for byte equal.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from prometheus_client import CollectorRegistry, Gauge, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric

from sits_observe.analytics.row_changes import Fingerprint
from sits_observe.store import Store
from sits_observe.surfaces.service.exporter.cache import Key, SignalCache
from sits_observe.surfaces.service.exporter.exporter import (
    DerivedSignals,
    ExporterSettings,
    metrics_text,
)
from sits_observe.surfaces.service.exporter.registry import Signal
from sits_observe.surfaces.service.exporter.signals.requests import PassInputs

T0 = datetime(2026, 11, 1, 12, 0)
TS = pa.timestamp("us")
GIB = 1024**3
NODES = [f"node-{i}" for i in range(6)]
GPUS = [(node, f"GPU-{n}-{g}") for n, node in enumerate(NODES) for g in range(8)]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path / "fleet.duckdb") as s:
        fleet(s)
        yield s


def fleet(store: Store) -> None:
    """Inventory, five minutes of samples (every 15 s), requests, windows and decisions."""
    rng = np.random.default_rng(3)
    store.append(
        "nodes",
        pa.table(
            {
                "ts": pa.array([T0] * len(NODES), TS),
                "node": NODES,
                "gpu_allocatable": pa.array([8] * len(NODES), pa.int32()),
                "cpu_allocatable_milli": [64_000] * len(NODES),
                "ready": [True] * len(NODES),
            }
        ),
    )
    busy = [(node, uuid) for i, (node, uuid) in enumerate(GPUS) if i % 2 == 0]
    store.append(
        "pods",
        pa.table(
            {
                "ts": pa.array([T0] * len(busy), TS),
                "pod_uid": [f"u{i}" for i in range(len(busy))],
                "namespace": [f"ns-{i % 3}" for i in range(len(busy))],
                "pod": [f"p{i}" for i in range(len(busy))],
                "workload": [f"w{i % 4}" for i in range(len(busy))],
                "node": [node for node, _ in busy],
                "phase": ["Running"] * len(busy),
                "gpu_request": pa.array([1] * len(busy), pa.int32()),
                "cpu_request_milli": [4000] * len(busy),
            }
        ),
    )
    for k in range(20):
        tick(store, T0 - timedelta(seconds=300 - 15 * k), rng)
    n = 3000
    store.append(
        "requests",
        pa.table(
            {
                "ts": pa.array(
                    [T0 - timedelta(microseconds=int(x)) for x in rng.uniform(0, 3.6e9, n)], TS
                ),
                "model": [f"model-{m}" for m in rng.integers(0, 3, n)],
                "latency_s": rng.gamma(2.0, 0.4, n),
                "ok": rng.random(n) > 0.02,
            }
        ),
    )
    store.append(
        "decisions",
        pa.table(
            {
                "ts": pa.array([T0 - timedelta(seconds=k) for k in range(6)], TS),
                "kind": ["ResourceQuota"] * 6,
                "namespace": [f"ns-{k % 3}" for k in range(6)],
                "name": ["sits"] * 6,
                "action": ["quota-gpu"] * 3 + ["quota-cpu"] * 3,
                "current": ["8"] * 6,
                "proposed": ["12"] * 6,
                "outcome": ["recommended"] * 6,
            }
        ),
    )


def tick(store: Store, at: datetime, rng: np.random.Generator) -> None:
    """One sample of every GPU at ``at`` and one cgroup sample of each busy one 1 s later."""
    held = [i % 2 == 0 for i in range(len(GPUS))]
    used = np.where(held, rng.uniform(10, 70, len(GPUS)), 1.0)
    store.append(
        "gpu_samples",
        pa.table(
            {
                "ts": pa.array([at] * len(GPUS), TS),
                "node": [node for node, _ in GPUS],
                "gpu_uuid": [uuid for _, uuid in GPUS],
                "gpu_index": pa.array([i % 8 for i in range(len(GPUS))], pa.int16()),
                "namespace": [f"ns-{(i // 2) % 3}" if h else None for i, h in enumerate(held)],
                "pod": [f"p{i // 2}" if h else None for i, h in enumerate(held)],
                "container": ["main" if h else None for h in held],
                "fb_used_bytes": (used * GIB).astype(np.int64),
                "fb_free_bytes": ((80 - used) * GIB).astype(np.int64),
                "fb_total_bytes": [80 * GIB] * len(GPUS),
                "dram_active_ratio": rng.uniform(0, 0.9, len(GPUS)),
            }
        ),
    )
    busy = [i for i, h in enumerate(held) if h]
    store.append(
        "container_samples",
        pa.table(
            {
                "ts": pa.array([at + timedelta(seconds=1)] * len(busy), TS),
                "node": [GPUS[i][0] for i in busy],
                "container_id": [f"c{i}" for i in busy],
                "namespace": [f"ns-{(i // 2) % 3}" for i in busy],
                "pod": [f"p{i // 2}" for i in busy],
                "container": ["main"] * len(busy),
                "memory_current_bytes": (rng.uniform(1, 16, len(busy)) * GIB).astype(np.int64),
            }
        ),
    )


class Clock:
    """The exporter's wall clock and monotonic clock, moved together by the test."""

    def __init__(self) -> None:
        self.at = T0
        self.mono_s = 1000.0

    def now(self) -> datetime:
        return self.at

    def monotonic(self) -> float:
        return self.mono_s

    def advance(self, seconds: float) -> None:
        self.at += timedelta(seconds=seconds)
        self.mono_s += seconds


def inline(job: Callable[[], None]) -> None:
    job()


def collector(store: Store, clock: Clock) -> DerivedSignals:
    """Every signal; passes (fast and slow) due every 15 s, run inline."""
    return DerivedSignals(
        store,
        ExporterSettings(cache_s=15, slow_cache_s=15),
        clock=clock.now,
        monotonic=clock.monotonic,
        spawn=inline,
    )


def fresh_text(store: Store, clock: Clock) -> bytes:
    """What a collector with no past computes now."""
    return collector(store, clock).exposition()


def same(served: bytes, scratch: bytes) -> bool:
    """The same lines in the same order: comments and series byte for byte, values equal
    or, for a float, within 1e-12 relative: an analysis that sums floats over rows DuckDB's
    threads return in varying order can differ in the last digit between two builds from the
    very same rows (seen: interference, 1 ulp); reuse itself copies text. Prints the
    differing lines."""
    left, right = served.decode().splitlines(), scratch.decode().splitlines()
    bad = [(a, b) for a, b in zip(left, right, strict=False) if not _close(a, b)]
    if len(left) != len(right) or bad:
        print(f"{len(left)} lines served, {len(right)} from scratch; differing: {bad[:20]}")
    return len(left) == len(right) and not bad


def _close(a: str, b: str) -> bool:
    if a == b:
        return True
    if a.startswith("#") or b.startswith("#"):
        return False
    (series_a, value_a), (series_b, value_b) = a.rsplit(" ", 1), b.rsplit(" ", 1)
    return series_a == series_b and math.isclose(float(value_a), float(value_b), rel_tol=1e-12)


def test_an_incremental_pass_gives_the_text_of_a_pass_from_scratch(store: Store) -> None:
    clock = Clock()
    derived = collector(store, clock)
    first = derived.exposition()
    assert same(first, fresh_text(store, clock))
    assert derived.cache.reused == 0

    # New samples of every GPU, nothing else: decisions, drops and quotas are not rebuilt.
    clock.advance(15)
    tick(store, clock.at - timedelta(seconds=2), np.random.default_rng(11))
    rebuilt = derived.cache.rebuilt
    second = derived.exposition()
    assert second != first
    assert same(second, fresh_text(store, clock))
    assert derived.cache.reused >= 4  # quotas, collector_drops, controller_decisions / errors
    assert derived.cache.rebuilt - rebuilt >= 6  # the GPU and request signals, the rest

    # No new row, the clock moves on: samples leave the windows, so those signals change.
    clock.advance(60)
    third = derived.exposition()
    assert third != second
    assert same(third, fresh_text(store, clock))

    # Nothing changes at all (the clock stands still but the cache is due): only the
    # signals that declare no rows are rebuilt, and the text is the same.
    clock.mono_s += 15
    reused = derived.cache.reused
    assert derived.exposition() == third
    assert derived.cache.reused - reused >= 12


def test_rows_updated_in_place_are_seen(store: Store) -> None:
    """A row changed in place (no row added or removed, as container attribution and the
    roll-up upserts do) rebuilds the signals that read it, as a pass from scratch would."""
    clock = Clock()
    derived = collector(store, clock)
    before = derived.exposition()
    store.execute(
        "UPDATE container_samples SET memory_current_bytes = memory_current_bytes + ? "
        "WHERE namespace = 'ns-1'",
        [4 * GIB],
    )
    clock.mono_s += 15
    after = derived.exposition()
    line = b'sits_smf_namespace_ratio{namespace="ns-1"}'
    assert _value(after, line) < _value(before, line)  # more host memory: a lower SMF
    assert same(after, fresh_text(store, clock))


def _value(text: bytes, series: bytes) -> float:
    (line,) = [x for x in text.splitlines() if x.startswith(series + b" ")]
    return float(line.rsplit(b" ", 1)[1])


def test_metrics_text_equals_the_registry_rendered_whole(store: Store) -> None:
    """The route joins the passes' texts; a registry holding the same families renders the
    same lines (the exporter's block comes last)."""
    clock = Clock()
    derived = collector(store, clock)
    registry = CollectorRegistry()
    Gauge("sits_test_own", "a metric of the service itself", registry=registry).set(3)
    registry.register(derived)
    served = metrics_text(registry, derived)
    whole = generate_latest(registry)
    assert sorted(served.splitlines()) == sorted(whole.splitlines())
    assert served.startswith(b"# HELP sits_test_own")
    assert served.endswith(derived.exposition())
    assert len(served.splitlines()) > 300


class Counting:
    """A fast builder whose value is the number of its builds; from the second build on it
    waits for the test before returning."""

    def __init__(self) -> None:
        self.builds = 0
        self.entered = threading.Event()
        self.release = threading.Event()

    def __call__(self, _: PassInputs) -> list[Metric]:
        self.builds += 1
        if self.builds > 1:
            self.entered.set()
            assert self.release.wait(30)
        family = GaugeMetricFamily("sits_test_builds", "builds so far")
        family.add_metric((), float(self.builds))
        return [family]


def test_a_scrape_during_a_pass_serves_the_previous_complete_text(store: Store) -> None:
    clock = Clock()
    builder = Counting()
    derived = DerivedSignals(
        store,
        ExporterSettings(cache_s=15, slow_cache_s=15),
        clock=clock.now,
        monotonic=clock.monotonic,
        signals=(Signal("builds", builder, (("sits_test_builds", GaugeMetricFamily),)),),
    )  # real threads (the default spawn)
    first = derived.exposition()
    assert b"sits_test_builds 1.0" in first
    clock.advance(15)
    started = time.perf_counter()
    assert derived.exposition() == first  # starts the pass in its thread, does not wait
    assert builder.entered.wait(30)
    assert derived.exposition() == first  # the pass is running: the last complete text
    assert time.perf_counter() - started < 10
    assert derived.computations == 2  # one pass at a time
    builder.release.set()
    deadline = time.monotonic() + 30
    while b"sits_test_builds 2.0" not in derived.exposition():
        assert time.monotonic() < deadline, "the background pass never published"
        time.sleep(0.01)
    assert derived.close(30)


def test_a_read_by_content_is_compared_only_when_its_spans_changed() -> None:
    """A :class:`ByContent` read: equal span fingerprints keep the build without running the
    rows' query; changed spans with the same rows keep it too (and the next pass compares
    the new spans); changed rows, or a rows query that fails, rebuild it."""
    asked: list[str] = []

    def key(spans: str, rows: str | None) -> Key:
        def content() -> tuple[Fingerprint, ...]:
            asked.append(spans)
            if rows is None:
                raise RuntimeError("the rows cannot be read")
            return ((1, rows),)

        return Key(((1, spans),), content)

    cache = SignalCache()
    builds: list[str] = []

    def build(name: str) -> Callable[[], list[Metric]]:
        def make() -> list[Metric]:
            builds.append(name)
            return [GaugeMetricFamily("sits_test_ratio", "t", value=len(builds))]

        return make

    def run(k: Key, name: str) -> None:
        if cache.get("s", k) is None:
            cache.build("s", k, build(name))

    run(key("a", "x"), "first")
    assert (builds, asked) == (["first"], ["a"])  # a build takes its rows' fingerprints
    run(key("a", "changed, but the spans say no"), "again")
    assert (builds, asked) == (["first"], ["a"])  # equal spans: no query, kept
    run(key("b", "x"), "new snapshot, same rows")
    assert (builds, asked) == (["first"], ["a", "b"])  # kept, now keyed by the spans "b"
    run(key("b", "y"), "again")
    assert (builds, asked) == (["first"], ["a", "b"])  # spans "b" again: kept, no query
    run(key("c", "y"), "rows changed")
    assert builds == ["first", "rows changed"]
    run(key("d", None), "rows unreadable")
    assert builds == ["first", "rows changed", "rows unreadable"]
    run(key("e", "y"), "the last build's rows were unknown")
    assert builds[-1] == "the last build's rows were unknown"
    assert cache.reused == 3 and cache.rebuilt == 4
