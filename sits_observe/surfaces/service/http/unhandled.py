"""Every answer in the one JSON error shape, unhandled errors and shutdown included.

Refusals are :class:`~.ingest.Refusal` bodies, ``{"detail": ..., "reason": ...}``. Three kinds
of answer used to escape that shape as ``text/plain``, and this module closes each:

- an exception a route did not handle: Starlette's error middleware answers with the handler
  :func:`internal_error` (500 ``internal``, the exception's type named, the traceback in the
  log only); :func:`add_error_handler` installs it on an app;
- a request cancelled while it runs (uvicorn cancels what is still running once the
  shutdown grace is over) or an app that raised past Starlette: :class:`JsonErrors`, the
  outermost layer of every port, answers 503 ``shutting_down`` or 500 ``internal`` when no
  answer has started, and logs the error once;
- answers the HTTP protocol sends itself (a malformed request, a header timeout, the
  connection cap): :func:`raw_answer` writes them as JSON too (:mod:`.server`).
"""

from __future__ import annotations

import asyncio
import logging

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sits_observe.domain.strict_json import dumps
from sits_observe.surfaces.service.http.json_answers import Refusal

log = logging.getLogger(__name__)

INTERNAL = "internal"
SHUTTING_DOWN = "shutting_down"


def internal_refusal(exc: BaseException) -> Refusal:
    """The 500 answer for an error nobody handled (its type named, never its message, which
    may hold paths or values of the store)."""
    return Refusal(
        500,
        INTERNAL,
        f"internal error ({type(exc).__name__}); the service's log has the details",
    )


def shutting_down() -> Refusal:
    """The answer for a request cut off by the shutdown before it was answered."""
    return Refusal(
        503,
        SHUTTING_DOWN,
        "the service shut down before this request was answered; send it again (a batch "
        "already stored is then acknowledged as a duplicate)",
        {"Retry-After": "1", "Connection": "close"},
    )


async def internal_error(request: Request, exc: Exception) -> Response:
    """Starlette's handler for an unhandled exception (its traceback is logged by the
    server's :class:`JsonErrors`, which sees it re-raised)."""
    return internal_refusal(exc).response()


def add_error_handler(app: Starlette) -> None:
    """Answer unhandled exceptions of ``app`` with :func:`internal_error`."""
    app.add_exception_handler(Exception, internal_error)


class JsonErrors:
    """The outermost layer of a port: whatever escapes the app becomes one JSON answer (when
    none has started) and one log line with its traceback, never uvicorn's text/plain 500."""

    def __init__(self, app: ASGIApp) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        what = f"{scope.get('method')} {scope.get('path')}"
        try:
            await self._app(scope, receive, tracked)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()  # the answer below is still sent
            log.warning("%s: cancelled by the shutdown before it was answered", what)
            refusal = shutting_down()
        except Exception as exc:
            log.exception("%s: unhandled error", what)
            refusal = internal_refusal(exc)
        else:
            if started:
                return
            log.error("%s: the app returned without an answer", what)
            refusal = Refusal(500, INTERNAL, "the service returned no answer; send it again")
        if not started:
            await refusal.response()(scope, receive, send)


def raw_answer(
    status: int, phrase: str, reason: str, detail: str, headers: dict[str, str] | None = None
) -> bytes:
    """A complete HTTP/1.1 answer in the JSON error shape, for the protocol layer to write
    before (or instead of) an app; it closes the connection."""
    body = dumps({"detail": detail, "reason": reason}, separators=(",", ":")).encode()
    lines = [
        f"HTTP/1.1 {status} {phrase}",
        "content-type: application/json",
        "connection: close",
        *(f"{k.lower()}: {v}" for k, v in (headers or {}).items()),
        f"content-length: {len(body)}",
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("ascii") + body
