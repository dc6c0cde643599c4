"""Kubernetes inventory: nodes and pods from the API server into the ``nodes`` / ``pods`` tables.

The official ``kubernetes`` client carries the transport (kubeconfig, in-cluster token, TLS);
we ask it for raw JSON (``_preload_content=False``) and parse each object here, so one
malformed object is dropped and counted instead of failing the whole page the way the
client's model deserialiser would, and a 10k-pod list does not build 10k model trees.

Units and rules (every Kubernetes JSON key stays inside this module):
- Quantities follow the API's grammar (``resource.Quantity``: ``7910m``, ``8``, ``32Gi``,
  ``1000000Ki``, ``1e9``) and are rounded up like ``Quantity.Value()`` / ``MilliValue()``.
- A pod's request per resource is what the scheduler reserves: a container's request defaults to
  its limit, and init containers are counted by the rule in "Init containers - Resource sharing
  within containers" and "Sidecar containers - Resource sharing" (kubernetes.io/docs/concepts/
  workloads/pods/init-containers/ and .../sidecar-containers/):
  ``max(sum(app) + sum(sidecars), max over init i of (init_i + sidecars started before i))``.
  Pod ``overhead`` (RuntimeClass) and pod-level ``resources`` (1.32+) are not added.
- QoS is ``status.qosClass``; when absent it is derived like ``GetPodQOS``
  (pkg/apis/core/helper/qos): only CPU and memory count, over app and init containers.
- Condition times are the ``lastTransitionTime`` of conditions whose status is ``True``.

Errors: an unreachable or refusing API (401, 403, 5xx, connection refused, non-JSON) raises
:class:`CollectorError`; a malformed object is dropped (``node_malformed`` / ``pod_malformed``);
an unreadable field becomes NULL and is counted (``*_bad_quantity``, ``*_bad_timestamp``,
``node_bad_label``).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import ROUND_CEILING, Decimal
from typing import Any, TypedDict, cast

import pyarrow as pa
import urllib3
from kubernetes import client as k8s_client
from kubernetes.client.exceptions import ApiException
from pydantic import BaseModel, ConfigDict, Field

from sits_observe.domain.collect import CollectResult
from sits_observe.domain.quantity import parse_quantity, quantity_milli, quantity_value
from sits_observe.domain.tables import NODES, PODS
from sits_observe.errors import CollectorError, ParseError

GPU_RESOURCE = "nvidia.com/gpu"
#: GPU feature discovery labels (github.com/NVIDIA/k8s-device-plugin, gpu-feature-discovery).
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_MEMORY_LABEL = "nvidia.com/gpu.memory"  # MiB
MIB = 1024 * 1024

# -- raw API JSON (only the keys we read) ----------------------------------------------


class OwnerReferenceJson(TypedDict, total=False):
    kind: str
    name: str
    controller: bool


class ObjectMetaJson(TypedDict, total=False):
    name: str
    namespace: str
    uid: str
    labels: dict[str, str]
    creationTimestamp: str
    ownerReferences: list[OwnerReferenceJson]


class ConditionJson(TypedDict, total=False):
    type: str
    status: str
    lastTransitionTime: str


class ResourcesJson(TypedDict, total=False):
    requests: dict[str, str]
    limits: dict[str, str]


class ContainerJson(TypedDict, total=False):
    name: str
    resources: ResourcesJson
    restartPolicy: str


class ContainerStatusJson(TypedDict, total=False):
    name: str
    containerID: str


class PodSpecJson(TypedDict, total=False):
    nodeName: str
    priorityClassName: str
    containers: list[ContainerJson]
    initContainers: list[ContainerJson]
    ephemeralContainers: list[ContainerJson]


class PodStatusJson(TypedDict, total=False):
    phase: str
    qosClass: str
    conditions: list[ConditionJson]
    containerStatuses: list[ContainerStatusJson]
    initContainerStatuses: list[ContainerStatusJson]
    ephemeralContainerStatuses: list[ContainerStatusJson]


class PodJson(TypedDict, total=False):
    metadata: ObjectMetaJson
    spec: PodSpecJson
    status: PodStatusJson


class NodeStatusJson(TypedDict, total=False):
    allocatable: dict[str, str]
    conditions: list[ConditionJson]


class NodeJson(TypedDict, total=False):
    metadata: ObjectMetaJson
    status: NodeStatusJson


# -- settings and collector ----------------------------------------------------------------


class KubeInventorySettings(BaseModel):
    """How the inventory collector reads the API server."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    page_size: int = Field(
        500, ge=1, le=10_000, description="objects per list page (the API's limit parameter)"
    )
    request_timeout_s: float = Field(
        30.0, gt=0, le=600, description="read timeout of one list request, seconds"
    )


class _Malformed(Exception):
    """An object lacks what identifies it; it is dropped and counted."""


@dataclass
class _Page:
    items: list[Any]
    continue_token: str | None


class KubeInventoryCollector:
    """Snapshot the cluster's nodes and pods (``name = "kube"``).

    ``api`` is an official-client ``ApiClient`` (kubeconfig, in-cluster or test emulator);
    ``now_fn`` is the clock :meth:`snapshot` stamps with (``collect(now)`` uses ``now``).
    """

    name = "kube"

    def __init__(
        self,
        api: k8s_client.ApiClient,
        *,
        now_fn: Callable[[], datetime] | None = None,
        settings: KubeInventorySettings | None = None,
    ) -> None:
        self._api = api
        self._core = k8s_client.CoreV1Api(api)
        self._now_fn = now_fn or (lambda: datetime.now(UTC))
        self.settings = settings or KubeInventorySettings()

    def snapshot(self) -> CollectResult:
        """``collect`` stamped with the injected clock."""
        return self.collect(self._now_fn())

    def collect(self, now: datetime) -> CollectResult:
        """List every node and pod once; raises :class:`CollectorError` when the API fails."""
        ts = now.astimezone(UTC).replace(tzinfo=None) if now.tzinfo else now
        dropped: Counter[str] = Counter()
        nodes = self._list_all("nodes", self._core.list_node)
        pods = self._list_all("pods", self._core.list_pod_for_all_namespaces)
        node_rows = _rows(nodes, node_row, "node_malformed", dropped)
        pod_rows = _rows(pods, pod_row, "pod_malformed", dropped)
        for row in node_rows:
            row["ts"] = ts
        for row in pod_rows:
            row["ts"] = ts
        return CollectResult(
            tables={
                "nodes": pa.Table.from_pylist(node_rows, schema=NODES.schema),
                "pods": pa.Table.from_pylist(pod_rows, schema=PODS.schema),
            },
            dropped=dropped,
        )

    # -- paginated reads ---------------------------------------------------------------

    def _list_all(self, what: str, call: Callable[..., Any]) -> list[Any]:
        """Every item of one list call, page by page; restarts once on 410 Expired."""
        for attempt in range(2):
            items: list[Any] = []
            token: str | None = None
            try:
                while True:
                    page = self._page(what, call, token)
                    items.extend(page.items)
                    token = page.continue_token
                    if not token:
                        return items
            except ApiException as exc:
                # A continue token outlives etcd compaction only ~5 minutes: start over once.
                if exc.status == 410 and token is not None and attempt == 0:
                    continue
                raise CollectorError(self._api_error(what, exc)) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def _page(self, what: str, call: Callable[..., Any], token: str | None) -> _Page:
        host = self._api.configuration.host
        try:
            response = call(
                limit=self.settings.page_size,
                _continue=token,
                _preload_content=False,
                _request_timeout=self.settings.request_timeout_s,
            )
            try:
                body = response.data
            finally:
                response.release_conn()
        except ApiException:
            raise
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise CollectorError(
                f"cannot reach the Kubernetes API at {host} while listing {what}: {exc}; "
                "check --kubeconfig / --context, or that the API server is up"
            ) from exc
        try:
            document = json.loads(body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise CollectorError(
                f"the Kubernetes API at {host} answered a non-JSON body listing {what}: {exc}"
            ) from exc
        if not isinstance(document, dict) or not isinstance(document.get("items"), list):
            raise CollectorError(
                f"the Kubernetes API at {host} answered a {what} list without an items array"
            )
        meta = document.get("metadata")
        token = meta.get("continue") if isinstance(meta, dict) else None
        return _Page(document["items"], token if isinstance(token, str) and token else None)

    def _api_error(self, what: str, exc: ApiException) -> str:
        host = self._api.configuration.host
        detail = _status_message(exc)
        if not exc.status:  # the client's own failures (TLS) carry status 0
            return f"cannot reach the Kubernetes API at {host} while listing {what}: {exc.reason}"
        if exc.status == 401:
            return (
                f"the Kubernetes API at {host} rejected the credentials listing {what} "
                f"(401 Unauthorized{detail}); check the kubeconfig user or service-account token"
            )
        if exc.status == 403:
            return (
                f"the Kubernetes API at {host} forbids listing {what} (403 Forbidden{detail}); "
                "grant get/list/watch on nodes and pods (see collectors/rbac.yaml)"
            )
        return f"the Kubernetes API at {host} answered {exc.status} {exc.reason} listing {what}" + (
            detail or ""
        )


def _status_message(exc: ApiException) -> str:
    """``: <message>`` from a ``kind: Status`` error body, or an empty string."""
    try:
        body = json.loads(exc.body) if exc.body else None
    except (ValueError, TypeError):
        return ""
    message = body.get("message") if isinstance(body, dict) else None
    return f": {message}" if isinstance(message, str) and message else ""


def _rows(
    items: Iterable[Any],
    parse: Callable[[Any, Counter[str]], dict[str, Any]],
    malformed: str,
    dropped: Counter[str],
) -> list[dict[str, Any]]:
    rows = []
    for item in items:
        try:
            rows.append(parse(item, dropped))
        except _Malformed:
            dropped[malformed] += 1
    return rows


# -- JSON helpers ---------------------------------------------------------------------------


def _obj(value: Any, what: str, *, required: bool = False) -> dict[str, Any]:
    if value is None and not required:
        return {}
    if not isinstance(value, dict):
        raise _Malformed(f"{what} is not an object")
    return value


def _seq(value: Any, what: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise _Malformed(f"{what} is not a list")
    return value


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _name(meta: Mapping[str, Any], key: str) -> str:
    value = _str(meta.get(key))
    if value is None:
        raise _Malformed(f"metadata.{key} is missing")
    return value


def _time(value: Any, reason: str, dropped: Counter[str]) -> datetime | None:
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(str(value))
    except ValueError:
        dropped[reason] += 1
        return None
    return parsed.astimezone(UTC).replace(tzinfo=None) if parsed.tzinfo else parsed


def _condition_times(
    conditions: list[Any], reason: str, dropped: Counter[str]
) -> dict[str, datetime | None]:
    """type -> lastTransitionTime of conditions that are ``True``."""
    times: dict[str, datetime | None] = {}
    for raw in conditions:
        cond = cast(ConditionJson, _obj(raw, "condition"))
        if cond.get("status") == "True" and isinstance(cond.get("type"), str):
            times[cond["type"]] = _time(cond.get("lastTransitionTime"), reason, dropped)
    return times


# -- nodes ---------------------------------------------------------------------------------


def node_row(item: Any, dropped: Counter[str]) -> dict[str, Any]:
    """One ``nodes`` row (without ``ts``) from a Node's JSON; raises ``_Malformed``."""
    node = cast(NodeJson, _obj(item, "node", required=True))
    meta = _obj(node.get("metadata"), "metadata", required=True)
    status = _obj(node.get("status"), "status")
    labels = _obj(meta.get("labels"), "metadata.labels")
    allocatable = _obj(status.get("allocatable"), "status.allocatable")

    def quantity(key: str, convert: Callable[[str], int]) -> int | None:
        if key not in allocatable:
            return None
        try:
            return convert(allocatable[key])
        except ParseError:
            dropped["node_bad_quantity"] += 1
            return None

    gpu_memory_bytes = None
    if GPU_MEMORY_LABEL in labels:
        try:
            gpu_memory_bytes = quantity_value(labels[GPU_MEMORY_LABEL]) * MIB
        except ParseError:
            dropped["node_bad_label"] += 1
    ready = None
    for raw in _seq(status.get("conditions"), "status.conditions"):
        cond = _obj(raw, "condition")
        if cond.get("type") == "Ready":
            ready = cond.get("status") == "True"
    gpus = quantity(GPU_RESOURCE, quantity_value)
    return {
        "node": _name(meta, "name"),
        "gpu_allocatable": 0 if gpus is None and GPU_RESOURCE not in allocatable else gpus,
        "gpu_product": _str(labels.get(GPU_PRODUCT_LABEL)),
        "gpu_memory_bytes": gpu_memory_bytes,
        "cpu_allocatable_milli": quantity("cpu", quantity_milli),
        "memory_allocatable_bytes": quantity("memory", quantity_value),
        "ready": ready,
        "labels_json": json.dumps(labels, sort_keys=True),
    }


# -- pods ----------------------------------------------------------------------------------

_REQUESTED = ("cpu", "memory", GPU_RESOURCE)
#: pod-template-hash: the decimal FNV-32 hash of the pod template, each digit mapped into the
#: alphabet of k8s.io/apimachinery rand.SafeEncodeString (so 1-10 characters, nearly always
#: 5 or more). Only used when a pod lacks its ``pod-template-hash`` label.
_TEMPLATE_HASH = re.compile(r"^[bcdfghjklmnpqrstvwxz2456789]{5,10}$")
_RUNTIME_PREFIX = re.compile(r"^[a-z0-9.+-]+://")


def _container_resources(container: Mapping[str, Any]) -> tuple[dict[str, Decimal], set[str]]:
    """(resource -> request, defaulting to the limit; resources whose quantity is unreadable)."""
    resources = _obj(container.get("resources"), "resources")
    requests = _obj(resources.get("requests"), "resources.requests")
    limits = _obj(resources.get("limits"), "resources.limits")
    out: dict[str, Decimal] = {}
    bad: set[str] = set()
    for key in _REQUESTED:
        raw = requests.get(key, limits.get(key))
        if raw is None:
            continue
        try:
            out[key] = parse_quantity(raw)
        except ParseError:
            bad.add(key)
    return out, bad


def pod_requests(
    containers: Iterable[Mapping[str, Any]], init_containers: Iterable[Mapping[str, Any]]
) -> tuple[dict[str, Decimal], set[str]]:
    """The pod's effective request per resource and the resources that were unreadable.

    ``max(sum(app) + sum(sidecars), max over init i of (init_i + sidecars started before i))``,
    where a sidecar is an init container with ``restartPolicy: Always`` (its own peak counts
    the sidecars started before it and itself).
    """
    zero = Decimal(0)
    bad: set[str] = set()
    app = dict.fromkeys(_REQUESTED, zero)
    for container in containers:
        req, b = _container_resources(container)
        bad |= b
        for key, value in req.items():
            app[key] += value
    sidecars = dict.fromkeys(_REQUESTED, zero)
    init_peak = dict.fromkeys(_REQUESTED, zero)
    for container in init_containers:
        req, b = _container_resources(container)
        bad |= b
        sidecar = container.get("restartPolicy") == "Always"
        for key in _REQUESTED:
            if sidecar:
                sidecars[key] += req.get(key, zero)
                during = sidecars[key]
            else:
                during = req.get(key, zero) + sidecars[key]
            init_peak[key] = max(init_peak[key], during)
    total = {key: max(app[key] + sidecars[key], init_peak[key]) for key in _REQUESTED}
    return total, bad


def derive_qos(containers: Iterable[Mapping[str, Any]]) -> str:
    """QoS class from container resources, as ``GetPodQOS`` computes it (CPU and memory)."""
    requests: dict[str, Decimal] = {}
    limits: dict[str, Decimal] = {}
    guaranteed = True
    for container in containers:
        resources = _obj(container.get("resources"), "resources")
        req = _obj(resources.get("requests"), "resources.requests")
        lim = _obj(resources.get("limits"), "resources.limits")
        found_limits = set()
        for key in ("cpu", "memory"):
            limit = _maybe_quantity(lim.get(key))
            request = _maybe_quantity(req.get(key))
            request = limit if request is None else request  # API defaulting: request = limit
            if request:
                requests[key] = requests.get(key, Decimal(0)) + request
            if limit:
                limits[key] = limits.get(key, Decimal(0)) + limit
                found_limits.add(key)
        if found_limits != {"cpu", "memory"}:
            guaranteed = False
    if not requests and not limits:
        return "BestEffort"
    if (
        guaranteed
        and requests.keys() == limits.keys()
        and all(requests[k] == limits[k] for k in requests)
    ):
        return "Guaranteed"
    return "Burstable"


def _maybe_quantity(raw: Any) -> Decimal | None:
    if raw is None:
        return None
    try:
        return parse_quantity(raw)
    except ParseError:
        return None


def workload_of(
    owner_kind: str | None, owner_name: str | None, labels: Mapping[str, Any], pod: str
) -> str:
    """The top-level workload: a ReplicaSet's Deployment, else the owner, else the pod."""
    if owner_kind is None or owner_name is None:
        return pod
    if owner_kind == "ReplicaSet":
        template_hash = labels.get("pod-template-hash")
        if isinstance(template_hash, str) and owner_name.endswith(f"-{template_hash}"):
            return owner_name[: -len(template_hash) - 1]
        head, _, tail = owner_name.rpartition("-")
        if head and _TEMPLATE_HASH.match(tail):
            return head
    return owner_name


def _controller(meta: Mapping[str, Any]) -> tuple[str | None, str | None]:
    for raw in _seq(meta.get("ownerReferences"), "metadata.ownerReferences"):
        ref = cast(OwnerReferenceJson, _obj(raw, "ownerReference"))
        if ref.get("controller") is True:
            return _str(ref.get("kind")), _str(ref.get("name"))
    return None, None


def _containers_json(spec: Mapping[str, Any], status: Mapping[str, Any]) -> str:
    ids: dict[str, str | None] = {}
    for key in ("initContainerStatuses", "containerStatuses", "ephemeralContainerStatuses"):
        for raw in _seq(status.get(key), f"status.{key}"):
            st = cast(ContainerStatusJson, _obj(raw, "container status"))
            name = _str(st.get("name"))
            cid = _str(st.get("containerID"))
            if name is not None:
                ids[name] = _RUNTIME_PREFIX.sub("", cid) if cid else None
    entries: list[dict[str, str | None]] = []
    for key in ("initContainers", "containers", "ephemeralContainers"):
        for raw in _seq(spec.get(key), f"spec.{key}"):
            name = _str(_obj(raw, "container").get("name"))
            if name is not None:
                entries.append({"name": name, "container_id": ids.pop(name, None)})
    entries.extend({"name": n, "container_id": c} for n, c in ids.items())
    return json.dumps(entries)


def pod_row(item: Any, dropped: Counter[str]) -> dict[str, Any]:
    """One ``pods`` row (without ``ts``) from a Pod's JSON; raises ``_Malformed``."""
    pod = cast(PodJson, _obj(item, "pod", required=True))
    meta = _obj(pod.get("metadata"), "metadata", required=True)
    spec = _obj(pod.get("spec"), "spec")
    status = _obj(pod.get("status"), "status")
    labels = _obj(meta.get("labels"), "metadata.labels")
    name = _name(meta, "name")
    containers = [_obj(c, "container") for c in _seq(spec.get("containers"), "spec.containers")]
    init = [_obj(c, "container") for c in _seq(spec.get("initContainers"), "spec.initContainers")]
    requests, bad = pod_requests(containers, init)
    if bad:
        dropped["pod_bad_quantity"] += len(bad)
    owner_kind, owner_name = _controller(meta)
    conditions = _condition_times(
        _seq(status.get("conditions"), "status.conditions"), "pod_bad_timestamp", dropped
    )
    return {
        "pod_uid": _name(meta, "uid"),
        "namespace": _name(meta, "namespace"),
        "pod": name,
        "node": _str(spec.get("nodeName")),
        "phase": _str(status.get("phase")),
        "qos_class": _str(status.get("qosClass")) or derive_qos([*init, *containers]),
        "owner_kind": owner_kind,
        "owner_name": owner_name,
        "workload": workload_of(owner_kind, owner_name, labels, name),
        "gpu_request": None if GPU_RESOURCE in bad else _ceil(requests[GPU_RESOURCE]),
        "cpu_request_milli": None if "cpu" in bad else _ceil(requests["cpu"] * 1000),
        "memory_request_bytes": None if "memory" in bad else _ceil(requests["memory"]),
        "priority_class": _str(spec.get("priorityClassName")),
        "containers_json": _containers_json(spec, status),
        "created_at": _time(meta.get("creationTimestamp"), "pod_bad_timestamp", dropped),
        "scheduled_at": conditions.get("PodScheduled"),
        "initialized_at": conditions.get("Initialized"),
        "containers_ready_at": conditions.get("ContainersReady"),
        "ready_at": conditions.get("Ready"),
    }


def _ceil(value: Decimal) -> int:
    return int(value.to_integral_value(rounding=ROUND_CEILING))
