"""The in-process alert evaluator: rules over the service's own samples, every interval.

Each evaluation reads the current samples (``source``, normally :func:`registry_samples` of
the service's registry), applies every :class:`AlertRule` and keeps Prometheus's state
machine per alert (rule + label set): *pending* from the first evaluation the condition holds
(``startsAt``), *firing* once it has held ``for_s`` seconds, *resolved* (``endsAt`` = now) at
the first evaluation it no longer holds; a pending alert that stops holding is forgotten.
The firing and just-resolved alerts go to the sink (the :class:`Notifier`), whose ``notify``
only queues work, so an evaluation never waits on the network.

A rule that fails to evaluate is logged and counted (``sits_alert_evaluation_errors_total``)
and keeps its previous state for that round; the loop never stops on an error.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Literal, Protocol

from sits_observe.surfaces.alerts.conditions import Labels, Samples, labels_of
from sits_observe.surfaces.alerts.metrics import AlertMetrics
from sits_observe.surfaces.alerts.rules import AlertRule
from sits_observe.surfaces.alerts.templates import render

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]
AlertKey = tuple[str, Labels]


@dataclass(frozen=True)
class Alert:
    """One alert as sent: ``ends_at`` is None while it fires."""

    name: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    starts_at: datetime
    ends_at: datetime | None
    value: float

    @property
    def key(self) -> AlertKey:
        """Rule name and label set: what identifies an alert across evaluations."""
        return (self.name, labels_of(self.labels))

    @property
    def status(self) -> Literal["firing", "resolved"]:
        """``firing`` or ``resolved``, as in Alertmanager's JSON."""
        return "firing" if self.ends_at is None else "resolved"

    @property
    def fingerprint(self) -> str:
        """A stable hex id of the label set (16 digits, like Alertmanager's)."""
        text = "\xff".join(f"{k}\xfe{v}" for k, v in labels_of(self.labels))
        return hashlib.sha256(text.encode()).hexdigest()[:16]


class AlertSink(Protocol):
    """Receives each evaluation's firing and just-resolved alerts; must not block."""

    def notify(self, firing: Sequence[Alert], resolved: Sequence[Alert], now: datetime) -> None:
        """Queue notifications for ``firing`` and ``resolved``."""
        ...


@dataclass
class _Active:
    active_at: datetime
    value: float
    labels: dict[str, str]
    annotations: dict[str, str]
    firing: bool = False


@dataclass
class AlertEvaluator:
    """Evaluates ``rules`` over ``source()`` and hands the results to ``sink``."""

    rules: Sequence[AlertRule]
    source: Callable[[], Samples]
    sink: AlertSink | None
    metrics: AlertMetrics
    clock: Clock = field(default=lambda: datetime.now(UTC))
    _active: dict[AlertKey, _Active] = field(default_factory=dict, init=False)
    _history: dict[str, dict[Labels, list[tuple[float, float]]]] = field(
        default_factory=dict, init=False
    )

    def __post_init__(self) -> None:
        for rule in self.rules:
            self.metrics.firing.labels(rule.name).set(0)

    def evaluate(self) -> list[Alert]:
        """One evaluation at ``clock()``: returns the alerts firing now."""
        now = self.clock()
        now_s = now.timestamp()
        try:
            samples = self.source()
        except Exception:
            log.exception("cannot read the samples for alert evaluation; trying next interval")
            self.metrics.evaluation_errors.labels("samples").inc()
            return self.firing()
        self._remember(samples, now_s)
        resolved: list[Alert] = []
        for rule in self.rules:
            try:
                resolved.extend(self._apply(rule, samples, now, now_s))
            except Exception:
                log.exception("alert rule %s failed; it keeps its state this round", rule.name)
                self.metrics.evaluation_errors.labels(rule.name).inc()
        firing = self.firing()
        for rule in self.rules:
            self.metrics.firing.labels(rule.name).set(sum(a.name == rule.name for a in firing))
        if self.sink is not None and (firing or resolved):
            self.sink.notify(firing, resolved, now)
        return firing

    def firing(self) -> list[Alert]:
        """The alerts firing after the latest evaluation."""
        return [
            Alert(key[0], st.labels, st.annotations, st.active_at, None, st.value)
            for key, st in self._active.items()
            if st.firing
        ]

    def pending(self) -> list[AlertKey]:
        """Alerts whose condition holds but not yet for their rule's ``for_s``."""
        return [key for key, st in self._active.items() if not st.firing]

    def run(self, stop: threading.Event, interval_s: float) -> None:
        """Evaluate every ``interval_s`` seconds until ``stop`` is set."""
        while not stop.is_set():
            try:
                self.evaluate()
            except Exception:
                # evaluate() already isolates each rule; this guards the sink and the clock.
                log.exception("alert evaluation failed; trying again in %s s", interval_s)
                self.metrics.evaluation_errors.labels("samples").inc()
            stop.wait(interval_s)

    def _apply(self, rule: AlertRule, samples: Samples, now: datetime, now_s: float) -> list[Alert]:
        hits = rule.condition.evaluate(samples, self._history, now_s)
        seen: set[AlertKey] = set()
        for series, value in hits:
            labels = {k: v for k, v in series if k != "__name__"}
            labels.update(alertname=rule.name, severity=rule.severity)
            key = (rule.name, labels_of(labels))
            seen.add(key)
            state = self._active.setdefault(key, _Active(now, value, labels, {}))
            state.value = value
            state.annotations = {
                "summary": render(rule.summary, labels, value),
                "description": render(rule.description, labels, value),
                "runbook_url": rule.runbook_url,
            }
            if now - state.active_at >= timedelta(seconds=rule.for_s):
                state.firing = True
        resolved = []
        for key in [k for k in self._active if k[0] == rule.name and k not in seen]:
            state = self._active.pop(key)
            if state.firing:
                resolved.append(
                    Alert(
                        rule.name,
                        state.labels,
                        state.annotations,
                        state.active_at,
                        now,
                        state.value,
                    )
                )
        return resolved

    def _remember(self, samples: Samples, now_s: float) -> None:
        """Keep the past samples the rules need (e.g. for ``increase``), over their windows."""
        for rule in self.rules:
            for metric, window_s in rule.condition.history_needs():
                series = self._history.setdefault(metric, {})
                current = dict(samples.get(metric, ()))
                for labels in list(series):
                    if labels not in current:
                        del series[labels]
                for labels, value in current.items():
                    points = series.setdefault(labels, [])
                    points.append((now_s, value))
                    while points and points[0][0] < now_s - window_s:
                        points.pop(0)
