"""The derived-signal exporter on /metrics: exact values, isolation of failures, the cache."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry, generate_latest

from sits_observe.collectors.exposition import Exposition, parse_exposition
from sits_observe.store import Store
from sits_observe.surfaces.service import ServiceSettings, create_app
from sits_observe.surfaces.service.exporter.exporter import DerivedSignals, ExporterSettings
from sits_observe.surfaces.service.exporter.registry import SIGNALS

NOW = datetime(2026, 11, 1, 12, 0)
TS = pa.timestamp("us")


def ts(values: list[datetime]) -> pa.Array:
    return pa.array(values, TS)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path / "s.duckdb") as s:
        yield s


def scrape(store: Store) -> Exposition:
    settings = ServiceSettings.model_validate({"token": "t", "retention_interval_s": 0})
    with TestClient(create_app(settings, store, clock=lambda: NOW)) as client:
        response = client.get("/metrics")
    assert response.status_code == 200
    return parse_exposition(response.text)


def values(expo: Exposition, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {tuple(sorted(s.labels)): s.value for s in expo.samples if s.name == name}


def one(expo: Exposition, name: str, **labels: str) -> float:
    found = [
        s.value
        for s in expo.samples
        if s.name == name and all(s.label(k) == v for k, v in labels.items())
    ]
    assert len(found) == 1, (name, labels, found)
    return found[0]


# -- fixtures of the store ------------------------------------------------------------------


def add_requests(store: Store) -> dict[str, list[float]]:
    """Requests of two models; returns the latencies that must count, per model."""
    rng = np.random.default_rng(7)
    a = rng.gamma(2.0, 0.3, 137).tolist()
    b = rng.gamma(3.0, 0.1, 11).tolist()
    rows_ts = [NOW - timedelta(seconds=1 + i) for i in range(len(a))]
    rows_ts += [NOW - timedelta(seconds=2 + 20 * i) for i in range(len(b))]
    latency = a + b
    model = ["a"] * len(a) + ["b"] * len(b)
    ok = [True] * len(latency)
    # Outside the 300 s window, and a failed request: neither may count.
    rows_ts += [NOW - timedelta(seconds=301), NOW - timedelta(seconds=5)]
    latency += [99.0, 50.0]
    model += ["a", "a"]
    ok += [True, False]
    store.append(
        "requests",
        pa.table({"ts": ts(rows_ts), "model": model, "latency_s": latency, "ok": ok}),
    )
    return {"a": a, "b": b}


def add_inventory(store: Store) -> None:
    """Node A: 2 GPUs, its CPU all taken by p1 (1 GPU); node B: 2 GPUs, idle.

    The workload is p1's shape (1 GPU, 4000 mCPU): it cannot run on A (no CPU left), so A's
    free GPU (1000 milli) is fragmented; B's two whole GPUs fit it. F = 1000, idle = 3000,
    total = 4000.
    """
    store.append(
        "nodes",
        pa.table(
            {
                "ts": ts([NOW, NOW]),
                "node": ["A", "B"],
                "gpu_allocatable": pa.array([2, 2], pa.int32()),
                "gpu_product": ["H100", "H100"],
                "cpu_allocatable_milli": [4000, 8000],
                "ready": [True, True],
            }
        ),
    )
    store.append(
        "pods",
        pa.table(
            {
                "ts": ts([NOW]),
                "pod_uid": ["u1"],
                "namespace": ["ns"],
                "pod": ["p1"],
                "node": ["A"],
                "phase": ["Running"],
                "gpu_request": pa.array([1], pa.int32()),
                "cpu_request_milli": [4000],
            }
        ),
    )


def add_gpu_samples(store: Store) -> None:
    """n1: two GPUs with DRAM activity 0.5 and 0.3 in the window (one stale 1.0 sample out)."""
    store.append(
        "gpu_samples",
        pa.table(
            {
                "ts": ts(
                    [
                        NOW - timedelta(seconds=10),
                        NOW - timedelta(seconds=10),
                        NOW - timedelta(seconds=400),
                    ]
                ),
                "node": ["n1", "n1", "n1"],
                "gpu_uuid": ["GPU-0", "GPU-1", "GPU-0"],
                "dram_active_ratio": [0.5, 0.3, 1.0],
            }
        ),
    )


def add_drops_and_decisions(store: Store) -> None:
    store.append(
        "collector_drops",
        pa.table(
            {
                "ts": ts([NOW, NOW, NOW]),
                "node": ["n1", "n2", "n1"],
                "collector": ["dcgm", "dcgm", "cgroup"],
                "reason": ["nan", "nan", "parse"],
                "count": [3, 4, 1],
            }
        ),
    )
    store.append(
        "decisions",
        pa.table(
            {
                "ts": ts([NOW, NOW, NOW]),
                "action": ["memory-class", "memory-class", "fragmentation"],
                "outcome": ["applied", "applied", "skipped:rate-limited"],
            }
        ),
    )


# -- tests ----------------------------------------------------------------------------------


def test_every_signal_has_its_exact_value(store: Store) -> None:
    latencies = add_requests(store)
    add_inventory(store)
    add_gpu_samples(store)
    add_drops_and_decisions(store)
    expo = scrape(store)

    for model, rows in latencies.items():
        for q in ("0.5", "0.95", "0.99"):
            expected = float(np.percentile(rows, float(q) * 100))
            got = one(expo, "sits_latency_seconds", model=model, quantile=q, window="5m")
            assert got == pytest.approx(expected, rel=1e-12, abs=1e-15)
        rps = one(expo, "sits_requests_per_second", model=model, window="5m")
        assert rps == len(rows) / 300.0
    assert one(expo, "sits_fgd_fragmentation_ratio") == pytest.approx(1000 / 3000)
    assert one(expo, "sits_fgd_fragmentation_amount_ratio") == pytest.approx(1000 / 4000)
    # Bandwidth = mean DRAM activity 0.4; NVLink and NUMA missing count 0: 0.4 x 0.4.
    assert values(expo, "sits_interference_score_ratio") == {
        (("Hostname", "n1"),): pytest.approx(0.16)
    }
    assert values(expo, "sits_collector_drops_total") == {
        (("collector", "cgroup"), ("reason", "parse")): 1.0,
        (("collector", "dcgm"), ("reason", "nan")): 7.0,
    }
    assert values(expo, "sits_controller_decisions_total") == {
        (("action", "fragmentation"), ("outcome", "skipped:rate-limited")): 1.0,
        (("action", "memory-class"), ("outcome", "applied")): 2.0,
    }
    assert all(v == 0 for v in values(expo, "sits_exporter_errors_total").values())
    assert expo.types["sits_latency_seconds"] == "gauge"
    assert expo.types["sits_collector_drops_total"] == "counter"
    # The service's own metrics are still there.
    assert "sits_store_rows" in expo.types


def test_a_failing_signal_is_counted_and_skipped(store: Store) -> None:
    """A broken table fails its own signal only; every other signal is still exported."""
    latencies = add_requests(store)
    add_inventory(store)
    add_gpu_samples(store)
    add_drops_and_decisions(store)
    store.execute("DROP TABLE collector_drops")
    expo = scrape(store)

    names = {s.name for s in expo.samples}
    assert "sits_collector_drops_total" not in names
    assert one(expo, "sits_exporter_errors_total", signal="collector_drops") == 1.0
    assert one(expo, "sits_exporter_errors_total", signal="latency") == 0.0
    p95 = one(expo, "sits_latency_seconds", model="a", quantile="0.95", window="5m")
    assert p95 == pytest.approx(float(np.percentile(latencies["a"], 95)), rel=1e-12)
    assert one(expo, "sits_interference_score_ratio", Hostname="n1") == pytest.approx(0.16)
    assert one(expo, "sits_fgd_fragmentation_ratio") == pytest.approx(1000 / 3000)


def test_no_inventory_yet_exports_nothing_and_counts_no_error(store: Store) -> None:
    """A fresh service has no node / pod snapshot: FGD is absent, not an error (an alert on
    sits_exporter_errors_total must not fire on a fresh install)."""
    add_requests(store)
    add_drops_and_decisions(store)
    expo = scrape(store)
    names = {s.name for s in expo.samples}
    assert "sits_fgd_fragmentation_ratio" not in names
    assert "sits_fgd_node_fragmentation_gpus" not in names
    assert "sits_pod_start_seconds" not in names
    assert all(v == 0 for v in values(expo, "sits_exporter_errors_total").values())


def test_an_empty_store_exports_only_empty_families(store: Store) -> None:
    expo = scrape(store)
    names = {s.name for s in expo.samples}
    assert "sits_latency_seconds" not in names
    assert "sits_collector_drops_total" not in names
    errors = values(expo, "sits_exporter_errors_total")
    assert set(errors) == {(("signal", s),) for s in SIGNALS}
    assert sum(errors.values()) == 0.0


def inline(job: Callable[[], None]) -> None:
    job()


class FakeMonotonic:
    def __init__(self) -> None:
        self.now_s = 1000.0

    def __call__(self) -> float:
        return self.now_s


def test_scrapes_within_cache_s_compute_once(store: Store) -> None:
    add_drops_and_decisions(store)
    tick = FakeMonotonic()
    registry = CollectorRegistry()
    exporter = DerivedSignals(
        store, ExporterSettings(cache_s=15), clock=lambda: NOW, monotonic=tick, spawn=inline
    )
    registry.register(exporter)

    def drops() -> float:
        expo = parse_exposition(generate_latest(registry).decode())
        return one(expo, "sits_collector_drops_total", collector="dcgm", reason="nan")

    assert drops() == 7.0
    store.append(
        "collector_drops",
        pa.table({"ts": ts([NOW]), "collector": ["dcgm"], "reason": ["nan"], "count": [5]}),
    )
    tick.now_s += 14.9
    assert drops() == 7.0  # cached: the new row is not seen yet
    assert exporter.computations == 1
    tick.now_s += 0.1
    assert drops() == 12.0
    assert exporter.computations == 2
    # Failures are counted once per pass, not once per scrape.
    store.execute("DROP TABLE collector_drops")
    tick.now_s += 15
    generate_latest(registry)
    generate_latest(registry)
    expo = parse_exposition(generate_latest(registry).decode())
    assert one(expo, "sits_exporter_errors_total", signal="collector_drops") == 1.0


def test_app_keeps_the_exporter_and_settings_validate(store: Store) -> None:
    settings = ServiceSettings.model_validate({"token": "t", "retention_interval_s": 0})
    app = create_app(settings, store)
    assert isinstance(app.state.exporter, DerivedSignals)
    with pytest.raises(ValueError):
        ExporterSettings(window_s=0)
