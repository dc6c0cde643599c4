"""The service's JSON answers, always strict RFC 8259 (a non-finite float is ``null``).

Starlette's ``JSONResponse`` refuses NaN (``allow_nan=False``) by raising while the answer is
rendered, which turns an error body or a row with a NaN into a 500; a plain ``json.dumps``
writes ``NaN``, which strict clients reject. :class:`StrictJSONResponse` writes ``null``
instead (:mod:`sits_observe.domain.strict_json`).

:class:`Refusal` is the one error shape, ``{"detail": ..., "reason": ...}``, of every answer
that is not a success (docs/api.md, "Errors").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from starlette.responses import JSONResponse
from starlette.types import Receive, Scope, Send

from sits_observe.domain.strict_json import dumps


class StrictJSONResponse(JSONResponse):
    """A JSON answer whose non-finite floats are written as ``null``."""

    def render(self, content: Any) -> bytes:
        """Compact UTF-8 JSON of ``content``."""
        return dumps(content, separators=(",", ":")).encode("utf-8")


@dataclass(frozen=True)
class Refusal:
    """Why a request is refused; becomes a JSON body ``{"detail": ..., "reason": ...}``."""

    status: int
    reason: str
    detail: str
    headers: dict[str, str] = field(default_factory=dict)

    def response(self) -> JSONResponse:
        """The HTTP answer."""
        body = {"detail": self.detail, "reason": self.reason}
        return StrictJSONResponse(body, self.status, headers=self.headers or None)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer with :meth:`response` (a refusal is an ASGI app)."""
        await self.response()(scope, receive, send)


def problem(status: int, reason: str, detail: str) -> JSONResponse:
    """A JSON error answer (for routes that do not count refusals)."""
    return Refusal(status, reason, detail).response()
