"""kube-scheduler's HTTP client for extenders, as the live scheduler's ExtenderTransport.

``pkg/scheduler/extender.go`` (``HTTPExtender.send``): ``POST`` the JSON body with
``Content-Type: application/json``, no credentials, the extender's ``httpTimeout`` as the
client timeout; any status other than 200 fails the call (``failed to <verb> with extender at
URL <url>, code <status>``), as does a transport error. The answer body goes back to the
scheduler model, which parses it as kube-scheduler does
(:mod:`sits_observe.lab.scheduler.wire`).

Calls count in ``sits_scheduler_extender_calls_total{verb, result}`` (result ``ok`` or
``error``), the scheduler's view of the extender (the service counts its own side in
``sits_extender_calls_total``).
"""

from __future__ import annotations

import http.client
from urllib.parse import urlsplit

from prometheus_client import CollectorRegistry, Counter

from sits_observe.lab.keepalive import KeptConnection
from sits_observe.lab.scheduler.wire import ExtenderCallError


class HttpExtenderTransport:
    """Extender calls over HTTP/1.1 keep-alive connections, one per extender address (as Go's
    ``http.Client`` keeps them; a connection the server closed while idle is sent again on a
    new one, :mod:`sits_observe.lab.keepalive`), with the standard library's client: the
    scheduler model's side of a call costs about a fifth of what a general-purpose client's
    does."""

    def __init__(self, *, registry: CollectorRegistry | None = None) -> None:
        self._connections: dict[tuple[str, str, int | None], KeptConnection] = {}
        self.calls = Counter(
            "sits_scheduler_extender_calls_total",
            "extender calls the live scheduler made, by verb and result: ok, error",
            ("verb", "result"),
            registry=registry or CollectorRegistry(),
        )

    def post(self, url: str, body: bytes, timeout_s: float) -> bytes:
        """POST ``body`` to ``url``; the answer, or :class:`ExtenderCallError`."""
        verb = url.rstrip("/").rsplit("/", 1)[-1]
        parts = urlsplit(url)
        key = (parts.scheme, parts.hostname or "", parts.port)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        conn = self._connections.get(key)
        if conn is None:
            conn = self._connections[key] = KeptConnection(*key, timeout_s)
        try:
            status, _, _, answer = conn.exchange(
                "POST", path, body, {"Content-Type": "application/json"}, timeout_s
            )
        except (OSError, http.client.HTTPException) as exc:
            self.calls.labels(verb, "error").inc()
            raise ExtenderCallError(f'Post "{url}": {exc}') from exc
        if status != 200:
            self.calls.labels(verb, "error").inc()
            raise ExtenderCallError(f"failed to {verb} with extender at URL {url}, code {status}")
        self.calls.labels(verb, "ok").inc()
        return answer

    def close(self) -> None:
        """Close the kept connections."""
        for conn in self._connections.values():
            conn.close()
        self._connections.clear()
