"""``POST /v1/traces``: OTLP/HTTP trace exports from inference servers become ``requests`` rows.

The endpoint speaks the OTLP/HTTP protocol (opentelemetry.io/docs/specs/otlp/#otlphttp):
protobuf (``application/x-protobuf``) or OTLP/JSON (``application/json``) bodies, optionally
``Content-Encoding: gzip``; the answer is an ``ExportTraceServiceResponse`` in the request's
encoding, with ``partial_success.rejected_spans`` when request spans could not be stored.
Errors carry a ``google.rpc.Status`` with a message saying what to fix; 400 means "do not
retry", 503 (store trouble) means "retry later", as the OTLP spec asks of clients.

The checks mirror ``POST /api/v1/ingest`` (same bearer token, same body limit, cheapest first):
token (401), media type and encoding (415), declared length (413), body streamed and
abandoned past the limit (413), gunzipped up to the same limit (413), sized (413: an OTLP/JSON
body of more than ``MAX_JSON_OBJECTS`` objects, an export of more spans than
``--max-table-rows``), decoded (400). Which
spans count as requests, and how their attributes map to columns, is
:mod:`.otlp_spans`; the rows then pass the domain's range rules, with an end time at most
``max_future_skew_s`` past the injected clock. Rows are written with
:meth:`Store.ingest` under a batch id derived from the decoded body's SHA-256, so an
exporter's retry of the same export is stored once; the store also keeps each (trace id,
span id) once, so the same span in another export is not stored twice either (counted as
``ignored`` / ``duplicate``).

Not traced itself: a service exporting its own spans to its own ``/v1/traces`` would
otherwise make a span per export, forever.
"""

from __future__ import annotations

import hashlib
import logging
import zlib
from collections.abc import Callable
from datetime import datetime, timedelta

from fastapi import FastAPI, Request, Response
from google.protobuf import json_format
from google.protobuf.message import Message
from google.rpc.status_pb2 import Status
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceResponse,
)
from prometheus_client import CollectorRegistry
from prometheus_client import Counter as PromCounter
from starlette.concurrency import run_in_threadpool

from sits_observe.errors import InputTooLarge, ParseError, SchemaError, StoreError
from sits_observe.store import Batch, Store, utc_naive
from sits_observe.surfaces.service.http.auth import RoleGuard
from sits_observe.surfaces.service.http.bodies import check_length, read_limited
from sits_observe.surfaces.service.http.json_answers import Refusal
from sits_observe.surfaces.service.metrics import ServiceMetrics
from sits_observe.surfaces.service.otlp_spans import (
    MEDIA_JSON,
    MEDIA_PROTOBUF,
    SpanRows,
    decode_export,
    request_rows,
    screen_rows,
)

log = logging.getLogger(__name__)

TRACES_PATH = "/v1/traces"
ENCODINGS = frozenset({"gzip", "identity", ""})

#: google.rpc.Code for each HTTP status this endpoint answers with an error.
_RPC_CODES = {400: 3, 401: 16, 403: 7, 413: 8, 415: 3, 503: 14}


class OtlpMetrics:
    """The receiver's counters, on the service's registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.exports = PromCounter(
            "sits_otlp_exports_total",
            "OTLP trace export requests by result: stored, duplicate, empty, rejected, failed",
            ("result",),
            registry=registry,
        )
        self.rejected = PromCounter(
            "sits_otlp_rejected_total",
            "OTLP trace export requests refused, by reason (unauthorized, malformed, ...)",
            ("reason",),
            registry=registry,
        )
        self.spans = PromCounter(
            "sits_otlp_spans_total",
            "spans received over OTLP by result (stored, ignored, rejected) and reason",
            ("result", "reason"),
            registry=registry,
        )
        self.values_dropped = PromCounter(
            "sits_otlp_values_dropped_total",
            "optional request values dropped to NULL (non-finite or negative), by column",
            ("column",),
            registry=registry,
        )


class OtlpEndpoint:
    """The ``/v1/traces`` handler, with its dependencies injected."""

    def __init__(
        self,
        store: Store,
        auth: RoleGuard,
        metrics: ServiceMetrics,
        otlp_metrics: OtlpMetrics,
        *,
        max_body_bytes: int,
        max_spans: int,
        clock: Callable[[], datetime],
        max_future_skew_s: float,
    ) -> None:
        self._store = store
        self._max_spans = max_spans
        self._auth = auth
        self._metrics = metrics
        self._otlp = otlp_metrics
        self._max_body_bytes = max_body_bytes
        self._clock = clock
        self._max_future_skew = timedelta(seconds=max_future_skew_s)

    async def handle(self, request: Request) -> Response:
        """Handle one ``POST /v1/traces``."""
        media = request.headers.get("content-type", "").split(";")[0].strip().lower()
        answer_media = media if media in (MEDIA_PROTOBUF, MEDIA_JSON) else MEDIA_JSON
        refusal = self._auth.check(request) or self._check_headers(request, media)
        if refusal is not None:
            return self._refused(refusal, answer_media)
        body = await self._read_body(request)
        if isinstance(body, Refusal):
            return self._refused(body, answer_media)
        self._metrics.bytes.inc(len(body))
        if request.headers.get("content-encoding", "").strip().lower() == "gzip":
            body = self._gunzip(body)
            if isinstance(body, Refusal):
                return self._refused(body, answer_media)
        now = self._clock()
        latest = utc_naive(now) + self._max_future_skew
        try:
            rows = await run_in_threadpool(
                lambda: screen_rows(
                    request_rows(decode_export(body, media, max_spans=self._max_spans)),
                    latest=latest,
                )
            )
        except InputTooLarge as exc:
            return self._refused(Refusal(413, exc.limit, str(exc)), answer_media)
        except ParseError as exc:
            return self._refused(Refusal(400, "malformed", str(exc)), answer_media)
        self._count_spans(rows)
        result = "empty"
        if rows.table.num_rows:
            batch_id = "otlp:" + hashlib.sha256(body).hexdigest()
            mismatch = self._auth.check_rows(request, {"requests": rows.table})  # node tokens
            if mismatch is not None:
                return self._refused(mismatch, answer_media)
            try:
                batch = Batch({"requests": rows.table}, now, batch_id=batch_id)
                receipt = await run_in_threadpool(self._store.ingest, batch)
            except SchemaError as exc:
                return self._refused(Refusal(400, "schema", str(exc)), answer_media)
            except StoreError as exc:
                log.error("OTLP export (%d request spans) not stored: %s", len(rows.table), exc)
                self._otlp.exports.labels("failed").inc()
                detail = f"spans not stored, export them again later: {exc}"
                return _status_response(503, detail, answer_media)
            result = "duplicate" if receipt.duplicate else "stored"
            stored = 0 if receipt.duplicate else receipt.rows
            self._otlp.spans.labels("stored", "").inc(stored)
            self._otlp.spans.labels("ignored", "duplicate").inc(rows.table.num_rows - stored)
            self._metrics.rows.labels("requests").inc(stored)
        self._otlp.exports.labels(result).inc()
        return _export_response(rows, answer_media)

    def _count_spans(self, rows: SpanRows) -> None:
        for reason, count in rows.ignored.items():
            self._otlp.spans.labels("ignored", reason).inc(count)
        for reason, count in rows.rejected.items():
            self._otlp.spans.labels("rejected", reason).inc(count)
        for column, count in rows.dropped_values.items():
            self._otlp.values_dropped.labels(column).inc(count)

    def _refused(self, refusal: Refusal, media: str) -> Response:
        self._otlp.rejected.labels(refusal.reason).inc()
        self._otlp.exports.labels("rejected").inc()
        return _status_response(refusal.status, refusal.detail, media, refusal.headers)

    def _check_headers(self, request: Request, media: str) -> Refusal | None:
        if media not in (MEDIA_PROTOBUF, MEDIA_JSON):
            return Refusal(
                415,
                "media_type",
                f"content type {media!r} is not accepted; send {MEDIA_PROTOBUF} or {MEDIA_JSON}",
            )
        encoding = request.headers.get("content-encoding", "").strip().lower()
        if encoding not in ENCODINGS:
            return Refusal(
                415,
                "encoding",
                f"content encoding {encoding!r} is not accepted; send gzip or no encoding",
            )
        return check_length(request, self._max_body_bytes, self._too_large, bad_status=400)

    async def _read_body(self, request: Request) -> bytes | Refusal:
        return await read_limited(request, self._max_body_bytes, self._too_large)

    def _gunzip(self, body: bytes) -> bytes | Refusal:
        """``body`` gunzipped, never to more than the body limit (a gzip bomb stops there)."""
        inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        try:
            out = inflater.decompress(body, self._max_body_bytes)
            if inflater.unconsumed_tail:
                return self._too_large(f"more than {self._max_body_bytes} bytes once gunzipped")
            out += inflater.flush()
        except zlib.error as exc:
            return Refusal(400, "malformed", f"body is not valid gzip: {exc}")
        if not inflater.eof:
            return Refusal(400, "malformed", "gzip body is truncated")
        return out

    def _too_large(self, what: str) -> Refusal:
        return Refusal(
            413,
            "too_large",
            f"body too large ({what}); the limit is {self._max_body_bytes} bytes: "
            "export smaller batches (BatchSpanProcessor max_export_batch_size) or raise "
            "--max-body-bytes",
        )


def _export_response(rows: SpanRows, media: str) -> Response:
    answer = ExportTraceServiceResponse()
    rejected = sum(rows.rejected.values())
    if rejected:
        reasons = ", ".join(f"{n} {why}" for why, n in sorted(rows.rejected.items()))
        answer.partial_success.rejected_spans = rejected
        answer.partial_success.error_message = (
            f"{rejected} request span(s) not stored ({reasons}): a request span needs a "
            "trace id and a span id, a start time and an end time not before it nor in the "
            "future, and values within the range rules (docs/tracing.md)"
        )
    return _message_response(200, answer, media)


def _status_response(
    status: int, detail: str, media: str, headers: dict[str, str] | None = None
) -> Response:
    return _message_response(
        status, Status(code=_RPC_CODES.get(status, 2), message=detail), media, headers
    )


def _message_response(
    status: int, message: Message, media: str, headers: dict[str, str] | None = None
) -> Response:
    if media == MEDIA_PROTOBUF:
        content = message.SerializeToString()
    else:
        content = json_format.MessageToJson(message, indent=None).encode("utf-8")
    return Response(content, status, headers=headers or None, media_type=media)


def register_otlp(
    app: FastAPI,
    store: Store,
    auth: RoleGuard,
    metrics: ServiceMetrics,
    *,
    max_body_bytes: int,
    max_spans: int,
    clock: Callable[[], datetime],
    max_future_skew_s: float,
) -> OtlpEndpoint:
    """Add ``POST /v1/traces`` to ``app`` (counters on the service's registry); an export of
    more than ``max_spans`` spans is refused (413)."""
    endpoint = OtlpEndpoint(
        store,
        auth,
        metrics,
        OtlpMetrics(metrics.registry),
        max_body_bytes=max_body_bytes,
        max_spans=max_spans,
        clock=clock,
        max_future_skew_s=max_future_skew_s,
    )
    app.add_api_route(
        TRACES_PATH, endpoint.handle, methods=["POST"], response_model=None, name="otlp_traces"
    )
    return endpoint
