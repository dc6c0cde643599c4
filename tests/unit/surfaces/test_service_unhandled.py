"""Every answer is the JSON error shape: unhandled errors, cancelled requests, raw answers."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from starlette.types import Message, Receive, Scope, Send

from sits_observe.store import Store
from sits_observe.surfaces.service import ServiceSettings, create_app
from sits_observe.surfaces.service import app as app_module
from sits_observe.surfaces.service.http.unhandled import JsonErrors, raw_answer

TOKEN = "t0ken-for-tests"


def test_an_unhandled_error_in_a_route_is_a_json_500(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(_: Store) -> dict[str, int]:
        raise RuntimeError("secret path /var/lib/db")

    monkeypatch.setattr(app_module, "table_counts", broken)
    settings = ServiceSettings(token=TOKEN, retention_interval_s=0)  # type: ignore[arg-type]
    with (
        Store.open(tmp_path / "s.duckdb") as store,
        TestClient(create_app(settings, store), raise_server_exceptions=False) as client,
    ):
        answer = client.get("/api/v1/tables", headers={"Authorization": f"Bearer {TOKEN}"})
        assert answer.status_code == 500
        assert answer.headers["content-type"] == "application/json"
        assert answer.json()["reason"] == "internal"
        assert "RuntimeError" in answer.json()["detail"]
        assert "secret" not in answer.text  # the message stays in the log
        assert client.get("/healthz").status_code == 200  # the service keeps serving


def run(app: JsonErrors) -> list[Message]:
    """Drive ``app`` with one POST; the messages it sent."""
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    scope: Scope = {"type": "http", "method": "POST", "path": "/api/v1/ingest", "headers": []}
    asyncio.run(app(scope, receive, send))
    return sent


def answer(sent: list[Message]) -> tuple[int, dict[str, str], dict[bytes, bytes]]:
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], json.loads(body), dict(start["headers"])


def test_a_request_cancelled_by_the_shutdown_is_a_json_503() -> None:
    async def cancelled(scope: Scope, receive: Receive, send: Send) -> None:
        task = asyncio.current_task()
        assert task is not None
        task.cancel()  # what uvicorn does once the shutdown grace is over
        await asyncio.sleep(1)

    status, body, headers = answer(run(JsonErrors(cancelled)))
    assert status == 503 and body["reason"] == "shutting_down"
    assert headers[b"retry-after"] == b"1"


def test_an_error_past_starlette_and_a_missing_answer_are_json_500s() -> None:
    async def raises(scope: Scope, receive: Receive, send: Send) -> None:
        raise KeyError("x")

    async def silent(scope: Scope, receive: Receive, send: Send) -> None:
        return None

    for app in (raises, silent):
        status, body, headers = answer(run(JsonErrors(app)))
        assert status == 500 and body["reason"] == "internal"
        assert headers[b"content-type"] == b"application/json"


def test_an_answer_already_started_is_not_answered_twice() -> None:
    async def half(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        raise RuntimeError("after the start")

    sent = run(JsonErrors(half))
    assert [m["type"] for m in sent] == ["http.response.start"]


def test_raw_answers_are_complete_json_http_messages() -> None:
    raw = raw_answer(408, "Request Timeout", "header_timeout", "late", {"Retry-After": "1"})
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    assert lines[0] == "HTTP/1.1 408 Request Timeout"
    assert "content-type: application/json" in lines and "retry-after: 1" in lines
    assert f"content-length: {len(body)}" in lines
    assert json.loads(body) == {"detail": "late", "reason": "header_timeout"}
