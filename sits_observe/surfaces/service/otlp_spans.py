"""OTLP trace exports from inference servers, decoded and turned into ``requests`` rows.

An export (``ExportTraceServiceRequest``) arrives as protobuf or as OTLP/JSON (the proto3
JSON mapping, except that trace and span ids are hex strings, not base64). Each span is
classified:

- a **request span** is a span that names a model (:data:`MODEL_KEYS`) and is either of kind
  ``SERVER`` (vLLM's ``llm_request`` span is one) or a root span of kind ``INTERNAL`` /
  ``UNSPECIFIED``. It becomes one row: ``ts`` = end time, ``latency_s`` = end - start
  (exact, nanoseconds in the wire format, microseconds in the row's ``ts``);
- any other span is *ignored* and counted by reason: ``client`` (kinds ``CLIENT``,
  ``PRODUCER``, ``CONSUMER``: the caller's view, which would count a request twice),
  ``no_model``, ``nested`` (an internal span under another span);
- a request span whose trace or span id is missing or malformed (``bad_id``: OTLP requires
  a 16-byte trace id and an 8-byte span id, not all zero) or whose times are missing or run
  backwards (``bad_time``) is *rejected* and reported in the response's ``partial_success``;
  so is one whose row breaks the domain's range rules (:func:`screen_rows`, e.g.
  ``requests.ts:future`` for an end time past the service's clock plus its allowed skew);
- a request span whose (trace id, span id) already came earlier in the same export is
  *ignored* (``duplicate``); the store also keeps a span id once across exports.

A JSON body nested deeper than :data:`MAX_JSON_DEPTH` is refused before it is parsed (a
cheap scan of the bytes), so a hostile document cannot exhaust the parser's recursion;
protobuf bodies are bounded by the protobuf runtime's own recursion limit (100).

Attribute names are OpenTelemetry's GenAI semantic conventions first, then the names vLLM
and OpenLLMetry used before them; the first one present wins (docs/tracing.md has the table).
Optional values that are not finite or are negative are dropped (NULL) and counted. Only
this module knows the OTLP and GenAI names; past it the ``requests`` columns rule.
"""

from __future__ import annotations

import base64
import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime

import numpy as np
import pyarrow as pa
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from sits_observe.domain.ranges import bound_of, check_rows, value_problem
from sits_observe.domain.tables import find_table
from sits_observe.errors import InputTooLarge, ParseError

MEDIA_PROTOBUF = "application/x-protobuf"
MEDIA_JSON = "application/json"
SOURCE = "otlp"

#: Model name: the model that served the request, else the one asked for.
MODEL_KEYS = (
    "gen_ai.response.model",
    "gen_ai.request.model",
    "llm.response.model",
    "llm.request.model",
)
INPUT_TOKEN_KEYS = (
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.prompt_tokens",
    "llm.usage.prompt_tokens",
)
OUTPUT_TOKEN_KEYS = (
    "gen_ai.usage.output_tokens",
    "gen_ai.usage.completion_tokens",
    "llm.usage.completion_tokens",
)
#: Time to first token in seconds, as an attribute (the second is vLLM's name).
TTFT_KEYS = ("gen_ai.server.time_to_first_token", "gen_ai.latency.time_to_first_token")
#: ... or as a span event: TTFT = event time - span start.
FIRST_TOKEN_EVENTS = frozenset({"gen_ai.first_token", "first_token"})
INTER_TOKEN_KEYS = ("gen_ai.server.time_per_output_token",)
HTTP_STATUS_KEYS = ("http.response.status_code", "http.status_code")
NODE_KEY = "k8s.node.name"
POD_KEY = "k8s.pod.name"
NAMESPACE_KEY = "k8s.namespace.name"

#: Deepest JSON nesting accepted. An export nests 6 levels down to an attribute value; each
#: nested kvlist value adds 4 (3 protobuf messages). 128 admits what the protobuf runtime's
#: own limit of 100 nested messages admits, and stays far below Python's recursion limit.
MAX_JSON_DEPTH = 128
#: Most JSON objects an OTLP/JSON body may hold. Parsing costs about 6 us and 240 bytes of
#: memory an object (8 MB of ``{}`` spans took 15 s and 650 MB); a request span with vLLM's
#: attributes is about 35 objects, so this admits some 7,000 spans an export (an SDK's
#: BatchSpanProcessor sends 512).
MAX_JSON_OBJECTS = 250_000
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_TRACE_ID_BYTES, _SPAN_ID_BYTES = 16, 8

_ROOT_KINDS = frozenset({Span.SPAN_KIND_INTERNAL, Span.SPAN_KIND_UNSPECIFIED})
_ID_FIELDS = ("traceId", "spanId", "parentSpanId")
_COLUMNS = find_table("requests").schema


@dataclass(frozen=True)
class SpanRows:
    """What an export became: ``requests`` rows and the spans that did not."""

    table: pa.Table
    spans: int
    ignored: Counter[str] = field(default_factory=Counter)
    rejected: Counter[str] = field(default_factory=Counter)
    #: Optional values dropped to NULL (non-finite, negative), by column.
    dropped_values: Counter[str] = field(default_factory=Counter)


def decode_export(
    body: bytes, media: str, *, max_spans: int | None = None
) -> ExportTraceServiceRequest:
    """The export in ``body`` (``media`` is :data:`MEDIA_PROTOBUF` or :data:`MEDIA_JSON`).

    Raises :class:`ParseError` saying what is wrong, and :class:`InputTooLarge` for an
    OTLP/JSON body of more than :data:`MAX_JSON_OBJECTS` objects (counted before parsing) or
    an export of more than ``max_spans`` spans (counted after the protobuf runtime's lazy
    parse, before a row is built).
    """
    export = ExportTraceServiceRequest()
    if media == MEDIA_JSON:
        depth, objects = json_shape(body)
        if depth > MAX_JSON_DEPTH:
            raise ParseError(
                f"OTLP/JSON body nests {depth} levels deep; at most {MAX_JSON_DEPTH} are accepted"
            )
        if objects > MAX_JSON_OBJECTS:
            raise InputTooLarge(
                f"OTLP/JSON body holds {objects} objects; at most {MAX_JSON_OBJECTS} are "
                "accepted: export fewer spans a request, or use protobuf",
                limit="max_json_objects",
                value=objects,
                allowed=MAX_JSON_OBJECTS,
            )
        try:
            document = json.loads(body)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ParseError(f"OTLP/JSON body is not JSON: {exc}") from exc
        if not isinstance(document, dict):
            raise ParseError("OTLP/JSON body must be an object with 'resourceSpans'")
        try:
            json_format.ParseDict(_ids_to_base64(document), export, ignore_unknown_fields=True)
        except json_format.ParseError as exc:
            raise ParseError(f"OTLP/JSON body is not an ExportTraceServiceRequest: {exc}") from exc
        except RecursionError as exc:  # the scan above makes this unreachable; belt and braces
            raise ParseError("OTLP/JSON body nests too deeply") from exc
    else:
        try:
            export.ParseFromString(body)
        except DecodeError as exc:
            raise ParseError(
                f"protobuf body is not an ExportTraceServiceRequest ({len(body)} bytes): {exc}"
            ) from exc
    if max_spans is not None:
        spans = sum(len(ss.spans) for rs in export.resource_spans for ss in rs.scope_spans)
        if spans > max_spans:
            raise InputTooLarge(
                f"the export holds {spans} spans; at most {max_spans} are accepted "
                "(--max-table-rows): export smaller batches",
                limit="max_table_rows",
                value=spans,
                allowed=max_spans,
            )
    return export


def json_depth(body: bytes) -> int:
    """The deepest ``[`` / ``{`` nesting of a JSON text (:func:`json_shape`)."""
    return json_shape(body)[0]


def json_shape(body: bytes) -> tuple[int, int]:
    """The deepest ``[`` / ``{`` nesting of a JSON text and its number of objects (brackets
    inside strings ignored), found without parsing: strings are cut out by one regex, the
    rest is a running sum."""
    structure = _JSON_STRING.sub(b"", body).translate(None, delete=_NOT_BRACKETS)
    if not structure:
        return 0, 0
    codes = np.frombuffer(structure, np.uint8)
    steps = np.where((codes == ord("[")) | (codes == ord("{")), 1, -1)
    return int(np.cumsum(steps).max()), int(np.count_nonzero(codes == ord("{")))


def _ids_to_base64(document: dict[str, object]) -> dict[str, object]:
    """OTLP/JSON carries ids as hex; the proto3 JSON parser wants bytes as base64."""
    for resource_spans in _objects(document.get("resourceSpans")):
        for scope_spans in _objects(resource_spans.get("scopeSpans")):
            for span in _objects(scope_spans.get("spans")):
                _convert_ids(span)
                for link in _objects(span.get("links")):
                    _convert_ids(link)
    return document


def _convert_ids(obj: dict[str, object]) -> None:
    for key in _ID_FIELDS:
        value = obj.get(key)
        if isinstance(value, str) and value:
            try:
                obj[key] = base64.b64encode(bytes.fromhex(value)).decode("ascii")
            except ValueError as exc:
                raise ParseError(f"{key} {value!r} is not a hex string") from exc


def _objects(value: object) -> Iterable[dict[str, object]]:
    if isinstance(value, list):
        return [item for item in value if isinstance(item, dict)]
    return []


def request_rows(export: ExportTraceServiceRequest) -> SpanRows:
    """The ``requests`` rows of the request spans in ``export`` (see the module docstring)."""
    columns: dict[str, list[object]] = {name: [] for name in _COLUMNS.names}
    ignored: Counter[str] = Counter()
    rejected: Counter[str] = Counter()
    dropped: Counter[str] = Counter()
    seen: set[tuple[bytes, bytes]] = set()
    spans = 0
    for resource_spans in export.resource_spans:
        where = _strings(resource_spans.resource.attributes, (NODE_KEY, POD_KEY, NAMESPACE_KEY))
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans += 1
                attributes = _values(span.attributes)
                why = _not_a_request(span, attributes)
                if why is not None:
                    ignored[why] += 1
                    continue
                why = _not_storable(span)
                if why is not None:
                    rejected[why] += 1
                    continue
                key = (bytes(span.trace_id), bytes(span.span_id))
                if key in seen:
                    ignored["duplicate"] += 1
                    continue
                seen.add(key)
                _add_row(columns, span, attributes, where, dropped)
    table = pa.table(columns, schema=_COLUMNS)
    return SpanRows(table, spans, ignored, rejected, dropped)


def screen_rows(rows: SpanRows, *, latest: datetime) -> SpanRows:
    """``rows`` with the domain's range rules applied (:mod:`sits_observe.domain.ranges`):
    a row they drop is a rejected span, counted under the rule's reason."""
    checked = check_rows("requests", rows.table, latest=latest)
    if not checked.dropped:
        return rows
    return replace(rows, table=checked.table, rejected=rows.rejected + checked.dropped)


def _not_storable(span: Span) -> str | None:
    if len(span.trace_id) != _TRACE_ID_BYTES or not any(span.trace_id):
        return "bad_id"
    if len(span.span_id) != _SPAN_ID_BYTES or not any(span.span_id):
        return "bad_id"
    if span.start_time_unix_nano == 0 or span.end_time_unix_nano < span.start_time_unix_nano:
        return "bad_time"
    return None


def _not_a_request(span: Span, attributes: Mapping[str, object]) -> str | None:
    if span.kind not in _ROOT_KINDS and span.kind != Span.SPAN_KIND_SERVER:
        return "client"
    if _first_string(attributes, MODEL_KEYS) is None:
        return "no_model"
    if span.kind in _ROOT_KINDS and span.parent_span_id:
        return "nested"
    return None


def _add_row(
    columns: dict[str, list[object]],
    span: Span,
    attributes: Mapping[str, object],
    where: Mapping[str, str],
    dropped: Counter[str],
) -> None:
    start_ns, end_ns = span.start_time_unix_nano, span.end_time_unix_nano
    ttft_s = _seconds(attributes, TTFT_KEYS, "ttft_s", dropped)
    if ttft_s is None:
        ttft_s = _first_event_s(span, dropped)
    http_status = _first_int(attributes, HTTP_STATUS_KEYS)
    failed = span.status.code == Status.STATUS_CODE_ERROR or (
        http_status is not None and http_status >= 400
    )
    status = str(http_status) if http_status is not None else ("error" if failed else "ok")
    row: dict[str, object] = {
        "ts": end_ns // 1000,
        "model": _first_string(attributes, MODEL_KEYS),
        "latency_s": (end_ns - start_ns) / 1e9,
        "ttft_s": ttft_s,
        "inter_token_s": _seconds(attributes, INTER_TOKEN_KEYS, "inter_token_s", dropped),
        "prompt_tokens": _count(attributes, INPUT_TOKEN_KEYS, "prompt_tokens", dropped),
        "output_tokens": _count(attributes, OUTPUT_TOKEN_KEYS, "output_tokens", dropped),
        "ok": not failed,
        "status": status,
        "namespace": where.get(NAMESPACE_KEY),
        "pod": where.get(POD_KEY),
        "node": where.get(NODE_KEY),
        "gpu_uuid": None,
        "source": SOURCE,
        "trace_id": bytes(span.trace_id).hex(),
        "span_id": bytes(span.span_id).hex(),
    }
    for name, column in columns.items():
        column.append(row[name])


def _first_event_s(span: Span, dropped: Counter[str]) -> float | None:
    times = [int(e.time_unix_nano) for e in span.events if e.name in FIRST_TOKEN_EVENTS]
    if not times:
        return None
    at_ns, start_ns = min(times), int(span.start_time_unix_nano)
    if at_ns < start_ns or at_ns > span.end_time_unix_nano:
        dropped["ttft_s"] += 1
        return None
    return (at_ns - start_ns) / 1e9


def _values(attributes: Iterable[KeyValue]) -> dict[str, object]:
    return {kv.key: _scalar(kv.value) for kv in attributes}


def _scalar(value: AnyValue) -> object:
    kind = value.WhichOneof("value")
    if kind == "string_value":
        return value.string_value
    if kind == "int_value":
        return value.int_value
    if kind == "double_value":
        return value.double_value
    if kind == "bool_value":
        return value.bool_value
    return None  # arrays, maps and bytes carry nothing the requests table holds


def _strings(attributes: Iterable[KeyValue], keys: tuple[str, ...]) -> dict[str, str]:
    values = _values(attributes)
    return {k: v for k in keys if isinstance(v := values.get(k), str) and v}


def _first_string(attributes: Mapping[str, object], keys: tuple[str, ...]) -> str | None:
    for key in keys:
        value = attributes.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def _first_int(attributes: Mapping[str, object], keys: tuple[str, ...]) -> int | None:
    for key in keys:
        value = attributes.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str) and value.isdigit():
            return int(value)
    return None


def _first_number(attributes: Mapping[str, object], keys: tuple[str, ...]) -> float | None:
    for key in keys:
        value = attributes.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    return None


def _seconds(
    attributes: Mapping[str, object], keys: tuple[str, ...], column: str, dropped: Counter[str]
) -> float | None:
    value = _first_number(attributes, keys)
    if value is not None and _breaks_rule(column, value):
        dropped[column] += 1
        return None
    return value


def _count(
    attributes: Mapping[str, object], keys: tuple[str, ...], column: str, dropped: Counter[str]
) -> int | None:
    value = _first_number(attributes, keys)
    if value is None:
        return None
    if _breaks_rule(column, value) or value != int(value):
        dropped[column] += 1
        return None
    return int(value)


def _breaks_rule(column: str, value: float) -> bool:
    """True when ``value`` breaks the domain's range rule of ``requests.<column>``."""
    bound = bound_of("requests", column)
    return bound is not None and value_problem(bound, value) is not None
