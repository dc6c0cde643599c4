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
ledger): that is a conflict (409), never a silent drop. Before storing, rows are checked
against the domain's range rules (:mod:`.ingest_rows`): bad rows are dropped, bad optional
values NULLed, and both reported.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

import pyarrow as pa
from starlette.concurrency import run_in_threadpool
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
from sits_observe.errors import BatchConflict, InputTooLarge, ParseError, SchemaError, StoreError
from sits_observe.store import BatchReceipt, GroupCommitter, Store
from sits_observe.surfaces.service.http.bodies import check_length, read_limited
from sits_observe.surfaces.service.http.json_answers import Refusal, StrictJSONResponse, problem
from sits_observe.surfaces.service.ingest_rows import (
    RowDropMetrics,
    Screened,
    screen_batch,
    with_drop_rows,
)
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
        now = self._clock()
        # One worker-thread hop for the body's CPU work (decode, digest, range rules): the
        # event loop stays free to read other agents' bodies meanwhile.
        opened = await run_in_threadpool(self._open, body, now)
        if isinstance(opened, Refusal):
            return self._refused(opened)
        screened, digest = opened
        stored = with_drop_rows(screened, at=now, node=node)
        mismatch = self._auth.check_rows(request, stored)  # a node token: its own rows only
        if mismatch is not None:
            return self._refused(mismatch)
        try:
            receipt = await self._append(stored, batch_id, node, digest)
        except BatchConflict as exc:
            return self._refused(Refusal(409, "conflict", str(exc)))
        except SchemaError as exc:
            return self._refused(Refusal(400, "schema", str(exc)))
        except StoreError as exc:
            log.error("batch %s from %s not stored: %s", batch_id, node, exc)
            self._metrics.batches.labels("failed").inc()
            return problem(503, "store", f"batch not stored, send it again later: {exc}")
        dropped: dict[str, int] = {}
        if receipt.duplicate:
            self._metrics.batches.labels("duplicate").inc()
        else:
            self._metrics.batches.labels("stored").inc()
            for name, table in stored.items():
                self._metrics.rows.labels(name).inc(table.num_rows)
            self._drops.count(screened.dropped)
            dropped = dict(sorted(screened.dropped.items()))
        note({"sits.ingest.rows": receipt.rows, "sits.ingest.duplicate": receipt.duplicate})
        answer = {"batch_id": batch_id, "rows": receipt.rows, "duplicate": receipt.duplicate}
        return StrictJSONResponse({**answer, "dropped": dropped})

    def _open(self, body: bytes, now: datetime) -> tuple[Screened, str] | Refusal:
        """The body decoded and screened by the range rules, with its SHA-256 (hex), or why
        it is refused (413: over a decode limit, read from the headers before decoding; 400:
        undecodable, a table agents may not send, a schema misfit)."""
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
        try:
            screened = screen_batch(tables, now=now, max_future_skew_s=self._max_future_skew_s)
        except SchemaError as exc:
            return Refusal(400, "schema", str(exc))
        return screened, hashlib.sha256(body).hexdigest()

    async def _append(
        self, tables: dict[str, pa.Table], batch_id: str, node: str | None, digest: str
    ) -> BatchReceipt:
        """Store the batch: through the group committer (awaited on the event loop, no
        worker thread held while the commit runs), or in a transaction of its own.

        A request cancelled meanwhile (uvicorn cancels what still runs once the shutdown
        grace is over) is answered truthfully: a batch still queued is withdrawn and the
        request ends with 503 ``shutting_down`` (:mod:`.unhandled`); one whose commit has
        begun cannot be withdrawn, so the answer waits for it, and a committed batch is
        never answered with an error."""
        queued = None
        if self._writer is not None:
            queued = self._writer.submit(tables, batch_id=batch_id, node=node, body_sha256=digest)
            waiting: asyncio.Future[BatchReceipt] = asyncio.wrap_future(queued)
        else:
            waiting = asyncio.ensure_future(
                run_in_threadpool(
                    lambda: self._store.append_batch(
                        tables, batch_id=batch_id, node=node, body_sha256=digest
                    )
                )
            )
        try:
            return await asyncio.shield(waiting)
        except asyncio.CancelledError:
            if queued is not None and queued.cancel():
                raise  # withdrawn before its commit began: never stored
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
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
