"""Slow clients, too many clients and clients that give up, against a real ``serve`` process.

Raw sockets on loopback: a slowloris that trickles its headers, one that trickles its body,
more connections than the cap, more requests in flight than the cap, and an upload cut off
halfway. Each is dropped (408 / 503 / closed) and counted in ``sits_http_dropped_total``
while ``/healthz`` keeps answering; the log holds one line per drop and no traceback.
Timeouts are set short through the flags; nothing asserts how fast the server reacted.
"""

from __future__ import annotations

import json
import select
import threading
from pathlib import Path

import httpx
import pytest

from tests.integration.serve_process import (
    TOKEN,
    connect,
    read_until_closed,
    serving,
    trickle,
    wait_until,
)

pytestmark = pytest.mark.slow

#: Long enough that a trickling client is still sending when it should have been cut off.
TRICKLE_LIMIT_S = 30.0


def ingest_head(length: int) -> bytes:
    return (
        f"POST /api/v1/ingest HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n"
        f"Content-Type: application/vnd.sits.arrow-batch\r\nX-Sits-Batch-Id: b-{length}\r\n"
        f"Content-Length: {length}\r\n\r\n"
    ).encode()


def test_slow_headers_and_slow_bodies_are_cut_off_while_healthz_answers(tmp_path: Path) -> None:
    with serving(tmp_path, "--header-timeout-s", "1", "--body-timeout-s", "2") as service:
        results: dict[str, tuple[bytes, bool]] = {}

        def slow_headers() -> None:
            with connect(service.port) as sock:
                endless = b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"X-Pad: y\r\n" * 500
                results["headers"] = trickle(sock, endless, 0.1, TRICKLE_LIMIT_S)

        def slow_body() -> None:
            with connect(service.port) as sock:
                sock.sendall(ingest_head(100_000))
                results["body"] = trickle(sock, b"x" * 100_000, 0.1, TRICKLE_LIMIT_S)

        threads = [threading.Thread(target=f) for f in (slow_headers, slow_body)]
        for thread in threads:
            thread.start()
        healthy = 0
        while any(t.is_alive() for t in threads):
            assert httpx.get(service.url + "/healthz", timeout=5).status_code == 200
            healthy += 1
        for thread in threads:
            thread.join()
        assert healthy > 0
        answer, closed = results["headers"]
        assert closed, "the slow-header client was never disconnected"
        assert answer.startswith(b"HTTP/1.1 408 ") and b'"reason":"header_timeout"' in answer
        assert b"content-type: application/json" in answer
        answer, closed = results["body"]
        assert closed, "the slow-body client was never disconnected"
        assert answer.startswith(b"HTTP/1.1 408 ") and b'"reason":"body_timeout"' in answer
        assert service.metric("sits_http_dropped_total", reason="header_timeout") == 1
        assert service.metric("sits_http_dropped_total", reason="body_timeout") == 1
        logs = service.logs()
    assert "Traceback" not in logs
    assert logs.count("request headers not received within 1 s") == 1
    assert logs.count("body not received within 2 s") == 1


def test_a_body_trickled_after_the_answer_is_cut_off(tmp_path: Path) -> None:
    with serving(tmp_path, "--body-timeout-s", "1") as service, connect(service.port) as sock:
        # /healthz answers without reading the body; the client keeps sending it.
        sock.sendall(b"POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n")
        answer, closed = trickle(sock, b"y" * 100_000, 0.1, TRICKLE_LIMIT_S)
        assert answer.startswith(b"HTTP/1.1 ")  # answered first,
        assert closed, "a client trickling an unread body was never disconnected"  # then cut off
        assert service.metric("sits_http_dropped_total", reason="body_timeout") == 1


def test_a_request_the_protocol_cannot_parse_is_a_json_400(tmp_path: Path) -> None:
    with serving(tmp_path) as service, connect(service.port) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nBad Header Line\r\n\r\n")
        answer, closed = read_until_closed(sock, 10)
        assert closed and answer.startswith(b"HTTP/1.1 400 ")
        head, _, body = answer.partition(b"\r\n\r\n")
        assert b"content-type: application/json" in head
        assert json.loads(body)["reason"] == "bad_request"
        assert service.metric("sits_http_dropped_total", reason="bad_request") == 1


def test_a_request_head_over_the_cap_is_a_json_431(tmp_path: Path) -> None:
    with serving(tmp_path) as service, connect(service.port) as sock:
        # One header line that never ends: the parser would buffer it without a bound.
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: ")
        for _ in range(64):  # 4 KiB at a time, until the server answers
            sock.sendall(b"y" * 4096)
            if select.select([sock], [], [], 0.2)[0]:
                break
        answer, closed = read_until_closed(sock, 10)
        assert closed and answer.startswith(b"HTTP/1.1 431 ")
        head, _, body = answer.partition(b"\r\n\r\n")
        assert b"content-type: application/json" in head
        assert json.loads(body)["reason"] == "header_too_large"
        assert service.metric("sits_http_dropped_total", reason="header_too_large") == 1
        # A head under the cap is served as before.
        big = {"X-Pad": "y" * 12 * 1024}
        assert httpx.get(service.url + "/healthz", headers=big, timeout=5).status_code == 200


def test_connections_over_the_cap_get_503_and_the_cap_frees_up(tmp_path: Path) -> None:
    with serving(tmp_path, "--max-connections", "3", "--header-timeout-s", "60") as service:
        held = [connect(service.port) for _ in range(3)]
        try:
            with connect(service.port) as extra:
                answer, closed = read_until_closed(extra, 10)
            assert closed and answer.startswith(b"HTTP/1.1 503 ")
            assert b'"reason":"connection_limit"' in answer
            held.pop().close()

            def healthz_answers() -> bool:
                try:
                    return httpx.get(service.url + "/healthz", timeout=2).status_code == 200
                except httpx.HTTPError:
                    return False

            wait_until(healthz_answers, 10, "/healthz to answer once a connection is free")
            assert service.metric("sits_http_dropped_total", reason="connection_limit") >= 1
        finally:
            for sock in held:
                sock.close()


def test_requests_over_the_in_flight_cap_get_503_busy(tmp_path: Path) -> None:
    flags = ("--max-concurrent-requests", "1", "--body-timeout-s", "60", "--queue-timeout-s", "0.2")
    with serving(tmp_path, *flags) as service, connect(service.port) as slow:
        slow.sendall(ingest_head(10_000) + b"x" * 100)  # in flight: its body never ends
        busy: list[httpx.Response] = []

        def refused_as_busy() -> bool:
            answer = httpx.post(
                service.url + "/api/v1/ingest",
                content=b"SITSARW1",
                headers={"Authorization": f"Bearer {TOKEN}", "X-Sits-Batch-Id": "b-2"},
                timeout=5,
            )
            busy.append(answer)
            return answer.status_code == 503

        wait_until(refused_as_busy, 10, "a second request to be refused as busy")
        assert busy[-1].json()["reason"] == "busy" and busy[-1].headers["Retry-After"] == "1"
        assert httpx.get(service.url + "/healthz", timeout=5).status_code == 200  # exempt
        assert service.metric("sits_http_dropped_total", reason="busy") >= 1


def test_one_node_token_holding_slow_bodies_cannot_starve_other_nodes(tmp_path: Path) -> None:
    tokens = tmp_path / "ingest-tokens"
    tokens.write_text("token-of-a node-a\ntoken-of-b node-b\n", encoding="utf-8")
    flags = ("--ingest-tokens-file", str(tokens), "--body-timeout-s", "60")
    with serving(tmp_path, *flags) as service:
        head = (
            "POST /api/v1/ingest HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer token-of-a\r\n"
            "X-Sits-Node: node-a\r\nX-Sits-Batch-Id: slow-{i}\r\nContent-Length: 1000\r\n\r\nS"
        )
        slow = [connect(service.port) for _ in range(64)]  # 64 bodies that never end
        try:
            for i, sock in enumerate(slow):
                sock.sendall(head.format(i=i).encode())
            wait_until(
                lambda: service.metric("sits_http_dropped_total", reason="client_busy") >= 48,
                10,
                "node-a's requests past its share to be refused",
            )
            answer = httpx.post(
                service.url + "/api/v1/ingest",
                content=b"SITSARW1",  # a valid batch with no tables
                headers={
                    "Authorization": "Bearer token-of-b",
                    "X-Sits-Node": "node-b",
                    "X-Sits-Batch-Id": "b-1",
                },
                timeout=10,
            )
            assert answer.status_code == 200, answer.text
            # node-a holds its share (8); 8 more waited and the other 48 were refused at once
            wait_until(
                lambda: service.metric("sits_http_dropped_total", reason="client_busy") == 56,
                15,
                "node-a's waiting requests to be refused",
            )
            assert service.metric("sits_http_dropped_total", reason="busy") == 0
        finally:
            for sock in slow:
                sock.close()


def test_a_request_over_the_cap_waits_for_the_slot_and_is_served(tmp_path: Path) -> None:
    flags = ("--max-concurrent-requests", "1", "--queue-timeout-s", "30")
    with serving(tmp_path, *flags) as service, connect(service.port) as slow:
        slow.sendall(ingest_head(10_000) + b"x" * 100)  # holds the one slot
        answers: list[httpx.Response] = []

        def second() -> None:
            answers.append(
                httpx.post(
                    service.url + "/api/v1/ingest",
                    content=b"SITSARW1",  # a valid batch with no tables
                    headers={"Authorization": f"Bearer {TOKEN}", "X-Sits-Batch-Id": "b-2"},
                    timeout=60,
                )
            )

        waiting = threading.Thread(target=second)
        waiting.start()
        waiting.join(1.0)
        assert waiting.is_alive() and not answers, "the second request did not wait"
        assert httpx.get(service.url + "/healthz", timeout=5).status_code == 200  # exempt
        slow.sendall(b"x" * 9_900)  # the first body ends (a malformed batch: answered 400)
        waiting.join(30)
        assert [a.status_code for a in answers] == [200]
        assert service.metric("sits_http_dropped_total", reason="busy") == 0


def test_an_aborted_upload_is_one_warning_line_and_counted(tmp_path: Path) -> None:
    with serving(tmp_path) as service:
        with connect(service.port) as sock:
            sock.sendall(ingest_head(200_000) + b"z" * 100_000)  # half the body, then gone
        wait_until(
            lambda: service.metric("sits_http_dropped_total", reason="client_disconnect") == 1,
            20,
            "the aborted upload to be counted",
        )
        assert httpx.get(service.url + "/healthz", timeout=5).status_code == 200
        logs = service.logs()
    assert "Traceback" not in logs and "Exception in ASGI application" not in logs
    lines = [line for line in logs.splitlines() if "closed the connection" in line]
    assert len(lines) == 1 and "POST /api/v1/ingest" in lines[0], logs
