"""Triton collector: counter windows (µs -> s), optional summary quantiles, resets."""

from __future__ import annotations

import math
from datetime import datetime, timedelta

import pytest

from sits_observe.collectors.inference.triton import TritonCollector
from sits_observe.domain.tables import SERVER_WINDOWS

T0 = datetime(2026, 3, 1, 12, 0, 0)


def counters(
    model: str,
    version: str,
    *,
    success: float,
    failure: float = 0.0,
    inferences: float | None = None,
    executions: float | None = None,
    request_us: float = 0.0,
    queue_us: float = 0.0,
    compute_us: float = 0.0,
) -> str:
    """Triton's per-model counters as its /metrics endpoint prints them."""
    labels = f'model="{model}",version="{version}"'
    values = {
        "nv_inference_request_success": success,
        "nv_inference_request_failure": failure,
        "nv_inference_count": success if inferences is None else inferences,
        "nv_inference_exec_count": success if executions is None else executions,
        "nv_inference_request_duration_us": request_us,
        "nv_inference_queue_duration_us": queue_us,
        "nv_inference_compute_infer_duration_us": compute_us,
    }
    lines = []
    for name, value in values.items():
        lines += [f"# HELP {name} see Triton docs", f"# TYPE {name} counter"]
        lines.append(f"{name}{{{labels}}} {value}")
    return "\n".join(lines) + "\n"


def summary(model: str, version: str, quantiles: dict[str, float]) -> str:
    name = "nv_inference_request_summary_us"
    labels = f'model="{model}",version="{version}"'
    lines = [f"# TYPE {name} summary"]
    lines += [f'{name}{{{labels},quantile="{q}"}} {v}' for q, v in quantiles.items()]
    lines += [f"{name}_count{{{labels}}} 100", f"{name}_sum{{{labels}}} 5000"]
    return "\n".join(lines) + "\n"


def window(first: str, second: str, window_s: float = 10.0) -> tuple[TritonCollector, dict]:
    collector = TritonCollector("http://unused", namespace="ml")
    assert collector.collect_text(first, T0).rows == 0
    result = collector.collect_text(second, T0 + timedelta(seconds=window_s))
    (row,) = result.tables[SERVER_WINDOWS.name].to_pylist()
    return collector, row


def test_counter_window_gives_throughput_and_mean_latency_in_seconds() -> None:
    first = counters("resnet", "1", success=100, request_us=1_000_000, executions=50)
    second = counters(
        "resnet",
        "1",
        success=150,
        failure=3,
        inferences=400,
        executions=60,
        request_us=1_000_000 + 50 * 20_000,  # 50 requests of 20 ms
        queue_us=50 * 5_000,
        compute_us=50 * 12_000,
    )
    collector, row = window(first, second)
    assert row["server"] == "triton"
    assert row["namespace"] == "ml"
    assert row["model"] == "resnet"
    assert row["completed"] == 50.0
    assert row["throughput_rps"] == 5.0
    assert row["latency_mean_s"] == pytest.approx(0.020)
    for column in ("latency_p50_s", "latency_p95_s", "latency_p99_s", "latency_error_bound_s"):
        assert row[column] is None, column  # counters cannot give quantiles
    assert row["estimate"] is True
    (detail,) = collector.last_details
    assert detail.failed == 3.0
    assert detail.queue_mean_s == pytest.approx(0.005)
    assert detail.compute_mean_s == pytest.approx(0.012)
    assert detail.mean_batch_size == pytest.approx((400 - 100) / (60 - 50))


def test_versions_are_summed_into_one_model_row() -> None:
    first = counters("bert", "1", success=0) + counters("bert", "2", success=0)
    second = counters("bert", "1", success=10, request_us=10 * 4_000) + counters(
        "bert", "2", success=30, request_us=30 * 8_000
    )
    _, row = window(first, second, window_s=20)
    assert row["completed"] == 40.0
    assert row["throughput_rps"] == 2.0
    assert row["latency_mean_s"] == pytest.approx((10 * 0.004 + 30 * 0.008) / 40)


def test_summary_quantiles_are_used_when_exported() -> None:
    quantiles = {"0.5": 15_000, "0.9": 30_000, "0.95": 41_000, "0.99": 90_000, "0.999": 120_000}
    first = counters("llm", "1", success=0)
    second = counters("llm", "1", success=10, request_us=200_000) + summary("llm", "1", quantiles)
    _, row = window(first, second)
    assert row["latency_p50_s"] == pytest.approx(0.015)
    assert row["latency_p95_s"] == pytest.approx(0.041)
    assert row["latency_p99_s"] == pytest.approx(0.090)
    assert row["latency_error_bound_s"] is None  # a summary's error is a rank, not a time


def test_nan_summary_quantile_is_null_and_counted() -> None:
    first = counters("llm", "1", success=0)
    second = counters("llm", "1", success=0) + summary(
        "llm", "1", {"0.5": math.nan, "0.95": math.nan, "0.99": math.nan}
    )
    collector = TritonCollector("http://unused")
    collector.collect_text(first, T0)
    result = collector.collect_text(second, T0 + timedelta(seconds=5))
    (row,) = result.tables[SERVER_WINDOWS.name].to_pylist()
    assert row["latency_p95_s"] is None
    assert row["latency_mean_s"] is None  # no successes: no mean
    assert result.dropped["nv_inference_request_summary_us: non-finite quantile"] == 3


def test_summary_over_several_versions_is_not_merged() -> None:
    q = {"0.5": 1000, "0.95": 2000, "0.99": 3000}
    first = counters("m", "1", success=0) + counters("m", "2", success=0)
    second = (
        counters("m", "1", success=1)
        + counters("m", "2", success=1)
        + summary("m", "1", q)
        + summary("m", "2", q)
    )
    collector = TritonCollector("http://unused")
    collector.collect_text(first, T0)
    result = collector.collect_text(second, T0 + timedelta(seconds=5))
    (row,) = result.tables[SERVER_WINDOWS.name].to_pylist()
    assert row["latency_p50_s"] is None
    assert result.dropped["nv_inference_request_summary_us: several versions, quantiles left NULL"]


def test_counter_reset_is_counted_not_a_negative_rate() -> None:
    collector = TritonCollector("http://unused")
    collector.collect_text(counters("m", "1", success=100, request_us=9e6), T0)
    result = collector.collect_text(
        counters("m", "1", success=5, request_us=1e5), T0 + timedelta(seconds=5)
    )
    assert result.rows == 0
    assert result.dropped["counter reset"] == 1
    assert collector.resets_total == 1
    later = collector.collect_text(
        counters("m", "1", success=15, request_us=2e5), T0 + timedelta(seconds=10)
    )
    (row,) = later.tables[SERVER_WINDOWS.name].to_pylist()
    assert row["completed"] == 10.0
    assert row["latency_mean_s"] == pytest.approx(0.01)


def test_pending_gauge_fills_requests_waiting() -> None:
    pending = 'nv_inference_pending_request_count{model="m",version="1"} 7\n'
    _, row = window(counters("m", "1", success=0), counters("m", "1", success=1) + pending)
    assert row["requests_waiting"] == 7.0
    assert row["requests_running"] is None
    assert row["kv_cache_usage_ratio"] is None


def test_model_that_disappears_is_forgotten() -> None:
    collector = TritonCollector("http://unused")
    collector.collect_text(counters("a", "1", success=1), T0)
    collector.collect_text(counters("b", "1", success=1), T0 + timedelta(seconds=1))
    result = collector.collect_text(counters("a", "1", success=9), T0 + timedelta(seconds=2))
    assert result.rows == 0  # 'a' was re-primed after it vanished: no window across the gap
