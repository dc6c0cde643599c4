"""vLLM collector: windows from cumulative counters, estimates, resets, old metric names."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta, timezone

import httpx
import pyarrow as pa
import pytest

from sits_observe.collectors.inference.vllm import VllmCollector
from sits_observe.domain.tables import SERVER_WINDOWS
from sits_observe.errors import CollectorError

T0 = datetime(2026, 3, 1, 12, 0, 0)
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
E2E = "vllm:e2e_request_latency_seconds"
TTFT = "vllm:time_to_first_token_seconds"
ITL = "vllm:inter_token_latency_seconds"


def histogram_lines(
    name: str,
    bounds: list[float],
    cumulative: list[float],
    total: float,
    *,
    model: str = MODEL,
    engine: str = "0",
    overflow: float = 0.0,
) -> list[str]:
    """One histogram series in prometheus_client's text layout.

    ``overflow`` observations lie above the last finite bound (only the +Inf bucket has them).
    """
    labels = f'model_name="{model}",engine="{engine}"'
    lines = [f"# TYPE {name} histogram"]
    total_count = cumulative[-1] + overflow
    for bound, count in zip([*bounds, math.inf], [*cumulative, total_count], strict=True):
        le = "+Inf" if math.isinf(bound) else repr(bound)
        lines.append(f'{name}_bucket{{{labels},le="{le}"}} {count}')
    lines.append(f"{name}_count{{{labels}}} {total_count}")
    lines.append(f"{name}_sum{{{labels}}} {total}")
    return lines


def gauge(name: str, value: float, *, model: str = MODEL, engine: str = "0") -> str:
    return f'{name}{{model_name="{model}",engine="{engine}"}} {value}'


def body(*parts: list[str] | str) -> str:
    lines: list[str] = []
    for part in parts:
        lines.extend([part] if isinstance(part, str) else part)
    return "\n".join(lines) + "\n"


BOUNDS = [0.5, 1.0, 2.0, 5.0]


def scrape_pair(
    collector: VllmCollector, first: str, second: str, window_s: float = 10.0
) -> pa.Table:
    primed = collector.collect_text(first, T0)
    assert primed.rows == 0, "the first scrape only primes"
    result = collector.collect_text(second, T0 + timedelta(seconds=window_s))
    return result.tables[SERVER_WINDOWS.name]


def test_window_from_histogram_deltas() -> None:
    """2 then 12 requests: 10 in the window, 4 in (0.5,1], 4 in (1,2], 2 in (2,5]."""
    first = body(
        histogram_lines(E2E, BOUNDS, [1, 2, 2, 2], 1.2),
        gauge("vllm:num_requests_running", 1),
    )
    second = body(
        histogram_lines(E2E, BOUNDS, [1, 6, 10, 12], 17.2),
        gauge("vllm:num_requests_running", 3),
        gauge("vllm:num_requests_waiting", 2),
        gauge("vllm:kv_cache_usage_perc", 0.42),
    )
    table = scrape_pair(VllmCollector("http://unused"), first, second)
    assert table.schema == SERVER_WINDOWS.schema
    (row,) = table.to_pylist()
    assert row["server"] == "vllm"
    assert row["model"] == MODEL
    assert row["ts"] == T0 + timedelta(seconds=10)
    assert row["window_s"] == 10.0
    assert row["completed"] == 10.0
    assert row["throughput_rps"] == pytest.approx(1.0)
    assert row["latency_mean_s"] == pytest.approx(16.0 / 10)
    # rank 5 of 10: 1 of 4 into (1, 2]
    assert row["latency_p50_s"] == pytest.approx(1.25)
    # rank 9.5: 1.5 of 2 into (2, 5]
    assert row["latency_p95_s"] == pytest.approx(2.0 + 3.0 * 1.5 / 2)
    assert row["latency_p99_s"] == pytest.approx(2.0 + 3.0 * 1.9 / 2)
    assert row["latency_error_bound_s"] == 3.0  # widest bucket used: (2, 5]
    assert row["requests_running"] == 3.0
    assert row["requests_waiting"] == 2.0
    assert row["kv_cache_usage_ratio"] == pytest.approx(0.42)
    assert row["estimate"] is True
    assert row["ttft_p95_s"] is None


def test_ttft_and_old_inter_token_name_are_read() -> None:
    """vLLM before the rename exports vllm:time_per_output_token_seconds; it is used."""
    ttft_b = [0.1, 0.25, 0.5]
    itl_b = [0.01, 0.025, 0.05]
    first = body(
        histogram_lines(E2E, BOUNDS, [0, 0, 0, 0], 0.0),
        histogram_lines(TTFT, ttft_b, [0, 0, 0], 0.0),
        histogram_lines("vllm:time_per_output_token_seconds", itl_b, [0, 0, 0], 0.0),
    )
    second = body(
        histogram_lines(E2E, BOUNDS, [0, 10, 10, 10], 8.0),
        histogram_lines(TTFT, ttft_b, [0, 10, 10], 2.0),
        histogram_lines("vllm:time_per_output_token_seconds", itl_b, [0, 0, 10], 0.4),
        gauge("vllm:gpu_cache_usage_perc", 0.5),
    )
    (row,) = scrape_pair(VllmCollector("http://unused"), first, second).to_pylist()
    assert row["ttft_p95_s"] == pytest.approx(0.1 + 0.15 * 0.95)
    assert row["inter_token_p95_s"] == pytest.approx(0.025 + 0.025 * 0.95)
    assert row["kv_cache_usage_ratio"] == 0.5  # old gauge name, still a 0-1 fraction


def test_new_inter_token_name_wins_over_old() -> None:
    itl_b = [0.01, 0.1]
    first = body(
        histogram_lines(E2E, BOUNDS, [0, 0, 0, 0], 0.0),
        histogram_lines(ITL, itl_b, [0, 0], 0.0),
        histogram_lines("vllm:time_per_output_token_seconds", itl_b, [0, 0], 0.0),
    )
    second = body(
        histogram_lines(E2E, BOUNDS, [0, 4, 4, 4], 3.0),
        histogram_lines(ITL, itl_b, [4, 4], 0.02),
        histogram_lines("vllm:time_per_output_token_seconds", itl_b, [0, 4], 0.2),
    )
    (row,) = scrape_pair(VllmCollector("http://unused"), first, second).to_pylist()
    assert row["inter_token_p95_s"] == pytest.approx(0.01 * 0.95)


def test_engines_are_summed_per_model_and_models_kept_apart() -> None:
    first = body(
        histogram_lines(E2E, BOUNDS, [0, 0, 0, 0], 0.0, engine="0"),
        histogram_lines(E2E, BOUNDS, [0, 0, 0, 0], 0.0, engine="1"),
        histogram_lines(E2E, BOUNDS, [0, 0, 0, 0], 0.0, model="small"),
    )
    second = body(
        histogram_lines(E2E, BOUNDS, [3, 3, 3, 3], 1.0, engine="0"),
        histogram_lines(E2E, BOUNDS, [0, 5, 5, 5], 4.0, engine="1"),
        histogram_lines(E2E, BOUNDS, [2, 2, 2, 2], 0.5, model="small"),
        gauge("vllm:num_requests_running", 2, engine="0"),
        gauge("vllm:num_requests_running", 5, engine="1"),
        gauge("vllm:kv_cache_usage_perc", 0.2, engine="0"),
        gauge("vllm:kv_cache_usage_perc", 0.6, engine="1"),
    )
    rows = scrape_pair(VllmCollector("http://unused"), first, second, window_s=4).to_pylist()
    assert [r["model"] for r in rows] == [MODEL, "small"]
    big, small = rows
    assert big["completed"] == 8.0
    assert big["throughput_rps"] == 2.0
    assert big["latency_mean_s"] == pytest.approx(5.0 / 8)
    assert big["requests_running"] == 7.0  # summed over engines
    assert big["kv_cache_usage_ratio"] == pytest.approx(0.4)  # averaged over engines
    assert small["completed"] == 2.0


def test_counter_reset_restarts_the_window_and_is_counted() -> None:
    collector = VllmCollector("http://unused")
    collector.collect_text(body(histogram_lines(E2E, BOUNDS, [5, 5, 5, 5], 2.0)), T0)
    restarted = collector.collect_text(
        body(histogram_lines(E2E, BOUNDS, [1, 1, 1, 1], 0.3)), T0 + timedelta(seconds=10)
    )
    assert restarted.rows == 0
    assert restarted.dropped["counter reset"] == 1
    assert collector.resets_total == 1
    after = collector.collect_text(
        body(histogram_lines(E2E, BOUNDS, [4, 4, 4, 4], 1.0)), T0 + timedelta(seconds=15)
    )
    (row,) = after.tables[SERVER_WINDOWS.name].to_pylist()
    assert row["completed"] == 3.0  # counted from the re-primed state, never negative
    assert row["window_s"] == 5.0


def test_quantile_in_inf_bucket_flags_an_infinite_error_bound() -> None:
    first = body(histogram_lines(E2E, BOUNDS, [0, 0, 0, 0], 0.0))
    # 10 requests, all slower than the last finite bound (5 s): only the +Inf bucket has them
    second = body(histogram_lines(E2E, BOUNDS, [0, 0, 0, 0], 80.0, overflow=10))
    (row,) = scrape_pair(VllmCollector("http://unused"), first, second).to_pylist()
    assert row["completed"] == 10.0
    assert row["latency_p50_s"] == 5.0
    assert row["latency_p99_s"] == 5.0
    assert row["latency_error_bound_s"] == math.inf
    assert row["latency_mean_s"] == pytest.approx(8.0)


def test_idle_window_has_zero_throughput_and_no_quantiles() -> None:
    text = body(histogram_lines(E2E, BOUNDS, [1, 1, 1, 1], 0.2))
    (row,) = scrape_pair(VllmCollector("http://unused"), text, text).to_pylist()
    assert row["completed"] == 0.0
    assert row["throughput_rps"] == 0.0
    assert row["latency_mean_s"] is None
    assert row["latency_p95_s"] is None
    assert row["latency_error_bound_s"] is None


def test_success_counter_is_used_when_the_histogram_is_unusable() -> None:
    """A NaN bucket drops that histogram (counted); completed comes from the success counter."""
    success = 'vllm:request_success_total{{model_name="{m}",engine="0",finished_reason="{r}"}} {v}'
    first = body(
        success.format(m=MODEL, r="stop", v=10),
        success.format(m=MODEL, r="length", v=5),
    )
    second = body(
        [
            *histogram_lines(E2E, BOUNDS, [1, 2, 3, 4], 1.0)[:2],
            f'{E2E}_bucket{{model_name="{MODEL}",engine="0",le="1.0"}} NaN',
        ],
        success.format(m=MODEL, r="stop", v=16),
        success.format(m=MODEL, r="length", v=9),
    )
    collector = VllmCollector("http://unused")
    collector.collect_text(first, T0)
    result = collector.collect_text(second, T0 + timedelta(seconds=10))
    assert result.dropped[f"{E2E}: non-finite or malformed part"] == 1
    (row,) = result.tables[SERVER_WINDOWS.name].to_pylist()
    assert row["completed"] == 10.0
    assert row["latency_mean_s"] is None


def test_bad_samples_are_counted_never_raised() -> None:
    collector = VllmCollector("http://unused")
    text = body(
        histogram_lines(E2E, BOUNDS, [1, 1, 1, 1], 0.2),
        'vllm:num_requests_running{engine="0"} 3',  # no model_name
        gauge("vllm:num_requests_waiting", math.nan),
        "this is not exposition",
    )
    result = collector.collect_text(text, T0)
    assert result.dropped["vllm:num_requests_running: no model_name label"] == 1
    assert result.dropped["vllm:num_requests_waiting: non-finite value"] == 1
    assert result.dropped["exposition: malformed line"] == 1


def test_non_increasing_scrape_time_gives_no_row() -> None:
    collector = VllmCollector("http://unused")
    text = body(histogram_lines(E2E, BOUNDS, [1, 1, 1, 1], 0.2))
    collector.collect_text(text, T0)
    again = collector.collect_text(text, T0)
    assert again.rows == 0
    assert again.dropped["non-increasing scrape time"] == 1


def test_zoned_now_is_stored_as_naive_utc() -> None:
    collector = VllmCollector("http://unused")
    text = body(histogram_lines(E2E, BOUNDS, [1, 1, 1, 1], 0.2))
    collector.collect_text(text, T0.replace(tzinfo=UTC))
    plus2 = timezone(timedelta(hours=2))
    later = (T0 + timedelta(hours=2, seconds=5)).replace(tzinfo=plus2)
    (row,) = collector.collect_text(text, later).tables[SERVER_WINDOWS.name].to_pylist()
    assert row["ts"] == T0 + timedelta(seconds=5)
    assert row["window_s"] == 5.0


def test_collect_scrapes_through_the_injected_client() -> None:
    bodies = [
        body(histogram_lines(E2E, BOUNDS, [0, 0, 0, 0], 0.0)),
        body(histogram_lines(E2E, BOUNDS, [2, 2, 2, 2], 0.6)),
    ]
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        return httpx.Response(200, text=bodies[len(seen) - 1])

    client = httpx.Client(transport=httpx.MockTransport(handler))
    collector = VllmCollector("http://vllm.local:8000/metrics", node="n1", pod="p", client=client)
    assert collector.collect(T0).rows == 0
    (row,) = collector.collect(T0 + timedelta(seconds=2)).tables[SERVER_WINDOWS.name].to_pylist()
    assert seen == ["http://vllm.local:8000/metrics"] * 2
    assert (row["node"], row["pod"], row["namespace"]) == ("n1", "p", None)
    assert row["throughput_rps"] == 1.0
    collector.close()  # borrowed client stays open
    assert not client.is_closed


def test_unreachable_endpoint_raises_collector_error() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    client = httpx.Client(transport=httpx.MockTransport(refuse))
    with pytest.raises(CollectorError, match=r"vllm\.local"):
        VllmCollector("http://vllm.local/metrics", client=client).collect(T0)
