"""SGLang and TensorRT-LLM over real HTTP on 127.0.0.1: the table-driven collector and
``sits-observe ingest sglang`` scrape a tiny server whose /metrics body grows, written from
SGLang's python/sglang/srt/metrics/collector.py and TensorRT-LLM's
tensorrt_llm/metrics/collector.py names and default buckets (tests/engine_expositions.py)."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from sits_observe.collectors.inference.engine import new_collector
from sits_observe.domain.tables import SERVER_WINDOWS
from sits_observe.store import Store
from sits_observe.surfaces.cli.main import app
from tests.engine_expositions import LAYOUTS, MODEL, FakeEngine, bucket_width
from tests.metrics_server import MetricsServer, serve_metrics

metrics_server = pytest.fixture(serve_metrics)


@pytest.mark.parametrize("engine", ["sglang", "trtllm"])
def test_window_over_http_matches_the_generated_data(
    metrics_server: MetricsServer, engine: str
) -> None:
    layout = LAYOUTS[engine]
    fake = FakeEngine(layout)
    fake.serve(200)
    metrics_server.body = fake.exposition
    t0 = datetime(2026, 6, 1, 8, 0, 0)
    with new_collector(engine, metrics_server.url, node="gpu-node-1", pod=f"{engine}-0") as c:
        assert c.collect(t0).rows == 0
        e2e, ttft, _ = fake.serve(600)
        result = c.collect(t0 + timedelta(seconds=30))
    assert dict(result.dropped) == {}
    (row,) = result.tables[SERVER_WINDOWS.name].to_pylist()
    assert (row["server"], row["model"], row["pod"]) == (engine, MODEL, f"{engine}-0")
    assert row["completed"] == 600.0
    assert row["throughput_rps"] == pytest.approx(20.0)
    assert row["latency_mean_s"] == pytest.approx(float(e2e.mean()), rel=1e-9)
    truth = float(np.quantile(e2e, 0.95, method="inverted_cdf"))
    assert abs(row["latency_p95_s"] - truth) <= row["latency_error_bound_s"]
    assert row["latency_error_bound_s"] >= bucket_width(layout.e2e[1], truth)
    assert layout.ttft is not None
    ttft_truth = float(np.quantile(ttft, 0.95, method="inverted_cdf"))
    assert abs(row["ttft_p95_s"] - ttft_truth) <= bucket_width(layout.ttft[1], ttft_truth)
    assert layout.kv is not None
    assert row["kv_cache_usage_ratio"] == pytest.approx(layout.kv[2])
    assert (row["requests_running"], row["requests_waiting"]) == (6.0, 2.0)


def test_cli_ingest_sglang_stores_n_windows(metrics_server: MetricsServer, tmp_path: Path) -> None:
    fake = FakeEngine(LAYOUTS["sglang"])
    lock = threading.Lock()

    def grow() -> str:
        with lock:
            fake.serve(40)
            return fake.exposition()

    metrics_server.body = grow
    db = tmp_path / "obs.duckdb"
    outcome = CliRunner().invoke(
        app,
        ["ingest", "sglang", metrics_server.url, "--db", str(db), "--interval-s", "0.2",
         "--windows", "2", "--node", "gpu-node-1"],
    )  # fmt: skip
    assert outcome.exit_code == 0, outcome.output
    assert "stored 2 server_windows rows" in outcome.output
    with Store.open(db, read_only=True) as store:
        rows = store.query(
            "SELECT server, completed, kv_cache_usage_ratio, estimate FROM server_windows "
            "ORDER BY ts"
        ).to_pylist()
    assert [r["server"] for r in rows] == ["sglang", "sglang"]
    assert [r["completed"] for r in rows] == [40.0, 40.0]
    assert all(r["kv_cache_usage_ratio"] == pytest.approx(0.28) for r in rows)
    assert all(r["estimate"] is True for r in rows)
