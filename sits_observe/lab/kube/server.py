"""The request handler of the Kubernetes emulator: kmock's object store with its gaps filled.

:class:`Emulator` runs inside the emulator thread's asyncio loop
(:mod:`sits_observe.lab.kube.emulator` is the runner and lists the behaviour). Next to
the gaps kmock has, it serves ``POST pods/<name>/binding`` and checks each new pod against the
ResourceQuotas of its namespace (403 when one would be exceeded), keeping their ``status``
current after every pod or quota change; the rules are :mod:`.kube_emulator_admission`. A pod's
quota check and its creation happen under one lock, so two creations cannot both pass a check
that only one of them fits.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
import re
import secrets
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import aiohttp.web
import kmock
from kmock._internal.aiobus import Bus, BusMark
from kmock._internal.rendering import Response

from sits_observe.lab.kube.admission import (
    BIND_SUCCESS,
    bind_pod,
    exceeded_message,
    hard_limits,
    namespace_usage,
    pod_usage,
    quota_status,
)
from sits_observe.lab.kube.query import (
    decode_token,
    encode_token,
    matches,
    selectors,
    status_error,
)
from sits_observe.lab.kube.resources import (
    ALL_VERBS,
    EXTRA_SUBRESOURCES,
    RESOURCES,
    ResourceSpec,
)

#: JSON object as kmock stores it.
JsonObject = dict[str, Any]

_POD = kmock.resource("", "v1", "pods")
#: One in-process watcher's queue of watch events (``{"type": ..., "object": ...}``).
EventQueue = deque[JsonObject]

#: Pod versions whose quota usage :meth:`Emulator._pod_usage` keeps (then it starts again).
_USAGE_KEPT = 10_000
_QUOTA = kmock.resource("", "v1", "resourcequotas")


#: kmock reads ``/api/v1/namespaces/...`` as a namespace prefix, so the Namespace resource
#: itself is served under this internal plural (never shown to clients).
_NAMESPACES_ALIAS = "sits-namespaces"
_NAMESPACE_PATH = re.compile(r"^/api/v1/namespaces(?P<rest>/[^/]+(?:/(?:status|finalize))?)?/?$")


def _rfc3339(ts: datetime) -> str:
    return ts.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# -- the handler --------------------------------------------------------------------------


@dataclass
class _Fault:
    """An error answered instead of serving requests whose ``METHOD path?query`` matches."""

    pattern: re.Pattern[str]
    status: int
    reason: str
    message: str
    remaining: int  # -1: forever


def _resource_version(obj: JsonObject) -> int:
    try:
        return int((obj.get("metadata") or {}).get("resourceVersion") or 0)
    except (TypeError, ValueError):
        return 0


class _FeedBus(Bus[Any]):
    """kmock's event bus that also hands every event, as it is put, to ``feed``: the
    in-process watchers of :meth:`Emulator.watch_in_process` see a change before the request
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


class Emulator(kmock.KubernetesEmulator):
    """kmock's emulator with the gaps listed in the runner's docstring filled, the Binding
    subresource and ResourceQuota admission.

    Runs inside one asyncio loop; every method here is called from that loop only.
    """

    def __init__(self, *, now_fn: Callable[[], datetime], keep_requests: int) -> None:
        super().__init__()
        self.now_fn = now_fn
        self.keep_requests = keep_requests
        self.revision = 0
        self.token_epoch = 0
        self.closing = asyncio.Event()
        self.faults: list[_Fault] = []
        self.specs: dict[kmock.resource, ResourceSpec] = {}
        # Held from a pod's quota check to its creation, so two creations cannot both pass.
        self._admission = asyncio.Lock()
        self._index: dict[tuple[str | None, str | None, str | None], list[tuple[str | None, Any]]]
        self._index = {}
        self._indexed = 0
        # Quota usage of each pod version, by (uid, resourceVersion): a quota's status is
        # recomputed over its namespace's pods after every pod write.
        self._usage: dict[tuple[str, str], dict[str, Decimal]] = {}
        #: In-process watchers' queues by resource (:meth:`watch_in_process`).
        self.watchers: dict[kmock.resource, list[EventQueue]] = {}
        #: The names of the live objects by (resource, namespace), from the announced changes.
        self._live_names: dict[tuple[kmock.resource, str | None], dict[str, None]] = {}
        self._buses = _FeedBuses(self._feed)
        for spec in RESOURCES:
            res = kmock.resource(spec.group, spec.version, spec.plural)
            self.specs[res] = spec
            if spec.plural == "namespaces":
                self.specs[kmock.resource("", "v1", _NAMESPACES_ALIAS)] = spec
            self.resources[res] = kmock.ResourceInfo(
                kind=spec.kind,
                singular=spec.kind.lower(),
                namespaced=spec.namespaced,
                verbs=set(ALL_VERBS),
                subresources=({"status"} if spec.has_status else set())
                | EXTRA_SUBRESOURCES.get(spec.plural, set()),
            )

    def next_revision(self) -> str:
        self.revision += 1
        return str(self.revision)

    # -- in-process watches ----------------------------------------------------------

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

    # -- request entry ---------------------------------------------------------------

    async def __call__(self, raw_request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        path = raw_request.path
        if len(path) > 1 and path.endswith("/"):  # the client asks discovery for "/api/v1/"
            path = path.rstrip("/")
        match = _NAMESPACE_PATH.match(path)
        if match is not None:
            path = f"/api/v1/{_NAMESPACES_ALIAS}{match['rest'] or ''}"
        if path != raw_request.path:
            raw_request = raw_request.clone(
                rel_url=raw_request.rel_url.with_path(path, keep_query=True)
            )
        return await super().__call__(raw_request)

    def _get_resources(self) -> list[kmock.resource]:
        alias = kmock.resource("", "v1", _NAMESPACES_ALIAS)
        return [r for r in super()._get_resources() if r != alias]

    async def _handle(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        self._forget_old_requests()
        self._raise_injected_fault(request)
        if request.resource is None:
            return await super()._handle(request)
        if request.resource == _POD and request.subresource == "binding":
            if request.method != kmock.method.POST or request.name is None:
                raise status_error(405, "MethodNotAllowed", "pods/binding only takes POST")
            answer = await self._bind(request)
            await self._refresh_quotas(request.namespace)
            return aiohttp.web.json_response(answer, status=201)
        if request.method == kmock.method.PUT and request.name is not None:
            response: aiohttp.web.StreamResponse = aiohttp.web.json_response(
                await self._replace(request)
            )
        elif request.action == kmock.action.CREATE and request.resource == _POD:
            self._prepare_create(request)
            async with self._admission:
                await self._admit_pod(request)
                response = await super()._handle(request)
        else:
            if request.action == kmock.action.CREATE:
                self._prepare_create(request)
            elif request.action == kmock.action.UPDATE and isinstance(request.data, dict):
                # A merge patch: stamp the new revision into it so the stored object and the
                # MODIFIED event carry it.
                meta = request.data.setdefault("metadata", {})
                if isinstance(meta, dict):
                    meta["resourceVersion"] = self.next_revision()
            response = await super()._handle(request)
        if request.resource in (_POD, _QUOTA) and request.method != kmock.method.GET:
            await self._refresh_quotas(self._namespace_of(request))
        return response

    @staticmethod
    def _namespace_of(request: kmock.Request) -> str | None:
        if request.namespace is not None:
            return request.namespace
        meta = request.data.get("metadata") if isinstance(request.data, dict) else None
        namespace = meta.get("namespace") if isinstance(meta, dict) else None
        return namespace if isinstance(namespace, str) else None

    # -- pods/binding ----------------------------------------------------------------

    async def _bind(self, request: kmock.Request) -> JsonObject:
        """Assign a pod to a node, as the API server's BindingREST does."""
        name = str(request.name)
        key = (_POD, request.namespace, name)
        async with self._lock:
            if key not in self._objects or self._objects[key].deleted:
                raise status_error(404, "NotFound", f'pods "{name}" not found')
            stored = self._objects[key]
            pod = bind_pod(stored.raw, request.data, name, _rfc3339(self.now_fn()))
            pod["metadata"]["resourceVersion"] = self.next_revision()
            stored.create(pod)
            await self._buses[_POD].put({"type": "MODIFIED", "object": copy.deepcopy(pod)})
        return BIND_SUCCESS

    # -- ResourceQuota ---------------------------------------------------------------

    def _live(self, resource: kmock.resource, namespace: str) -> list[JsonObject]:
        """Live objects of ``resource`` in ``namespace``; call with the lock held.

        From :attr:`_live_names`, kept by every change the store announces: kmock keeps every
        object it ever stored, and an hour of an experiment run created thousands of pods
        whose scan, for every pod write's quota check, grew with the run."""
        keys = (
            (resource, namespace, name) for name in self._live_names.get((resource, namespace), {})
        )
        found = (self._objects[key] for key in keys if key in self._objects)
        return [obj.raw for obj in found if not obj.deleted]

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

    def _KubernetesEmulator__get_objs(  # noqa: N802  # kmock's private name, mangled
        self, request: kmock.Request, strict: bool
    ) -> list[Any]:
        """kmock's lookup of the objects a request names, without its scan of every stored
        object when the request names one (a GET, PATCH or DELETE of one object): the same
        match (resource, exact namespace and name) as one dict lookup."""
        if strict and request.resource is not None and request.name is not None:
            key = (request.resource, request.namespace, request.name)
            return [self._objects[key]] if key in self._objects else []
        found: list[Any] = kmock.KubernetesEmulator._KubernetesEmulator__get_objs(  # type: ignore[attr-defined]
            self, request, strict
        )
        return found

    async def _admit_pod(self, request: kmock.Request) -> None:
        """403 Forbidden when the new pod would exceed a ResourceQuota of its namespace."""
        body = request.data
        meta = body.get("metadata") or {}
        namespace = meta.get("namespace")
        if not isinstance(namespace, str):
            return
        async with self._lock:
            pods = self._live(_POD, namespace)
            quotas = sorted(
                self._live(_QUOTA, namespace), key=lambda q: str(q["metadata"].get("name"))
            )
        requested = pod_usage(body)
        for quota in quotas:
            hard = hard_limits(quota)
            used = namespace_usage(pods, hard, self._pod_usage)
            message = exceeded_message(
                str(meta.get("name")), str(quota["metadata"].get("name")), requested, used, hard
            )
            if message is not None:
                raise status_error(403, "Forbidden", message)

    def _pod_usage(self, pod: Mapping[str, Any]) -> dict[str, Decimal]:
        """:func:`pod_usage` of a stored pod, read once per version of it."""
        meta = pod.get("metadata") or {}
        key = (str(meta.get("uid") or ""), str(meta.get("resourceVersion") or ""))
        if not all(key):
            return pod_usage(pod)
        usage = self._usage.get(key)
        if usage is None:
            if len(self._usage) > _USAGE_KEPT:
                self._usage.clear()
            usage = self._usage[key] = pod_usage(pod)
        return usage

    async def _refresh_quotas(self, namespace: str | None) -> None:
        """Keep ``status.hard`` / ``status.used`` of the namespace's quotas current."""
        if namespace is None:
            return
        async with self._lock:
            quotas = list(self._stored(_QUOTA, namespace))
            if not quotas:  # most namespaces have none: no need to add up their pods
                return
            pods = self._live(_POD, namespace)
            for stored in quotas:
                hard = (stored.raw.get("spec") or {}).get("hard") or {}
                used = namespace_usage(pods, hard_limits(stored.raw), self._pod_usage)
                status = quota_status(hard, used)
                if stored.raw.get("status") == status:
                    continue
                quota = copy.deepcopy(stored.raw)
                quota["status"] = status
                quota.setdefault("metadata", {})["resourceVersion"] = self.next_revision()
                stored.create(quota)
                await self._buses[_QUOTA].put({"type": "MODIFIED", "object": copy.deepcopy(quota)})

    def _raise_injected_fault(self, request: kmock.Request) -> None:
        line = f"{request.method.value} {request.url.path_qs}"
        for fault in self.faults:
            if fault.remaining != 0 and fault.pattern.search(line):
                fault.remaining -= 1
                raise status_error(fault.status, fault.reason, fault.message)

    def _forget_old_requests(self) -> None:
        keep = self.keep_requests
        if len(self._requests) > 2 * keep:
            del self._requests[:-keep]
            for payload in self._payloads:
                del payload._requests[:-keep]
            for errors in self._errors:
                del errors[:-keep]

    def _namespace_for(self, request: kmock.Request, meta: JsonObject) -> None:
        if request.namespace is None:
            return
        sent = meta.get("namespace")
        if sent in (None, ""):
            meta["namespace"] = request.namespace
        elif sent != request.namespace:
            raise status_error(
                400,
                "BadRequest",
                f"the namespace of the provided object ({sent}) does not match the namespace "
                f"sent on the request ({request.namespace})",
            )

    def _prepare_create(self, request: kmock.Request) -> None:
        body = request.data
        if not isinstance(body, dict):
            raise status_error(400, "BadRequest", "the request body must be a JSON object")
        meta = body.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise status_error(400, "BadRequest", "metadata must be a JSON object")
        if not meta.get("name"):
            if not meta.get("generateName"):
                raise status_error(422, "Invalid", "metadata.name or generateName is required")
            meta["name"] = meta["generateName"] + secrets.token_hex(3)[:5]
        self._namespace_for(request, meta)
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", _rfc3339(self.now_fn()))
        meta["resourceVersion"] = self.next_revision()
        spec = self.specs.get(request.resource) if request.resource is not None else None
        if spec is not None:
            body.setdefault("apiVersion", spec.api_version)
            body.setdefault("kind", spec.kind)

    # -- PUT (replace) ---------------------------------------------------------------

    async def _replace(self, request: kmock.Request) -> JsonObject:
        resource, name = request.resource, request.name
        assert resource is not None and name is not None
        body = request.data
        if not isinstance(body, dict) or not isinstance(body.get("metadata", {}), dict):
            raise status_error(400, "BadRequest", "the request body must be a JSON object")
        body = copy.deepcopy(body)
        meta = body.setdefault("metadata", {})
        if meta.get("name") not in (None, name):
            raise status_error(
                400, "BadRequest", f"the name of the object ({meta['name']}) does not match {name}"
            )
        self._namespace_for(request, meta)
        if request.subresource not in (None, "status"):
            raise status_error(
                404, "NotFound", f"subresource {request.subresource!r} is not served"
            )
        key = (resource, request.namespace, name)
        async with self._lock:
            if key not in self._objects or self._objects[key].deleted:
                raise kmock.KubernetesObjectNotFoundError()
            stored = self._objects[key]
            current = copy.deepcopy(stored.raw)
            sent_rv = meta.get("resourceVersion")
            if sent_rv not in (None, "") and sent_rv != current["metadata"].get("resourceVersion"):
                raise status_error(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on {resource.plural} "{name}": the object '
                    "has been modified; please apply your changes to the latest version and "
                    "try again",
                )
            spec = self.specs.get(resource)
            if request.subresource == "status":
                new = current
                new["status"] = body.get("status")
            else:
                new = body
                for field in ("uid", "creationTimestamp", "deletionTimestamp"):
                    if field in current["metadata"]:
                        new["metadata"][field] = current["metadata"][field]
                if spec is not None and spec.has_status and "status" in current:
                    new["status"] = current["status"]
            new["metadata"]["resourceVersion"] = self.next_revision()
            stored.create(new)
            bus: Bus[Any] = self._buses[resource]
            await bus.put({"type": "MODIFIED", "object": copy.deepcopy(new)})
            if new["metadata"].get("deletionTimestamp") and not new["metadata"].get("finalizers"):
                stored.delete()
                await bus.put({"type": "DELETED", "object": copy.deepcopy(new)})
        return new

    # -- LIST ------------------------------------------------------------------------

    def _known(self, request: kmock.Request) -> ResourceSpec:
        spec = self.specs.get(request.resource) if request.resource is not None else None
        if spec is None and request.resource not in self._get_resources():
            raise kmock.KubernetesResourceNotFoundError()
        if spec is None:
            assert request.resource is not None and request.resource.plural is not None
            plural = request.resource.plural
            spec = ResourceSpec(
                request.resource.group or "",
                request.resource.version or "v1",
                plural,
                plural.capitalize(),
                namespaced=request.namespace is not None,
            )
        return spec

    def _visible(self, request: kmock.Request) -> Iterator[JsonObject]:
        """Live objects of the request's resource in its namespace (all when cluster-wide)."""
        labels = request.params.get("labelSelector")
        fields = request.params.get("fieldSelector")
        assert request.resource is not None
        for obj in self._stored(request.resource, request.namespace):
            raw = obj.raw
            if matches(raw, labels, fields):
                yield raw

    async def _serve_list(self, request: kmock.Request) -> kmock.Payload:
        """The list, serialised while the lock is held (so no copy of the stored objects is
        needed: nothing can change them before they are written out)."""
        spec = self._known(request)
        try:
            limit = int(request.params.get("limit") or 0)
        except ValueError as exc:
            raise status_error(400, "BadRequest", "limit must be an integer") from exc
        token = request.params.get("continue")
        after = decode_token(token, self.token_epoch) if token else None
        async with self._lock:
            items = list(self._visible(request))
            revision = str(self.revision)
            return Response(
                payload=json.dumps(self._list_body(spec, items, after, limit, revision)).encode(),
                headers={"Content-Type": "application/json; charset=utf-8"},
            )

    def _list_body(
        self,
        spec: ResourceSpec,
        items: list[JsonObject],
        after: tuple[str, str] | None,
        limit: int,
        revision: str,
    ) -> JsonObject:
        def sort_key(o: JsonObject) -> tuple[str, str]:
            meta = o.get("metadata") or {}
            return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))

        items.sort(key=sort_key)
        if after is not None:
            items = [o for o in items if sort_key(o) > after]
        metadata: JsonObject = {"resourceVersion": revision}
        if 0 < limit < len(items):
            metadata["continue"] = encode_token(sort_key(items[limit - 1]), self.token_epoch)
            metadata["remainingItemCount"] = len(items) - limit
            items = items[:limit]
        return {
            "apiVersion": spec.api_version,
            "kind": f"{spec.kind}List",
            "metadata": metadata,
            "items": items,
        }

    # -- WATCH -----------------------------------------------------------------------

    async def _serve_watch(self, request: kmock.Request) -> AsyncIterator[kmock.Payload]:
        labels = request.params.get("labelSelector")
        fields = request.params.get("fieldSelector")
        # A bad selector answers 400 before the stream starts (kmock sends headers only with
        # the first chunk), not an ERROR event inside it.
        selectors(labels, fields)
        # Start the HTTP stream at once, as the API server does, even if nothing happens.
        yield b""
        loop = asyncio.get_running_loop()
        try:
            timeout_s = float(request.params.get("timeoutSeconds") or 0)
        except ValueError:
            timeout_s = 0.0
        deadline = loop.time() + timeout_s if timeout_s > 0 else None
        try:
            since = int(request.params.get("resourceVersion") or 0)
        except ValueError:
            since = 0
        assert request.resource is not None
        bus: Bus[Any] = self._buses[request.resource]
        async with self._lock:
            initial = [copy.deepcopy(o) for o in self._visible(request)]
            mark: BusMark[Any] = await bus.mark()
        try:
            for obj in initial:
                if _resource_version(obj) > since:
                    yield {"type": "ADDED", "object": obj}
            stream = bus.stream(since=mark)
            while True:
                event = await self._next_event(stream, deadline)
                if event is None:
                    return
                obj = event.get("object") or {}
                if (
                    request.namespace is not None
                    and (obj.get("metadata") or {}).get("namespace") != request.namespace
                ):
                    continue
                if (
                    request.name is not None
                    and (obj.get("metadata") or {}).get("name") != request.name
                ):
                    continue
                if matches(obj, labels, fields):
                    yield event
        finally:
            await bus.unmark(mark)

    async def _next_event(
        self, stream: AsyncIterator[JsonObject], deadline: float | None
    ) -> JsonObject | None:
        """The next bus event, or None at the deadline or when the emulator shuts down."""
        loop = asyncio.get_running_loop()
        nxt: asyncio.Future[Any] = asyncio.ensure_future(anext(stream))
        closing: asyncio.Future[Any] = asyncio.ensure_future(self.closing.wait())
        timeout = None if deadline is None else max(0.0, deadline - loop.time())
        done, _ = await asyncio.wait(
            [nxt, closing], timeout=timeout, return_when=asyncio.FIRST_COMPLETED
        )
        closing.cancel()
        if nxt in done:
            event: JsonObject = nxt.result()
            return event
        nxt.cancel()
        await asyncio.gather(nxt, return_exceptions=True)
        return None
