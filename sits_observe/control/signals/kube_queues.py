"""Adapter: Kueue and KAI scheduler queues in the Kubernetes API <-> :class:`QueueState`.

Read (each a paged list through :class:`~sits_observe.collectors.kube.api.KubeJson`, the
official client's ``ApiClient``; vendor JSON stays in this module):

- Kueue (``kueue.x-k8s.io/v1beta1``, ``apis/kueue/v1beta1/clusterqueue_types.go``): each
  ``ClusterQueue``'s ``spec.resourceGroups[].flavors[].resources[]`` entry named
  ``nvidia.com/gpu`` (``nominalQuota``, ``borrowingLimit``, ``lendingLimit``: quantities) and
  ``spec.cohort`` (``cohortName`` in later versions). A ClusterQueue whose GPU quota is split
  over several flavors gets no advice: measured use does not say which flavor a pod took.
  ``LocalQueue`` ``spec.clusterQueue`` maps a namespace to its ClusterQueue; a namespace
  whose LocalQueues point at more than one ClusterQueue is not counted to any.
- KAI Scheduler (``scheduling.run.ai/v2``, ``pkg/apis/scheduling/v2``): each ``Queue``'s
  ``spec.resources.gpu`` (``quota``, ``limit``, ``overQuotaWeight``, ``lendingLimit``:
  numbers of GPUs, fractions allowed; a negative quota or limit means unlimited) and
  ``spec.parentQueue``. Pods name their queue in the label ``kai.scheduler/queue`` (older
  releases and Run:ai ``runai/queue``). A namespace whose labelled pods all name one queue
  counts to it whole (so the pods of past days count too: the store keeps no pod labels);
  otherwise each labelled pod counts to its own queue.

A kind the API server does not serve (404: the CRD is not installed) is read as no queues, no
error. Any other failure leaves that source out of the pass and is reported in
:attr:`QueueState.errors` (the loop counts it in
``sits_controller_errors_total{where="queues"}``).

Written (``act`` mode, :mod:`.apply`): a JSON merge patch. KAI's ``spec.resources.gpu``
is a map, so the patch carries only the changed field. Kueue's quotas sit in lists, which a
merge patch replaces whole, so :func:`queue_patch` rewrites ``spec.resourceGroups`` as just
read with the one value changed and sends the read ``metadata.resourceVersion``: a concurrent
change answers 409 and the write is retried on a fresh read.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping
from typing import Any, TypedDict

import polars as pl

from sits_observe.collectors.kube.api import JsonObject, KubeJson
from sits_observe.control.controller.actions import Action
from sits_observe.control.controller.kube import QUEUE_RESOURCES
from sits_observe.control.controller.planning.inputs import (
    OBJECTS_SCHEMA,
    QUEUE_MEMBERS_SCHEMA,
    VALUES_SCHEMA,
    QueueState,
)
from sits_observe.control.controller.planning.model import recommended_values
from sits_observe.control.controller.settings import ControllerSettings
from sits_observe.domain.quantity import parse_quantity
from sits_observe.errors import KubeApiError, ParseError

log = logging.getLogger(__name__)

#: The resource name both schedulers' GPU quota is kept under (Kueue: the flavor's resource).
GPU_RESOURCE = "nvidia.com/gpu"
#: Pod labels naming a KAI queue, in the order they are looked at.
KAI_QUEUE_LABELS = ("kai.scheduler/queue", "runai/queue")
LOCAL_QUEUES_PATH = "/apis/kueue.x-k8s.io/v1beta1/localqueues"

#: Action -> the field it writes, per queue kind.
FIELDS: dict[str, dict[Action, str]] = {
    "ClusterQueue": {
        Action.QUEUE_GPU_QUOTA: "nominalQuota",
        Action.QUEUE_GPU_BORROWING_LIMIT: "borrowingLimit",
    },
    "Queue": {Action.QUEUE_GPU_QUOTA: "quota", Action.QUEUE_GPU_LIMIT: "limit"},
}


class KueueResourceQuota(TypedDict, total=False):
    """``ResourceQuota`` of a Kueue flavor (quantities)."""

    name: str
    nominalQuota: str | int | float
    borrowingLimit: str | int | float
    lendingLimit: str | int | float


class KueueFlavorQuotas(TypedDict, total=False):
    """``FlavorQuotas`` of a Kueue resource group."""

    name: str
    resources: list[KueueResourceQuota]


class KaiQueueResource(TypedDict, total=False):
    """``QueueResource`` of a KAI queue (GPUs, fractions allowed)."""

    quota: float
    limit: float
    overQuotaWeight: float
    lendingLimit: float


def _list_path(kind: str) -> str:
    api_version, plural = QUEUE_RESOURCES[kind]
    return f"/apis/{api_version}/{plural}"


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _items(value: Any) -> list[Mapping[str, Any]]:
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def _gpus(raw: Any) -> float | None:
    """A quantity (Kueue) or number (KAI) of GPUs; None when absent, negative (KAI's
    unlimited) or malformed."""
    if raw is None or isinstance(raw, bool):
        return None
    try:
        value = float(raw) if isinstance(raw, int | float) else float(parse_quantity(raw))
    except (ParseError, ValueError):
        return None
    return value if math.isfinite(value) and value >= 0 else None


def _text(value: float | None) -> str | None:
    return None if value is None else f"{value:g}"


def gpu_flavors(spec: Mapping[str, Any]) -> list[tuple[int, int, int, KueueResourceQuota]]:
    """(group, flavor, resource index, quota) of each GPU entry of a ClusterQueue's spec."""
    found = []
    for g, group in enumerate(_items(spec.get("resourceGroups"))):
        for f, flavor in enumerate(_items(group.get("flavors"))):
            for r, resource in enumerate(_items(flavor.get("resources"))):
                if resource.get("name") == GPU_RESOURCE:
                    found.append((g, f, r, KueueResourceQuota(**resource)))  # type: ignore[typeddict-item]
    return found


class _Rows:
    """The frames of a :class:`QueueState`, row by row."""

    def __init__(self, opt_out_key: str) -> None:
        self.opt_out_key = opt_out_key
        self.objects: list[tuple[str, None, str, bool, None]] = []
        self.values: list[tuple[str, None, str, str, str | None, str | None]] = []
        self.facts: list[tuple[str, str, str | None, str | None, float | None, float | None]] = []
        self.members: list[tuple[str, str, str, str | None]] = []
        self.errors: list[str] = []

    def add(
        self, kind: str, item: Mapping[str, Any], current: Mapping[Action, float | None]
    ) -> None:
        meta = _mapping(item.get("metadata"))
        name = str(meta.get("name") or "")
        annotations = {str(k): str(v) for k, v in _mapping(meta.get("annotations")).items()}
        opted = annotations.get(self.opt_out_key, "").strip().lower() == "true"
        self.objects.append((kind, None, name, opted, None))
        recommended = recommended_values(annotations)
        for action in FIELDS[kind]:
            value = _text(current.get(action))
            self.values.append((kind, None, name, str(action), value, recommended.get(action)))

    def state(self) -> QueueState:
        counts = pl.DataFrame(self.members, schema=QUEUE_MEMBERS_SCHEMA, orient="row")
        per_queue = counts.group_by("kind", "queue").agg(
            pl.col("namespace").n_unique().alias("member_namespaces")
        )
        facts = pl.DataFrame(
            self.facts,
            schema={
                "kind": pl.String,
                "name": pl.String,
                "cohort": pl.String,
                "flavor": pl.String,
                "lending_limit": pl.Float64,
                "over_quota_weight": pl.Float64,
            },
            orient="row",
        ).join(per_queue.rename({"queue": "name"}), on=["kind", "name"], how="left")
        return QueueState.of(
            objects=pl.DataFrame(self.objects, schema=OBJECTS_SCHEMA, orient="row"),
            values=pl.DataFrame(self.values, schema=VALUES_SCHEMA, orient="row"),
            facts=facts.with_columns(pl.col("member_namespaces").fill_null(0)),
            members=counts,
            errors=tuple(self.errors),
        )


def _listed(
    kube: KubeJson,
    rows: _Rows,
    what: str,
    path: str,
    *,
    page: int,
    query: Mapping[str, str] | None = None,
) -> list[JsonObject]:
    """Every item of one list; none when the kind is not served (404) or the list failed
    (then ``what`` is in ``rows.errors``)."""
    try:
        return kube.list_all(path, page_size=page, query=query)
    except KubeApiError as exc:
        if exc.status != 404:
            log.warning("reading %s failed: %s", what, exc)
            rows.errors.append(what)
        return []


def _cluster_queues(rows: _Rows, items: Iterable[Mapping[str, Any]]) -> set[str]:
    """Add each ClusterQueue; returns the names with one GPU flavor (the advised ones)."""
    advised = set()
    for item in items:
        name = str(_mapping(item.get("metadata")).get("name") or "")
        spec = _mapping(item.get("spec"))
        gpu = gpu_flavors(spec)
        if not name or len(gpu) != 1:
            if len(gpu) > 1:
                log.info("ClusterQueue %s: GPU quota in %d flavors, not advised", name, len(gpu))
            continue
        g, f, _, quota = gpu[0]
        flavor = _items(_items(spec.get("resourceGroups"))[g].get("flavors"))[f]
        cohort = spec.get("cohort") or spec.get("cohortName")
        rows.add(
            "ClusterQueue",
            item,
            {
                Action.QUEUE_GPU_QUOTA: _gpus(quota.get("nominalQuota")),
                Action.QUEUE_GPU_BORROWING_LIMIT: _gpus(quota.get("borrowingLimit")),
            },
        )
        rows.facts.append(
            (
                "ClusterQueue",
                name,
                str(cohort) if cohort else None,
                str(flavor.get("name") or ""),
                _gpus(quota.get("lendingLimit")),
                None,
            )
        )
        advised.add(name)
    return advised


def _local_queues(rows: _Rows, items: Iterable[Mapping[str, Any]], advised: set[str]) -> None:
    """Namespace -> its ClusterQueue, where its LocalQueues name exactly one."""
    targets: dict[str, set[str]] = {}
    for item in items:
        namespace = _mapping(item.get("metadata")).get("namespace")
        cluster_queue = _mapping(item.get("spec")).get("clusterQueue")
        if isinstance(namespace, str) and isinstance(cluster_queue, str):
            targets.setdefault(namespace, set()).add(cluster_queue)
    for namespace, queues in sorted(targets.items()):
        if len(queues) == 1 and (queue := next(iter(queues))) in advised:
            rows.members.append(("ClusterQueue", queue, namespace, None))
        elif len(queues) > 1:
            log.info("namespace %s: LocalQueues of %s, not counted", namespace, sorted(queues))


def _kai_queues(rows: _Rows, items: Iterable[Mapping[str, Any]]) -> set[str]:
    names = set()
    for item in items:
        name = str(_mapping(item.get("metadata")).get("name") or "")
        if not name:
            continue
        spec = _mapping(item.get("spec"))
        gpu: KaiQueueResource = _mapping(_mapping(spec.get("resources")).get("gpu"))  # type: ignore[assignment]
        rows.add(
            "Queue",
            item,
            {
                Action.QUEUE_GPU_QUOTA: _gpus(gpu.get("quota")),
                Action.QUEUE_GPU_LIMIT: _gpus(gpu.get("limit")),
            },
        )
        parent = spec.get("parentQueue")
        weight = gpu.get("overQuotaWeight")
        rows.facts.append(
            (
                "Queue",
                name,
                str(parent) if parent else None,
                None,
                _gpus(gpu.get("lendingLimit")),
                float(weight) if isinstance(weight, int | float) else None,
            )
        )
        names.add(name)
    return names


def _kai_members(rows: _Rows, pods: Iterable[Mapping[str, Any]], queues: set[str]) -> None:
    by_namespace: dict[str, dict[str, str]] = {}
    for pod in pods:
        meta = _mapping(pod.get("metadata"))
        labels = _mapping(meta.get("labels"))
        queue = next((labels[k] for k in KAI_QUEUE_LABELS if labels.get(k)), None)
        namespace, name = meta.get("namespace"), meta.get("name")
        if isinstance(queue, str) and queue in queues and namespace and name:
            by_namespace.setdefault(str(namespace), {})[str(name)] = queue
    for namespace, pods_queue in sorted(by_namespace.items()):
        named = set(pods_queue.values())
        if len(named) == 1:
            rows.members.append(("Queue", named.pop(), namespace, None))
            continue
        rows.members.extend(("Queue", q, namespace, p) for p, q in sorted(pods_queue.items()))


def read_queues(kube: KubeJson, settings: ControllerSettings) -> QueueState:
    """The cluster's Kueue and KAI queues, their facts and members (module docstring)."""
    rows = _Rows(settings.opt_out_annotation)
    page = settings.page_size
    cluster_queues = _listed(kube, rows, "clusterqueues", _list_path("ClusterQueue"), page=page)
    advised = _cluster_queues(rows, cluster_queues)
    local_queues = _listed(kube, rows, "localqueues", LOCAL_QUEUES_PATH, page=page)
    _local_queues(rows, local_queues, advised)
    kai = _listed(kube, rows, "queues", _list_path("Queue"), page=page)
    if kai:
        names = _kai_queues(rows, kai)
        pods: list[JsonObject] = []
        for label in KAI_QUEUE_LABELS:
            pods += _listed(
                kube, rows, "pods", "/api/v1/pods", page=page, query={"labelSelector": label}
            )
        _kai_members(rows, pods, names)
    return rows.state()


def queue_patch(kind: str, current: Mapping[str, Any], fields: Mapping[str, str]) -> JsonObject:
    """The merge patch setting ``fields`` (field name -> GPUs) of a queue's GPU quota.

    ``current`` is the object as just read (Kueue: its resource groups are sent back whole,
    with its ``resourceVersion``). Raises :class:`ParseError` when a ClusterQueue no longer
    has exactly one GPU flavor.
    """
    if kind == "Queue":
        gpu = {k: float(v) for k, v in fields.items()}
        return {"spec": {"resources": {"gpu": gpu}}}
    spec = _mapping(current.get("spec"))
    found = gpu_flavors(spec)
    name = _mapping(current.get("metadata")).get("name")
    if len(found) != 1:
        raise ParseError(
            f"ClusterQueue {name}: {len(found)} flavors hold {GPU_RESOURCE}, expected one; "
            "its quota is left as it is"
        )
    g, f, r, _ = found[0]
    groups: list[Any] = [dict(x) for x in _items(spec.get("resourceGroups"))]
    flavors: list[Any] = [dict(x) for x in _items(groups[g].get("flavors"))]
    resources: list[Any] = [dict(x) for x in _items(flavors[f].get("resources"))]
    resources[r] = {**resources[r], **fields}
    flavors[f] = {**flavors[f], "resources": resources}
    groups[g] = {**groups[g], "flavors": flavors}
    version = _mapping(current.get("metadata")).get("resourceVersion")
    meta = {"resourceVersion": version} if version else {}
    return {"metadata": meta, "spec": {"resourceGroups": groups}}
