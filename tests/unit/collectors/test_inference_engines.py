"""Every serving engine of the mapping table, parsed by the real collector into server_windows
rows with the right units: SGLang, TensorRT-LLM, Dynamo's frontend, the llm-d endpoint picker
and OpenTelemetry GenAI server metrics (fixtures: tests/engine_expositions.py)."""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np
import pyarrow as pa
import pytest

from sits_observe.collectors.inference.engine import EngineCollector, new_collector
from sits_observe.collectors.inference.engines import ENGINES, EngineMetrics, Kind, Source, find
from sits_observe.collectors.inference.triton import TritonCollector
from sits_observe.collectors.inference.vllm import VllmCollector
from sits_observe.domain.tables import SERVER_WINDOWS
from sits_observe.errors import ConfigError, UnknownNameError
from tests.engine_expositions import LAYOUTS, MODEL, FakeEngine, bucket_width

T0 = datetime(2026, 6, 1, 8, 0, 0)


def one_window(collector: EngineCollector, fake: FakeEngine, n: int = 400) -> tuple[dict, tuple]:
    fake.serve(150)  # history before the first scrape
    assert collector.collect_text(fake.exposition(), T0).rows == 0
    added = fake.serve(n)
    result = collector.collect_text(fake.exposition(), T0 + timedelta(seconds=20))
    assert dict(result.dropped) == {}
    table = result.tables[SERVER_WINDOWS.name]
    assert table.schema.equals(SERVER_WINDOWS.schema)
    (row,) = table.to_pylist()
    return row, added


@pytest.mark.parametrize("engine", sorted(LAYOUTS))
def test_each_engine_fills_a_window_row_in_seconds(engine: str) -> None:
    layout = LAYOUTS[engine]
    row, (e2e, ttft, itl) = one_window(EngineCollector("http://unused", engine), FakeEngine(layout))
    assert row["server"] == engine
    assert row["model"] == MODEL
    assert row["window_s"] == 20.0
    assert row["completed"] == 400.0
    assert row["throughput_rps"] == pytest.approx(20.0)
    assert row["latency_mean_s"] == pytest.approx(float(e2e.mean()), rel=1e-9)
    bounds = layout.e2e[1]
    bound = row["latency_error_bound_s"]
    for column, q in (("latency_p50_s", 0.5), ("latency_p95_s", 0.95), ("latency_p99_s", 0.99)):
        truth = float(np.quantile(e2e, q, method="inverted_cdf"))
        assert abs(row[column] - truth) <= bound, (column, row[column], truth, bound)
        assert bucket_width(bounds, truth) <= bound
    for column, spec, values in (
        ("ttft_p95_s", layout.ttft, ttft),
        ("inter_token_p95_s", layout.itl, itl),
    ):
        assert spec is not None
        truth = float(np.quantile(values, 0.95, method="inverted_cdf"))
        assert abs(row[column] - truth) <= bucket_width(spec[1], truth), column
    # gauges: counts summed over the model's series, the KV fraction kept as a 0-1 ratio
    assert row["requests_running"] == (6.0 if layout.running else None)
    assert row["requests_waiting"] == (2.0 if layout.waiting else None)
    assert row["kv_cache_usage_ratio"] == (layout.kv[2] if layout.kv else None)
    assert row["estimate"] is True


def test_the_request_counter_counts_when_the_latency_histogram_is_absent() -> None:
    fake = FakeEngine(LAYOUTS["sglang"])
    collector = EngineCollector("http://unused", "sglang")

    def without_e2e() -> str:
        lines = fake.exposition().splitlines()
        return "\n".join(line for line in lines if "e2e_request_latency" not in line) + "\n"

    fake.serve(10)
    collector.collect_text(without_e2e(), T0)
    fake.serve(30)
    result = collector.collect_text(without_e2e(), T0 + timedelta(seconds=10))
    (row,) = result.tables[SERVER_WINDOWS.name].to_pylist()
    assert row["completed"] == 30.0
    assert row["latency_mean_s"] is None and row["latency_p95_s"] is None
    assert row["ttft_p95_s"] is not None


def test_legacy_epp_names_are_read_when_the_llm_d_names_are_absent() -> None:
    fake = FakeEngine(LAYOUTS["llm-d-epp"])
    rename = {
        "llm_d_epp_request_duration_seconds": "inference_objective_request_duration_seconds",
        "llm_d_epp_request_total": "inference_objective_request_total",
        "llm_d_epp_request_running": "inference_objective_running_requests",
    }

    def legacy() -> str:
        text = fake.exposition()
        for new, old in rename.items():
            text = text.replace(new, old)
        return text

    collector = EngineCollector("http://unused", "llm-d-epp")
    fake.serve(50)
    collector.collect_text(legacy(), T0)
    e2e, _, _ = fake.serve(80)
    result = collector.collect_text(legacy(), T0 + timedelta(seconds=8))
    (row,) = result.tables[SERVER_WINDOWS.name].to_pylist()
    assert row["completed"] == 80.0
    assert row["latency_mean_s"] == pytest.approx(float(e2e.mean()))
    assert row["requests_running"] == 6.0


def test_a_millisecond_histogram_and_a_percent_gauge_are_stored_in_seconds_and_ratio() -> None:
    # An engine row of one's own: the table converts units at the collector.
    row_ms = EngineMetrics(
        "custom",
        "model",
        "a test row",
        {
            "latency_s": Source(("req_latency_ms",), Kind.histogram, "ms"),
            "kv_cache_usage_ratio": Source(("kv_used_percent",), Kind.gauge, "percent", "mean"),
        },
    )

    def body(n: int, total_ms: float) -> str:
        return (
            "# TYPE req_latency_ms histogram\n"
            f'req_latency_ms_bucket{{model="m",le="100.0"}} {n // 2}\n'
            f'req_latency_ms_bucket{{model="m",le="1000.0"}} {n}\n'
            f'req_latency_ms_bucket{{model="m",le="+Inf"}} {n}\n'
            f'req_latency_ms_count{{model="m"}} {n}\n'
            f'req_latency_ms_sum{{model="m"}} {total_ms}\n'
            '# TYPE kv_used_percent gauge\nkv_used_percent{model="m"} 42.0\n'
        )

    collector = EngineCollector("http://unused", row_ms)
    collector.collect_text(body(0, 0.0), T0)
    result = collector.collect_text(body(10, 3000.0), T0 + timedelta(seconds=5))
    (row,) = result.tables[SERVER_WINDOWS.name].to_pylist()
    assert row["server"] == "custom"
    assert row["latency_mean_s"] == pytest.approx(0.3)
    assert row["latency_p50_s"] == pytest.approx(0.1)  # the 100 ms bound, in seconds
    assert row["latency_error_bound_s"] == pytest.approx(0.9)  # (0.1, 1.0] s
    assert row["kv_cache_usage_ratio"] == pytest.approx(0.42)


def test_new_collector_picks_each_engines_collector_and_lists_names_on_a_miss() -> None:
    assert isinstance(new_collector("triton", "http://unused"), TritonCollector)
    vllm = new_collector("vllm", "http://unused")
    assert isinstance(vllm, EngineCollector) and vllm.name == "vllm"
    for engine in ENGINES:
        assert new_collector(engine, "http://unused").name == engine
    with pytest.raises(UnknownNameError, match="known: vllm, triton, sglang"):
        find("tgi")
    with pytest.raises(ConfigError, match="not a histogram"):
        EngineCollector("http://unused", "triton")


def test_vllm_collector_is_the_table_driven_collector_with_vllms_row() -> None:
    collector = VllmCollector("http://unused")
    assert isinstance(collector, EngineCollector)
    assert collector.metrics is ENGINES["vllm"]


def test_every_row_of_the_table_names_a_source_and_known_columns() -> None:
    columns = set(SERVER_WINDOWS.schema.names) | {"latency_s"}
    for engine, metrics in ENGINES.items():
        assert metrics.engine == engine
        assert "/" in metrics.source, engine  # owner/repo path
        assert set(metrics.columns) <= columns, engine
        assert "latency_s" in metrics.columns, engine
        for source in metrics.columns.values():
            assert source.families and source.scale > 0
    assert isinstance(SERVER_WINDOWS.schema, pa.Schema)
