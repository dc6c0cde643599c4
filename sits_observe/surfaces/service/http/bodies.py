"""Request bodies read within a limit: the declared length checked before a byte is read, the
stream abandoned as soon as it passes the limit."""

from __future__ import annotations

from collections.abc import Callable

from starlette.requests import Request

from sits_observe.surfaces.service.http.json_answers import Refusal


def check_length(
    request: Request,
    max_bytes: int,
    too_large: Callable[[str], Refusal],
    *,
    bad_status: int,
) -> Refusal | None:
    """A refusal when the declared Content-Length is not a number or exceeds ``max_bytes``."""
    declared = request.headers.get("content-length")
    if declared is None:
        return None
    if not declared.isdigit():
        return Refusal(bad_status, "bad_header", f"Content-Length {declared!r} is not a number")
    if int(declared) > max_bytes:
        return too_large(f"Content-Length {declared}")
    return None


async def read_limited(
    request: Request, max_bytes: int, too_large: Callable[[str], Refusal]
) -> bytes | Refusal:
    """The whole body, or a refusal as soon as more than ``max_bytes`` have streamed (the
    Content-Length header may lie or be absent; the rest of the body is never buffered)."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            return too_large(f"more than {max_bytes} bytes streamed")
        chunks.append(chunk)
    return b"".join(chunks)
