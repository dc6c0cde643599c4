"""The Kubernetes API's JSON as the inventory reads it: typed shapes and tolerant accessors.

The inventory parses raw list bodies itself (:mod:`sits_observe.collectors.kube.inventory`), so one
object with a field of the wrong JSON type is dropped and counted instead of failing the page.
These helpers are the one place that decides what "wrong" means:

- an object without what identifies it (``metadata.name``, ``uid``, ``namespace``), or with a
  container, list or object field of another JSON type, raises :class:`Malformed` (the caller
  drops the object and counts it);
- an absent optional field is an empty object or list;
- an unreadable timestamp is NULL and counted under the caller's reason.

The TypedDicts list only the keys the inventory reads (camelCase, as the API writes them).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from datetime import datetime
from typing import Any, TypedDict, cast

from sits_observe.domain.times import utc_naive


class OwnerReferenceJson(TypedDict, total=False):
    kind: str
    name: str
    controller: bool


class ObjectMetaJson(TypedDict, total=False):
    name: str
    namespace: str
    uid: str
    labels: dict[str, str]
    annotations: dict[str, str]
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
    nodeSelector: dict[str, str]
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


class Malformed(Exception):
    """An object lacks what identifies it, or a field has the wrong JSON type: drop it."""


def obj(value: Any, what: str, *, required: bool = False) -> dict[str, Any]:
    """``value`` as a JSON object; absent (None) is ``{}`` unless ``required``."""
    if value is None and not required:
        return {}
    if not isinstance(value, dict):
        raise Malformed(f"{what} is not an object")
    return value


def seq(value: Any, what: str) -> list[Any]:
    """``value`` as a JSON list; absent (None) is ``[]``."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise Malformed(f"{what} is not a list")
    return value


def text(value: Any) -> str | None:
    """A non-empty string, else None."""
    return value if isinstance(value, str) and value else None


def identity(meta: Mapping[str, Any], key: str) -> str:
    """``metadata.<key>``, which must be a non-empty string."""
    value = text(meta.get(key))
    if value is None:
        raise Malformed(f"metadata.{key} is missing")
    return value


def timestamp(value: Any, reason: str, dropped: Counter[str]) -> datetime | None:
    """An RFC 3339 time as naive UTC; unreadable is None and counted under ``reason``."""
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(str(value))
    except ValueError:
        dropped[reason] += 1
        return None
    return utc_naive(parsed)


def condition_times(
    conditions: list[Any], reason: str, dropped: Counter[str]
) -> dict[str, datetime | None]:
    """type -> lastTransitionTime of conditions that are ``True``."""
    times: dict[str, datetime | None] = {}
    for raw in conditions:
        cond = cast(ConditionJson, obj(raw, "condition"))
        if cond.get("status") == "True" and isinstance(cond.get("type"), str):
            times[cond["type"]] = timestamp(cond.get("lastTransitionTime"), reason, dropped)
    return times
