"""The HTTP servers of ``serve``: sockets bound first, protocol-level limits, one shutdown.

- the sockets come from :func:`.sockets.bind`, opened before anything else exists, so a
  port in use is a one-line error and leaves no database file behind.
- :func:`guarded_protocol` is uvicorn's httptools protocol (llhttp, in C: 0.43 ms of the
  server's CPU per 335 KB agent body where uvicorn's pure-Python h11 protocol took 0.75) with
  what uvicorn lacks: a header timeout (uvicorn waits for headers forever), a cap on the
  request line and headers (httptools has none; h11 had 16 KiB), a cap on open connections
  (answered 503 and closed before a byte is read), and a body timeout for bodies nobody
  reads (a client that keeps trickling the body of an already answered request is closed).
  What it answers itself (those, and a request it cannot parse) is JSON like every other
  refusal; each app runs inside :class:`~.unhandled.JsonErrors`, so an error or a cancelled
  request is too. This protocol is used whatever ``uvicorn.Config(http=...)`` would pick, so
  the limits hold everywhere; the ASGI half of the limits is :mod:`.limits`.
- :class:`Servers` runs one uvicorn server per listener (the API, and the scheduler extender
  on its own port) in one event loop, and on SIGTERM / SIGINT stops them together:
  in-flight requests get ``shutdown_grace_s``, then the apps' lifespans stop their background
  work (docs/api.md: the process exits within 10 s whatever is running).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from types import FrameType
from typing import Any

import uvicorn
from starlette.types import ASGIApp
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from sits_observe.surfaces.service.http.limits import HttpLimits, OnDrop
from sits_observe.surfaces.service.http.unhandled import JsonErrors, raw_answer
from sits_observe.surfaces.service.metrics import ServiceMetrics

log = logging.getLogger(__name__)

_RAW_408 = raw_answer(
    408, "Request Timeout", "header_timeout", "request headers not received in time"
)
#: Bytes of a request line and headers at most (h11's default, which uvicorn's h11 protocol
#: kept): httptools buffers a header without a limit of its own.
MAX_HEAD_BYTES = 16 * 1024

_RAW_431 = raw_answer(
    431,
    "Request Header Fields Too Large",
    "header_too_large",
    f"request line and headers over {MAX_HEAD_BYTES} bytes; send them shorter",
)
_RAW_503 = raw_answer(
    503,
    "Service Unavailable",
    "connection_limit",
    "too many open connections; retry shortly",
    {"Retry-After": "1"},
)
#: How often a body timer re-checks while the app is still answering the request.
_RECHECK_S = 1.0


# Where the parser is in the current request (set from httptools' callbacks).
_IDLE, _HEAD, _BODY, _DONE = range(4)


def guarded_protocol(limits: HttpLimits, on_drop: OnDrop) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol class with the header timeout, head size cap, connection
    cap and unread-body timeout of ``limits``; drops are reported to ``on_drop(reason)``."""

    class GuardedHttpToolsProtocol(HttpToolsProtocol):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._header_timer: asyncio.TimerHandle | None = None
            self._body_timer: asyncio.TimerHandle | None = None
            self._reading = _IDLE
            self._head_bytes = 0

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            full = len(self.connections) >= limits.max_connections
            super().connection_made(transport)
            if full:
                on_drop("connection_limit")
                transport.write(_RAW_503)
                transport.close()
                return
            self._arm_header_timer()

        def data_received(self, data: bytes) -> None:
            # A request's head is counted over the reads that began inside it (or between
            # requests): a read that ends a body and begins the next head is not counted,
            # so the count may fall short by one read, never run without bound.
            counted = self._reading != _BODY
            super().data_received(data)
            if self.transport.is_closing():
                return
            if self._reading == _HEAD and counted:
                self._head_bytes += len(data)
                if self._head_bytes > MAX_HEAD_BYTES:
                    self._refuse_head()
                    return
            if self._reading == _BODY and self._body_timer is None:
                self._body_timer = self.loop.call_later(limits.body_timeout_s, self._body_timeout)

        # httptools' callbacks (uvicorn's, plus where the request stands)
        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._reading = _HEAD
            self._head_bytes = 0
            if self._header_timer is None:  # the next request on a kept-alive connection
                self._arm_header_timer()

        def on_headers_complete(self) -> None:
            self._cancel_header_timer()
            self._reading = _BODY
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            self._reading = _DONE
            self._cancel_body_timer()
            super().on_message_complete()

        def send_400_response(self, msg: str) -> None:
            """A request httptools cannot parse: the JSON error shape, then close."""
            on_drop("bad_request")
            self.transport.write(raw_answer(400, "Bad Request", "bad_request", msg))
            self.transport.close()

        def connection_lost(self, exc: Exception | None) -> None:
            self._cancel_header_timer()
            self._cancel_body_timer()
            super().connection_lost(exc)

        def _refuse_head(self) -> None:
            on_drop("header_too_large")
            log.warning(
                "%s: request line and headers over %d bytes; connection closed",
                _peer(self.client),
                MAX_HEAD_BYTES,
            )
            self.transport.write(_RAW_431)
            self.transport.close()

        def _arm_header_timer(self) -> None:
            self._cancel_header_timer()
            self._header_timer = self.loop.call_later(limits.header_timeout_s, self._header_timeout)

        def _cancel_header_timer(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _cancel_body_timer(self) -> None:
            if self._body_timer is not None:
                self._body_timer.cancel()
                self._body_timer = None

        def _header_timeout(self) -> None:
            self._header_timer = None
            if self.transport.is_closing() or self._reading not in (_IDLE, _HEAD):
                return
            on_drop("header_timeout")
            log.warning(
                "%s: request headers not received within %g s; connection closed",
                _peer(self.client),
                limits.header_timeout_s,
            )
            self.transport.write(_RAW_408)
            self.transport.close()

        def _body_timeout(self) -> None:
            self._body_timer = None
            if self.transport.is_closing() or self._reading != _BODY:
                return
            cycle = self.cycle
            if cycle is not None and not cycle.response_complete:
                # The app still answers: it reads the body under its own deadline
                # (limits.LimitsMiddleware) or answers without it; look again soon.
                self._body_timer = self.loop.call_later(_RECHECK_S, self._body_timeout)
                return
            on_drop("body_timeout")
            log.warning(
                "%s: request body not received within %g s; connection closed",
                _peer(self.client),
                limits.body_timeout_s,
            )
            self.transport.close()

    return GuardedHttpToolsProtocol


@dataclass(frozen=True)
class Listener:
    """One app on one bound socket, with that port's limits; drops at the protocol level
    are counted in ``metrics``' ``sits_http_dropped_total``."""

    app: ASGIApp
    sock: socket.socket
    limits: HttpLimits
    name: str
    metrics: ServiceMetrics

    @property
    def url(self) -> str:
        host, port = self.sock.getsockname()[:2]
        return f"http://{host}:{port}"


class _Server(uvicorn.Server):
    """A uvicorn server that leaves signal handling to :class:`Servers`."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class Servers:
    """Serves every listener until SIGTERM / SIGINT, then stops them all."""

    def __init__(
        self,
        listeners: list[Listener],
        *,
        log_level: str = "info",
        shutdown_grace_s: int = 5,
    ) -> None:
        self._listeners = listeners
        self._servers: list[_Server] = []
        for listener in listeners:
            config = uvicorn.Config(
                JsonErrors(listener.app),
                http=guarded_protocol(listener.limits, _drop_counter(listener.metrics)),
                # No route is a WebSocket; "auto" would import the websockets package at start.
                ws="none",
                log_level=log_level.lower(),
                access_log=log_level.lower() == "debug",
                timeout_keep_alive=listener.limits.keep_alive_s,
                timeout_graceful_shutdown=shutdown_grace_s,
                lifespan="on",
            )
            self._servers.append(_Server(config))

    def stop(self) -> None:
        """Ask every server to stop (what SIGTERM does)."""
        for server in self._servers:
            server.should_exit = True

    def run(self) -> None:
        """Serve until :meth:`stop` or a signal; returns once every server has shut down."""
        previous = {}
        if threading.current_thread() is threading.main_thread():
            previous = {
                s: signal.signal(s, self._on_signal) for s in (signal.SIGTERM, signal.SIGINT)
            }
        try:
            asyncio.run(self._serve())
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    def _on_signal(self, signum: int, _: FrameType | None) -> None:
        log.info("%s received: shutting down", signal.Signals(signum).name)
        if any(s.should_exit for s in self._servers) and signum == signal.SIGINT:
            for server in self._servers:  # a second Ctrl-C: do not wait for requests
                server.force_exit = True
        self.stop()

    async def _serve(self) -> None:
        for listener in self._listeners:
            log.info("serving %s on %s", listener.name, listener.url)
        await asyncio.gather(
            *(
                s.serve(sockets=[lst.sock])
                for s, lst in zip(self._servers, self._listeners, strict=True)
            )
        )


def _drop_counter(metrics: ServiceMetrics) -> OnDrop:
    """Counts drops in ``sits_http_dropped_total``."""

    def count(reason: str) -> None:
        metrics.dropped.labels(reason).inc()

    return count


def _peer(client: tuple[str, int] | None) -> str:
    return f"{client[0]}:{client[1]}" if client else "a client"
