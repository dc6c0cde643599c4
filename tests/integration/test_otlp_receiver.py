"""Spans in: the OpenTelemetry SDK's own OTLP/HTTP exporter against the running service.

The service runs under uvicorn on loopback with a real DuckDB file; spans are made by a real
SDK ``TracerProvider`` (explicit start and end times, so the expected latency is known to the
nanosecond) and shipped by ``OTLPSpanExporter`` (protobuf, optionally gzip). JSON, malformed
bodies, a wrong token and the body limit are sent with httpx.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from google.rpc.status_pb2 import Status
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import SpanKind, StatusCode, set_span_in_context
from opentelemetry.trace import Status as SpanStatus

from sits_observe.store import Store
from sits_observe.surfaces.service.settings import ServiceSettings
from tests.integration.service_support import ServedApp, strict_json

TOKEN = "otlp-test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
T0_NS = 1_767_225_600_000_000_000  # 2026-01-01T00:00:00Z
RESOURCE = {
    "service.name": "vllm",
    "k8s.node.name": "gpu-node-1",
    "k8s.pod.name": "llama-7b-0",
    "k8s.namespace.name": "serving",
}
COLUMNS = (
    "ts, model, latency_s, ttft_s, inter_token_s, prompt_tokens, output_tokens, ok, status, "
    "namespace, pod, node, gpu_uuid, source"
)


class Collected(SpanExporter):
    """Keeps finished spans so the test can hand the same ones to OTLPSpanExporter."""

    def __init__(self) -> None:
        self.spans: list[ReadableSpan] = []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans.extend(spans)
        return SpanExportResult.SUCCESS


def served_app(store: Store, *, max_body_bytes: int = 8 * 1024 * 1024) -> ServedApp:
    settings = ServiceSettings(  # type: ignore[call-arg]
        token=TOKEN, retention_interval_s=0, max_body_bytes=max_body_bytes
    )
    return ServedApp(store, settings)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path / "otlp.duckdb") as s:
        yield s


@pytest.fixture
def served(store: Store) -> Iterator[ServedApp]:
    with served_app(store) as app:
        yield app


def inference_spans() -> list[ReadableSpan]:
    """Three request spans and three that are not, as an inference server would send them."""
    collected = Collected()
    provider = TracerProvider(resource=Resource.create(RESOURCE))
    provider.add_span_processor(SimpleSpanProcessor(collected))
    tracer = provider.get_tracer("vllm")
    # vLLM's own span: SERVER kind, its pre-semconv attribute names, TTFT as an attribute.
    vllm = tracer.start_span(
        "llm_request",
        kind=SpanKind.SERVER,
        start_time=T0_NS,
        attributes={
            "gen_ai.response.model": "llama-7b",
            "gen_ai.usage.prompt_tokens": 512,
            "gen_ai.usage.completion_tokens": 128,
            "gen_ai.latency.time_to_first_token": 0.042,
        },
    )
    # An internal child without a model: not a request.
    child = tracer.start_span(
        "scheduler.step", context=set_span_in_context(vllm), start_time=T0_NS + 1_000
    )
    child.end(end_time=T0_NS + 2_000)
    vllm.end(end_time=T0_NS + 1_234_567_891)
    # GenAI semantic conventions: request model, input/output tokens, a first-token event.
    semconv = tracer.start_span(
        "chat llama-7b",
        kind=SpanKind.SERVER,
        start_time=T0_NS + 5_000_000_000,
        attributes={
            "gen_ai.request.model": "llama-7b",
            "gen_ai.usage.input_tokens": 20,
            "gen_ai.usage.output_tokens": 7,
            "http.response.status_code": 200,
        },
    )
    semconv.add_event("gen_ai.first_token", timestamp=T0_NS + 5_000_000_000 + 80_000_000)
    semconv.end(end_time=T0_NS + 5_000_000_000 + 333_333_333)
    # A failed request (root span, INTERNAL kind, status ERROR), OpenLLMetry's model name.
    failed = tracer.start_span(
        "generate",
        start_time=T0_NS + 9_000_000_000,
        attributes={"llm.request.model": "mistral-7b"},
    )
    failed.set_status(SpanStatus(StatusCode.ERROR, "CUDA out of memory"))
    failed.end(end_time=T0_NS + 9_000_000_000 + 7_000)
    # The caller's view of a request (CLIENT): would count the request twice.
    client = tracer.start_span(
        "openai.chat",
        kind=SpanKind.CLIENT,
        start_time=T0_NS,
        attributes={"gen_ai.request.model": "llama-7b"},
    )
    client.end(end_time=T0_NS + 2_000_000_000)
    # A plain HTTP server span without a model.
    health = tracer.start_span("GET /health", kind=SpanKind.SERVER, start_time=T0_NS)
    health.end(end_time=T0_NS + 1_000)
    return collected.spans


def expected_rows() -> list[tuple[Any, ...]]:
    where = ("serving", "llama-7b-0", "gpu-node-1", None, "otlp")
    return [
        (
            datetime(2026, 1, 1, 0, 0, 1, 234567),
            "llama-7b",
            1.234567891,
            0.042,
            None,
            512,
            128,
            True,
            "ok",
            *where,
        ),
        (
            datetime(2026, 1, 1, 0, 0, 5, 333333),
            "llama-7b",
            0.333333333,
            0.08,
            None,
            20,
            7,
            True,
            "200",
            *where,
        ),
        (
            datetime(2026, 1, 1, 0, 0, 9, 7),
            "mistral-7b",
            7e-06,
            None,
            None,
            None,
            None,
            False,
            "error",
            *where,
        ),
    ]


def stored_rows(store: Store) -> list[tuple[Any, ...]]:
    table = store.query(f"SELECT {COLUMNS} FROM requests ORDER BY ts")
    return [tuple(row.values()) for row in table.to_pylist()]


def exporter(url: str, *, token: str = TOKEN, gzip_body: bool = False) -> OTLPSpanExporter:
    return OTLPSpanExporter(
        endpoint=url + "/v1/traces",
        headers={"Authorization": f"Bearer {token}"},
        compression=Compression.Gzip if gzip_body else Compression.NoCompression,
        timeout=10,
    )


@pytest.mark.parametrize("gzip_body", [False, True], ids=["protobuf", "protobuf-gzip"])
def test_sdk_exporter_spans_become_exact_request_rows(
    served: ServedApp, store: Store, gzip_body: bool
) -> None:
    spans = inference_spans()
    result = exporter(served.url, gzip_body=gzip_body).export(spans)
    assert result is SpanExportResult.SUCCESS
    rows = stored_rows(store)
    assert rows == expected_rows()
    # The latency is end - start of the exported span, exactly.
    vllm = next(s for s in spans if s.name == "llm_request")
    assert vllm.end_time is not None and vllm.start_time is not None
    assert rows[0][2] == (vllm.end_time - vllm.start_time) / 1e9
    assert served.metric("sits_otlp_spans_total", result="stored", reason="") == 3
    assert served.metric("sits_otlp_spans_total", result="ignored", reason="client") == 1
    assert served.metric("sits_otlp_spans_total", result="ignored", reason="no_model") == 2
    assert served.metric("sits_otlp_exports_total", result="stored") == 1
    assert served.metric("sits_ingest_rows_total", table="requests") == 3


def test_a_retried_export_is_stored_once(served: ServedApp, store: Store) -> None:
    spans = inference_spans()
    sdk = exporter(served.url)
    assert sdk.export(spans) is SpanExportResult.SUCCESS
    assert sdk.export(spans) is SpanExportResult.SUCCESS
    assert store.count("requests") == 3
    assert served.metric("sits_otlp_exports_total", result="duplicate") == 1


def hex_ids(trace: int, span: int) -> dict[str, str]:
    return {"traceId": f"{trace:032x}", "spanId": f"{span:016x}"}


def json_export(spans: list[dict[str, Any]]) -> dict[str, Any]:
    resource = [{"key": k, "value": {"stringValue": v}} for k, v in RESOURCE.items()]
    return {
        "resourceSpans": [{"resource": {"attributes": resource}, "scopeSpans": [{"spans": spans}]}]
    }


def json_span(name: str, start_ns: int, end_ns: int, **attrs: Any) -> dict[str, Any]:
    values = []
    for key, value in attrs.items():
        if isinstance(value, str):
            values.append({"key": key, "value": {"stringValue": value}})
        else:  # OTLP/JSON writes int64 as a decimal string
            values.append({"key": key, "value": {"intValue": str(value)}})
    return {
        **hex_ids(0xABC, start_ns % 2**63 + 1),
        "name": name,
        "kind": 2,  # SPAN_KIND_SERVER, as an integer per the OTLP/JSON mapping
        "startTimeUnixNano": str(start_ns),
        "endTimeUnixNano": str(end_ns),
        "attributes": values,
    }


@pytest.mark.parametrize("gzip_body", [False, True], ids=["json", "json-gzip"])
def test_otlp_json_export_with_partial_success(
    served: ServedApp, store: Store, gzip_body: bool
) -> None:
    document = json_export(
        [
            json_span(
                "llm_request",
                T0_NS,
                T0_NS + 250_000_001,
                **{"gen_ai.request.model": "qwen-14b", "gen_ai.usage.output_tokens": 9},
            ),
            # Ends before it starts: a request span that cannot be a row.
            json_span("llm_request", T0_NS + 10, T0_NS, **{"gen_ai.request.model": "qwen-14b"}),
        ]
    )
    body = json.dumps(document).encode()
    headers = {**AUTH, "Content-Type": "application/json"}
    if gzip_body:
        body = gzip.compress(body)
        headers["Content-Encoding"] = "gzip"
    answer = httpx.post(served.url + "/v1/traces", content=body, headers=headers, timeout=10)
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("application/json")
    partial = answer.json()["partialSuccess"]
    assert partial["rejectedSpans"] == "1"
    assert "bad_time" in partial["errorMessage"]
    rows = store.query("SELECT model, latency_s, output_tokens, ok, source FROM requests")
    assert rows.to_pylist() == [
        {
            "model": "qwen-14b",
            "latency_s": 0.250000001,
            "output_tokens": 9,
            "ok": True,
            "source": "otlp",
        }
    ]
    assert served.metric("sits_otlp_spans_total", result="rejected", reason="bad_time") == 1


def test_protobuf_answer_is_an_export_response(served: ServedApp) -> None:
    # An empty export is valid: nothing to store, an empty ExportTraceServiceResponse.
    answer = httpx.post(
        served.url + "/v1/traces",
        content=b"",
        headers={**AUTH, "Content-Type": "application/x-protobuf"},
    )
    assert answer.status_code == 200
    assert answer.headers["content-type"] == "application/x-protobuf"
    parsed = ExportTraceServiceResponse()
    parsed.ParseFromString(answer.content)
    assert not parsed.HasField("partial_success")
    assert served.metric("sits_otlp_exports_total", result="empty") == 1


def test_wrong_token_is_refused(served: ServedApp, store: Store) -> None:
    assert exporter(served.url, token="wrong").export(inference_spans()) is (
        SpanExportResult.FAILURE
    )
    answer = httpx.post(
        served.url + "/v1/traces",
        content=b"",
        headers={"Content-Type": "application/x-protobuf"},
    )
    assert answer.status_code == 401
    status = Status()
    status.ParseFromString(answer.content)
    assert "Authorization" in status.message and status.code == 16
    assert store.count("requests") == 0
    assert served.metric("sits_otlp_rejected_total", reason="unauthorized") == 2


@pytest.mark.parametrize(
    ("media", "encoding", "body", "message"),
    [
        ("application/x-protobuf", None, b"\xff\xff\xff\xff", "not an ExportTraceServiceRequest"),
        ("application/json", None, b"{not json", "not JSON"),
        ("application/json", None, b'{"resourceSpans": 3}', "not an ExportTraceServiceRequest"),
        (
            "application/json",
            None,
            json.dumps(json_export([{"traceId": "zz", "spanId": "01"}])).encode(),
            "not a hex string",
        ),
        ("application/x-protobuf", "gzip", b"not gzip at all", "not valid gzip"),
    ],
    ids=["protobuf", "json-syntax", "json-shape", "json-ids", "gzip"],
)
def test_malformed_exports_get_400_with_a_clear_message(
    served: ServedApp, media: str, encoding: str | None, body: bytes, message: str
) -> None:
    headers = {**AUTH, "Content-Type": media}
    if encoding:
        headers["Content-Encoding"] = encoding
    answer = httpx.post(served.url + "/v1/traces", content=body, headers=headers)
    assert answer.status_code == 400
    if media == "application/json":
        text = answer.json()["message"]
    else:
        status = Status()
        status.ParseFromString(answer.content)
        text = status.message
    assert message in text
    assert served.metric("sits_otlp_rejected_total", reason="malformed") == 1


def test_media_type_and_body_limit(store: Store) -> None:
    with served_app(store, max_body_bytes=1024) as served:
        url = served.url + "/v1/traces"
        plain = httpx.post(url, content=b"x", headers={**AUTH, "Content-Type": "text/plain"})
        assert plain.status_code == 415
        big = httpx.post(
            url, content=b"\0" * 2048, headers={**AUTH, "Content-Type": "application/x-protobuf"}
        )
        assert big.status_code == 413
        bomb = httpx.post(
            url,
            content=gzip.compress(b"\0" * 100_000),
            headers={
                **AUTH,
                "Content-Type": "application/x-protobuf",
                "Content-Encoding": "gzip",
            },
        )
        assert bomb.status_code == 413
        assert "once gunzipped" in Status.FromString(bomb.content).message
        assert served.metric("sits_otlp_rejected_total", reason="too_large") == 2


# -- bounded work, one row per span, no time travel (issue 9) ---------------------------------


def post_json(url: str, document: dict[str, Any]) -> httpx.Response:
    headers = {**AUTH, "Content-Type": "application/json"}
    return httpx.post(url + "/v1/traces", content=json.dumps(document), headers=headers)


def test_an_end_time_in_the_future_is_rejected_and_counted(store: Store) -> None:
    now = datetime(2026, 1, 1, 0, 10, tzinfo=UTC)
    settings = ServiceSettings(  # type: ignore[call-arg]
        token=TOKEN, retention_interval_s=0, max_future_skew_s=60
    )
    model = {"gen_ai.request.model": "qwen-14b"}
    ten_min_ns = T0_NS + 600 * 10**9
    spans = [  # json_span derives the span id from the start time: three starts, three ids
        json_span("llm_request", T0_NS, 2**64 - 1, **model),  # the year 2554
        json_span("llm_request", T0_NS + 1, ten_min_ns + 61 * 10**9, **model),  # past the skew
        json_span("llm_request", T0_NS + 2, ten_min_ns + 59 * 10**9, **model),  # within it
    ]
    with ServedApp(store, settings, clock=lambda: now) as served:
        answer = post_json(served.url, json_export(spans))
        assert answer.status_code == 200, answer.text
        partial = strict_json(answer.text)["partialSuccess"]
        assert partial["rejectedSpans"] == "2"
        assert "requests.ts:future" in partial["errorMessage"]
        reason = "requests.ts:future"
        assert served.metric("sits_otlp_spans_total", result="rejected", reason=reason) == 2
    assert store.scalar("SELECT max(ts) FROM requests") == datetime(2026, 1, 1, 0, 10, 59)
    assert store.count("requests") == 1


def test_identical_spans_in_one_export_are_stored_once(served: ServedApp, store: Store) -> None:
    span = json_span("llm_request", T0_NS, T0_NS + 10**8, **{"gen_ai.request.model": "m"})
    answer = post_json(served.url, json_export([span] * 20_000))
    assert answer.status_code == 200, answer.text
    assert store.count("requests") == 1
    assert served.metric("sits_otlp_spans_total", result="ignored", reason="duplicate") == 19_999
    assert served.metric("sits_otlp_spans_total", result="stored", reason="") == 1


def test_a_span_sent_again_in_another_export_is_stored_once(
    served: ServedApp, store: Store
) -> None:
    spans = inference_spans()
    sdk = exporter(served.url)
    assert sdk.export(spans[:3]) is SpanExportResult.SUCCESS  # two request spans
    assert sdk.export(spans) is SpanExportResult.SUCCESS  # the same two and one more
    assert stored_rows(store) == expected_rows()
    assert store.scalar("SELECT count(DISTINCT (trace_id, span_id)) FROM requests") == 3
    assert served.metric("sits_otlp_spans_total", result="ignored", reason="duplicate") == 2


@pytest.mark.parametrize("depth", [200, 100_000])
def test_deeply_nested_json_is_400_not_500(served: ServedApp, store: Store, depth: int) -> None:
    body = b'{"resourceSpans": ' + b"[" * depth + b"]" * depth + b"}"
    headers = {**AUTH, "Content-Type": "application/json"}
    answer = httpx.post(served.url + "/v1/traces", content=body, headers=headers)
    assert answer.status_code == 400
    assert "at most 128" in strict_json(answer.text)["message"]
    assert served.metric("sits_otlp_rejected_total", reason="malformed") == 1
    # The service keeps serving.
    assert exporter(served.url).export(inference_spans()) is SpanExportResult.SUCCESS


def test_deeply_nested_protobuf_is_400(served: ServedApp) -> None:
    value = _pb_field(1, b"leaf")
    for _ in range(5_000):  # AnyValue.kvlist_value -> KeyValueList.values -> KeyValue.value
        value = _pb_field(6, _pb_field(1, _pb_field(1, b"k") + _pb_field(2, value)))
    span = _pb_field(9, _pb_field(1, b"deep") + _pb_field(2, value))  # Span.attributes
    body = _pb_field(1, _pb_field(2, _pb_field(2, span)))
    headers = {**AUTH, "Content-Type": "application/x-protobuf"}
    answer = httpx.post(served.url + "/v1/traces", content=body, headers=headers)
    assert answer.status_code == 400
    assert "not an ExportTraceServiceRequest" in Status.FromString(answer.content).message


def _pb_field(number: int, payload: bytes) -> bytes:
    """One length-delimited protobuf field."""
    out, size = bytearray([(number << 3) | 2]), len(payload)
    while True:
        byte, size = size & 0x7F, size >> 7
        out.append(byte | (0x80 if size else 0))
        if not size:
            return bytes(out) + payload


def test_exports_too_large_once_decoded_are_413_before_any_row(
    served: ServedApp, store: Store
) -> None:
    """8 MB of OTLP/JSON ``{}`` spans used to take 15 s and 650 MB to parse; 300,000 empty
    protobuf spans (600 KB) are over the span limit (--max-table-rows, 250,000)."""
    many_objects = (
        '{"resourceSpans":[{"scopeSpans":[{"spans":[' + ",".join(["{}"] * 300_000) + "]}]}]}"
    ).encode()
    many_spans = _pb_field(1, _pb_field(2, b"\x12\x00" * 300_000))
    for body, media, reason in (
        (many_objects, "application/json", "max_json_objects"),
        (many_spans, "application/x-protobuf", "max_table_rows"),
    ):
        headers = {**AUTH, "Content-Type": media}
        answer = httpx.post(served.url + "/v1/traces", content=body, headers=headers, timeout=30)
        assert answer.status_code == 413, answer.text
        message = (
            strict_json(answer.text)["message"]
            if media == "application/json"
            else Status.FromString(answer.content).message
        )
        assert "at most" in message
        assert served.metric("sits_otlp_rejected_total", reason=reason) == 1
    assert store.count("requests") == 0
    assert exporter(served.url).export(inference_spans()) is SpanExportResult.SUCCESS
