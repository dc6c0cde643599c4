"""Prometheus metrics of alerting, on the service's explicit registry.

Label sets are bounded: ``alertname`` is one of the rule names, ``target`` is
``alertmanager`` or ``webhook-<i>`` (``i`` = position of the ``--alert-webhook-url`` flag),
``outcome`` one of :data:`OUTCOMES`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge

#: ``sent`` (2xx), ``rejected`` (4xx, not retried), ``failed`` (retries exhausted or shut
#: down), ``dropped`` (the target's queue was full).
OUTCOMES = ("sent", "rejected", "failed", "dropped")


@dataclass
class AlertMetrics:
    """Every metric of alerting."""

    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        reg = self.registry
        self.firing = Gauge(
            "sits_alerts_firing",
            "alerts firing now in the in-process evaluator, by rule",
            ("alertname",),
            registry=reg,
        )
        self.notifications = Counter(
            "sits_alert_notifications_total",
            "alert notifications by target and outcome: sent, rejected, failed, dropped",
            ("target", "outcome"),
            registry=reg,
        )
        self.retries = Counter(
            "sits_alert_notification_retries_total",
            "HTTP attempts retried after a 5xx, 429, timeout or connection error, by target",
            ("target",),
            registry=reg,
        )
        self.evaluation_errors = Counter(
            "sits_alert_evaluation_errors_total",
            "rule evaluations that failed, by rule (`samples`: reading the registry failed)",
            ("rule",),
            registry=reg,
        )
