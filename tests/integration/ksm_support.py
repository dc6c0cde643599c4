"""Test support: kube-state-metrics exposition of Node and Pod objects, by KSM's own rules.

What ``kube-state-metrics`` v2 writes for the objects (internal/store/node.go, pod.go,
utils.go of kubernetes/kube-state-metrics): resource names sanitised (``[^a-zA-Z0-9_]`` ->
``_``), CPU as ``MilliValue / 1000`` cores, memory and extended resources as ``Value()``
(rounded up), one ``kube_node_status_condition`` series per condition and status
(``true`` / ``false`` / ``unknown``, 1 for the current one), one ``kube_pod_status_phase``
series per phase, one ``kube_pod_status_qos_class`` series per class when
``status.qosClass`` is set, labels, annotations and node selectors as ``label_*`` /
``annotation_*`` / ``nodeselector_*`` (the allowlists and the ``kube_pod_nodeselectors``
opt-in are assumed on).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from sits_observe.domain.quantity import parse_quantity

#: Node labels KSM is told to export (``--metric-labels-allowlist=nodes=[...]``).
NODE_LABELS_ALLOWED = (
    "nvidia.com/gpu.product",
    "nvidia.com/gpu.memory",
    "sits.io/gpu-interconnect",
    "sits.io/gpus-per-numa",
)
#: Pod annotations KSM is told to export (``--metric-annotations-allowlist=pods=[...]``).
POD_ANNOTATIONS_ALLOWED = ("alibabacloud.com/gpu-milli",)
_PHASES = ("Pending", "Succeeded", "Failed", "Unknown", "Running")
_STATUSES = ("true", "false", "unknown")
_QOS_CLASSES = ("BestEffort", "Burstable", "Guaranteed")


def sanitise(name: str) -> str:
    """KSM's ``SanitizeLabelName``."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def _labels(pairs: Mapping[str, str]) -> str:
    return ",".join(f'{k}="{v}"' for k, v in pairs.items())


def _value(resource: str, raw: str) -> tuple[str, float]:
    """(unit, value) of one resource quantity, as KSM converts it."""
    quantity: Decimal = parse_quantity(raw)
    if resource == "cpu":
        return "core", math.ceil(quantity * 1000) / 1000
    return ("byte" if resource == "memory" else "integer"), float(math.ceil(quantity))


def node_lines(node: Mapping[str, Any]) -> list[str]:
    """The KSM series of one Node object."""
    name = node["metadata"]["name"]
    status = node.get("status", {})
    out = []
    for resource, raw in status.get("allocatable", {}).items():
        unit, value = _value(resource, raw)
        labels = {"node": name, "resource": sanitise(resource), "unit": unit}
        out.append(f"kube_node_status_allocatable{{{_labels(labels)}}} {value!r}")
    for condition in status.get("conditions", []):
        for s in _STATUSES:
            current = 1 if str(condition["status"]).lower() == s else 0
            labels = {"node": name, "condition": condition["type"], "status": s}
            out.append(f"kube_node_status_condition{{{_labels(labels)}}} {current}")
    allowed = {
        f"label_{sanitise(k)}": v
        for k, v in node["metadata"].get("labels", {}).items()
        if k in NODE_LABELS_ALLOWED
    }
    out.append(f"kube_node_labels{{{_labels({'node': name, **allowed})}}} 1")
    return out


def pod_lines(pod: Mapping[str, Any]) -> list[str]:
    """The KSM series of one Pod object."""
    meta, spec, status = pod["metadata"], pod.get("spec", {}), pod.get("status", {})
    who = {"namespace": meta["namespace"], "pod": meta["name"], "uid": meta["uid"]}
    node = spec.get("nodeName") or ""
    owners: list[dict[str, str]] = meta.get("ownerReferences", [])
    owner = next((o for o in owners if o.get("controller")), {})
    info = {
        **who,
        "host_ip": "",
        "pod_ip": "",
        "node": node,
        "created_by_kind": owner.get("kind", ""),
        "created_by_name": owner.get("name", ""),
        "priority_class": spec.get("priorityClassName", ""),
        "host_network": "false",
    }
    out = [f"kube_pod_info{{{_labels(info)}}} 1"]
    phase = status.get("phase")
    if phase:
        for p in _PHASES:
            out.append(f"kube_pod_status_phase{{{_labels({**who, 'phase': p})}}} {int(p == phase)}")
    qos = status.get("qosClass")
    if qos:  # KSM v2.8+: one series per class, none when the API server set no class
        for q in _QOS_CLASSES:
            qos_labels = _labels({**who, "qos_class": q})
            out.append(f"kube_pod_status_qos_class{{{qos_labels}}} {int(q == qos)}")
    out += _requests("kube_pod_container_resource_requests", who, node, spec.get("containers"))
    init = spec.get("initContainers") or []
    out += _requests("kube_pod_init_container_resource_requests", who, node, init)
    for c in init:
        labels = {**who, "container": c["name"], "restart_policy": c.get("restartPolicy", "")}
        out.append(f"kube_pod_init_container_info{{{_labels(labels)}}} 1")
    selectors = {f"nodeselector_{sanitise(k)}": v for k, v in spec.get("nodeSelector", {}).items()}
    out.append(f"kube_pod_nodeselectors{{{_labels({**who, **selectors})}}} 1")
    annotations = {
        f"annotation_{sanitise(k)}": v
        for k, v in meta.get("annotations", {}).items()
        if k in POD_ANNOTATIONS_ALLOWED
    }
    out.append(f"kube_pod_annotations{{{_labels({**who, **annotations})}}} 1")
    return out


def _requests(
    family: str, who: Mapping[str, str], node: str, containers: Iterable[Any] | None
) -> list[str]:
    out = []
    for c in containers or []:
        for resource, raw in c.get("resources", {}).get("requests", {}).items():
            unit, value = _value(resource, raw)
            labels = {**who, "container": c["name"], "node": node}
            labels |= {"resource": sanitise(resource), "unit": unit}
            out.append(f"{family}{{{_labels(labels)}}} {value!r}")
    return out


def ksm_text(nodes: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]) -> str:
    """One KSM scrape of ``nodes`` and ``pods`` (no timestamps)."""
    lines = [line for n in nodes for line in node_lines(n)]
    lines += [line for p in pods for line in pod_lines(p)]
    return "\n".join(lines) + "\n"
