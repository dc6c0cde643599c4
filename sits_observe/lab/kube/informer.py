"""A lab component's local copy of one resource, kept current by the emulator's watch events.

kube-scheduler, the kubelet and the workload controllers never list the API server on every
pass: each keeps an informer, a cache filled by one list and then by a watch. The lab's models
of them do the same against the emulator (:meth:`KubeEmulator.informer`), without the wire:
the emulator hands each change to the informer's queue before it answers the request that made
it, so a component reading its informer after another's write always sees that write, in the
order the emulator made the changes, on every run of a seed. Writes still go over HTTP.

:meth:`Informer.items` applies the queued events and returns the objects in the order a list
answers (namespace, then name). They are shared with the cache: read-only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sits_observe.lab.kube.feed import EventQueue

#: JSON object as the API serves it.
JsonObject = dict[str, Any]


def _key(obj: JsonObject) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


class Informer:
    """One resource's objects as the last applied watch event left them."""

    def __init__(
        self,
        initial: list[JsonObject],
        events: EventQueue,
        *,
        close: Callable[[], None] = lambda: None,
    ) -> None:
        self._objects: dict[tuple[str, str], JsonObject] = {_key(o): o for o in initial}
        self._events = events
        self._close = close
        self._sorted: list[JsonObject] | None = None

    def items(self) -> list[JsonObject]:
        """Every live object, after the changes made so far (see the module docstring)."""
        events = self._events
        while events:
            event = events.popleft()
            obj = event["object"]
            if event["type"] == "DELETED":
                self._objects.pop(_key(obj), None)
            else:
                self._objects[_key(obj)] = obj
            self._sorted = None
        if self._sorted is None:
            self._sorted = [self._objects[k] for k in sorted(self._objects)]
        return list(self._sorted)

    def close(self) -> None:
        """Stop receiving changes."""
        self._close()
