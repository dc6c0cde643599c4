"""What the Kubernetes emulator checks on a pod's way in: ResourceQuota admission and binding.

**Binding** (``POST pods/<name>/binding``, from ``pkg/registry/core/pod/storage/storage.go``
``BindingREST`` and ``ValidatePodBinding``): the target's kind must be ``Node`` or empty and its
name set (422 Invalid otherwise); a pod already bound answers 409 Conflict (``pod <name> is
already assigned to node "<node>"``), as does a ``metadata.uid`` precondition that is not the
pod's. The pod gets ``spec.nodeName``, the binding's annotations and a ``PodScheduled``
condition with status True; the API answers a ``Status`` with code 201.

**ResourceQuota admission**, written from kubernetes/kubernetes
``plugin/pkg/admission/resourcequota/controller.go`` (``checkRequest``) and
``pkg/quota/v1/evaluator/core/pods.go`` (``podComputeUsageHelper``):

- a pod counts against every ResourceQuota of its namespace while it is not terminal (phase
  not ``Succeeded`` / ``Failed``);
- what it counts: ``pods`` and ``count/pods`` = 1; ``requests.<r>`` and, for CPU and memory,
  the bare ``cpu`` / ``memory`` keys = the sum of its containers' requests (a request defaults
  to the limit, as API defaulting does), or the largest init container's when that is larger;
  ``limits.<r>`` likewise from the limits. Only the keys a quota's ``spec.hard`` names are
  checked, and a pod that does not use a key is never refused for it;
- a creation that would take ``used + requested`` past ``hard`` for any key is refused with
  403 Forbidden and the API server's message::

      pods "NAME" is forbidden: exceeded quota: QUOTA, requested: KEY=Q, used: KEY=Q,
      limited: KEY=Q

  listing only the exceeded keys, sorted (``prettyPrint``); quantities are printed in their
  canonical form (CPU in cores or ``m``, memory with a binary suffix when exact);
- ``status.hard`` mirrors ``spec.hard`` and ``status.used`` the current usage of every hard
  key (the quota controller's job, done here after every pod or quota change).

Not emulated: the backward-compatibility rule that refuses a pod without an explicit CPU or
memory request in a namespace whose quota limits them ("must specify"), scopes and scope
selectors, and object counts other than pods.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping
from decimal import Decimal
from typing import Any

from sits_observe.domain.quantity import QuantityUnit, format_quantity, parse_quantity
from sits_observe.errors import ParseError
from sits_observe.lab.kube.query import status_error

JsonObject = dict[str, Any]

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
#: The API server's answer to a successful binding.
BIND_SUCCESS: JsonObject = {
    "kind": "Status",
    "apiVersion": "v1",
    "metadata": {},
    "status": "Success",
    "code": 201,
}
_BARE = {"cpu": "requests.cpu", "memory": "requests.memory"}
_QUOTA_UNITS: dict[str, QuantityUnit] = {"cpu": "cores", "memory": "bytes"}


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _quantity(raw: Any) -> Decimal | None:
    if raw is None:
        return None
    try:
        return parse_quantity(raw)
    except ParseError:
        return None


def _container_amounts(container: Mapping[str, Any], kind: str) -> dict[str, Decimal]:
    """Requests (``kind`` "requests", defaulting to the limits) or limits of one container."""
    resources = _mapping(container.get("resources"))
    limits = _mapping(resources.get("limits"))
    chosen = dict(limits)
    if kind == "requests":
        chosen.update(_mapping(resources.get("requests")))
    out: dict[str, Decimal] = {}
    for name, raw in chosen.items():
        value = _quantity(raw)
        if value is not None:
            out[str(name)] = value
    return out


def pod_usage(pod: Mapping[str, Any]) -> dict[str, Decimal]:
    """Every quota key ``pod`` uses, with its amount (see the module docstring)."""
    spec = _mapping(pod.get("spec"))
    usage: dict[str, Decimal] = {"pods": Decimal(1), "count/pods": Decimal(1)}
    for kind in ("requests", "limits"):
        total: dict[str, Decimal] = {}
        for container in spec.get("containers") or ():
            for name, value in _container_amounts(_mapping(container), kind).items():
                total[name] = total.get(name, Decimal(0)) + value
        for container in spec.get("initContainers") or ():
            for name, value in _container_amounts(_mapping(container), kind).items():
                total[name] = max(total.get(name, Decimal(0)), value)
        for name, value in total.items():
            usage[f"{kind}.{name}"] = value
    for bare, full in _BARE.items():
        if full in usage:
            usage[bare] = usage[full]
    return usage


def counts_against_quota(pod: Mapping[str, Any]) -> bool:
    """A pod that is not terminal uses its namespace's quota."""
    return _mapping(pod.get("status")).get("phase") not in TERMINAL_PHASES


def namespace_usage(
    pods: Iterable[Mapping[str, Any]],
    keys: Iterable[str],
    usage_of: Callable[[Mapping[str, Any]], dict[str, Decimal]] = pod_usage,
) -> dict[str, Decimal]:
    """Usage of ``keys`` by the non-terminal ``pods`` (of one namespace); ``usage_of`` is
    :func:`pod_usage` or a cache of it."""
    wanted = list(keys)
    used = dict.fromkeys(wanted, Decimal(0))
    for pod in pods:
        if not counts_against_quota(pod):
            continue
        usage = usage_of(pod)
        for key in wanted:
            used[key] += usage.get(key, Decimal(0))
    return used


def hard_limits(quota: Mapping[str, Any]) -> dict[str, Decimal]:
    """``spec.hard`` as amounts (unreadable quantities are left out)."""
    out: dict[str, Decimal] = {}
    for key, raw in _mapping(_mapping(quota.get("spec")).get("hard")).items():
        value = _quantity(raw)
        if value is not None:
            out[str(key)] = value
    return out


def exceeded_message(
    pod_name: str,
    quota_name: str,
    requested: Mapping[str, Decimal],
    used: Mapping[str, Decimal],
    hard: Mapping[str, Decimal],
) -> str | None:
    """The 403 message when admitting ``requested`` breaks the quota, else None."""
    exceeded = sorted(
        key
        for key, limit in hard.items()
        if requested.get(key, Decimal(0)) > 0 and used.get(key, Decimal(0)) + requested[key] > limit
    )
    if not exceeded:
        return None

    def pretty(values: Mapping[str, Decimal]) -> str:
        return ",".join(f"{k}={quota_quantity(k, values.get(k, Decimal(0)))}" for k in exceeded)

    return (
        f'pods "{pod_name}" is forbidden: exceeded quota: {quota_name}, requested: '
        f"{pretty(requested)}, used: {pretty(used)}, limited: {pretty(hard)}"
    )


def quota_status(hard: Mapping[str, Any], used: Mapping[str, Decimal]) -> JsonObject:
    """The ``status`` the quota controller keeps: ``hard`` as written, ``used`` per key."""
    return {
        "hard": {str(k): str(v) for k, v in hard.items()},
        "used": {k: quota_quantity(k, v) for k, v in sorted(used.items())},
    }


def quota_quantity(key: str, value: Decimal) -> str:
    """``value`` of quota key ``key`` in canonical quantity form: ``4``, ``500m``, ``16Gi``."""
    resource = key.split(".", 1)[1] if "." in key and not key.startswith("count/") else key
    return format_quantity(value, _QUOTA_UNITS.get(resource, "count"))


# -- binding ------------------------------------------------------------------------------


def bind_pod(pod: Mapping[str, Any], binding: Any, name: str, now: str) -> JsonObject:
    """``pod`` bound as ``binding`` says (a copy), or the API server's error for it."""
    if not isinstance(binding, Mapping):
        raise status_error(400, "BadRequest", "the request body must be a Binding object")
    target = _mapping(binding.get("target"))
    node = target.get("name")
    invalid = f'Binding "{name}" is invalid: '
    if target.get("kind") not in (None, "", "Node"):
        raise status_error(
            422,
            "Invalid",
            f'{invalid}target.kind: Unsupported value: "{target.get("kind")}": '
            'supported values: "Node"',
        )
    if not isinstance(node, str) or not node:
        raise status_error(422, "Invalid", f"{invalid}target.name: Required value")
    bound = copy.deepcopy(dict(pod))
    meta = bound.setdefault("metadata", {})
    conflict = f'Operation cannot be fulfilled on pods/binding "{name}": '
    sent_uid = _mapping(binding.get("metadata")).get("uid")
    if sent_uid and sent_uid != meta.get("uid"):
        raise status_error(
            409,
            "Conflict",
            f"{conflict}Precondition failed: UID in precondition: {sent_uid}, "
            f"UID in object meta: {meta.get('uid')}",
        )
    spec = bound.setdefault("spec", {})
    if spec.get("nodeName"):
        raise status_error(
            409,
            "Conflict",
            f'{conflict}pod {name} is already assigned to node "{spec["nodeName"]}"',
        )
    spec["nodeName"] = node
    annotations = _mapping(_mapping(binding.get("metadata")).get("annotations"))
    if annotations:
        meta.setdefault("annotations", {}).update(annotations)
    status = bound.setdefault("status", {})
    conditions = [c for c in status.get("conditions") or () if c.get("type") != "PodScheduled"]
    conditions.append(
        {"type": "PodScheduled", "status": "True", "lastProbeTime": None, "lastTransitionTime": now}
    )
    status["conditions"] = conditions
    return bound
