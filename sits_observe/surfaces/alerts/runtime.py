"""Alerting inside ``serve``: the evaluator thread and the notifier, started and stopped as one.

:func:`start_alerting` is called from the service's lifespan with the service's registry;
the evaluator runs on its own thread (reading the registry may run the exporter's store
queries, which must not hold the event loop) and the notifier's targets on theirs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import httpx
from prometheus_client import CollectorRegistry

from sits_observe.surfaces.alerts.evaluator import AlertEvaluator
from sits_observe.surfaces.alerts.metrics import AlertMetrics
from sits_observe.surfaces.alerts.notify import Notifier
from sits_observe.surfaces.alerts.rules import alert_rules
from sits_observe.surfaces.alerts.sampling import registry_samples
from sits_observe.surfaces.alerts.settings import AlertingSettings


@dataclass
class AlertingRuntime:
    """The running evaluator and notifier; :meth:`stop` ends both."""

    evaluator: AlertEvaluator
    notifier: Notifier
    thread: threading.Thread
    stop_event: threading.Event

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop evaluating, then stop delivering (queued notifications are not sent)."""
        self.stop_event.set()
        self.thread.join(timeout_s)
        self.notifier.stop(timeout_s)


def start_alerting(
    settings: AlertingSettings,
    registry: CollectorRegistry,
    *,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    transport: httpx.BaseTransport | None = None,
) -> AlertingRuntime:
    """Start evaluating the rules over ``registry`` and delivering to the configured targets;
    raises :class:`ConfigError` for a missing or unreadable webhook secret."""
    metrics = AlertMetrics(registry)
    valid_for_s = 4 * max(settings.eval_interval_s, settings.notify.resend_interval_s)
    notifier = Notifier(
        settings.notify, metrics, valid_for_s=valid_for_s, transport=transport
    ).start()
    evaluator = AlertEvaluator(
        rules=alert_rules(settings.rules),
        source=lambda: registry_samples(registry),
        sink=notifier,
        metrics=metrics,
        clock=clock,
    )
    stop = threading.Event()
    thread = threading.Thread(
        target=evaluator.run, args=(stop, settings.eval_interval_s), name="alerts-eval", daemon=True
    )
    thread.start()
    return AlertingRuntime(evaluator, notifier, thread, stop)
