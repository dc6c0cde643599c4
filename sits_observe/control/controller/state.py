"""Read what the cluster holds now into a
:class:`~sits_observe.control.controller.planning.inputs.CurrentState`.

One paged list each of nodes, the owner workloads (Deployments, StatefulSets, DaemonSets, Jobs,
CronJobs: :data:`~.kube.WORKLOAD_RESOURCES`), pods, namespaces and the managed ResourceQuotas
(field selector on the name: ``quota.quota_name``, then the tenant throttle's
``tenant_throttle_quota_name``), plus a GET of the time-slicing ConfigMap when one is configured,
and the Kueue / KAI queues (:mod:`.kube_queues`). A workload kind the API server does not serve
(404) is read as none. From each object: whether it opted out (the opt-out annotation; for a
namespace also its selection label, ``namespace_label``), the value in effect of each action
(our labels, QoS annotations, the pod's priority class, the quota's ``spec.hard``), and the
``proposed`` of each ``sits.io/recommendation.<action>`` annotation; for each pod, the workload
that owns it (:mod:`.state_owners`).

Vendor JSON stays here: past this module only the frames of :mod:`.inputs` travel.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import polars as pl
import yaml

from sits_observe.collectors.kube.api import KubeJson, object_path
from sits_observe.control.controller.actions import Action
from sits_observe.control.controller.kube import WORKLOAD_RESOURCES, list_path
from sits_observe.control.controller.planning.inputs import OBJECTS_SCHEMA, CurrentState
from sits_observe.control.controller.planning.model import (
    ACTIONS,
    QUOTA_ACTIONS,
    recommended_values,
)
from sits_observe.control.controller.quota_settings import QUOTA_GPU
from sits_observe.control.controller.settings import ControllerSettings
from sits_observe.control.controller.state_owners import Workloads
from sits_observe.control.signals.kube_queues import read_queues
from sits_observe.domain.quantity import parse_quantity
from sits_observe.errors import KubeApiError, ParseError

#: Actions whose value in effect is a label or annotation of the object, by kind.
_MARKED = {
    kind: [
        (a, s.actuator, s.key)
        for a, s in ACTIONS.items()
        if s.kind == kind and s.key and s.actuator in ("label", "annotation")
    ]
    for kind in ("Node", "Pod")
}


def _meta(item: Mapping[str, Any]) -> tuple[str | None, str, dict[str, str], dict[str, str]]:
    meta = item.get("metadata") if isinstance(item.get("metadata"), dict) else {}
    assert isinstance(meta, dict)
    labels = meta.get("labels") if isinstance(meta.get("labels"), dict) else {}
    annotations = meta.get("annotations") if isinstance(meta.get("annotations"), dict) else {}
    namespace = meta.get("namespace")
    return (
        namespace if isinstance(namespace, str) and namespace else None,
        str(meta.get("name") or ""),
        {str(k): str(v) for k, v in (labels or {}).items()},
        {str(k): str(v) for k, v in (annotations or {}).items()},
    )


def selection(labels: Mapping[str, str], key: str) -> bool | None:
    """A namespace's selection label: ``"true"`` True, ``"false"`` False, else (unlabelled or
    another value) None."""
    value = labels.get(key, "").strip().lower()
    return True if value == "true" else False if value == "false" else None


class _Rows:
    def __init__(self, opt_out_key: str) -> None:
        self.opt_out_key = opt_out_key
        self.objects: list[tuple[str, str | None, str, bool, bool | None]] = []
        self.values: dict[tuple[str, str | None, str, str], list[str | None]] = {}
        self.owners: list[tuple[str, str, str, str]] = []

    def add_object(
        self,
        kind: str,
        namespace: str | None,
        name: str,
        annotations: Mapping[str, str],
        enabled: bool | None = None,
    ) -> None:
        opted = annotations.get(self.opt_out_key, "").strip().lower() == "true"
        self.objects.append((kind, namespace, name, opted, enabled))
        for action, proposed in recommended_values(annotations).items():
            self.values.setdefault((kind, namespace, name, action), [None, None])[1] = proposed

    def set_current(
        self, kind: str, namespace: str | None, name: str, action: Action, value: str | None
    ) -> None:
        if value is not None:
            self.values.setdefault((kind, namespace, name, str(action)), [None, None])[0] = value

    def state(self, time_slices: dict[str, str]) -> CurrentState:
        objects = pl.DataFrame(self.objects, schema=OBJECTS_SCHEMA, orient="row")
        values = pl.DataFrame(
            [(*k, v[0], v[1]) for k, v in self.values.items()],
            schema=["kind", "namespace", "name", "action", "current", "recommended"],
            orient="row",
        )
        owners = pl.DataFrame(
            self.owners,
            schema=["namespace", "pod", "owner_kind", "owner_name"],
            orient="row",
        )
        return CurrentState.of(
            objects=objects, values=values, time_slices=time_slices, owners=owners
        )


def _marked(
    rows: _Rows,
    *,
    kind: str,
    namespace: str | None,
    name: str,
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
) -> None:
    for action, actuator, key in _MARKED[kind]:
        source = labels if actuator == "label" else annotations
        rows.set_current(kind, namespace, name, action, source.get(str(key)))


def _quota_value(action: Action, raw: Any) -> str | None:
    try:
        value = parse_quantity(raw)
    except ParseError:
        return None
    if action is Action.QUOTA_CPU:
        value = value * 1000
    return str(int(value.to_integral_value(rounding="ROUND_CEILING")))


def _time_slices(kube: KubeJson, settings: ControllerSettings) -> dict[str, str]:
    where = settings.time_slicing_ref()
    if where is None:
        return {}
    try:
        configmap = kube.request("GET", object_path("ConfigMap", where[0], where[1]))
    except KubeApiError as exc:
        if exc.status == 404:
            return {}
        raise
    data = configmap.get("data") if isinstance(configmap.get("data"), dict) else {}
    try:
        entries = yaml.safe_load((data or {}).get(settings.time_slicing_key) or "") or {}
    except yaml.YAMLError:
        return {}
    if not isinstance(entries, dict):
        return {}
    return {str(k): str(v) for k, v in entries.items()}


def _workloads(kube: KubeJson, rows: _Rows, page: int) -> Workloads:
    """List every workload kind (404, a kind the server does not serve: none of it)."""
    workloads = Workloads()
    for kind in WORKLOAD_RESOURCES:
        try:
            items = kube.list_all(list_path(kind), page_size=page)
        except KubeApiError as exc:
            if exc.status != 404:
                raise
            continue
        for item in items:
            namespace, name, _, annotations = _meta(item)
            if name and namespace:
                rows.add_object(kind, namespace, name, annotations)
                workloads.add(kind, namespace, name, item.get("metadata") or {})
    return workloads


def read_state(kube: KubeJson, settings: ControllerSettings) -> CurrentState:
    """The cluster's current state; raises :class:`KubeApiError` when a list fails."""
    rows = _Rows(settings.opt_out_annotation)
    page = settings.page_size
    for item in kube.list_all("/api/v1/nodes", page_size=page):
        _, name, labels, annotations = _meta(item)
        if name:
            rows.add_object("Node", None, name, annotations)
            _marked(
                rows, kind="Node", namespace=None, name=name, labels=labels, annotations=annotations
            )
    workloads = _workloads(kube, rows, page)
    for item in kube.list_all("/api/v1/pods", page_size=page):
        namespace, name, labels, annotations = _meta(item)
        if not name or not namespace:
            continue
        rows.add_object("Pod", namespace, name, annotations)
        owner = workloads.owner_of(namespace, labels, item.get("metadata") or {})
        if owner is not None:
            rows.owners.append((namespace, name, *owner))
        _marked(
            rows, kind="Pod", namespace=namespace, name=name, labels=labels, annotations=annotations
        )
        spec = item.get("spec") if isinstance(item.get("spec"), dict) else {}
        priority = (spec or {}).get("priorityClassName")
        rows.set_current(
            "Pod",
            namespace,
            name,
            Action.PRIORITY_CLASS,
            priority if isinstance(priority, str) else None,
        )
    for item in kube.list_all("/api/v1/namespaces", page_size=page):
        _, name, labels, annotations = _meta(item)
        if name:
            enabled = selection(labels, settings.namespace_label)
            rows.add_object("Namespace", None, name, annotations, enabled)
    for quota_name in dict.fromkeys(
        (settings.quota.quota_name, settings.tenant_throttle_quota_name)
    ):
        quotas = kube.list_all(
            "/api/v1/resourcequotas",
            page_size=page,
            query={"fieldSelector": f"metadata.name={quota_name}"},
        )
        _quotas(rows, quotas, settings)
    return rows.state(_time_slices(kube, settings)).with_queues(read_queues(kube, settings))


def _quotas(rows: _Rows, quotas: Iterable[Mapping[str, Any]], settings: ControllerSettings) -> None:
    # The managed quota's keys are the namespace quota actions'; the tenant throttle's
    # quota (scoped to the non-critical classes) has one, its GPU key.
    managed = {
        settings.quota.quota_name: QUOTA_ACTIONS,
        settings.tenant_throttle_quota_name: {QUOTA_GPU: Action.TENANT_THROTTLE},
    }
    for item in quotas:
        namespace, name, _, annotations = _meta(item)
        if not namespace or name not in managed:
            continue
        rows.add_object("ResourceQuota", namespace, name, annotations)
        spec = item.get("spec")
        hard = spec.get("hard") if isinstance(spec, dict) else None
        if not isinstance(hard, dict):
            continue
        for key, action in managed[name].items():
            if key in hard:
                rows.set_current(
                    "ResourceQuota", namespace, name, action, _quota_value(action, hard[key])
                )
