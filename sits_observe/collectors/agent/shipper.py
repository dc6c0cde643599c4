"""Ship one batch to the central service over HTTP and classify what happened.

The shipper never raises for a failed delivery: it returns a :class:`ShipResult` whose
:class:`ShipOutcome` tells the agent loop what to do with the batch:

- ``ACKED`` / ``DUPLICATE``: the service committed it (now or earlier); forget it.
- ``REJECTED``: the service answered 4xx (other than 401, 403, 408 and 429): the batch itself
  is bad and sending it again cannot help. The loop moves it to the dead-letter directory.
- ``UNAVAILABLE``: no answer, a timeout, 5xx, 408, 429, 401 or 403. The batch is fine but the
  service cannot take it now; the loop spools it and replays it later. 401/403 belong here
  because a wrong token is fixed by the operator, after which the spooled batches must still
  arrive (they are logged loudly, not dropped).

Retries (for UNAVAILABLE only) back off exponentially with jitter and wait on the stop
event, so a shutdown during a back-off is immediate (:func:`retry_delay_s`). A batch id makes
every retry idempotent: the service stores a batch id at most once.

The service URL is checked once, when the shipper is built (:func:`service_url`): a URL
httpx cannot send to would otherwise look like an outage, and the agent would spool every
batch until its spool overflowed.
"""

from __future__ import annotations

import ipaddress
import logging
import random
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from urllib.parse import urlsplit

import httpx

from sits_observe.collectors.agent.wire import (
    CONTENT_TYPE,
    HEADER_BATCH_ID,
    HEADER_NODE,
    INGEST_PATH,
)
from sits_observe.errors import ConfigError

log = logging.getLogger(__name__)

#: 4xx answers that say "not now" rather than "never": request timeout, too many requests,
#: and authentication (an operator fixes the token; the data is still good).
_RETRYABLE_4XX = frozenset({401, 403, 408, 429})

#: A DNS name: dot-separated labels of letters, digits and inner hyphens (RFC 1123).
_HOSTNAME = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)(\.(?!-)[A-Za-z0-9-]{1,63}(?<!-))*\.?\Z")
_URL_SHAPE = "http(s)://HOST:PORT/PATH, e.g. http://sits-observe:8080"


def retry_delay_s(
    attempt: int,
    backoff_s: float,
    backoff_max_s: float,
    retry_after_s: float | None = None,
    draw: Callable[[], float] = random.random,
) -> float:
    """Seconds to wait after failed attempt ``attempt`` (1 = the first): ``backoff_s``
    doubling per attempt up to ``backoff_max_s``, of which a random half to all is waited
    ("equal jitter": agents refused at the same moment do not all come back at the same
    moment), and never less than the service's ``Retry-After`` (itself at most
    ``backoff_max_s``). ``draw`` returns a number in [0, 1)."""
    full = min(backoff_s * 2.0 ** (attempt - 1), backoff_max_s)
    delay = full / 2 + draw() * full / 2
    if retry_after_s is not None:
        delay = max(delay, min(retry_after_s, backoff_max_s))
    return delay


def retry_after_s(value: str | None) -> float | None:
    """A ``Retry-After`` header's value in seconds (the delta-seconds form; a date, or no
    header, is None)."""
    text = (value or "").strip()
    return float(text) if text.isdigit() else None


def service_url(text: str) -> str:
    """``text`` checked as the service's base URL, without a trailing slash.

    Allowed: scheme ``http`` or ``https``, a host (DNS name, IPv4 or bracketed IPv6), an
    optional port and path prefix. Refused, with the reason: whitespace, any other scheme, no
    host, a bad port, a query or fragment (the shipper appends the ingest path), and
    credentials (the token travels in the ``Authorization`` header, never in a URL that ends
    up in logs). Raises :class:`ConfigError`.
    """
    problem = _url_problem(text)
    if problem is not None:
        raise ConfigError(f"--service {text!r} is not a service URL: {problem}; use {_URL_SHAPE}")
    return text.rstrip("/")


def _url_problem(text: str) -> str | None:
    if not text or any(c.isspace() for c in text):
        return "it is empty or contains whitespace"
    parts = urlsplit(text)
    if parts.scheme.lower() not in ("http", "https"):
        return f"the scheme must be http or https, not {parts.scheme or 'missing'!r}"
    if parts.username is not None or parts.password is not None:
        return "credentials in the URL are not allowed (pass the token with --token-file)"
    if parts.query or text.endswith("?"):
        return "a query (?...) is not allowed"
    if parts.fragment or "#" in text:
        return "a fragment (#...) is not allowed"
    host = parts.hostname
    if not host:
        return "it names no host"
    if not _host_ok(host, bracketed=parts.netloc.startswith("[")):
        return f"{host!r} is not a host name or IP address"
    try:
        parts.port  # noqa: B018 -- the property validates the port
    except ValueError:
        return f"the port in {parts.netloc!r} is not a number in 0-65535"
    return None


def _host_ok(host: str, *, bracketed: bool) -> bool:
    if bracketed:
        try:
            return ipaddress.ip_address(host).version == 6
        except ValueError:
            return False
    return _HOSTNAME.match(host) is not None


class ShipOutcome(Enum):
    """What became of one delivery attempt (after retries)."""

    ACKED = "acked"
    DUPLICATE = "duplicate"
    REJECTED = "rejected"
    UNAVAILABLE = "unavailable"

    @property
    def delivered(self) -> bool:
        """True when the service holds the batch."""
        return self in (ShipOutcome.ACKED, ShipOutcome.DUPLICATE)


@dataclass(frozen=True)
class ShipResult:
    """The outcome, the last HTTP status (None when there was no answer) and why."""

    outcome: ShipOutcome
    status: int | None
    detail: str
    attempts: int
    #: The service's ``Retry-After`` on the last answer, in seconds (None: not sent).
    retry_after_s: float | None = None


class Shipper:
    """Deliver wire-format batches to ``POST {base_url}/api/v1/ingest``."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        node: str,
        client: httpx.Client | None = None,
        timeout_s: float = 5.0,
        retries: int = 2,
        backoff_s: float = 0.5,
        backoff_max_s: float = 5.0,
        stop_event: threading.Event | None = None,
    ) -> None:
        self.url = service_url(base_url) + INGEST_PATH
        self._headers = {
            "Authorization": f"Bearer {token}",
            "Content-Type": CONTENT_TYPE,
            HEADER_NODE: node,
        }
        # The timeout travels with each request, so a client shared with the scrapers (one
        # connection pool and TLS context per agent) keeps its own timeout for them.
        self._timeout = httpx.Timeout(timeout_s)
        self._client = client or httpx.Client(timeout=self._timeout)
        self._owns_client = client is None
        self.retries = retries
        self.backoff_s = backoff_s
        self.backoff_max_s = backoff_max_s
        self._stop = stop_event or threading.Event()

    def close(self) -> None:
        """Close the connection pool (only when the shipper created it)."""
        if self._owns_client:
            self._client.close()

    def ship(self, batch_id: str, body: bytes, *, retries: int | None = None) -> ShipResult:
        """Send one batch, retrying UNAVAILABLE answers up to ``retries`` times."""
        allowed = self.retries if retries is None else retries
        attempt = 0
        while True:
            attempt += 1
            result = self._attempt(batch_id, body, attempt)
            if result.outcome is not ShipOutcome.UNAVAILABLE or attempt > allowed:
                return result
            delay_s = retry_delay_s(
                attempt, self.backoff_s, self.backoff_max_s, result.retry_after_s
            )
            log.debug("batch %s: %s; retrying in %.2f s", batch_id, result.detail, delay_s)
            if self._stop.wait(delay_s):
                return result

    def _attempt(self, batch_id: str, body: bytes, attempt: int) -> ShipResult:
        headers = {**self._headers, HEADER_BATCH_ID: batch_id}
        try:
            response = self._client.post(
                self.url, content=body, headers=headers, timeout=self._timeout
            )
        except httpx.TimeoutException as exc:
            return ShipResult(
                ShipOutcome.UNAVAILABLE, None, f"timed out ({type(exc).__name__})", attempt
            )
        except httpx.HTTPError as exc:
            return ShipResult(ShipOutcome.UNAVAILABLE, None, f"no answer: {exc}", attempt)
        status = response.status_code
        if status == 200:
            duplicate = _duplicate_flag(response)
            outcome = ShipOutcome.DUPLICATE if duplicate else ShipOutcome.ACKED
            return ShipResult(outcome, status, "stored", attempt)
        detail = f"HTTP {status}: {_detail(response)}"
        if 400 <= status < 500 and status not in _RETRYABLE_4XX:
            return ShipResult(ShipOutcome.REJECTED, status, detail, attempt)
        return ShipResult(
            ShipOutcome.UNAVAILABLE,
            status,
            detail,
            attempt,
            retry_after_s(response.headers.get("retry-after")),
        )


def _duplicate_flag(response: httpx.Response) -> bool:
    try:
        payload = response.json()
    except ValueError:
        return False
    return isinstance(payload, dict) and payload.get("duplicate") is True


def _detail(response: httpx.Response) -> str:
    try:
        payload = response.json()
    except ValueError:
        return response.text[:200]
    if isinstance(payload, dict) and isinstance(payload.get("detail"), str):
        return str(payload["detail"])[:500]
    return response.text[:200]
