"""The request handler of the Kubernetes emulator: kmock's object store with its gaps filled.

:class:`Emulator` runs inside the emulator thread's asyncio loop
(:mod:`sits_observe.lab.kube.emulator` is the runner and lists the behaviour). Next to
the gaps kmock has, it serves ``POST pods/<name>/binding`` and admits each new pod against the
ResourceQuotas of its namespace. This module holds the request entry, binding, create, PUT and
LIST; the handler's other parts are its bases: the revision counter and the index of stored
objects (:mod:`sits_observe.lab.kube.object_store`), the in-process watch feed
(:mod:`sits_observe.lab.kube.feed`), WATCH (:mod:`sits_observe.lab.kube.watch`) and
ResourceQuota admission (:mod:`sits_observe.lab.kube.quota`, the rules in
:mod:`sits_observe.lab.kube.admission`).
"""

from __future__ import annotations

import copy
import json
import re
import secrets
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import aiohttp.web
import kmock
from kmock._internal.aiobus import Bus
from kmock._internal.rendering import Response

from sits_observe.lab.kube.admission import BIND_SUCCESS, bind_pod
from sits_observe.lab.kube.object_store import JsonObject
from sits_observe.lab.kube.query import decode_token, encode_token, status_error
from sits_observe.lab.kube.quota import POD, QUOTA, QuotaAdmission
from sits_observe.lab.kube.resources import (
    ALL_VERBS,
    EXTRA_SUBRESOURCES,
    RESOURCES,
    ResourceSpec,
)
from sits_observe.lab.kube.watch import WatchServing

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


class Emulator(QuotaAdmission, WatchServing):
    """kmock's emulator with the gaps listed in the runner's docstring filled, the Binding
    subresource and ResourceQuota admission.

    Runs inside one asyncio loop; every method here is called from that loop only.
    """

    def __init__(self, *, now_fn: Callable[[], datetime], keep_requests: int) -> None:
        super().__init__()
        self.now_fn = now_fn
        self.keep_requests = keep_requests
        self.token_epoch = 0
        self.faults: list[_Fault] = []
        self.specs: dict[kmock.resource, ResourceSpec] = {}
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
        if request.resource == POD and request.subresource == "binding":
            if request.method != kmock.method.POST or request.name is None:
                raise status_error(405, "MethodNotAllowed", "pods/binding only takes POST")
            answer = await self._bind(request)
            await self._refresh_quotas(request.namespace)
            return aiohttp.web.json_response(answer, status=201)
        if request.method == kmock.method.PUT and request.name is not None:
            response: aiohttp.web.StreamResponse = aiohttp.web.json_response(
                await self._replace(request)
            )
        elif request.action == kmock.action.CREATE and request.resource == POD:
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
        if request.resource in (POD, QUOTA) and request.method != kmock.method.GET:
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
        key = (POD, request.namespace, name)
        async with self._lock:
            stored = self._object(key)
            if stored is None or stored.deleted:
                raise status_error(404, "NotFound", f'pods "{name}" not found')
            pod = bind_pod(stored.raw, request.data, name, _rfc3339(self.now_fn()))
            pod["metadata"]["resourceVersion"] = self.next_revision()
            stored.create(pod)
            await self._buses[POD].put({"type": "MODIFIED", "object": copy.deepcopy(pod)})
        return BIND_SUCCESS

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
            stored = self._object(key)
            if stored is None or stored.deleted:
                raise kmock.KubernetesObjectNotFoundError()
            current: JsonObject = copy.deepcopy(stored.raw)
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
