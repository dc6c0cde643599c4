"""kube-scheduler's side of the extender protocol: the requests it sends, the answers it reads.

The extender's side is :mod:`sits_observe.control.extender.wire`; this module is the client,
written from ``pkg/scheduler/extender.go`` (``HTTPExtender``) and
``k8s.io/kube-scheduler/extender/v1/types.go``:

- every call is ``POST urlPrefix + "/" + verb`` with ``Content-Type: application/json``;
- filter / prioritize send ``ExtenderArgs`` ``{"Pod", "Nodes", "NodeNames"}``: with
  ``nodeCacheCapable`` only names (``Nodes`` null), otherwise full ``v1.Node`` objects
  (``NodeNames`` null);
- filter reads ``ExtenderFilterResult``: a non-empty ``Error`` fails the call; with
  ``nodeCacheCapable`` the passing nodes are ``NodeNames`` (a name it did not send is an
  error), otherwise ``Nodes.items``; ``null`` means no node passes. ``FailedNodes`` and
  ``FailedAndUnresolvableNodes`` give a reason per node;
- prioritize reads ``HostPriorityList`` ``[{"Host", "Score"}]``;
- bind sends ``ExtenderBindingArgs`` ``{"PodName", "PodNamespace", "PodUID", "Node"}`` and
  reads ``ExtenderBindingResult`` ``{"Error"}``.

Transport failures and unreadable answers raise :class:`ExtenderCallError`; what the cycle does
with it (skip an ``ignorable`` extender, fail the attempt, ignore a prioritize error) is
:mod:`sits_observe.lab.scheduler.model`'s business, as it is kube-scheduler's.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from sits_observe.domain.strict_json import dumps


class ExtenderCallError(Exception):
    """An extender call failed: unreachable, non-200, unreadable, or an ``Error`` answer."""


class ExtenderTransport(Protocol):
    """Delivers one extender call: HTTP in a cluster, the service's handler in a replay."""

    def post(self, url: str, body: bytes, timeout_s: float) -> bytes:
        """POST ``body`` to ``url``; the answer body, or :class:`ExtenderCallError`."""
        ...


@dataclass(frozen=True)
class FilterAnswer:
    """What kube-scheduler keeps of an ``ExtenderFilterResult``."""

    passing: tuple[str, ...]
    failed: Mapping[str, str]
    unresolvable: Mapping[str, str]


def extender_args(
    pod: Mapping[str, Any],
    names: Sequence[str],
    *,
    node_cache_capable: bool,
    node_objects: Sequence[Mapping[str, Any]] = (),
) -> bytes:
    """The ``ExtenderArgs`` body for ``pod`` and the candidate ``names``."""
    if node_cache_capable:
        document: dict[str, Any] = {"Pod": pod, "Nodes": None, "NodeNames": list(names)}
    else:
        document = {
            "Pod": pod,
            "Nodes": {"metadata": {}, "items": list(node_objects)},
            "NodeNames": None,
        }
    return dumps(document, separators=(",", ":")).encode("utf-8")


def binding_args(pod: Mapping[str, Any], node: str) -> bytes:
    """The ``ExtenderBindingArgs`` body binding ``pod`` to ``node``."""
    meta = pod.get("metadata") or {}
    document = {
        "PodName": meta.get("name", ""),
        "PodNamespace": meta.get("namespace", ""),
        "PodUID": meta.get("uid", ""),
        "Node": node,
    }
    return dumps(document, separators=(",", ":")).encode("utf-8")


def read_filter(body: bytes, sent: Sequence[str], *, node_cache_capable: bool) -> FilterAnswer:
    """Parse a filter answer as kube-scheduler does; :class:`ExtenderCallError` when it fails."""
    document = _object(body, "ExtenderFilterResult")
    error = document.get("Error") or ""
    if error:
        raise ExtenderCallError(str(error))
    allowed = set(sent)
    if node_cache_capable:
        names = document.get("NodeNames")
        passing = tuple(str(n) for n in names) if isinstance(names, list) else ()
    else:
        items = (document.get("Nodes") or {}).get("items")
        passing = (
            tuple(str((i.get("metadata") or {}).get("name", "")) for i in items)
            if isinstance(items, list)
            else ()
        )
    unknown = [n for n in passing if n not in allowed]
    if unknown:
        raise ExtenderCallError(
            f"extender claims filtered node(s) {', '.join(unknown[:3])} that were not sent"
        )
    return FilterAnswer(
        passing,
        _reasons(document.get("FailedNodes")),
        _reasons(document.get("FailedAndUnresolvableNodes")),
    )


def read_priorities(body: bytes) -> dict[str, int]:
    """``{host: score}`` from a ``HostPriorityList``."""
    try:
        document = json.loads(body)
    except ValueError as exc:
        raise ExtenderCallError(f"prioritize answer is not JSON: {exc}") from exc
    if not isinstance(document, list):
        raise ExtenderCallError("prioritize answer is not a HostPriorityList (a JSON list)")
    scores: dict[str, int] = {}
    for entry in document:
        if not isinstance(entry, dict) or not isinstance(entry.get("Score"), int):
            raise ExtenderCallError(f"prioritize answer entry {entry!r} is not {{Host, Score}}")
        scores[str(entry.get("Host"))] = int(entry["Score"])
    return scores


def read_binding(body: bytes) -> None:
    """Raise :class:`ExtenderCallError` when an ``ExtenderBindingResult`` carries an error."""
    error = _object(body, "ExtenderBindingResult").get("Error") or ""
    if error:
        raise ExtenderCallError(str(error))


def _object(body: bytes, what: str) -> dict[str, Any]:
    try:
        document = json.loads(body)
    except ValueError as exc:
        raise ExtenderCallError(f"{what} is not JSON: {exc}") from exc
    if not isinstance(document, dict):
        raise ExtenderCallError(f"{what} is not a JSON object")
    return document


def _reasons(value: object) -> dict[str, str]:
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}
