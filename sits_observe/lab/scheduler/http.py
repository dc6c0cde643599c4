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
import ssl
from urllib.parse import urlsplit

from prometheus_client import CollectorRegistry, Counter

from sits_observe.lab.scheduler.wire import ExtenderCallError

#: A connection the server closed while it sat idle: the call is sent again on a new one (Go's
#: transport retries a request it could not write on a reused connection the same way).
_STALE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)


class HttpExtenderTransport:
    """Extender calls over HTTP/1.1 keep-alive connections, one per extender address (as Go's
    ``http.Client`` keeps them), with the standard library's client: the scheduler model's
    side of a call costs about a fifth of what a general-purpose client's does."""

    def __init__(self, *, registry: CollectorRegistry | None = None) -> None:
        self._connections: dict[tuple[str, str, int | None], http.client.HTTPConnection] = {}
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
        headers = {"Content-Type": "application/json"}
        try:
            reused = key in self._connections
            try:
                status, answer = self._send(key, path, body, headers, timeout_s)
            except _STALE:
                self._drop(key)
                if not reused:
                    raise
                status, answer = self._send(key, path, body, headers, timeout_s)
        except (OSError, http.client.HTTPException) as exc:
            self._drop(key)
            self.calls.labels(verb, "error").inc()
            raise ExtenderCallError(f'Post "{url}": {exc}') from exc
        if status != 200:
            self.calls.labels(verb, "error").inc()
            raise ExtenderCallError(f"failed to {verb} with extender at URL {url}, code {status}")
        self.calls.labels(verb, "ok").inc()
        return answer

    def _send(
        self,
        key: tuple[str, str, int | None],
        path: str,
        body: bytes,
        headers: dict[str, str],
        timeout_s: float,
    ) -> tuple[int, bytes]:
        conn = self._connections.get(key)
        if conn is None:
            scheme, host, port = key
            if scheme == "https":
                context = ssl.create_default_context()
                conn = http.client.HTTPSConnection(host, port, timeout=timeout_s, context=context)
            else:
                conn = http.client.HTTPConnection(host, port, timeout=timeout_s)
            self._connections[key] = conn
        conn.timeout = timeout_s
        if conn.sock is not None:
            conn.sock.settimeout(timeout_s)
        conn.request("POST", path, body=body, headers=headers)
        response = conn.getresponse()
        answer = response.read()
        if response.will_close:
            self._drop(key)
        return response.status, answer

    def _drop(self, key: tuple[str, str, int | None]) -> None:
        conn = self._connections.pop(key, None)
        if conn is not None:
            conn.close()

    def close(self) -> None:
        """Close the kept connections."""
        for key in list(self._connections):
            self._drop(key)
