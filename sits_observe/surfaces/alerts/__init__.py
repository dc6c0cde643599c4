"""Alerting: declarative rules (Prometheus file + in-process), Alertmanager and webhooks.

See docs/alerts.md. :func:`alert_rules` is the single list of rules; :mod:`.promfile`
writes grafana/alerts/sits-observe.rules.yml from it; :func:`start_alerting` runs the
evaluator and notifier inside ``serve``.

The re-exports load on first use (:mod:`sits_observe.domain.lazy_exports`): ``serve`` reads
only :mod:`.settings` for its flags, and the evaluator and notifier (httpx) are not imported
before its port is up.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sits_observe.domain.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from sits_observe.surfaces.alerts.evaluator import Alert, AlertEvaluator, AlertSink
    from sits_observe.surfaces.alerts.metrics import AlertMetrics
    from sits_observe.surfaces.alerts.notify import Notifier, Target
    from sits_observe.surfaces.alerts.promfile import rules_yaml
    from sits_observe.surfaces.alerts.rules import AlertRule, alert_rules
    from sits_observe.surfaces.alerts.runtime import AlertingRuntime, start_alerting
    from sits_observe.surfaces.alerts.sampling import registry_samples
    from sits_observe.surfaces.alerts.settings import (
        AlertingSettings,
        AlertSettings,
        NotifySettings,
    )
    from sits_observe.surfaces.alerts.signing import signature, signed_headers, verify

__all__ = [
    "Alert",
    "AlertEvaluator",
    "AlertMetrics",
    "AlertRule",
    "AlertSettings",
    "AlertSink",
    "AlertingRuntime",
    "AlertingSettings",
    "Notifier",
    "NotifySettings",
    "Target",
    "alert_rules",
    "registry_samples",
    "rules_yaml",
    "signature",
    "signed_headers",
    "start_alerting",
    "verify",
]

__getattr__ = lazy_exports(
    __name__,
    {
        "Alert": "evaluator",
        "AlertEvaluator": "evaluator",
        "AlertSink": "evaluator",
        "AlertMetrics": "metrics",
        "Notifier": "notify",
        "Target": "notify",
        "rules_yaml": "promfile",
        "AlertRule": "rules",
        "alert_rules": "rules",
        "AlertingRuntime": "runtime",
        "start_alerting": "runtime",
        "registry_samples": "sampling",
        "AlertingSettings": "settings",
        "AlertSettings": "settings",
        "NotifySettings": "settings",
        "signature": "signing",
        "signed_headers": "signing",
        "verify": "signing",
    },
)
