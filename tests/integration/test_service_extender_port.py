"""``serve --extender-port``: the scheduler extender alone on its own port, the API without it.

A real ``serve`` process on loopback; kube-scheduler-shaped calls (JSON, no token) go to the
extender port. The store is empty, so the extender fails open (every node passes), which is
enough to show where each route is served and that the two ports share one registry.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tests.integration.serve_process import (
    TOKEN,
    connect,
    free_port,
    read_until_closed,
    serving,
)

pytestmark = pytest.mark.slow

CALL = json.dumps({"Pod": {"metadata": {"name": "p"}}, "Nodes": None, "NodeNames": ["a", "b"]})
JSON = {"Content-Type": "application/json"}


def test_the_extender_has_its_own_port_and_leaves_the_api_port(tmp_path: Path) -> None:
    extender_port = free_port()
    with serving(tmp_path, "--extender-port", str(extender_port)) as service:
        extender = f"http://127.0.0.1:{extender_port}"
        answer = httpx.post(extender + "/scheduler/filter", content=CALL, headers=JSON)
        assert answer.status_code == 200 and answer.json()["NodeNames"] == ["a", "b"]
        scores = httpx.post(extender + "/scheduler/prioritize", content=CALL, headers=JSON)
        assert scores.status_code == 200 and [s["Host"] for s in scores.json()] == ["a", "b"]
        # The API port no longer serves the extender, the extender port nothing else.
        assert httpx.post(service.url + "/scheduler/filter", content=CALL).status_code == 404
        auth = {"Authorization": f"Bearer {TOKEN}"}
        assert httpx.get(extender + "/api/v1/tables", headers=auth).status_code == 404
        assert httpx.get(extender + "/metrics").status_code == 404
        # One registry: the API's /metrics counts the calls made on the extender port.
        calls = "sits_extender_calls_total"
        assert service.metric(calls, verb="filter", outcome="fail_open") == 1
        assert service.metric(calls, verb="prioritize", outcome="fail_open") == 1


def test_the_extender_port_refuses_oversized_and_slow_callers(tmp_path: Path) -> None:
    extender_port = free_port()
    with serving(tmp_path, "--extender-port", str(extender_port)) as service:
        # A declared body over the 24 MiB limit is refused before a byte of it is read.
        with connect(extender_port) as sock:
            sock.sendall(
                b"POST /scheduler/filter HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                b"\r\nContent-Length: 60000000\r\n\r\n{"
            )
            answer, _ = read_until_closed(sock, 10)
        assert answer.startswith(b"HTTP/1.1 200 ") and b"over the extender limit" in answer
        # A caller that never finishes its headers is cut off (extender port: 5 s).
        with connect(extender_port) as sock:
            sock.sendall(b"POST /scheduler/filter HTTP/1.1\r\n")
            answer, closed = read_until_closed(sock, 30)
        assert closed and answer.startswith(b"HTTP/1.1 408 ")
        assert service.metric("sits_http_dropped_total", reason="header_timeout") == 1
