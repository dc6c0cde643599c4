"""The service's JSON answers, always strict RFC 8259 (a non-finite float is ``null``).

Starlette's ``JSONResponse`` refuses NaN (``allow_nan=False``) by raising while the answer is
rendered, which turns an error body or a row with a NaN into a 500; a plain ``json.dumps``
writes ``NaN``, which strict clients reject. :class:`StrictJSONResponse` writes ``null``
instead (:mod:`sits_observe.domain.strict_json`).
"""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse

from sits_observe.domain.strict_json import dumps


class StrictJSONResponse(JSONResponse):
    """A JSON answer whose non-finite floats are written as ``null``."""

    def render(self, content: Any) -> bytes:
        """Compact UTF-8 JSON of ``content``."""
        return dumps(content, separators=(",", ":")).encode("utf-8")
