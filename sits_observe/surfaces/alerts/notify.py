"""Delivery of alerts to Alertmanager and to signed webhooks, off the evaluation thread.

:class:`Notifier` is the evaluator's sink. ``notify()`` runs in the evaluation thread and
only decides what is due and queues request bodies: each target (Alertmanager, each webhook)
has its own thread and bounded queue, so a slow or dead receiver delays nothing but itself,
and a full queue drops the notification and counts it
(``sits_alert_notifications_total{outcome="dropped"}``) instead of blocking.

What is due, per target:

- Alertmanager (``POST /api/v2/alerts``): a new firing alert at once, then every
  ``resend_interval_s`` while it fires (Alertmanager expects re-sends, and resolves an alert
  whose ``endsAt`` passes without one); a resolved alert once, with ``endsAt`` = resolution.
- Webhooks (Alertmanager's webhook JSON, one message per alert group = ``alertname``): when
  the group's set of firing alerts changes or an alert resolves, and every
  ``webhook_repeat_interval_s`` while any fires. Each body is signed (:mod:`.signing`).

Each request is retried with exponential backoff and jitter on 5xx, 429, timeouts and
connection errors, up to ``max_attempts``; any other status (4xx: the receiver refuses the
request, a retry would not change that) ends it as ``rejected``.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import random
import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Literal

import httpx

from sits_observe.surfaces.alerts.evaluator import Alert, AlertKey
from sits_observe.surfaces.alerts.metrics import AlertMetrics
from sits_observe.surfaces.alerts.payloads import alertmanager_body, webhook_body
from sits_observe.surfaces.alerts.settings import NotifySettings
from sits_observe.surfaces.alerts.signing import signed_headers

log = logging.getLogger(__name__)

ALERTS_PATH = "/api/v2/alerts"
Attempt = Literal["sent", "retry", "rejected"]


class Target:
    """One destination: a thread posting the bodies of its bounded queue, with retries."""

    def __init__(
        self,
        name: str,
        url: str,
        settings: NotifySettings,
        metrics: AlertMetrics,
        *,
        secret: bytes | None = None,
        transport: httpx.BaseTransport | None = None,
        wall_clock_s: Callable[[], float] = time.time,
        rng: random.Random | None = None,
    ) -> None:
        self.name = name
        self.url = url
        self._settings = settings
        self._metrics = metrics
        self._secret = secret
        self._transport = transport
        self._wall_clock_s = wall_clock_s
        self._rng = rng or random.Random()
        self._queue: queue.Queue[bytes | None] = queue.Queue(maxsize=settings.queue_size)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"alerts-{name}", daemon=True)

    def start(self) -> None:
        """Start the delivery thread."""
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop after the current attempt; bodies still queued are not sent."""
        self._stop.set()
        # With a full queue the thread sees the stop flag after its current delivery.
        with contextlib.suppress(queue.Full):
            self._queue.put_nowait(None)
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def submit(self, body: bytes) -> bool:
        """Queue ``body`` without waiting; False (and counted as dropped) when full."""
        try:
            self._queue.put_nowait(body)
        except queue.Full:
            self._metrics.notifications.labels(self.name, "dropped").inc()
            log.warning("alert queue of %s is full; notification dropped", self.name)
            return False
        return True

    def _run(self) -> None:
        with httpx.Client(timeout=self._settings.timeout_s, transport=self._transport) as client:
            while not self._stop.is_set():
                body = self._queue.get()
                if body is None or self._stop.is_set():
                    break
                try:
                    self._deliver(client, body)
                except Exception:
                    # Never let one notification end the thread: count it and carry on.
                    log.exception("alert delivery to %s failed unexpectedly", self.name)
                    self._metrics.notifications.labels(self.name, "failed").inc()

    def _deliver(self, client: httpx.Client, body: bytes) -> None:
        s = self._settings
        for attempt in range(1, s.max_attempts + 1):
            if attempt > 1:
                self._metrics.retries.labels(self.name).inc()
                if self._stop.wait(self.backoff_s(attempt - 1)):
                    break
            result = self._attempt(client, body)
            if result != "retry":
                self._metrics.notifications.labels(self.name, result).inc()
                return
        self._metrics.notifications.labels(self.name, "failed").inc()
        log.warning("giving up on a notification to %s after %s attempts", self.name, attempt)

    def backoff_s(self, retry: int) -> float:
        """Wait before retry number ``retry`` (1 = first): doubling, capped, jittered 50-100%."""
        s = self._settings
        ceiling = min(s.backoff_max_s, s.backoff_base_s * 2.0 ** (retry - 1))
        return ceiling * self._rng.uniform(0.5, 1.0)

    def _attempt(self, client: httpx.Client, body: bytes) -> Attempt:
        headers = {"Content-Type": "application/json", "User-Agent": "sits-observe"}
        if self._secret is not None:
            headers.update(signed_headers(self._secret, int(self._wall_clock_s()), body))
        try:
            response = client.post(self.url, content=body, headers=headers)
        except httpx.TransportError as exc:  # timeouts, refused connections, resets
            log.info("alert delivery to %s: %s; retrying", self.name, type(exc).__name__)
            return "retry"
        if response.is_success:
            return "sent"
        if response.status_code == 429 or response.status_code >= 500:
            log.info("alert delivery to %s: HTTP %s; retrying", self.name, response.status_code)
            return "retry"
        log.warning(
            "alert delivery to %s refused: HTTP %s %s",
            self.name,
            response.status_code,
            response.text[:200],
        )
        return "rejected"


class Notifier:
    """The evaluator's sink: decides what each target is due and queues it (never blocks)."""

    def __init__(
        self,
        settings: NotifySettings,
        metrics: AlertMetrics,
        *,
        valid_for_s: float,
        transport: httpx.BaseTransport | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self._settings = settings
        self._valid_for_s = valid_for_s
        secret = settings.resolved_secret()
        self.alertmanager: Target | None = None
        if settings.alertmanager_url is not None:
            url = settings.alertmanager_url.rstrip("/") + ALERTS_PATH
            self.alertmanager = Target(
                "alertmanager", url, settings, metrics, transport=transport, rng=rng
            )
        self.webhooks = [
            Target(
                f"webhook-{i}", url, settings, metrics, secret=secret, transport=transport, rng=rng
            )
            for i, url in enumerate(settings.webhook_urls)
        ]
        self._am_sent: dict[AlertKey, datetime] = {}
        self._groups_firing: dict[str, frozenset[AlertKey]] = {}
        self._groups_sent: dict[str, datetime] = {}

    @property
    def targets(self) -> list[Target]:
        """Every configured target."""
        return ([self.alertmanager] if self.alertmanager else []) + self.webhooks

    def start(self) -> Notifier:
        """Start every target's thread."""
        for target in self.targets:
            target.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop every target's thread."""
        for target in self.targets:
            target.stop(timeout_s)

    def notify(self, firing: Sequence[Alert], resolved: Sequence[Alert], now: datetime) -> None:
        """Queue what is due to each target for this evaluation's alerts."""
        if self.alertmanager is not None:
            self._to_alertmanager(self.alertmanager, firing, resolved, now)
        if self.webhooks:
            self._to_webhooks(firing, resolved, now)

    def _to_alertmanager(
        self, target: Target, firing: Sequence[Alert], resolved: Sequence[Alert], now: datetime
    ) -> None:
        resend = timedelta(seconds=self._settings.resend_interval_s)
        due = [
            a for a in firing if a.key not in self._am_sent or now - self._am_sent[a.key] >= resend
        ]
        live = {a.key for a in firing}
        self._am_sent = {k: t for k, t in self._am_sent.items() if k in live}
        if not due and not resolved:
            return
        self._am_sent.update((a.key, now) for a in due)
        body = alertmanager_body(
            [*due, *resolved],
            now,
            valid_for_s=self._valid_for_s,
            external_url=self._settings.external_url,
        )
        target.submit(body)

    def _to_webhooks(
        self, firing: Sequence[Alert], resolved: Sequence[Alert], now: datetime
    ) -> None:
        repeat_s = self._settings.webhook_repeat_interval_s
        groups = {a.name for a in [*firing, *resolved]} | set(self._groups_firing)
        for group in sorted(groups):
            now_firing = [a for a in firing if a.name == group]
            now_resolved = [a for a in resolved if a.name == group]
            keys = frozenset(a.key for a in now_firing)
            changed = keys != self._groups_firing.get(group, frozenset()) or bool(now_resolved)
            last = self._groups_sent.get(group)
            repeat = (
                bool(keys)
                and repeat_s > 0
                and last is not None
                and (now - last >= timedelta(seconds=repeat_s))
            )
            if keys:
                self._groups_firing[group] = keys
            else:
                self._groups_firing.pop(group, None)
                self._groups_sent.pop(group, None)
            if not (changed or repeat) or not (now_firing or now_resolved):
                continue
            if keys:
                self._groups_sent[group] = now
            body = webhook_body(
                group,
                [*now_firing, *now_resolved],
                receiver=self._settings.receiver,
                external_url=self._settings.external_url,
            )
            for target in self.webhooks:
                target.submit(body)
