"""The PromQL HTTP client and the dcgm-exporter mapping of the PromQL GPU source.

The transport is a fake (httpx.MockTransport) answering like the Prometheus API documents
(https://prometheus.io/docs/prometheus/latest/querying/api/).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from sits_observe.errors import StoreError
from sits_observe.store.promql.client import PromQLClient
from sits_observe.store.promql.source import PromQLGpuSource

T0 = datetime(2026, 11, 1, 12, 0)


def _client(handler: Callable[[httpx.Request], httpx.Response]) -> PromQLClient:
    return PromQLClient(
        "http://prom:9090/", client=httpx.Client(transport=httpx.MockTransport(handler))
    )


def _ok(data: Any) -> httpx.Response:
    return httpx.Response(200, json={"status": "success", "data": data})


def test_query_range_sends_times_and_step_and_parses_values() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return _ok(
            {
                "resultType": "matrix",
                "result": [
                    {"metric": {"__name__": "m", "a": "x"}, "values": [[1.5, "1"], [2.5, "NaN"]]}
                ],
            }
        )

    (series,) = _client(handler).query_range("m", T0, T0 + timedelta(seconds=30), 15)
    params = seen[0].url.params
    assert seen[0].url.path == "/api/v1/query_range"
    assert params["start"] == f"{T0.replace(tzinfo=UTC).timestamp():.3f}"
    assert params["step"] == "15s"
    assert series.name == "m" and series.labels["a"] == "x"
    assert series.t_s.tolist() == [1.5, 2.5]
    assert series.values[0] == 1.0 and math.isnan(series.values[1])


def test_series_sends_every_matcher() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.params.get_list("match[]") == ["a", "b"]
        return _ok([{"__name__": "a", "UUID": "GPU-1"}])

    assert _client(handler).series(["a", "b"], T0, T0) == [{"__name__": "a", "UUID": "GPU-1"}]


@pytest.mark.parametrize(
    ("response", "words"),
    [
        (httpx.Response(400, json={"status": "error", "error": "parse error"}), "parse error"),
        (httpx.Response(502, text="bad gateway"), "HTTP 502"),
        (httpx.Response(200, json={"status": "error", "errorType": "timeout"}), "timeout"),
        (
            httpx.Response(200, json={"status": "success", "data": {"resultType": "vector"}}),
            "matrix",
        ),
    ],
)
def test_errors_become_store_errors_naming_the_query(response: httpx.Response, words: str) -> None:
    client = _client(lambda _request: response)
    with pytest.raises(StoreError, match=words) as info:
        client.query_range("up", T0, T0, 1)
    assert "'up'" in str(info.value)


def test_unreachable_store_is_a_store_error() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused")

    with pytest.raises(StoreError, match="unreachable"):
        _client(handler).query("up", T0)


def test_bad_url_and_step_are_refused() -> None:
    with pytest.raises(StoreError, match="http"):
        PromQLClient("prom:9090")
    with pytest.raises(StoreError, match="positive"):
        _client(lambda _r: _ok({})).query_range("up", T0, T0, 0)


def test_gpu_source_pivots_families_scales_units_and_drops_out_of_range() -> None:
    ms = T0.replace(tzinfo=UTC).timestamp()
    gpu = {"Hostname": "n1", "UUID": "GPU-1", "gpu": "0", "modelName": "H100", "pod": ""}
    answers = {
        "DCGM_FI_DEV_FB_USED": [[ms, "1024"], [ms + 15, "2048"]],
        "DCGM_FI_DEV_FB_FREE": [[ms, "1000"], [ms + 15, "1000"]],
        "DCGM_FI_DEV_FB_RESERVED": [[ms, "10"], [ms + 15, "10"]],
        "DCGM_FI_DEV_GPU_UTIL": [[ms, "50"], [ms + 15, "150"]],  # 150 % is out of range
    }

    def handler(request: httpx.Request) -> httpx.Response:
        query = request.url.params["query"]
        family = next((f for f in answers if f in query), None)
        result = (
            []
            if family is None
            else [{"metric": {**gpu, "__name__": family}, "values": answers[family]}]
        )
        return _ok({"resultType": "matrix", "result": result})

    source = PromQLGpuSource(_client(handler))
    table = source.gpu_samples(
        T0,
        T0 + timedelta(minutes=1),
        columns=["fb_used_bytes", "fb_total_bytes", "gpu_util_ratio"],
    )
    rows = table.to_pylist()
    assert [r["ts"] for r in rows] == [T0, T0 + timedelta(seconds=15)]
    assert [r["fb_used_bytes"] for r in rows] == [1024 * 2**20, 2048 * 2**20]
    assert [r["fb_total_bytes"] for r in rows] == [2034 * 2**20, 3058 * 2**20]
    assert [r["gpu_util_ratio"] for r in rows] == [0.5, None]
    assert rows[0]["node"] == "n1" and rows[0]["gpu_index"] == 0 and rows[0]["pod"] is None
    assert rows[0]["power_w"] is None and rows[0]["source"] == "promql"
    assert table.schema.field("fb_used_bytes").type.bit_width == 64


def test_gpu_source_refuses_an_empty_range() -> None:
    source = PromQLGpuSource(_client(lambda _r: _ok({"resultType": "matrix", "result": []})))
    with pytest.raises(StoreError, match="empty time range"):
        source.gpu_samples(T0, T0)
