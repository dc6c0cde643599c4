"""Bounded HTTP reads for scraping collectors.

Every scrape has a timeout and a size limit, and every failure (refused connection,
timeout, HTTP error status, oversized body) becomes a :class:`CollectorError` that names the
URL and the cause. Clients are injected so tests can pass a transport and the agent can reuse
one connection pool.

The timeout bounds the whole scrape, as Prometheus' ``scrape_timeout`` does: httpx's own
timeouts apply to each connect / read, so a server that drips a byte just inside each read
timeout would otherwise hold the scrape forever. :func:`fetch_text` therefore also checks a
deadline (the client's read timeout unless given) between chunks.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from sits_observe.errors import CollectorError

DEFAULT_MAX_BYTES = 64 * 1024 * 1024
DEFAULT_TIMEOUT_S = 5.0


def new_client(timeout_s: float = DEFAULT_TIMEOUT_S) -> httpx.Client:
    """An HTTP client with the scrape timeout applied to connect, read and write."""
    return httpx.Client(timeout=httpx.Timeout(timeout_s), follow_redirects=True)


def _too_big(url: str, max_bytes: int) -> CollectorError:
    return CollectorError(
        f"GET {url} body exceeds {max_bytes} bytes; raise the limit or reduce the exporter's "
        "counters"
    )


def fetch_text(
    client: httpx.Client,
    url: str,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    deadline_s: float | None = None,
) -> str:
    """GET ``url`` and return its body as text; raises :class:`CollectorError` on failure.

    ``deadline_s`` bounds the whole request (default: the client's read timeout; None there
    too means no overall bound).
    """
    budget_s = deadline_s if deadline_s is not None else client.timeout.read
    started = time.monotonic()
    try:
        with client.stream("GET", url) as response:
            if response.status_code != 200:
                raise CollectorError(f"GET {url} answered HTTP {response.status_code}")
            declared = response.headers.get("content-length", "")
            if declared.isdecimal() and int(declared) > max_bytes:
                raise _too_big(url, max_bytes)
            chunks: list[bytes] = []
            size = 0
            for chunk in response.iter_bytes():
                size += len(chunk)
                if size > max_bytes:
                    raise _too_big(url, max_bytes)
                chunks.append(chunk)
                if budget_s is not None and time.monotonic() - started > budget_s:
                    raise CollectorError(
                        f"GET {url} took longer than {budget_s:g} s in all; the endpoint is "
                        "too slow (raise the timeout or check the exporter)"
                    )
    except httpx.TimeoutException as exc:
        raise CollectorError(f"GET {url} timed out ({exc.__class__.__name__})") from exc
    except httpx.HTTPError as exc:
        raise CollectorError(f"GET {url} failed: {exc}") from exc
    return b"".join(chunks).decode("utf-8", errors="replace")


def read_source(
    source: str, client: httpx.Client | None = None, *, max_bytes: int = DEFAULT_MAX_BYTES
) -> str:
    """Read ``source``: an ``http(s)://`` URL or a file path."""
    if source.startswith(("http://", "https://")):
        if client is None:
            with new_client() as own:
                return fetch_text(own, source, max_bytes=max_bytes)
        return fetch_text(client, source, max_bytes=max_bytes)
    path = Path(source)
    try:
        if path.stat().st_size > max_bytes:
            raise CollectorError(f"{source} is larger than {max_bytes} bytes")
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise CollectorError(f"cannot read {source}: {exc.strerror or exc}") from exc
