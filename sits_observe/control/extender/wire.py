"""The kube-scheduler extender wire format, read and written exactly as kube-scheduler speaks it.

Source of the format: ``k8s.io/kube-scheduler/extender/v1/types.go``
(kubernetes/kubernetes, ``staging/src/k8s.io/kube-scheduler/extender/v1/types.go``). Those
structs carry *no* json tags, so Go's ``encoding/json`` uses the Go field names as keys:

- ``ExtenderArgs``: ``Pod`` (a ``v1.Pod``), ``Nodes`` (a ``v1.NodeList``, set only when the
  extender is configured with ``nodeCacheCapable: false``) and ``NodeNames`` (a list of names,
  set only with ``nodeCacheCapable: true``); the unset one is JSON ``null``;
- ``ExtenderFilterResult``: ``Nodes``, ``NodeNames``, ``FailedNodes`` and
  ``FailedAndUnresolvableNodes`` (name -> message) and ``Error``;
- ``HostPriorityList``: a list of ``{"Host": name, "Score": int}``, scores between
  ``MinExtenderPriority`` = 0 and ``MaxExtenderPriority`` = 10;
- ``ExtenderBindingArgs``: ``PodName``, ``PodNamespace``, ``PodUID``, ``Node``; the answer
  ``ExtenderBindingResult`` is ``{"Error": ""}`` (bound) or the reason it was not.

The Pod and the Nodes inside are ordinary Kubernetes API objects (camelCase keys).

What kube-scheduler does with the answers (``pkg/scheduler/extender.go``, ``HTTPExtender``):
it POSTs to ``urlPrefix + "/" + verb`` with only ``Content-Type: application/json`` (no
credentials). For filter, a non-200 status or a non-empty ``Error`` fails the call (the pod's
scheduling attempt fails unless the extender is ``ignorable``); in node-cache mode it reads
``NodeNames`` (each must be one of the names it sent), otherwise ``Nodes.items``; a ``null``
list means *no node passes*, so answers always carry an explicit list. For prioritize, any
failure (non-200, unreadable body) is ignored: the pod is scheduled without this extender's
scores. Scores are multiplied by the extender's ``weight`` and by MaxNodeScore /
MaxExtenderPriority (100 / 10).

Only the keys the scorer needs are validated (pydantic, extra keys ignored); node objects in
``Nodes`` mode are kept as received so the filter can return them unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal
from json.encoder import encode_basestring_ascii
from typing import Any, TypedDict

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sits_observe.analytics.fragmentation.fgd.model import MILLI_PER_GPU
from sits_observe.collectors.kube.gpu import GPU_RESOURCE, pod_gpu_request
from sits_observe.collectors.kube.gpu_stack import affinity_keys
from sits_observe.collectors.kube.pods import pod_requests, workload_of
from sits_observe.control.extender.scoring import REQUEST_CAP, PodRequest
from sits_observe.domain.quantity import parse_quantity
from sits_observe.domain.strict_json import dumps
from sits_observe.errors import ParseError

#: k8s.io/kube-scheduler/extender/v1: MinExtenderPriority and MaxExtenderPriority.
MIN_EXTENDER_PRIORITY = 0
MAX_EXTENDER_PRIORITY = 10

#: Pod annotation (ours) declaring the GPU memory the pod needs on *each* of its GPUs, as a
#: Kubernetes quantity (``24Gi``, ``20000Mi``). It overrides the measured need.
GPU_MEMORY_ANNOTATION = "sits.io/gpu-memory"

Quantity = str | int | float


# -- what kube-scheduler sends (only the keys we read are validated) ---------------------


class _Wire(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class ResourcesWire(_Wire):
    """``v1.ResourceRequirements`` (requests and limits by resource name)."""

    requests: dict[str, Quantity] | None = None
    limits: dict[str, Quantity] | None = None


class ContainerWire(_Wire):
    """``v1.Container``: name, resources, and ``restartPolicy`` (sidecars)."""

    name: str | None = None
    resources: ResourcesWire | None = None
    restart_policy: str | None = Field(None, alias="restartPolicy")


class OwnerReferenceWire(_Wire):
    """``metav1.OwnerReference``."""

    kind: str | None = None
    name: str | None = None
    controller: bool | None = None


class ObjectMetaWire(_Wire):
    """``metav1.ObjectMeta`` (the keys the scorer reads)."""

    name: str = ""
    namespace: str = ""
    uid: str | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    owner_references: list[OwnerReferenceWire] | None = Field(None, alias="ownerReferences")


class PodSpecWire(_Wire):
    """``v1.PodSpec`` (the keys the scorer reads)."""

    containers: list[ContainerWire] | None = None
    init_containers: list[ContainerWire] | None = Field(None, alias="initContainers")
    priority: int | None = None
    priority_class_name: str | None = Field(None, alias="priorityClassName")
    # Kept as received: collectors.kube_gpu reads the GPU-product constraint from them.
    node_selector: dict[str, str] | None = Field(None, alias="nodeSelector")
    affinity: dict[str, Any] | None = None


class PodWire(_Wire):
    """``v1.Pod``."""

    metadata: ObjectMetaWire = Field(default_factory=ObjectMetaWire)
    spec: PodSpecWire = Field(default_factory=PodSpecWire)


class NodeListWire(_Wire):
    """``v1.NodeList``; the items are kept as received."""

    items: list[dict[str, Any]] | None = None


class ExtenderArgsWire(_Wire):
    """``ExtenderArgs`` with its PascalCase keys."""

    pod: PodWire | None = Field(None, alias="Pod")
    nodes: NodeListWire | None = Field(None, alias="Nodes")
    node_names: list[str] | None = Field(None, alias="NodeNames")


# -- what we answer -------------------------------------------------------------------------


class NodeListJson(TypedDict):
    """``v1.NodeList`` as Go writes it (empty ListMeta, the items)."""

    metadata: dict[str, str]
    items: list[dict[str, Any]]


class ExtenderFilterResultJson(TypedDict):
    """``ExtenderFilterResult``."""

    Nodes: NodeListJson | None
    NodeNames: list[str] | None
    FailedNodes: dict[str, str]
    FailedAndUnresolvableNodes: dict[str, str]
    Error: str


class HostPriorityJson(TypedDict):
    """One ``HostPriority``."""

    Host: str
    Score: int


# -- parsed call --------------------------------------------------------------------------


@dataclass(frozen=True)
class ExtenderCall:
    """One filter or prioritize call: the pod, the candidate names, and how they came.

    ``node_cache_capable`` is True when kube-scheduler sent ``NodeNames`` (the extender is
    configured ``nodeCacheCapable: true``); then the answer must name nodes. Otherwise it sent
    full ``Nodes`` objects, kept in ``node_items`` (same order as ``nodes``) for the answer.
    """

    pod: PodRequest
    nodes: tuple[str, ...]
    node_cache_capable: bool
    node_items: tuple[Mapping[str, Any], ...] = ()


def parse_extender_args(body: bytes) -> ExtenderCall:
    """Read an ``ExtenderArgs`` body; raises :class:`ParseError` saying what is wrong."""
    try:
        args = ExtenderArgsWire.model_validate_json(body)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in exc.errors()[:5]
        )
        raise ParseError(
            f"not a kube-scheduler ExtenderArgs body ({problems}); expected JSON "
            '{"Pod": {...}, "Nodes": {"items": [...]} or null, "NodeNames": [...] or null}'
        ) from None
    if args.pod is None:
        raise ParseError("ExtenderArgs has no Pod; kube-scheduler always sends the pod")
    pod = pod_request(args.pod)
    if args.node_names is not None:
        return ExtenderCall(pod, tuple(args.node_names), node_cache_capable=True)
    if args.nodes is None:
        raise ParseError(
            "ExtenderArgs has neither NodeNames (nodeCacheCapable: true) nor Nodes "
            "(nodeCacheCapable: false)"
        )
    items = tuple(args.nodes.items or ())
    names = tuple(_node_name(item, i) for i, item in enumerate(items))
    return ExtenderCall(pod, names, node_cache_capable=False, node_items=items)


def _node_name(item: Mapping[str, Any], i: int) -> str:
    meta = item.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    if not isinstance(name, str) or not name:
        raise ParseError(f"Nodes.items[{i}] has no metadata.name")
    return name


def pod_request(pod: PodWire) -> PodRequest:
    """What the scorer needs from a ``v1.Pod``; raises :class:`ParseError` on bad quantities.

    Requests follow the scheduler's rule (a request defaults to the limit; init containers and
    sidecars by the Kubernetes formula, see
    :func:`sits_observe.collectors.kube.inventory.pod_requests`). An amount above
    :data:`~sits_observe.control.extender.scoring.REQUEST_CAP` (``1e16`` GPUs, a ``1e400`` memory
    need) is held at it: beyond every node, so it fits nowhere.
    """
    meta, spec = pod.metadata, pod.spec
    who = f"pod {meta.namespace}/{meta.name}"
    containers = [c.model_dump(by_alias=True, exclude_none=True) for c in spec.containers or ()]
    init = [c.model_dump(by_alias=True, exclude_none=True) for c in spec.init_containers or ()]
    totals, bad = pod_requests(containers, init)
    if bad:
        raise ParseError(
            f"{who}: unreadable quantity for {', '.join(sorted(bad))}; "
            "expected Kubernetes quantities such as 1, 500m, 16Gi"
        )
    annotations = meta.annotations or {}
    memory_bytes = None
    if GPU_MEMORY_ANNOTATION in annotations:
        raw = annotations[GPU_MEMORY_ANNOTATION]
        try:
            memory_bytes = _ceil(parse_quantity(raw))
        except ParseError as exc:
            raise ParseError(f"{who}: annotation {GPU_MEMORY_ANNOTATION}={raw!r}: {exc}") from None
        if memory_bytes <= 0:
            raise ParseError(
                f"{who}: annotation {GPU_MEMORY_ANNOTATION}={raw!r} must be a positive size"
            )
    owner = next((o for o in meta.owner_references or () if o.controller), None)
    workload = workload_of(
        owner.kind if owner else None, owner.name if owner else None, meta.labels or {}, meta.name
    )
    gpus = _ceil(totals[GPU_RESOURCE])
    # The one reader of a pod's GPU share and products (malformed values count as absent).
    gpu = pod_gpu_request(pod.model_dump(by_alias=True, exclude_none=True), gpus)
    # sits.io/model and sits.io/precision: the device affinity rules' inputs.
    model, precision = affinity_keys({"labels": meta.labels, "annotations": annotations})
    return PodRequest(
        namespace=meta.namespace,
        name=meta.name,
        gpus=gpus,
        cpu_milli=_ceil(totals["cpu"] * 1000),
        gpu_memory_bytes=memory_bytes,
        priority=spec.priority,
        workload=workload,
        gpu_milli=gpu.gpu_milli if gpus else MILLI_PER_GPU,
        gpu_types=gpu.gpu_types,
        uid=meta.uid or "",
        memory_bytes=_ceil(totals["memory"]),
        hint_uuids=gpu.hint_uuids,
        model=model,
        precision=precision,
    )


def _ceil(value: Decimal) -> int:
    """``value`` rounded up, held at ``REQUEST_CAP`` before it becomes an int (``int()`` of
    ``1e999999`` alone takes seconds, and the scorer computes in int64)."""
    return int(min(value, _CAP).to_integral_value(rounding=ROUND_CEILING))


_CAP = Decimal(REQUEST_CAP)


# -- answers ---------------------------------------------------------------------------------


def filter_result(
    call: ExtenderCall,
    passing: Iterable[str],
    failed: Mapping[str, str],
    unresolvable: Mapping[str, str],
) -> ExtenderFilterResultJson:
    """The ``ExtenderFilterResult`` for ``call``: names or node objects, as it came."""
    kept = list(passing)
    if call.node_cache_capable:
        return _filter_json(None, kept, failed, unresolvable, "")
    wanted = set(kept)
    items = [
        dict(item) for name, item in zip(call.nodes, call.node_items, strict=True) if name in wanted
    ]
    node_list: NodeListJson = {"metadata": {}, "items": items}
    return _filter_json(node_list, None, failed, unresolvable, "")


def filter_error(message: str) -> ExtenderFilterResultJson:
    """An ``ExtenderFilterResult`` carrying only ``Error`` (kube-scheduler fails the call)."""
    return _filter_json(None, None, {}, {}, message)


def _filter_json(
    nodes: NodeListJson | None,
    names: list[str] | None,
    failed: Mapping[str, str],
    unresolvable: Mapping[str, str],
    error: str,
) -> ExtenderFilterResultJson:
    return {
        "Nodes": nodes,
        "NodeNames": names,
        "FailedNodes": dict(failed),
        "FailedAndUnresolvableNodes": dict(unresolvable),
        "Error": error,
    }


def encode(result: ExtenderFilterResultJson | list[HostPriorityJson]) -> bytes:
    """Compact JSON bytes of an answer, strict RFC 8259: Go's ``encoding/json`` in
    kube-scheduler rejects ``NaN``, so a non-finite number (only possible inside node objects
    echoed back as received) is written as ``null``."""
    return dumps(result, separators=(",", ":")).encode("utf-8")


def host_priority_json(hosts: Sequence[str], scores: Sequence[int]) -> bytes:
    """``HostPriorityList`` JSON for ``hosts`` and their ``scores`` (0-10), in that order.

    Written by joining per-host fragments (the stdlib's C string encoder, the same escaping as
    ``json.dumps``) because a list of 5,000 dicts through ``json.dumps`` costs about 5 ms and
    the join well under 1 ms (bench/bench_extender.py).
    """
    if len(hosts) != len(scores):
        raise ValueError(f"{len(hosts)} hosts but {len(scores)} scores")
    if scores and not MIN_EXTENDER_PRIORITY <= min(scores) <= max(scores) <= MAX_EXTENDER_PRIORITY:
        raise ValueError(f"scores must be {MIN_EXTENDER_PRIORITY}-{MAX_EXTENDER_PRIORITY}")
    tails = _SCORE_TAILS
    parts = [
        _HOST_HEAD + encode_basestring_ascii(h) + tails[s]
        for h, s in zip(hosts, scores, strict=True)
    ]
    return ("[" + ",".join(parts) + "]").encode("ascii")


_HOST_HEAD = '{"Host":'
_SCORE_TAILS = tuple(f',"Score":{s}}}' for s in range(MAX_EXTENDER_PRIORITY + 1))


# -- bind ------------------------------------------------------------------------------------


class BindingArgsWire(_Wire):
    """``ExtenderBindingArgs``: which pod to bind to which node (PascalCase, no json tags)."""

    pod_name: str = Field(..., alias="PodName", min_length=1)
    pod_namespace: str = Field(..., alias="PodNamespace", min_length=1)
    pod_uid: str = Field("", alias="PodUID")
    node: str = Field(..., alias="Node", min_length=1)


def parse_binding_args(body: bytes) -> BindingArgsWire:
    """Read an ``ExtenderBindingArgs`` body; raises :class:`ParseError` saying what is wrong."""
    try:
        return BindingArgsWire.model_validate_json(body)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in exc.errors()[:5]
        )
        raise ParseError(
            f"not a kube-scheduler ExtenderBindingArgs body ({problems}); expected JSON "
            '{"PodName": ..., "PodNamespace": ..., "PodUID": ..., "Node": ...}'
        ) from None


def binding_result(error: str = "") -> bytes:
    """``ExtenderBindingResult``: ``{"Error": ""}`` when bound, else the reason."""
    return dumps({"Error": error}, separators=(",", ":")).encode("utf-8")
