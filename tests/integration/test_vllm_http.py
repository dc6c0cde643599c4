"""vLLM collector over real HTTP on 127.0.0.1: a tiny server whose /metrics body grows.

The body mimics what vLLM's ``PrometheusStatLogger`` (vllm/v1/metrics/loggers.py) serves via
prometheus_client: HELP/TYPE lines, labels ``model_name`` and ``engine``, the declared bucket
bounds, ``_created`` series, the success counter with ``finished_reason``, both KV-cache gauge
names, and process metrics the collector must ignore. Latencies are drawn from a seeded
log-normal, so the true window quantiles are known exactly.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from sits_observe.collectors.inference.vllm import VllmCollector
from sits_observe.domain.tables import SERVER_WINDOWS
from sits_observe.store import Store
from sits_observe.surfaces.cli.main import app
from tests.metrics_server import MetricsServer, serve_metrics

metrics_server = pytest.fixture(serve_metrics)

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
#: bucket bounds (s) as vllm/v1/metrics/loggers.py declares them
E2E_BOUNDS = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
              60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0]  # fmt: skip
TTFT_BOUNDS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
               7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0]  # fmt: skip
ITL_BOUNDS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
              7.5, 10.0, 20.0, 40.0, 80.0]  # fmt: skip
CREATED = 1767225600.123


def fmt(value: float) -> str:
    """prometheus_client's float format (``+Inf``, ``12.0``)."""
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


@dataclass
class FakeVllm:
    """Cumulative vLLM state for one model on two engines (data parallel)."""

    e2e: list[np.ndarray] = field(default_factory=lambda: [np.empty(0), np.empty(0)])
    ttft: list[np.ndarray] = field(default_factory=lambda: [np.empty(0), np.empty(0)])
    itl: list[np.ndarray] = field(default_factory=lambda: [np.empty(0), np.empty(0)])
    rng: np.random.Generator = field(default_factory=lambda: np.random.default_rng(7))

    def serve(self, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Finish ``n`` more requests, split over the engines; returns what was added."""
        e2e = self.rng.lognormal(math.log(2.5), 0.6, n)
        ttft = self.rng.lognormal(math.log(0.15), 0.5, n)
        itl = self.rng.lognormal(math.log(0.02), 0.3, n)
        half = n // 2
        for i, part in enumerate((slice(0, half), slice(half, n))):
            self.e2e[i] = np.concatenate([self.e2e[i], e2e[part]])
            self.ttft[i] = np.concatenate([self.ttft[i], ttft[part]])
            self.itl[i] = np.concatenate([self.itl[i], itl[part]])
        return e2e, ttft, itl

    def exposition(self, running: int = 4, waiting: int = 1, kv: float = 0.37) -> str:
        lines = [
            "# HELP python_gc_objects_collected_total Objects collected during gc",
            "# TYPE python_gc_objects_collected_total counter",
            'python_gc_objects_collected_total{generation="0"} 12345.0',
            "# HELP process_resident_memory_bytes Resident memory size in bytes.",
            "# TYPE process_resident_memory_bytes gauge",
            "process_resident_memory_bytes 2.1474836e+09",
        ]
        gauges = [
            ("vllm:num_requests_running", "Number of requests in model execution batches.",
             running),
            ("vllm:num_requests_waiting", "Number of requests waiting to be processed.", waiting),
            ("vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage."
             "DEPRECATED: Use vllm:kv_cache_usage_perc instead.", 0.99),
            ("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", kv),
        ]  # fmt: skip
        for name, doc, value in gauges:
            lines += [f"# HELP {name} {doc}", f"# TYPE {name} gauge"]
            for engine in ("0", "1"):
                share = value / 2 if name.startswith("vllm:num_") else value
                lines.append(f'{name}{{model_name="{MODEL}",engine="{engine}"}} {fmt(share)}')
        lines += [
            "# HELP vllm:request_success_total Count of successfully processed requests.",
            "# TYPE vllm:request_success_total counter",
        ]
        for engine in ("0", "1"):
            done = self.e2e[int(engine)].size
            for reason, share in (("stop", done - done // 5), ("length", done // 5), ("abort", 0)):
                labels = f'model_name="{MODEL}",engine="{engine}",finished_reason="{reason}"'
                lines.append(f"vllm:request_success_total{{{labels}}} {fmt(share)}")
                lines.append(f"vllm:request_success_created{{{labels}}} {CREATED}")
        histograms = [
            ("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
             E2E_BOUNDS, self.e2e),
            ("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
             TTFT_BOUNDS, self.ttft),
            ("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
             ITL_BOUNDS, self.itl),
        ]  # fmt: skip
        for name, doc, bounds, per_engine in histograms:
            lines += [f"# HELP {name} {doc}", f"# TYPE {name} histogram"]
            for engine, values in enumerate(per_engine):
                labels = f'model_name="{MODEL}",engine="{engine}"'
                for bound in [*bounds, math.inf]:
                    count = float(np.count_nonzero(values <= bound))
                    lines.append(f'{name}_bucket{{{labels},le="{fmt(bound)}"}} {fmt(count)}')
                lines.append(f"{name}_count{{{labels}}} {fmt(float(values.size))}")
                lines.append(f"{name}_sum{{{labels}}} {fmt(float(values.sum()))}")
            lines += [f"# HELP {name}_created {doc}", f"# TYPE {name}_created gauge"]
            for engine in range(2):
                labels = f'model_name="{MODEL}",engine="{engine}"'
                lines.append(f"{name}_created{{{labels}}} {CREATED}")
        return "\n".join(lines) + "\n"


def bucket_width(bounds: list[float], value: float) -> float:
    """Width of the bucket ``(lower, upper]`` holding ``value`` (first lower bound 0)."""
    edges = [0.0, *bounds, math.inf]
    i = int(np.searchsorted(edges, value, side="left"))
    return edges[i] - edges[i - 1]


def test_window_over_http_matches_the_generated_data(metrics_server: MetricsServer) -> None:
    fake = FakeVllm()
    fake.serve(200)  # history before the first scrape
    metrics_server.body = fake.exposition
    t0 = datetime(2026, 6, 1, 8, 0, 0)
    with VllmCollector(metrics_server.url, node="gpu-node-1", namespace="llm", pod="vllm-0") as c:
        assert c.collect(t0).rows == 0
        e2e, ttft, itl = fake.serve(600)
        result = c.collect(t0 + timedelta(seconds=30))
    assert dict(result.dropped) == {}
    (row,) = result.tables[SERVER_WINDOWS.name].to_pylist()
    assert (row["node"], row["namespace"], row["pod"]) == ("gpu-node-1", "llm", "vllm-0")
    assert row["model"] == MODEL
    assert row["window_s"] == 30.0
    assert row["completed"] == 600.0
    assert row["throughput_rps"] == pytest.approx(20.0)
    assert row["latency_mean_s"] == pytest.approx(float(e2e.mean()), rel=1e-9)
    assert row["requests_running"] == 4.0
    assert row["requests_waiting"] == 1.0
    assert row["kv_cache_usage_ratio"] == pytest.approx(0.37)  # new gauge name wins
    assert row["estimate"] is True

    bound = row["latency_error_bound_s"]
    for column, q in (("latency_p50_s", 0.5), ("latency_p95_s", 0.95), ("latency_p99_s", 0.99)):
        truth = float(np.quantile(e2e, q, method="inverted_cdf"))
        assert abs(row[column] - truth) <= bound, (column, row[column], truth, bound)
        assert bucket_width(E2E_BOUNDS, truth) <= bound
    # the stated bound is a real vLLM bucket width, not a loose constant
    widths = {b - a for a, b in zip([0.0, *E2E_BOUNDS], E2E_BOUNDS, strict=False)}
    assert bound in widths
    ttft_truth = float(np.quantile(ttft, 0.95, method="inverted_cdf"))
    assert abs(row["ttft_p95_s"] - ttft_truth) <= bucket_width(TTFT_BOUNDS, ttft_truth)
    itl_truth = float(np.quantile(itl, 0.95, method="inverted_cdf"))
    assert abs(row["inter_token_p95_s"] - itl_truth) <= bucket_width(ITL_BOUNDS, itl_truth)


def test_server_restart_over_http_is_a_counted_reset(metrics_server: MetricsServer) -> None:
    before = FakeVllm()
    before.serve(300)
    restarted = FakeVllm(rng=np.random.default_rng(8))
    restarted.serve(10)
    bodies = iter([before.exposition(), restarted.exposition()])
    metrics_server.body = lambda: next(bodies)
    t0 = datetime(2026, 6, 1, 8, 0, 0)
    with VllmCollector(metrics_server.url) as collector:
        collector.collect(t0)
        result = collector.collect(t0 + timedelta(seconds=15))
    assert result.rows == 0
    assert result.dropped["counter reset"] == 1
    assert collector.resets_total == 1


def test_cli_ingest_vllm_stores_n_windows(metrics_server: MetricsServer, tmp_path: Path) -> None:
    fake = FakeVllm()
    lock = threading.Lock()

    def grow() -> str:
        with lock:
            fake.serve(50)
            return fake.exposition()

    metrics_server.body = grow
    db = tmp_path / "obs.duckdb"
    outcome = CliRunner().invoke(
        app,
        ["ingest", "vllm", metrics_server.url, "--db", str(db), "--interval-s", "0.2",
         "--windows", "2", "--node", "gpu-node-1"],
    )  # fmt: skip
    assert outcome.exit_code == 0, outcome.output
    assert "stored 2 server_windows rows" in outcome.output
    with Store.open(db, read_only=True) as store:
        rows = store.query(
            "SELECT completed, throughput_rps * window_s AS implied, window_s, estimate, node "
            "FROM server_windows ORDER BY ts"
        ).to_pylist()
    assert [r["completed"] for r in rows] == [50.0, 50.0]
    for r in rows:
        assert r["implied"] == pytest.approx(50.0)
        assert r["window_s"] >= 0.2
        assert r["estimate"] is True
        assert r["node"] == "gpu-node-1"


def test_cli_ingest_vllm_rejects_out_of_range_settings(tmp_path: Path) -> None:
    outcome = CliRunner().invoke(
        app,
        ["ingest", "vllm", "http://127.0.0.1:9/metrics", "--db", str(tmp_path / "x.duckdb"),
         "--interval-s", "0"],
    )  # fmt: skip
    assert outcome.exit_code == 2
    assert "interval" in outcome.output
