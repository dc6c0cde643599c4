"""The Kubernetes emulator's reads of kmock's object store, and its one ``resourceVersion``
counter.

:class:`ObjectStore` is the base of the emulator's request handler
(:class:`sits_observe.lab.kube.server.Emulator`): every write takes the next revision
(:meth:`ObjectStore.next_revision`); a resource's live objects come from an index by resource
rather than kmock's scan of every object it ever stored (:meth:`ObjectStore._by_resource`), a
request that names one object from one dict lookup, and LIST and WATCH read the objects their
selectors match (:meth:`ObjectStore._visible`).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import kmock

from sits_observe.lab.kube.query import matches

#: JSON object as kmock stores it.
JsonObject = dict[str, Any]


class ObjectStore(kmock.KubernetesEmulator):
    """kmock's emulator with one revision counter for every write and its stored objects
    indexed by resource.

    Runs inside one asyncio loop; every method here is called from that loop only.
    """

    def __init__(self) -> None:
        super().__init__()
        self.revision = 0
        self._index: dict[tuple[str | None, str | None, str | None], list[tuple[str | None, Any]]]
        self._index = {}
        self._indexed = 0

    def next_revision(self) -> str:
        self.revision += 1
        return str(self.revision)

    def _stored(self, resource: kmock.resource, namespace: str | None) -> Iterator[Any]:
        """The live stored objects of ``resource`` (in ``namespace``; None: every one), in
        kmock's order, from :meth:`_by_resource`."""
        for ns, obj in self._by_resource(resource):
            if (namespace is None or ns == namespace) and not obj.deleted:
                yield obj

    def _by_resource(self, resource: kmock.resource) -> list[tuple[str | None, Any]]:
        """Every stored object of ``resource`` (deleted ones too) with its namespace.

        kmock keeps every object it ever stored (a deletion only marks it) in one dict in
        insertion order, and scans all of it for each request. An hour of an experiment run
        stores thousands of pods, Jobs and events, so the scans grew with the run. This index
        takes in the dict's new entries on each call; it starts again if the dict shrank (a
        test removing objects through kmock)."""
        objects = self._objects._objects
        if len(objects) < self._indexed:
            self._index.clear()
            self._indexed = 0
        if len(objects) > self._indexed:
            for (res, ns, _), obj in itertools.islice(objects.items(), self._indexed, None):
                self._index.setdefault((res.group, res.version, res.plural), []).append((ns, obj))
            self._indexed = len(objects)
        return self._index.get((resource.group, resource.version, resource.plural), [])

    def _object(self, key: tuple[kmock.resource, str | None, str]) -> Any | None:
        """The stored object at ``(resource, namespace, name)`` (deleted ones too), or None:
        one lookup in kmock's dict, not its view's (which checks the key's shape with
        ``typing`` instance checks and parses the resource again, for every lookup)."""
        return self._objects._objects.get(key)

    def _KubernetesEmulator__get_objs(  # noqa: N802  # kmock's private name, mangled
        self, request: kmock.Request, strict: bool
    ) -> list[Any]:
        """kmock's lookup of the objects a request names, without its scan of every stored
        object when the request names one (a GET, PATCH or DELETE of one object): the same
        match (resource, exact namespace and name) as one dict lookup."""
        if strict and request.resource is not None and request.name is not None:
            found_one = self._object((request.resource, request.namespace, request.name))
            return [] if found_one is None else [found_one]
        found: list[Any] = kmock.KubernetesEmulator._KubernetesEmulator__get_objs(  # type: ignore[attr-defined]
            self, request, strict
        )
        return found

    def _visible(self, request: kmock.Request) -> Iterator[JsonObject]:
        """Live objects of the request's resource in its namespace (all when cluster-wide)."""
        labels = request.params.get("labelSelector")
        fields = request.params.get("fieldSelector")
        assert request.resource is not None
        for obj in self._stored(request.resource, request.namespace):
            raw = obj.raw
            if matches(raw, labels, fields):
                yield raw
