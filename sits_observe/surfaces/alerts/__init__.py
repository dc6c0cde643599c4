"""Alerting: declarative rules (Prometheus file + in-process), Alertmanager and webhooks.

See docs/alerts.md. :func:`alert_rules` is the single list of rules; :mod:`.promfile`
writes grafana/alerts/sits-observe.rules.yml from it; :func:`start_alerting` runs the
evaluator and notifier inside ``serve``.
"""

from sits_observe.surfaces.alerts.evaluator import Alert, AlertEvaluator, AlertSink
from sits_observe.surfaces.alerts.metrics import AlertMetrics
from sits_observe.surfaces.alerts.notify import Notifier, Target
from sits_observe.surfaces.alerts.promfile import rules_yaml
from sits_observe.surfaces.alerts.rules import AlertRule, alert_rules
from sits_observe.surfaces.alerts.runtime import AlertingRuntime, start_alerting
from sits_observe.surfaces.alerts.sampling import registry_samples
from sits_observe.surfaces.alerts.settings import AlertingSettings, AlertSettings, NotifySettings
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
