"""The shipper's classification of answers, its retries and back-off (injected transport)."""

from __future__ import annotations

import threading
from collections.abc import Callable

import httpx
import pytest

from sits_observe.collectors.agent.shipper import (
    ShipOutcome,
    Shipper,
    retry_after_s,
    retry_delay_s,
)
from sits_observe.collectors.agent.wire import CONTENT_TYPE

Handler = Callable[[httpx.Request], httpx.Response]


class Script:
    """A transport that answers from a list and records every request."""

    def __init__(self, *answers: int | Exception, body: dict[str, object] | None = None) -> None:
        self.answers = list(answers)
        self.body = body
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        if answer == 200:
            return httpx.Response(200, json=self.body or {"duplicate": False})
        return httpx.Response(answer, json={"detail": f"status {answer}", "reason": "x"})


def shipper(script: Script, **kwargs: object) -> Shipper:
    client = httpx.Client(transport=httpx.MockTransport(script))
    return Shipper(
        "http://svc:8080/", "s3cret", node="node-1", client=client, backoff_s=0.0, **kwargs
    )


def test_acknowledged_batch_sends_token_ids_and_body() -> None:
    script = Script(200)
    result = shipper(script).ship("b1", b"BODY")
    assert result.outcome is ShipOutcome.ACKED and result.attempts == 1
    (request,) = script.requests
    assert str(request.url) == "http://svc:8080/api/v1/ingest"
    assert request.headers["authorization"] == "Bearer s3cret"
    assert request.headers["x-sits-batch-id"] == "b1"
    assert request.headers["x-sits-node"] == "node-1"
    assert request.headers["content-type"] == CONTENT_TYPE
    assert request.content == b"BODY"


def test_duplicate_acknowledgement_is_reported_as_delivered() -> None:
    result = shipper(Script(200, body={"duplicate": True})).ship("b1", b"x")
    assert result.outcome is ShipOutcome.DUPLICATE and result.outcome.delivered


@pytest.mark.parametrize("status", [500, 502, 503, 408, 429])
def test_transient_answers_are_retried_until_success(status: int) -> None:
    script = Script(status, status, 200)
    result = shipper(script, retries=2).ship("b1", b"x")
    assert result.outcome is ShipOutcome.ACKED
    assert len(script.requests) == 3
    assert {r.headers["x-sits-batch-id"] for r in script.requests} == {"b1"}


@pytest.mark.parametrize(
    "failure",
    [httpx.ConnectError("refused"), httpx.ReadTimeout("slow"), 503, 401, 403],
    ids=["refused", "timeout", "503", "401", "403"],
)
def test_unavailable_after_the_retries_run_out(failure: int | Exception) -> None:
    script = Script(failure)
    result = shipper(script, retries=3).ship("b1", b"x")
    assert result.outcome is ShipOutcome.UNAVAILABLE
    assert not result.outcome.delivered
    assert len(script.requests) == 4


@pytest.mark.parametrize("status", [400, 404, 413, 415, 422])
def test_a_bad_batch_is_rejected_at_once_and_never_retried(status: int) -> None:
    script = Script(status)
    result = shipper(script, retries=5).ship("b1", b"x")
    assert result.outcome is ShipOutcome.REJECTED
    assert result.status == status and f"status {status}" in result.detail
    assert len(script.requests) == 1


def test_per_call_retries_override_the_default() -> None:
    script = Script(503)
    assert shipper(script, retries=5).ship("b1", b"x", retries=0).attempts == 1
    assert len(script.requests) == 1


def test_back_off_waits_on_the_stop_event() -> None:
    """With a stop requested, the shipper gives up instead of sleeping through a back-off."""
    stop = threading.Event()
    stop.set()
    script = Script(503)
    client = httpx.Client(transport=httpx.MockTransport(script))
    ship = Shipper(
        "http://svc", "t", node="n", client=client, retries=5, backoff_s=3600, stop_event=stop
    )
    result = ship.ship("b1", b"x")
    assert result.outcome is ShipOutcome.UNAVAILABLE
    assert len(script.requests) == 1


def test_the_back_off_doubles_with_jitter_and_keeps_to_retry_after() -> None:
    # Half of the doubled back-off is always waited, the other half is drawn.
    assert retry_delay_s(1, 0.25, 5.0, draw=lambda: 0.0) == 0.125
    assert retry_delay_s(1, 0.25, 5.0, draw=lambda: 0.999) == pytest.approx(0.25, abs=1e-3)
    assert retry_delay_s(3, 0.25, 5.0, draw=lambda: 0.5) == 0.75  # 1 s: 0.5 + 0.25
    assert retry_delay_s(10, 0.25, 5.0, draw=lambda: 1.0) == 5.0  # capped
    # The service's Retry-After is a floor, capped at the longest back-off.
    assert retry_delay_s(1, 0.25, 5.0, retry_after_s=1.0, draw=lambda: 0.0) == 1.0
    assert retry_delay_s(1, 0.25, 5.0, retry_after_s=3600.0, draw=lambda: 0.0) == 5.0
    draws = {retry_delay_s(2, 0.25, 5.0) for _ in range(50)}
    assert len(draws) > 1 and all(0.25 <= d <= 0.5 for d in draws)


def test_a_busy_answer_carries_its_retry_after() -> None:
    def busy(request: httpx.Request) -> httpx.Response:
        return httpx.Response(503, headers={"Retry-After": "1"}, json={"detail": "busy"})

    client = httpx.Client(transport=httpx.MockTransport(busy))
    ship = Shipper("http://svc", "t", node="n", client=client, retries=0)
    result = ship.ship("b1", b"x")
    assert result.outcome is ShipOutcome.UNAVAILABLE and result.retry_after_s == 1.0


def test_retry_after_in_seconds_only() -> None:
    assert retry_after_s(" 3 ") == 3.0
    assert retry_after_s("Wed, 21 Oct 2026 07:28:00 GMT") is None  # the date form: ignored
    assert retry_after_s(None) is None
