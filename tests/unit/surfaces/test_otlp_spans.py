"""The OTLP span -> ``requests`` mapping, without HTTP: classification, units, bad values."""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from sits_observe.errors import ParseError
from sits_observe.surfaces.service.otlp_spans import (
    MEDIA_JSON,
    MEDIA_PROTOBUF,
    decode_export,
    request_rows,
)

T0_NS = 1_767_225_600_000_000_000  # 2026-01-01T00:00:00Z


def attr(key: str, value: str | int | float) -> KeyValue:
    if isinstance(value, str):
        return KeyValue(key=key, value=AnyValue(string_value=value))
    if isinstance(value, int):
        return KeyValue(key=key, value=AnyValue(int_value=value))
    return KeyValue(key=key, value=AnyValue(double_value=value))


def export_of(*spans: Span, node: str | None = "n1") -> ExportTraceServiceRequest:
    export = ExportTraceServiceRequest()
    resource_spans = export.resource_spans.add()
    if node:
        resource_spans.resource.attributes.append(attr("k8s.node.name", node))
    resource_spans.scope_spans.add().spans.extend(spans)
    return export


_IDS = itertools.count(1)


def server_span(start_ns: int, end_ns: int, **attrs: str | int | float) -> Span:
    span_id = next(_IDS)
    span = Span(
        name="llm_request",
        kind=Span.SPAN_KIND_SERVER,
        start_time_unix_nano=start_ns,
        end_time_unix_nano=end_ns,
        trace_id=(7).to_bytes(16, "big"),
        span_id=span_id.to_bytes(8, "big"),
    )
    span.attributes.extend(attr(k.replace("__", "."), v) for k, v in attrs.items())
    return span


@given(
    start_ns=st.integers(T0_NS, T0_NS + 10**15),
    duration_ns=st.integers(0, 3600 * 10**9),
)
def test_latency_is_end_minus_start_and_ts_is_the_end(start_ns: int, duration_ns: int) -> None:
    span = server_span(start_ns, start_ns + duration_ns, gen_ai__request__model="m")
    rows = request_rows(export_of(span)).table.to_pylist()
    assert len(rows) == 1
    assert rows[0]["latency_s"] == duration_ns / 1e9
    end_us = (start_ns + duration_ns) // 1000
    assert rows[0]["ts"] == datetime(1970, 1, 1) + timedelta(microseconds=end_us)


def test_classification_and_counts() -> None:
    internal_root = server_span(T0_NS, T0_NS + 5, llm__request__model="m")
    internal_root.kind = Span.SPAN_KIND_INTERNAL
    nested = server_span(T0_NS, T0_NS + 5, gen_ai__request__model="m")
    nested.kind = Span.SPAN_KIND_INTERNAL
    nested.parent_span_id = b"\x01" * 8
    client = server_span(T0_NS, T0_NS + 5, gen_ai__request__model="m")
    client.kind = Span.SPAN_KIND_CLIENT
    no_model = server_span(T0_NS, T0_NS + 5)
    backwards = server_span(T0_NS + 5, T0_NS, gen_ai__request__model="m")
    unset = server_span(0, T0_NS, gen_ai__request__model="m")
    result = request_rows(export_of(internal_root, nested, client, no_model, backwards, unset))
    assert result.spans == 6 and result.table.num_rows == 1
    assert result.ignored == {"nested": 1, "client": 1, "no_model": 1}
    assert result.rejected == {"bad_time": 2}


def test_preferred_names_status_and_bad_values() -> None:
    span = server_span(
        T0_NS,
        T0_NS + 10**9,
        gen_ai__response__model="served",
        gen_ai__request__model="asked",
        gen_ai__usage__input_tokens=-3,
        gen_ai__usage__output_tokens=4.5,
        gen_ai__server__time_to_first_token=float("nan"),
        gen_ai__server__time_per_output_token=0.01,
        http__response__status_code=503,
    )
    event = span.events.add()
    event.name, event.time_unix_nano = "first_token", T0_NS + 2 * 10**9  # after the end
    result = request_rows(export_of(span, node=None))
    (row,) = result.table.to_pylist()
    assert row["model"] == "served"
    assert (row["prompt_tokens"], row["output_tokens"], row["ttft_s"]) == (None, None, None)
    assert row["inter_token_s"] == 0.01
    assert (row["ok"], row["status"], row["node"]) == (False, "503", None)
    assert result.dropped_values == {"prompt_tokens": 1, "output_tokens": 1, "ttft_s": 2}


def test_json_ids_are_hex_and_ints_may_be_strings() -> None:
    body = (
        b'{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"0102030405060708090a0b0c0d0e0f10",'
        b'"spanId":"0102030405060708","name":"r","kind":2,"startTimeUnixNano":"1000",'
        b'"endTimeUnixNano":1500,"attributes":[{"key":"gen_ai.request.model",'
        b'"value":{"stringValue":"m"}}]}]}]}]}'
    )
    export = decode_export(body, MEDIA_JSON)
    span = export.resource_spans[0].scope_spans[0].spans[0]
    assert span.trace_id == bytes(range(1, 17)) and span.span_id == bytes(range(1, 9))
    assert request_rows(export).table.column("latency_s").to_pylist() == [5e-07]


@pytest.mark.parametrize(
    ("body", "media"),
    [(b"\x0a\xff", MEDIA_PROTOBUF), (b"[]", MEDIA_JSON), (b"\xff", MEDIA_JSON)],
)
def test_undecodable_bodies_raise_parse_error(body: bytes, media: str) -> None:
    with pytest.raises(ParseError):
        decode_export(body, media)
