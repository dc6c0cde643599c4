"""The Kubernetes emulator's in-process watch feed, and the live-names index kept from it.

kmock announces every change of a resource on an event bus. :class:`WatchFeed` replaces each
bus with one that, as an event is put, keeps the names of the live objects by resource and
namespace (:meth:`WatchFeed._live`: quota admission reads a namespace's live pods from it, not
a scan of every pod ever stored) and copies the event to every in-process watcher of the
resource (:meth:`WatchFeed.watch_in_process`, the lab's informers): a watcher sees a change
before the request that made it is answered.
"""

from __future__ import annotations

import copy
from collections import deque
from collections.abc import Callable
from typing import Any

import kmock
from kmock._internal.aiobus import Bus

from sits_observe.lab.kube.object_store import JsonObject, ObjectStore

#: One in-process watcher's queue of watch events (``{"type": ..., "object": ...}``).
EventQueue = deque[JsonObject]


class _FeedBus(Bus[Any]):
    """kmock's event bus that also hands every event, as it is put, to ``feed``: the
    in-process watchers of :meth:`WatchFeed.watch_in_process` see a change before the request
    that made it is answered."""

    feed: Callable[[tuple[Any, ...]], None] | None = None

    async def put(self, *items: Any) -> None:
        await super().put(*items)
        if self.feed is not None:
            self.feed(items)


class _FeedBuses(dict[kmock.resource, Bus[Any]]):
    """kmock's bus per resource (created on first use), each a :class:`_FeedBus`."""

    def __init__(self, feed: Callable[[kmock.resource, tuple[Any, ...]], None]) -> None:
        super().__init__()
        self._feed = feed

    def __missing__(self, resource: kmock.resource) -> Bus[Any]:
        bus = _FeedBus()
        bus.feed = lambda items: self._feed(resource, items)
        self[resource] = bus
        return bus


class WatchFeed(ObjectStore):
    """The emulator's store with the in-process watchers and the live-names index fed by
    every change it announces."""

    def __init__(self) -> None:
        super().__init__()
        #: In-process watchers' queues by resource (:meth:`watch_in_process`).
        self.watchers: dict[kmock.resource, list[EventQueue]] = {}
        #: The names of the live objects by (resource, namespace), from the announced changes.
        self._live_names: dict[tuple[kmock.resource, str | None], dict[str, None]] = {}
        self._buses = _FeedBuses(self._feed)

    async def watch_in_process(
        self, resource: kmock.resource
    ) -> tuple[list[JsonObject], EventQueue]:
        """The live objects of ``resource`` and a queue that receives every later change
        (a watch from that state, without the wire): taken under the store's lock, so no
        change falls between the two. Objects are copies; treat them as read-only."""
        async with self._lock:
            initial = [copy.deepcopy(obj.raw) for obj in self._stored(resource, None)]
            queue: EventQueue = deque()
            self.watchers.setdefault(resource, []).append(queue)
        return initial, queue

    def unwatch(self, resource: kmock.resource, queue: EventQueue) -> None:
        """Stop feeding ``queue``."""
        queues = self.watchers.get(resource, [])
        self.watchers[resource] = [q for q in queues if q is not queue]  # deques compare by items

    def _feed(self, resource: kmock.resource, items: tuple[Any, ...]) -> None:
        """Keep :attr:`_live_names`, and copy each event once to every in-process watcher of
        ``resource``."""
        for item in items:
            meta = (item.get("object") or {}).get("metadata") or {}
            name = meta.get("name")
            if not isinstance(name, str):
                continue
            names = self._live_names.setdefault((resource, meta.get("namespace")), {})
            if item.get("type") == "DELETED":
                names.pop(name, None)
            else:
                names[name] = None
        queues = self.watchers.get(resource)
        if not queues:
            return
        for item in items:
            event = {"type": item["type"], "object": copy.deepcopy(item["object"])}
            for queue in queues:
                queue.append(event)

    def _live(self, resource: kmock.resource, namespace: str) -> list[JsonObject]:
        """Live objects of ``resource`` in ``namespace``; call with the lock held.

        From :attr:`_live_names`, kept by every change the store announces: kmock keeps every
        object it ever stored, and an hour of an experiment run created thousands of pods
        whose scan, for every pod write's quota check, grew with the run."""
        found = (
            self._object((resource, namespace, name))
            for name in self._live_names.get((resource, namespace), {})
        )
        return [obj.raw for obj in found if obj is not None and not obj.deleted]
