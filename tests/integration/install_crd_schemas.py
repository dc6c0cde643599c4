"""JSON schemas of the Prometheus Operator objects the install renders, written down here.

``kubernetes-validate`` bundles the OpenAPI schemas of Kubernetes' own kinds only; a
ServiceMonitor, PodMonitor or PrometheusRule (``monitoring.coreos.com/v1``) is a custom
resource whose schema ships with the operator's CRDs. These are that schema, transcribed
from the operator's CRDs (``example/prometheus-operator-crd/monitoring.coreos.com_*.yaml``,
operator 0.8x: field names, types, enums, the duration pattern, the required fields) for
every field the install uses, and stricter in one way: any field not listed is refused
(``additionalProperties: false``), so a misspelt field fails here instead of being pruned
silently by the API server.
"""

from __future__ import annotations

from typing import Any

#: The CRDs' pattern of a Prometheus duration (``monitoringv1.Duration``).
DURATION = {
    "type": "string",
    "pattern": r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?"
    r"(([0-9]+)ms)?)$",
}
_STRINGS = {"type": "object", "additionalProperties": {"type": "string"}}
_METADATA = {
    "type": "object",
    "required": ["name", "namespace"],
    "properties": {
        "name": {"type": "string", "minLength": 1},
        "namespace": {"type": "string", "minLength": 1},
        "labels": _STRINGS,
        "annotations": _STRINGS,
    },
    "additionalProperties": False,
}
_LABEL_SELECTOR = {
    "type": "object",
    "properties": {
        "matchLabels": _STRINGS,
        "matchExpressions": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["key", "operator"],
                "properties": {
                    "key": {"type": "string"},
                    "operator": {"type": "string"},
                    "values": {"type": "array", "items": {"type": "string"}},
                },
                "additionalProperties": False,
            },
        },
    },
    "additionalProperties": False,
}
_NAMESPACE_SELECTOR = {
    "type": "object",
    "properties": {
        "any": {"type": "boolean"},
        "matchNames": {"type": "array", "items": {"type": "string"}},
    },
    "additionalProperties": False,
}
_RELABEL = {
    "type": "object",
    "properties": {
        "action": {
            "enum": [
                *(
                    a
                    for pair in (
                        ("replace", "Replace"),
                        ("keep", "Keep"),
                        ("drop", "Drop"),
                        ("hashmod", "HashMod"),
                        ("labelmap", "LabelMap"),
                        ("labeldrop", "LabelDrop"),
                        ("labelkeep", "LabelKeep"),
                        ("lowercase", "Lowercase"),
                        ("uppercase", "Uppercase"),
                        ("keepequal", "KeepEqual"),
                        ("dropequal", "DropEqual"),
                    )
                    for a in pair
                )
            ]
        },
        "regex": {"type": "string"},
        "replacement": {"type": "string"},
        "separator": {"type": "string"},
        "sourceLabels": {"type": "array", "items": {"type": "string"}},
        "targetLabel": {"type": "string"},
    },
    "additionalProperties": False,
}
_SECRET_KEY = {
    "type": "object",
    "required": ["key"],
    "properties": {"name": {"type": "string"}, "key": {"type": "string"}},
    "additionalProperties": False,
}
_ENDPOINT = {
    "type": "object",
    "properties": {
        "port": {"type": "string"},
        "path": {"type": "string"},
        "scheme": {"enum": ["http", "https", "HTTP", "HTTPS"]},
        "interval": DURATION,
        "scrapeTimeout": DURATION,
        "honorLabels": {"type": "boolean"},
        "relabelings": {"type": "array", "items": _RELABEL},
        "metricRelabelings": {"type": "array", "items": _RELABEL},
        "authorization": {
            "type": "object",
            "properties": {"type": {"type": "string"}, "credentials": _SECRET_KEY},
            "additionalProperties": False,
        },
    },
    "additionalProperties": False,
}


def _object(kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"const": "monitoring.coreos.com/v1"},
            "kind": {"const": kind},
            "metadata": _METADATA,
            "spec": spec,
        },
        "additionalProperties": False,
    }


SERVICE_MONITOR = _object(
    "ServiceMonitor",
    {
        "type": "object",
        "required": ["endpoints", "selector"],
        "properties": {
            "selector": _LABEL_SELECTOR,
            "namespaceSelector": _NAMESPACE_SELECTOR,
            "jobLabel": {"type": "string"},
            "endpoints": {"type": "array", "minItems": 1, "items": _ENDPOINT},
        },
        "additionalProperties": False,
    },
)

POD_MONITOR = _object(
    "PodMonitor",
    {
        "type": "object",
        "required": ["selector"],
        "properties": {
            "selector": _LABEL_SELECTOR,
            "namespaceSelector": _NAMESPACE_SELECTOR,
            "jobLabel": {"type": "string"},
            "podMetricsEndpoints": {"type": "array", "minItems": 1, "items": _ENDPOINT},
        },
        "additionalProperties": False,
    },
)

_RULE = {
    "type": "object",
    "required": ["expr"],
    "properties": {
        "alert": {"type": "string"},
        "record": {"type": "string"},
        "expr": {"anyOf": [{"type": "integer"}, {"type": "string"}]},
        "for": DURATION,
        "keep_firing_for": {**DURATION, "minLength": 1},
        "labels": _STRINGS,
        "annotations": _STRINGS,
    },
    "additionalProperties": False,
}

PROMETHEUS_RULE = _object(
    "PrometheusRule",
    {
        "type": "object",
        "properties": {
            "groups": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["name"],
                    "properties": {
                        "name": {"type": "string", "minLength": 1},
                        "interval": DURATION,
                        "rules": {"type": "array", "items": _RULE},
                    },
                    "additionalProperties": False,
                },
            }
        },
        "additionalProperties": False,
    },
)

#: kind -> schema, for every monitoring.coreos.com/v1 kind the install renders.
SCHEMAS: dict[str, dict[str, Any]] = {
    "ServiceMonitor": SERVICE_MONITOR,
    "PodMonitor": POD_MONITOR,
    "PrometheusRule": PROMETHEUS_RULE,
}
