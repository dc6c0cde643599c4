"""The JSON bodies alerts travel in: Alertmanager's API v2 and its webhook format.

- :func:`alertmanager_body`: the list ``POST /api/v2/alerts`` takes (``postableAlerts``:
  labels, annotations, startsAt, endsAt, generatorURL). A firing alert carries an ``endsAt`` in
  the future (Prometheus sends ``now + 4 x max(evaluation, resend interval)``), so Alertmanager
  resolves it by itself if re-sends stop; a resolved one carries its resolution time.
- :func:`webhook_body`: Alertmanager's ``webhook_config`` message, version "4" (receiver,
  status, alerts[], groupLabels, commonLabels, commonAnnotations, externalURL, groupKey,
  truncatedAlerts), one per alert group (``alertname``), so a receiver written for
  Alertmanager reads ours unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import TypedDict

from sits_observe.surfaces.alerts.evaluator import Alert

#: Alertmanager's "zero time" endsAt of a firing alert in webhook messages.
ZERO_TIME = "0001-01-01T00:00:00Z"


class PostableAlert(TypedDict):
    """One element of Alertmanager's ``POST /api/v2/alerts`` body."""

    labels: dict[str, str]
    annotations: dict[str, str]
    startsAt: str
    endsAt: str
    generatorURL: str


class WebhookAlert(TypedDict):
    """One element of ``alerts`` in Alertmanager's webhook message."""

    status: str
    labels: dict[str, str]
    annotations: dict[str, str]
    startsAt: str
    endsAt: str
    generatorURL: str
    fingerprint: str


class WebhookMessage(TypedDict):
    """Alertmanager's webhook message, version 4."""

    version: str
    groupKey: str
    truncatedAlerts: int
    status: str
    receiver: str
    groupLabels: dict[str, str]
    commonLabels: dict[str, str]
    commonAnnotations: dict[str, str]
    externalURL: str
    alerts: list[WebhookAlert]


def rfc3339(moment: datetime) -> str:
    """UTC time as RFC 3339 with a ``Z`` (milliseconds), as Alertmanager writes it."""
    text = moment.astimezone(UTC).isoformat(timespec="milliseconds")
    return text.replace("+00:00", "Z")


def generator_url(external_url: str, alert: Alert) -> str:
    """Where the alert came from: the service's /metrics (the samples the rules read)."""
    return external_url.rstrip("/") + "/metrics"


def alertmanager_body(
    alerts: Sequence[Alert], now: datetime, *, valid_for_s: float, external_url: str
) -> bytes:
    """The ``POST /api/v2/alerts`` body for ``alerts`` (firing and resolved)."""
    items: list[PostableAlert] = []
    for alert in alerts:
        ends = alert.ends_at or now + timedelta(seconds=valid_for_s)
        items.append(
            {
                "labels": dict(alert.labels),
                "annotations": dict(alert.annotations),
                "startsAt": rfc3339(alert.starts_at),
                "endsAt": rfc3339(ends),
                "generatorURL": generator_url(external_url, alert),
            }
        )
    return json.dumps(items, separators=(",", ":")).encode()


def _common(maps: Sequence[Mapping[str, str]]) -> dict[str, str]:
    if not maps:
        return {}
    first = maps[0]
    return {k: v for k, v in sorted(first.items()) if all(m.get(k) == v for m in maps[1:])}


def webhook_message(
    group: str, alerts: Sequence[Alert], *, receiver: str, external_url: str
) -> WebhookMessage:
    """One group's message: ``alerts`` of rule ``group``, firing first, then resolved."""
    ordered = sorted(alerts, key=lambda a: (a.status != "firing", a.fingerprint))
    group_labels = {"alertname": group}
    return {
        "version": "4",
        "groupKey": "{}:" + "{" + f'alertname="{group}"' + "}",
        "truncatedAlerts": 0,
        "status": "firing" if any(a.ends_at is None for a in alerts) else "resolved",
        "receiver": receiver,
        "groupLabels": group_labels,
        "commonLabels": _common([a.labels for a in ordered]),
        "commonAnnotations": _common([a.annotations for a in ordered]),
        "externalURL": external_url,
        "alerts": [
            {
                "status": a.status,
                "labels": dict(a.labels),
                "annotations": dict(a.annotations),
                "startsAt": rfc3339(a.starts_at),
                "endsAt": ZERO_TIME if a.ends_at is None else rfc3339(a.ends_at),
                "generatorURL": generator_url(external_url, a),
                "fingerprint": a.fingerprint,
            }
            for a in ordered
        ],
    }


def webhook_body(group: str, alerts: Sequence[Alert], *, receiver: str, external_url: str) -> bytes:
    """:func:`webhook_message` as the exact bytes that are signed and sent."""
    message = webhook_message(group, alerts, receiver=receiver, external_url=external_url)
    return json.dumps(message, separators=(",", ":")).encode()
