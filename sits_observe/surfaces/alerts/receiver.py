"""A small webhook receiver on loopback: verifies signatures and records what arrives.

Used by the tests and ``bench/bench_alert_delivery.py`` (as the far end of both the direct
webhook and Alertmanager's ``webhook_configs``), and a worked example of verification for
people writing their own receiver (docs/alerts.md). Standard library HTTP server, one thread
per request; ``responder`` decides each answer (status, and seconds to wait before it), so a
test can script 503s, 400s and slow answers.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType

from sits_observe.surfaces.alerts.signing import verify

#: ``responder(n)`` for the ``n``-th request (0-based): ``(status, delay_s)``.
Responder = Callable[[int], tuple[int, float]]


@dataclass(frozen=True)
class Received:
    """One request: path, headers (lower-case names), raw body, arrival (``time.monotonic``)
    and whether its signature verified (None when the receiver has no secret)."""

    path: str
    headers: dict[str, str]
    body: bytes
    at_s: float
    verified: bool | None


class WebhookReceiver:
    """``with WebhookReceiver(secret) as hook:`` then POST to ``hook.url``."""

    def __init__(self, secret: bytes | None = None, responder: Responder | None = None) -> None:
        self.secret = secret
        self.responder: Responder = responder or (lambda _n: (200, 0.0))
        self.received: list[Received] = []
        self._requests = 0
        self.arrived = threading.Condition()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:43211``; any path is accepted."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> WebhookReceiver:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._server.shutdown()
        self._server.server_close()

    def wait_for(self, predicate: Callable[[list[Received]], bool], timeout_s: float) -> bool:
        """Block until ``predicate(received)`` holds (True) or ``timeout_s`` passes (False)."""
        with self.arrived:
            return self.arrived.wait_for(lambda: predicate(self.received), timeout_s)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                at_s = time.monotonic()
                headers = {k.lower(): v for k, v in self.headers.items()}
                verified = None
                if receiver.secret is not None:
                    verified = verify(receiver.secret, headers, body, time.time())
                with receiver.arrived:
                    n = receiver._requests
                    receiver._requests += 1
                    status, delay_s = receiver.responder(n)
                if delay_s > 0:
                    time.sleep(delay_s)
                with receiver.arrived:
                    receiver.received.append(Received(self.path, headers, body, at_s, verified))
                    receiver.arrived.notify_all()
                try:
                    self.send_response(status)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                except OSError:
                    pass  # the client gave up (timeout) before the answer

            def log_message(self, format: str, *args: object) -> None:
                """Quiet: the tests read ``received`` instead."""

        return Handler
