"""What one client may hold of the service: time to send a request, requests in flight.

uvicorn bounds neither the time a client takes to send its headers or body nor the number of
requests in progress (``limit_concurrency`` counts idle keep-alive connections too and answers
only once the headers are in), so a few hundred clients trickling bytes used to hold the
service's memory and connections for as long as they liked. The limits live in two places:

- the HTTP protocol (:mod:`.server`): the header timeout, the connection cap, and closing
  connections that trickle a body nobody reads;
- this ASGI middleware, inside the app: the body timeout for handlers that read the body
  (408 with ``Connection: close``), the cap on requests in flight, and a client that closes
  the connection mid-body becomes one warning line, not a traceback.

A request over the in-flight cap waits for a slot, in arrival order, for up to
``queue_timeout_s`` (its body is not read meanwhile: uvicorn stops reading the socket once
64 KiB of it are buffered, so it holds that and one socket read, at most 256 KiB: about
320 KiB), and only then, or when ``max_queued_requests`` already wait, gets
503 ``busy`` with ``Retry-After``. Refusing at once made a saturated service slower: each
refused batch came back after its back-off and cost a connection, its headers and a refusal
again, several times over. At 1,000 agents shipping 30 ticks a batch (bench_service_ingest,
120 s each, docs/benchmarks.md) acknowledgement p99 was 60 s with 12,264 retries when
refused at once, 60 s with 8,145 retries after a 2 s wait, and 3.1 s with no retry after a
4 s wait (the default: under the agent's 5 s timeout). Probes and ``/metrics`` are exempt
from the cap, so a saturated service is neither killed as dead nor blind.

Each client, a (bearer token, ``X-Sits-Node``) pair, holds at most
``max_requests_per_client`` of the slots (and as many waiting), so one token or node trickling
slow bodies cannot hold every slot for the body timeout while every other node gets 503: past
its share it waits for one of its own slots and then gets 503 ``client_busy``. An agent has
one batch in flight; requests without a token or node share one key.

Everything dropped is counted in ``sits_http_dropped_total{reason}`` (docs/api.md, "Limits").
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections import deque
from collections.abc import Callable

from pydantic import BaseModel, ConfigDict, Field
from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sits_observe.surfaces.service.http.json_answers import Refusal
from sits_observe.surfaces.service.http.unhandled import add_error_handler
from sits_observe.surfaces.service.metrics import ServiceMetrics, TimingMiddleware

log = logging.getLogger(__name__)

#: Paths never refused as busy: liveness and readiness must answer under load, and a
#: saturated service is exactly when its metrics matter (the exporter caches its passes).
#: ``/scheduler/readyz``: the extender's readiness (its startupProbe), on either port.
EXEMPT_PATHS = frozenset({"/healthz", "/readyz", "/metrics", "/scheduler/readyz"})

#: Counts one dropped request or connection by reason.
OnDrop = Callable[[str], None]


class HttpLimits(BaseModel):
    """Time and concurrency limits of one listening port."""

    model_config = ConfigDict(frozen=True)

    header_timeout_s: float = Field(
        10.0,
        gt=0,
        le=600,
        description="seconds a client has to send the request line and headers (from "
        "connecting, or from the first byte of a kept-alive connection's next request); "
        "then 408 and the connection is closed",
    )
    body_timeout_s: float = Field(
        60.0,
        gt=0,
        le=3600,
        description="seconds a client has to send the whole request body once its headers "
        "are in; then 408 and the connection is closed",
    )
    keep_alive_s: int = Field(
        5, ge=1, le=600, description="seconds an idle kept-alive connection stays open"
    )
    max_connections: int = Field(
        1024,
        ge=1,
        le=100_000,
        description="open connections at most; one more is answered 503 and closed at once",
    )
    max_concurrent_requests: int = Field(
        64,
        ge=1,
        le=100_000,
        description="requests in progress at most (/healthz, /readyz and /metrics excepted); "
        "more wait for a slot (--queue-timeout-s), then get 503 'busy' with Retry-After: 1",
    )
    queue_timeout_s: float = Field(
        4.0,
        ge=0,
        le=600,
        description="seconds a request over --max-concurrent-requests waits for a slot, in "
        "arrival order, before 503 'busy' (0: refused at once); keep it under the clients' "
        "timeout (the agent's --ship-timeout-s, 5)",
    )
    max_requests_per_client: int = Field(
        8,
        ge=1,
        le=100_000,
        description="requests in progress at most for one client, a (bearer token, "
        "X-Sits-Node) pair; more wait for one of its slots (--queue-timeout-s), then get 503 "
        "'client_busy', so one token or node cannot hold every slot",
    )
    max_queued_requests: int = Field(
        256,
        ge=0,
        le=100_000,
        description="requests waiting for a slot at most; one more gets 503 'busy' at once "
        "(each holds up to about 320 KiB of its body until it runs)",
    )


class BodyTimeout(Exception):
    """The client did not finish its body in time (raised from ``receive``)."""


class LimitsMiddleware:
    """Body deadline, in-flight cap and quiet client disconnects for one app."""

    def __init__(self, app: ASGIApp, limits: HttpLimits, on_drop: OnDrop) -> None:
        self._app = app
        self._limits = limits
        self._on_drop = on_drop
        self._slots = Slots(limits.max_concurrent_requests, limits.max_queued_requests)
        #: Each client's share of the slots, while it has requests in progress or waiting.
        self._clients: dict[bytes, Slots] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        path = str(scope.get("path", ""))
        if path in EXEMPT_PATHS:
            await self._run(scope, receive, send, path)
            return
        limits = self._limits
        loop = asyncio.get_running_loop()
        deadline = loop.time() + limits.queue_timeout_s
        key = client_key(scope)
        share = self._clients.get(key)
        if share is None:
            share = self._clients[key] = Slots(
                limits.max_requests_per_client, limits.max_requests_per_client
            )
        try:
            if not await share.acquire(limits.queue_timeout_s):
                self._on_drop("client_busy")
                await _refuse(scope, receive, send, _client_busy(limits.max_requests_per_client))
                return
            try:
                if not await self._slots.acquire(deadline - loop.time()):
                    self._on_drop("busy")
                    await _refuse(scope, receive, send, _busy(limits.max_concurrent_requests))
                    return
                try:
                    await self._run(scope, receive, send, path)
                finally:
                    self._slots.release()
            finally:
                share.release()
        finally:
            if share.idle:
                self._clients.pop(key, None)

    async def _run(self, scope: Scope, receive: Receive, send: Send, path: str) -> None:
        started = False

        async def note_start(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self._app(scope, _deadline(receive, self._limits.body_timeout_s), note_start)
        except BodyTimeout:
            self._on_drop("body_timeout")
            log.warning(
                "%s %s from %s: body not received within %g s; answered 408",
                scope.get("method"),
                path,
                _client(scope),
                self._limits.body_timeout_s,
            )
            if not started:
                refusal = Refusal(
                    408,
                    "body_timeout",
                    f"the request body did not arrive within {self._limits.body_timeout_s:g} s",
                    {"Connection": "close"},
                )
                await refusal.response()(scope, receive, send)
        except ClientDisconnect:
            self._on_drop("client_disconnect")
            log.warning(
                "%s %s from %s: the client closed the connection before the body ended",
                scope.get("method"),
                path,
                _client(scope),
            )


class Slots:
    """At most ``limit`` holders; up to ``max_waiting`` more wait, first come first served.

    A freed slot is handed to the oldest waiter directly, so a request that arrives as one
    finishes cannot overtake those already waiting. Runs on one event loop (no locks).
    """

    def __init__(self, limit: int, max_waiting: int) -> None:
        self._limit = limit
        self._free = limit
        self._max_waiting = max_waiting
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def waiting(self) -> int:
        return sum(not f.done() for f in self._waiters)

    @property
    def idle(self) -> bool:
        """No holder and nobody waiting."""
        return self._free == self._limit and self.waiting == 0

    async def acquire(self, timeout_s: float) -> bool:
        """Take a slot, waiting up to ``timeout_s``; False when none came (or the queue is
        full). A caller that gets True must :meth:`release` once."""
        if self._free > 0 and not self._waiters:
            self._free -= 1
            return True
        if timeout_s <= 0 or self.waiting >= self._max_waiting:
            return False
        handed = asyncio.get_running_loop().create_future()
        self._waiters.append(handed)
        try:
            async with asyncio.timeout(timeout_s):
                await handed
        except TimeoutError:
            pass
        except BaseException:  # cancelled (the client left): give back a slot handed over
            if _holds(handed):
                self.release()
            raise
        finally:
            handed.cancel()  # no-op once handed; otherwise release() skips it
        # A slot handed over just as the timeout fired is still this caller's.
        return _holds(handed)

    def release(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self._free += 1


def _holds(handed: asyncio.Future[None]) -> bool:
    return handed.done() and not handed.cancelled()


def _deadline(receive: Receive, timeout_s: float) -> Receive:
    """``receive`` that raises :class:`BodyTimeout` when the body is not complete within
    ``timeout_s`` of the request's start (a total, so a byte every few seconds does not
    keep a request alive); once the body is complete it waits without a limit (for a
    disconnect)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    done = False

    async def bounded() -> Message:
        nonlocal done
        if done:
            return await receive()
        remaining = deadline - loop.time()
        if remaining <= 0:
            raise BodyTimeout
        try:
            async with asyncio.timeout(remaining):
                message = await receive()
        except TimeoutError:
            raise BodyTimeout from None
        done = message["type"] != "http.request" or not message.get("more_body", False)
        return message

    return bounded


def client_key(scope: Scope) -> bytes:
    """Who a request counts against: its bearer token and ``X-Sits-Node`` header, digested
    (a token is never kept); requests without either share one key."""
    headers = Headers(scope=scope)
    who = f"{headers.get('authorization', '')}\0{headers.get('x-sits-node', '')}"
    return hashlib.sha256(who.encode("latin-1", "replace")).digest()


def _client_busy(limit: int) -> Refusal:
    return Refusal(
        503,
        "client_busy",
        f"this client (bearer token and X-Sits-Node) has {limit} requests in progress, its "
        "share of this port; retry once one is answered",
        {"Retry-After": "1", "Connection": "close"},
    )


def _busy(limit: int) -> Refusal:
    return Refusal(
        503,
        "busy",
        f"{limit} requests are in progress, the most this port takes; retry shortly",
        {"Retry-After": "1", "Connection": "close"},
    )


async def _refuse(scope: Scope, receive: Receive, send: Send, refusal: Refusal) -> None:
    await refusal.response()(scope, receive, send)


def _client(scope: Scope) -> str:
    client = scope.get("client")
    return f"{client[0]}:{client[1]}" if client else "an unknown client"


def add_limits(app: Starlette, metrics: ServiceMetrics, limits: HttpLimits) -> None:
    """The limits middleware on ``app``, drops counted in ``sits_http_dropped_total``, the
    timing middleware outside everything, and JSON answers for unhandled errors."""

    def dropped(reason: str) -> None:
        metrics.dropped.labels(reason).inc()

    add_error_handler(app)
    app.add_middleware(LimitsMiddleware, limits=limits, on_drop=dropped)
    app.add_middleware(TimingMiddleware, metrics=metrics)
