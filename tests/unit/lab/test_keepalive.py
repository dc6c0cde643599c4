"""A lab client's kept connection: reused, and sent again once when the server closed it."""

from __future__ import annotations

import http.server
import socket
import threading
from collections.abc import Iterator
from typing import ClassVar

import pytest

from sits_observe.lab.keepalive import KeptConnection


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    #: Close each connection after one answer without saying so (an idle timeout).
    drop_after_answer = False
    peers: ClassVar[list[int]] = []

    def do_POST(self) -> None:  # the standard library's name
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        type(self).peers.append(self.client_address[1])
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        if type(self).drop_after_answer:
            self.close_connection = True

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[tuple[int, type[_Handler]]]:
    handler = type("Handler", (_Handler,), {"peers": [], "drop_after_answer": False})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield httpd.server_address[1], handler
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_one_connection_carries_every_exchange(server: tuple[int, type[_Handler]]) -> None:
    port, handler = server
    conn = KeptConnection("http", "127.0.0.1", port, 5.0)
    answers = [conn.exchange("POST", "/x", f"{i}".encode(), {}) for i in range(3)]
    assert [(a[0], a[3]) for a in answers] == [(200, b"0"), (200, b"1"), (200, b"2")]
    assert len(set(handler.peers)) == 1  # one client port: one connection
    conn.close()


def test_a_connection_the_server_closed_is_sent_again_on_a_new_one(
    server: tuple[int, type[_Handler]],
) -> None:
    port, handler = server
    handler.drop_after_answer = True
    conn = KeptConnection("http", "127.0.0.1", port, 5.0)
    assert conn.exchange("POST", "/x", b"a", {})[3] == b"a"
    assert conn.exchange("POST", "/x", b"b", {})[3] == b"b"  # the kept one had gone stale
    assert len(set(handler.peers)) == 2
    conn.close()


def test_a_dead_server_is_an_error_not_a_retry_loop() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed when the block ends: nobody listens
    conn = KeptConnection("http", "127.0.0.1", port, 2.0)
    with pytest.raises(ConnectionRefusedError):
        conn.exchange("POST", "/x", b"a", {})
    with pytest.raises(ConnectionRefusedError):  # and again: no connection kept from before
        conn.exchange("POST", "/x", b"a", {})
