"""``POST /api/v1/ingest``: authenticate, bound, decode and store one agent batch.

The checks run cheapest first and before the body is read where they can: token (401),
headers (422), media type (415), declared ``Content-Length`` (413), then the body is read
in chunks and abandoned as soon as it passes the limit (413), so an oversized or
unauthenticated request never costs more than the limit in memory. What decoding would cost
is read from the Arrow headers before anything is decoded (rows per table and per batch,
bytes once decompressed: :class:`~sits_observe.collectors.agent.wire.DecodeLimits`), and a
batch over a limit gets 413 with the limit's name as its reason. A batch is acknowledged
(200) only after the store committed it (with group commit, the transaction that holds it and
the batches that arrived with it: :mod:`sits_observe.store.group_commit`); a batch id seen
before is acknowledged as a duplicate and not stored again, which makes agent replays
idempotent, unless its body differs from the one stored under that id (SHA-256 kept in the
ledger): that is a conflict (409), never a silent drop. The decoded batch goes to the store
as every source's rows do (:mod:`sits_observe.store.intake`: conformed, screened by the
domain's range rules, appended); bad rows are dropped, bad optional values NULLed, and both
reported (:mod:`.ingest_rows`). This module only speaks HTTP.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import hashlib
import logging
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import JSONResponse

from sits_observe.collectors.agent.wire import (
    BATCH_ID_PATTERN,
    CONTENT_TYPE,
    HEADER_BATCH_ID,
    HEADER_NODE,
    NODE_PATTERN,
    DecodeLimits,
    decode_batch,
)
from sits_observe.errors import (
    BatchConflict,
    InputTooLarge,
    ParseError,
    SchemaError,
    SitsError,
    StoreError,
)
from sits_observe.store import Batch, GroupCommitter, IngestReceipt, Store
from sits_observe.surfaces.service.http.bodies import check_length, read_limited
from sits_observe.surfaces.service.http.json_answers import Refusal, StrictJSONResponse, problem
from sits_observe.surfaces.service.ingest_rows import RowDropMetrics
from sits_observe.surfaces.service.metrics import ServiceMetrics
from sits_observe.tracing import note, traced

if TYPE_CHECKING:
    from sits_observe.surfaces.service.http.auth import RoleGuard

log = logging.getLogger(__name__)

#: What node agents produce. Inventory snapshots and controller decisions are written by
#: the service itself, never accepted from the network.
AGENT_TABLES = (
    "gpu_samples",
    "container_samples",
    "gpu_processes",
    "requests",
    "server_windows",
    "collector_drops",
    # topology and NUMA collectors (docs/collectors/topology.md)
    "numa_samples",
    "container_numa_samples",
    "gpu_topology",
    "gpu_links",
    "sync_delays",
    # the kubelet's pod-resources join (docs/collectors/podresources.md)
    "gpu_attribution",
)

#: Media types accepted for the wire format (the generic one for hand-made clients).
ACCEPTED_TYPES = frozenset({CONTENT_TYPE, "application/octet-stream"})


class IngestEndpoint:
    """The ingest handler, with its dependencies injected."""

    def __init__(
        self,
        store: Store,
        auth: RoleGuard,
        metrics: ServiceMetrics,
        *,
        max_body_bytes: int,
        decode_limits: DecodeLimits,
        clock: Callable[[], datetime],
        max_future_skew_s: float,
        writer: GroupCommitter | None = None,
    ) -> None:
        self._store = store
        self._decode_limits = decode_limits
        self._writer = writer
        self._auth = auth
        self._metrics = metrics
        self._max_body_bytes = max_body_bytes
        self._clock = clock
        self._max_future_skew_s = max_future_skew_s
        self._drops = RowDropMetrics(metrics.registry)
        # One thread decodes every body (see :meth:`handle`); started on the first batch.
        self._decoder = ThreadPoolExecutor(1, thread_name_prefix="ingest-decode")

    def close(self) -> None:
        """Stop the decoding thread (the server has stopped taking requests)."""
        self._decoder.shutdown(wait=False, cancel_futures=True)

    @traced("sits.ingest", task_type="ingest")
    async def handle(self, request: Request) -> JSONResponse:
        """Handle one ``POST /api/v1/ingest``."""
        refusal = self._auth.check(request) or self._check_headers(request)
        if refusal is not None:
            return self._refused(refusal)
        batch_id = request.headers[HEADER_BATCH_ID]
        node = request.headers.get(HEADER_NODE)
        body = await self._read_body(request)
        if isinstance(body, Refusal):
            return self._refused(body)
        self._metrics.bytes.inc(len(body))
        meta = Batch({}, self._clock(), node, batch_id, None, self._max_future_skew_s)
        # The body's CPU work (decode, digest, range rules) runs on one thread of its own:
        # the event loop stays free to read other bodies and answer the extender meanwhile,
        # and no more than three threads (loop, decoder, group-commit writer) want the GIL.
        # With a thread per request (the shared pool, up to 40) the writer waited that
        # many times longer for the GIL after each DuckDB statement, and the service
        # stored a fifth fewer rows a second (docs/benchmarks.md, "Service ingest").
        work = functools.partial(contextvars.copy_context().run, self._open, body, meta, request)
        decoding = asyncio.get_running_loop().run_in_executor(self._decoder, work)
        try:
            opened = await asyncio.shield(decoding)
        except asyncio.CancelledError:
            # Shutdown cancelled the request while its body was being decoded: what the
            # thread began is finished, and a batch it queued is withdrawn; one whose commit
            # has begun is answered once committed, as in :meth:`_stored`.
            opened = await decoding
            if isinstance(opened, Refusal) or _withdrawn(opened):
                raise
        if isinstance(opened, Refusal):
            return self._refused(opened)
        try:
            receipt = await self._stored(opened, batch_id)
        except BatchConflict as exc:
            return self._refused(Refusal(409, "conflict", str(exc)))
        except SchemaError as exc:
            return self._refused(Refusal(400, "schema", str(exc)))
        except StoreError as exc:
            log.error("batch %s from %s not stored: %s", batch_id, node, exc)
            self._metrics.batches.labels("failed").inc()
            return problem(503, "store", f"batch not stored, send it again later: {exc}")
        if receipt.duplicate:
            self._metrics.batches.labels("duplicate").inc()
        else:
            self._metrics.batches.labels("stored").inc()
            for name, rows in receipt.rows_by_table.items():
                self._metrics.rows.labels(name).inc(rows)
            self._drops.count(receipt.dropped)
        note({"sits.ingest.rows": receipt.rows, "sits.ingest.duplicate": receipt.duplicate})
        answer = {"batch_id": batch_id, "rows": receipt.rows, "duplicate": receipt.duplicate}
        return StrictJSONResponse({**answer, "dropped": dict(receipt.dropped)})

    def _open(self, body: bytes, meta: Batch, request: Request) -> Queued | Refusal:
        """Decode the body, check its rows belong to the caller, and hand it to the store
        (:meth:`Store.ingest`, which conforms, screens and appends), or say why it is
        refused (413: over a decode limit, read from the headers before decoding; 400:
        undecodable, a table agents may not send, a schema misfit; 403: a node token's rows
        of another node)."""
        try:
            tables = decode_batch(body, self._decode_limits)
        except InputTooLarge as exc:
            return Refusal(413, exc.limit, str(exc))
        except ParseError as exc:
            return Refusal(400, "undecodable", str(exc))
        unknown = sorted(set(tables) - set(AGENT_TABLES))
        if unknown:
            detail = (
                f"table(s) {', '.join(unknown)} cannot be ingested; "
                f"agents may send: {', '.join(AGENT_TABLES)}"
            )
            return Refusal(400, "unknown_table", detail)
        mismatch = self._auth.check_rows(request, tables)  # a node token: its own rows only
        if mismatch is not None:
            return mismatch
        batch = replace(meta, tables=tables, body_sha256=hashlib.sha256(body).hexdigest())
        try:
            if self._writer is not None:
                return self._writer.ingest(batch)
            return _done(self._store.ingest(batch))
        except SchemaError as exc:
            return Refusal(400, "schema", str(exc))
        except SitsError as exc:
            return _failed(exc)

    async def _stored(self, queued: Queued, batch_id: str) -> IngestReceipt:
        """The receipt once the store committed the batch (awaited on the event loop, no
        worker thread held while a group commit runs).

        A request cancelled meanwhile (uvicorn cancels what still runs once the shutdown
        grace is over) is answered truthfully: a batch still queued is withdrawn and the
        request ends with 503 ``shutting_down`` (:mod:`.unhandled`); one whose commit has
        begun cannot be withdrawn, so the answer waits for it, and a committed batch is
        never answered with an error."""
        waiting: asyncio.Future[IngestReceipt] = asyncio.wrap_future(queued)
        try:
            return await asyncio.shield(waiting)
        except asyncio.CancelledError:
            if _withdrawn(queued):
                raise
            log.warning("batch %s: shutdown cancelled its request mid-commit; answering", batch_id)
            return await waiting

    def _refused(self, refusal: Refusal) -> JSONResponse:
        note({"sits.ingest.refused": refusal.reason})
        self._metrics.rejected.labels(refusal.reason).inc()
        self._metrics.batches.labels("rejected").inc()
        return refusal.response()

    def _check_headers(self, request: Request) -> Refusal | None:
        batch_id = request.headers.get(HEADER_BATCH_ID)
        if batch_id is None or not BATCH_ID_PATTERN.match(batch_id):
            return Refusal(
                422,
                "bad_header",
                f"header {HEADER_BATCH_ID} is {batch_id!r}; it must be 1-128 characters of "
                "letters, digits, '.', ':' or '-' (a uuid4 hex is fine), unique per batch",
            )
        node = request.headers.get(HEADER_NODE)
        if node is not None and not NODE_PATTERN.match(node):
            return Refusal(
                422,
                "bad_header",
                f"header {HEADER_NODE} is {node!r}; it must be a node name "
                "(letters, digits, '.', '_' or '-', at most 253 characters)",
            )
        media = request.headers.get("content-type", CONTENT_TYPE).split(";")[0].strip().lower()
        if media not in ACCEPTED_TYPES:
            return Refusal(
                415,
                "media_type",
                f"content type {media!r} is not accepted; send {CONTENT_TYPE} (see docs/api.md)",
            )
        return check_length(request, self._max_body_bytes, self._too_large, bad_status=422)

    async def _read_body(self, request: Request) -> bytes | Refusal:
        return await read_limited(request, self._max_body_bytes, self._too_large)

    def _too_large(self, what: str) -> Refusal:
        return Refusal(
            413,
            "too_large",
            f"body too large ({what}); the limit is {self._max_body_bytes} bytes: "
            "send smaller batches or raise --max-body-bytes",
        )


#: A batch handed to the store: its receipt once committed.
Queued = Future[IngestReceipt]


def _withdrawn(queued: Queued) -> bool:
    """For a request shutdown cancelled: True when its batch was still queued and is now
    withdrawn (never stored; the cancellation ends the request), False when its commit has
    begun, so the request's cancellation is undone and it waits to answer truthfully."""
    if queued.cancel():
        return True
    task = asyncio.current_task()
    if task is not None:
        task.uncancel()
    return False


def _done(receipt: IngestReceipt) -> Queued:
    future: Queued = Future()
    future.set_result(receipt)
    return future


def _failed(exc: SitsError) -> Queued:
    future: Queued = Future()
    future.set_exception(exc)
    return future
