"""OTLP bodies that must not cost more than they are worth: repeated spans, bad ids, deep
nesting (JSON and protobuf), end times in the future."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from sits_observe.errors import InputTooLarge, ParseError
from sits_observe.surfaces.service.otlp_spans import (
    MAX_JSON_DEPTH,
    MAX_JSON_OBJECTS,
    MEDIA_JSON,
    MEDIA_PROTOBUF,
    decode_export,
    json_depth,
    json_shape,
    request_rows,
    screen_rows,
)

T0_NS = 1_767_225_600_000_000_000  # 2026-01-01T00:00:00Z
TRACE = bytes.fromhex("4bf92f3577b34da6a3ce929d0e0e4736")


def request_span(span_id: int, *, trace: bytes = TRACE, end_ns: int = T0_NS + 10**9) -> Span:
    span = Span(
        name="llm_request",
        kind=Span.SPAN_KIND_SERVER,
        trace_id=trace,
        span_id=span_id.to_bytes(8, "big"),
        start_time_unix_nano=T0_NS,
        end_time_unix_nano=end_ns,
    )
    span.attributes.append(
        KeyValue(key="gen_ai.request.model", value=AnyValue(string_value="llama"))
    )
    return span


def export_of(*spans: Span) -> ExportTraceServiceRequest:
    export = ExportTraceServiceRequest()
    export.resource_spans.add().scope_spans.add().spans.extend(spans)
    return export


def test_identical_spans_in_one_export_become_one_row() -> None:
    export = export_of(*[request_span(1)] * 20_000, request_span(2))
    rows = request_rows(export)
    assert rows.spans == 20_001 and rows.table.num_rows == 2
    assert rows.ignored == {"duplicate": 19_999}
    assert rows.table.column("trace_id").to_pylist() == [TRACE.hex()] * 2
    assert rows.table.column("span_id").to_pylist() == ["0000000000000001", "0000000000000002"]


def test_spans_without_a_valid_id_are_rejected() -> None:
    no_trace = request_span(1, trace=b"")
    zero_trace = request_span(2, trace=bytes(16))
    short_trace = request_span(3, trace=b"\x01" * 8)
    zero_span = request_span(0)
    rows = request_rows(export_of(no_trace, zero_trace, short_trace, zero_span, request_span(5)))
    assert rows.rejected == {"bad_id": 4}
    assert rows.table.num_rows == 1


def test_an_end_time_past_the_clock_is_rejected() -> None:
    latest = datetime(2026, 1, 1, 0, 5)  # the service's clock + its allowed skew
    far = request_span(1, end_ns=2**64 - 1)  # the largest fixed64: the year 2554
    near = request_span(2, end_ns=T0_NS + 299 * 10**9)
    just_after = request_span(3, end_ns=T0_NS + 301 * 10**9)
    rows = screen_rows(request_rows(export_of(far, near, just_after)), latest=latest)
    assert rows.rejected == {"requests.ts:future": 2}
    assert rows.table.column("ts").to_pylist() == [datetime(2026, 1, 1) + timedelta(seconds=299)]


def nested_json(depth: int) -> bytes:
    return b'{"resourceSpans": ' + b"[" * depth + b"]" * depth + b"}"


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH, 100_000])
def test_json_nested_past_the_limit_is_a_parse_error(depth: int) -> None:
    with pytest.raises(ParseError, match=f"at most {MAX_JSON_DEPTH}"):
        decode_export(nested_json(depth), MEDIA_JSON)


def test_json_objects_are_counted_before_parsing() -> None:
    spans = ",".join(['{"name": "a {b} c", "attributes": [{}]}'] * (MAX_JSON_OBJECTS // 2 + 1))
    body = ('{"resourceSpans":[{"scopeSpans":[{"spans":[' + spans + "]}]}]}").encode()
    assert json_shape(body)[1] == 3 + 2 * (MAX_JSON_OBJECTS // 2 + 1)  # braces in strings skipped
    with pytest.raises(InputTooLarge) as caught:
        decode_export(body, MEDIA_JSON)
    assert caught.value.limit == "max_json_objects"


def test_spans_over_the_limit_are_refused_after_the_lazy_parse() -> None:
    export = export_of(*(request_span(i) for i in range(1, 5)))
    body = export.SerializeToString()
    assert len(decode_export(body, MEDIA_PROTOBUF, max_spans=4).resource_spans) == 1
    with pytest.raises(InputTooLarge, match="4 spans; at most 3"):
        decode_export(body, MEDIA_PROTOBUF, max_spans=3)


def test_json_nested_within_the_limit_is_parsed() -> None:
    # A kvlist attribute value nested 29 deep: 126 levels of JSON, 93 protobuf messages.
    value: dict[str, object] = {"stringValue": "leaf"}
    for _ in range(29):
        value = {"kvlistValue": {"values": [{"key": "k", "value": value}]}}
    attribute = {"key": "deep", "value": value}
    document = {"resourceSpans": [{"scopeSpans": [{"spans": [{"attributes": [attribute]}]}]}]}
    body = json.dumps(document).encode()
    assert json_depth(body) == 126
    span = decode_export(body, MEDIA_JSON).resource_spans[0].scope_spans[0].spans[0]
    assert span.attributes[0].key == "deep"


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet='[]{}"\\ab\n'),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text("[]{}\"'k"), inner),
    max_leaves=30,
)


def true_depth(value: object) -> int:
    if isinstance(value, list):
        return 1 + max((true_depth(v) for v in value), default=0)
    if isinstance(value, dict):
        return 1 + max((true_depth(v) for v in value.values()), default=0)
    return 0


@given(json_values)
def test_json_depth_matches_the_parsed_document(value: object) -> None:
    """Brackets and escaped quotes inside strings never count."""
    assert json_depth(json.dumps(value).encode()) == true_depth(value)


def _field(number: int, payload: bytes) -> bytes:
    """One length-delimited protobuf field (wire type 2)."""
    key, size = (number << 3) | 2, len(payload)
    out = bytearray([key])
    while True:
        byte, size = size & 0x7F, size >> 7
        out.append(byte | (0x80 if size else 0))
        if not size:
            return bytes(out) + payload


def deep_protobuf(depth: int) -> bytes:
    """An export whose one span has an attribute value nested ``depth`` kvlists deep (the
    SDK refuses to build one, so the bytes are written by hand: AnyValue.kvlist_value = 6,
    KeyValueList.values = 1, KeyValue key = 1 / value = 2, Span.attributes = 9,
    ScopeSpans.spans = 2, ResourceSpans.scope_spans = 2, the request's resource_spans = 1)."""
    value = _field(1, b"leaf")
    for _ in range(depth):
        value = _field(6, _field(1, _field(1, b"k") + _field(2, value)))
    span = _field(9, _field(1, b"deep") + _field(2, value))
    return _field(1, _field(2, _field(2, span)))


def test_protobuf_nested_past_the_runtime_limit_is_a_parse_error() -> None:
    with pytest.raises(ParseError, match="not an ExportTraceServiceRequest"):
        decode_export(deep_protobuf(5_000), MEDIA_PROTOBUF)
    assert len(decode_export(deep_protobuf(10), MEDIA_PROTOBUF).resource_spans) == 1
