"""A /metrics endpoint on loopback serving whatever text a test sets: the stand-in for an
inference server's exporter in the engine tests."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class MetricsServer:
    """/metrics on 127.0.0.1 returning ``body()`` at each request."""

    url: str
    body: Callable[[], str]


def serve_metrics() -> Iterator[MetricsServer]:
    """A :class:`MetricsServer` for one test (make it a fixture: ``metrics_server =
    pytest.fixture(serve_metrics)``), shut down after it."""
    holder = MetricsServer("", lambda: "")

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            payload = holder.body().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: object) -> None:
            """Keep test output clean."""

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    holder.url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
    try:
        yield holder
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
