"""Delivery: signed webhook JSON, retries and their limits, bounded queues, resend policy.

HTTP goes to a real receiver on 127.0.0.1 (:class:`WebhookReceiver`) except the policy tests,
which record requests through an injected ``httpx.MockTransport``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import random
import socket
import threading
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from sits_observe.errors import ConfigError
from sits_observe.surfaces.alerts import Alert, AlertMetrics, Notifier, NotifySettings, Target
from sits_observe.surfaces.alerts.payloads import webhook_body
from sits_observe.surfaces.alerts.receiver import WebhookReceiver
from sits_observe.surfaces.alerts.signing import signed_headers, verify

SECRET = b"0123456789abcdef-secret"
T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
WAIT_S = 20.0  # upper bound for a background delivery to land (not a speed assertion)


def _alert(name: str = "SitsFragmentationHigh", ends_at: datetime | None = None, **labels: str):
    return Alert(
        name,
        {"alertname": name, "severity": "warning", **labels},
        {"summary": "s", "description": "d"},
        T0,
        ends_at,
        0.9,
    )


def _settings(**values: object) -> NotifySettings:
    base: dict[str, object] = {
        "timeout_s": 0.5,
        "max_attempts": 4,
        "backoff_base_s": 0.01,
        "backoff_max_s": 0.05,
        "webhook_secret": SECRET.decode(),
    }
    base.update(values)
    return NotifySettings.model_validate(base)


def _count(metrics: AlertMetrics, target: str, outcome: str) -> float:
    value = metrics.registry.get_sample_value(
        "sits_alert_notifications_total", {"target": target, "outcome": outcome}
    )
    return value or 0.0


def _deliver(settings: NotifySettings, body: bytes, hook: WebhookReceiver, n: int):
    metrics = AlertMetrics()
    target = Target("webhook-0", hook.url + "/hook", settings, metrics, secret=SECRET)
    target.start()
    try:
        assert target.submit(body)
        assert hook.wait_for(lambda r: len(r) >= n, WAIT_S)
        _wait_metric(metrics, "webhook-0")
    finally:
        target.stop()
    return metrics


def _wait_metric(metrics: AlertMetrics, target: str) -> None:
    done = threading.Event()
    for _ in range(int(WAIT_S / 0.01)):
        if any(_count(metrics, target, o) for o in ("sent", "rejected", "failed")):
            return
        done.wait(0.01)
    raise AssertionError("no outcome recorded")


def test_webhook_message_is_alertmanager_version_4_and_signed() -> None:
    body = webhook_body(
        "SitsLatencyOverSLO",
        [
            _alert("SitsLatencyOverSLO", model="a"),
            _alert("SitsLatencyOverSLO", T0 + timedelta(minutes=5), model="b"),
        ],
        receiver="sits-observe",
        external_url="http://sits:8080",
    )
    with WebhookReceiver(SECRET) as hook:
        metrics = _deliver(_settings(), body, hook, 1)
    (got,) = hook.received
    assert got.body == body
    assert got.verified is True
    # Independent check of the documented scheme: HMAC-SHA256(secret, "<ts>." + body).
    stamp = got.headers["x-sits-timestamp"]
    want = hmac.new(SECRET, stamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    assert got.headers["x-sits-signature"] == f"sha256={want}"
    message = json.loads(got.body)
    assert message["version"] == "4"
    assert message["status"] == "firing"
    assert message["receiver"] == "sits-observe"
    assert message["groupKey"] == '{}:{alertname="SitsLatencyOverSLO"}'
    assert message["groupLabels"] == {"alertname": "SitsLatencyOverSLO"}
    assert message["commonLabels"] == {"alertname": "SitsLatencyOverSLO", "severity": "warning"}
    assert message["commonAnnotations"] == {"description": "d", "summary": "s"}
    assert message["externalURL"] == "http://sits:8080"
    assert [a["status"] for a in message["alerts"]] == ["firing", "resolved"]
    assert message["alerts"][0]["endsAt"] == "0001-01-01T00:00:00Z"
    assert message["alerts"][1]["endsAt"] == "2026-11-30T12:05:00.000Z"
    assert message["alerts"][0]["startsAt"] == "2026-11-30T12:00:00.000Z"
    assert _count(metrics, "webhook-0", "sent") == 1


def test_verify_rejects_tampering_wrong_secret_and_replays() -> None:
    body = b'{"version":"4"}'
    headers = signed_headers(SECRET, 1000, body)
    assert verify(SECRET, headers, body, 1000.0)
    assert verify(SECRET, {k.lower(): v for k, v in headers.items()}, body, 1100.0)
    assert not verify(SECRET, headers, body + b" ", 1000.0)
    assert not verify(b"another-secret-of-16", headers, body, 1000.0)
    assert not verify(SECRET, headers, body, 1000.0 + 301)  # too old: a replay
    assert not verify(SECRET, {**headers, "X-Sits-Timestamp": "1001"}, body, 1000.0)
    assert not verify(SECRET, {}, body, 1000.0)


def test_retries_on_503_then_succeeds() -> None:
    with WebhookReceiver(SECRET, lambda n: (503 if n < 2 else 200, 0.0)) as hook:
        metrics = _deliver(_settings(), b"{}", hook, 3)
    assert len(hook.received) == 3
    assert all(r.verified for r in hook.received)  # re-signed per attempt
    assert _count(metrics, "webhook-0", "sent") == 1
    assert (
        metrics.registry.get_sample_value(
            "sits_alert_notification_retries_total", {"target": "webhook-0"}
        )
        == 2
    )


def test_no_retry_on_400() -> None:
    with WebhookReceiver(SECRET, lambda n: (400, 0.0)) as hook:
        metrics = _deliver(_settings(), b"{}", hook, 1)
    assert len(hook.received) == 1
    assert _count(metrics, "webhook-0", "rejected") == 1
    assert _count(metrics, "webhook-0", "sent") == 0


def test_a_timeout_is_retried() -> None:
    # The first answer comes after 1.5 s, past the 0.5 s timeout; the retry is answered at once.
    with WebhookReceiver(SECRET, lambda n: (200, 1.5 if n == 0 else 0.0)) as hook:
        metrics = _deliver(_settings(), b"{}", hook, 2)
    assert _count(metrics, "webhook-0", "sent") == 1
    assert (
        metrics.registry.get_sample_value(
            "sits_alert_notification_retries_total", {"target": "webhook-0"}
        )
        >= 1
    )


def test_gives_up_after_max_attempts_on_a_dead_port() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again before use: connection refused
    metrics = AlertMetrics()
    target = Target("webhook-0", f"http://127.0.0.1:{port}/", _settings(max_attempts=3), metrics)
    target.start()
    try:
        target.submit(b"{}")
        _wait_metric(metrics, "webhook-0")
    finally:
        target.stop()
    assert _count(metrics, "webhook-0", "failed") == 1
    assert (
        metrics.registry.get_sample_value(
            "sits_alert_notification_retries_total", {"target": "webhook-0"}
        )
        == 2
    )


def test_backoff_doubles_is_capped_and_jittered() -> None:
    settings = _settings(backoff_base_s=1.0, backoff_max_s=5.0)
    target = Target("t", "http://127.0.0.1:9/", settings, AlertMetrics(), rng=random.Random(1))
    waits = [target.backoff_s(n) for n in range(1, 6)]
    for n, wait in enumerate(waits, start=1):
        ceiling = min(5.0, 2.0 ** (n - 1))
        assert ceiling / 2 <= wait <= ceiling
    assert len(set(waits)) == len(waits)  # jittered, not a fixed schedule


def test_a_full_queue_drops_and_counts_without_blocking() -> None:
    release = threading.Event()

    def held(n: int) -> tuple[int, float]:
        release.wait(WAIT_S)
        return 200, 0.0

    metrics = AlertMetrics()
    settings = _settings(queue_size=1, timeout_s=60)
    with WebhookReceiver(SECRET, held) as hook:
        target = Target("webhook-0", hook.url, settings, metrics, secret=SECRET)
        target.start()
        try:
            assert target.submit(b"1")
            # Wait until the worker holds body 1 in flight (the server counts it on arrival).
            for _ in range(int(WAIT_S / 0.01)):
                if hook._requests:
                    break
                release.wait(0.01)
            # Neither call waits for the stuck receiver: body 2 queues, body 3 is dropped.
            assert target.submit(b"2")
            assert not target.submit(b"3")
            assert _count(metrics, "webhook-0", "dropped") == 1
            release.set()
            assert hook.wait_for(lambda r: len(r) == 2, WAIT_S)
        finally:
            release.set()
            target.stop()
    assert [r.body for r in hook.received] == [b"1", b"2"]


def test_webhooks_need_a_secret() -> None:
    with pytest.raises(ConfigError, match="--alert-webhook-secret-file"):
        NotifySettings(webhook_urls=("http://127.0.0.1:1/",)).resolved_secret()


# --- what is due when ---------------------------------------------------------------------


class Recorder:
    def __init__(self) -> None:
        self.requests: list[tuple[str, bytes]] = []
        self.arrived = threading.Condition()

    def handler(self, request: httpx.Request) -> httpx.Response:
        with self.arrived:
            self.requests.append((request.url.path, request.content))
            self.arrived.notify_all()
        return httpx.Response(200)

    def bodies(self, path: str, n: int) -> list[object]:
        with self.arrived:
            ok = self.arrived.wait_for(
                lambda: len([r for r in self.requests if r[0] == path]) >= n, WAIT_S
            )
            assert ok, f"expected {n} requests to {path}, got {self.requests}"
            return [json.loads(b) for p, b in self.requests if p == path]


def _notifier(recorder: Recorder, **values: object) -> Notifier:
    settings = _settings(
        alertmanager_url="http://am:9093",
        webhook_urls=("http://hook:1/w",),
        resend_interval_s=60,
        webhook_repeat_interval_s=600,
        **values,
    )
    transport = httpx.MockTransport(recorder.handler)
    return Notifier(settings, AlertMetrics(), valid_for_s=240, transport=transport).start()


def test_alertmanager_resend_and_resolve_policy() -> None:
    recorder = Recorder()
    notifier = _notifier(recorder)
    a = _alert(model="x")
    try:
        notifier.notify([a], [], T0)
        notifier.notify([a], [], T0 + timedelta(seconds=30))  # not due yet
        notifier.notify([a], [], T0 + timedelta(seconds=60))  # resend
        resolved = _alert(model="x", ends_at=T0 + timedelta(seconds=75))
        notifier.notify([], [resolved], T0 + timedelta(seconds=75))
        posts = recorder.bodies("/api/v2/alerts", 3)
    finally:
        notifier.stop()
    assert len(posts) == 3
    first, second, third = posts
    assert first == [
        {
            "labels": {"alertname": "SitsFragmentationHigh", "severity": "warning", "model": "x"},
            "annotations": {"summary": "s", "description": "d"},
            "startsAt": "2026-11-30T12:00:00.000Z",
            "endsAt": "2026-11-30T12:04:00.000Z",  # now + valid_for_s
            "generatorURL": "http://127.0.0.1:8080/metrics",
        }
    ]
    assert second[0]["endsAt"] == "2026-11-30T12:05:00.000Z"
    assert third[0]["endsAt"] == "2026-11-30T12:01:15.000Z"  # resolved: endsAt = resolution


def test_webhook_sends_on_change_and_repeat_only() -> None:
    recorder = Recorder()
    notifier = _notifier(recorder)
    a, b = _alert(model="a"), _alert(model="b")
    try:
        notifier.notify([a], [], T0)  # new: sent
        notifier.notify([a], [], T0 + timedelta(seconds=60))  # unchanged: not sent
        notifier.notify([a, b], [], T0 + timedelta(seconds=120))  # b new: sent
        notifier.notify([a, b], [], T0 + timedelta(seconds=720))  # repeat interval: sent
        gone = _alert(model="a", ends_at=T0 + timedelta(seconds=780))
        notifier.notify([b], [gone], T0 + timedelta(seconds=780))  # a resolved: sent
        messages = recorder.bodies("/w", 4)
    finally:
        notifier.stop()
    assert len(messages) == 4
    statuses = [sorted((x["labels"]["model"], x["status"]) for x in m["alerts"]) for m in messages]
    assert statuses == [
        [("a", "firing")],
        [("a", "firing"), ("b", "firing")],
        [("a", "firing"), ("b", "firing")],
        [("a", "resolved"), ("b", "firing")],
    ]
    assert [m["status"] for m in messages] == ["firing"] * 4
    assert messages[3]["alerts"][-1]["status"] == "resolved"  # firing ones first
