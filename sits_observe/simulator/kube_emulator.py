"""A Kubernetes API on loopback for tests, the simulated-cluster demo and controller tests.

:class:`KubeEmulator` runs kmock's ``KubernetesEmulator`` (an in-memory object store behind the
real REST paths) on ``127.0.0.1`` and a free port, in a background thread with its own asyncio
loop, so synchronous code (the official ``kubernetes`` client, the demo) can use it outside
pytest. It registers the resources sits_observe reads or writes and fills the gaps kmock 0.8
has next to a real API server:

- ``PUT`` (replace, including ``/status``) is missing; we add it with optimistic concurrency
  (a stale ``metadata.resourceVersion`` answers 409 Conflict), which Lease renewal relies on.
- Objects POSTed without ``metadata.namespace`` are stored under the URL's namespace but keep no
  namespace in their body, so namespaced watches (which filter on the body) never see them; we
  default the namespace like the API server does (and reject a mismatch with 400).
- Lists ignore ``limit`` / ``continue``; we paginate in key order with opaque continue tokens
  (410 Expired once :meth:`KubeEmulator.expire_continue_tokens` is called).
- Lists and watches ignore label and field selectors; we apply equality-based ones
  (``a=b``, ``a!=b``, ``a``, ``!a``) and answer 400 for set-based ones rather than ignore them.
- Objects get no ``uid``, ``creationTimestamp`` or ``resourceVersion`` and ``generateName`` is
  not honoured; we fill those on create (values a client sends are kept, so tests can pin them).
- Watches subscribe to changes only after sending the initial state (a change in between is
  lost), never end on ``timeoutSeconds``, and replay everything even when given a
  ``resourceVersion``; our watch snapshots and subscribes atomically, honours both.
- ``/api/v1/namespaces`` and ``/api/v1/namespaces/<name>`` are parsed as a namespace prefix
  (listing Namespaces fails with 500); we route them to an internal alias resource. A
  trailing slash (``/api/v1/``, which the client's discovery uses) is read as a list; we drop it.
- Every request is kept forever; we keep the last ``keep_requests`` so a demo can run for days.

Not emulated (lenient on purpose): admission and defaulting (a pod's ``status`` is stored as
sent), validation beyond the above, namespaces need not exist, strategic-merge list semantics
(PATCH merges dicts and replaces lists), bookmarks, authentication.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import copy
import json
import re
import secrets
import socket
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import aiohttp.web
import kmock
import yaml
from kmock._internal.aiobus import Bus, BusMark
from kubernetes import client as k8s_client

_T = TypeVar("_T")

#: JSON object as kmock stores it.
JsonObject = dict[str, Any]

_READ_VERBS = frozenset({"get", "list", "watch"})
_ALL_VERBS = _READ_VERBS | {"create", "update", "patch", "delete", "deletecollection"}


@dataclass(frozen=True)
class ResourceSpec:
    """One API resource the emulator serves."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    has_status: bool = False

    @property
    def key(self) -> str:
        """kmock's ``group/version/plural`` spelling (``v1/pods`` for the core group)."""
        prefix = f"{self.group}/{self.version}" if self.group else self.version
        return f"{prefix}/{self.plural}"

    @property
    def api_version(self) -> str:
        """The ``apiVersion`` of its objects."""
        return f"{self.group}/{self.version}" if self.group else self.version


#: What sits_observe reads (inventory), writes (controllers, leases) or shows (events).
RESOURCES: tuple[ResourceSpec, ...] = (
    ResourceSpec("", "v1", "nodes", "Node", namespaced=False, has_status=True),
    ResourceSpec("", "v1", "pods", "Pod", namespaced=True, has_status=True),
    ResourceSpec("", "v1", "events", "Event", namespaced=True),
    ResourceSpec("", "v1", "namespaces", "Namespace", namespaced=False, has_status=True),
    ResourceSpec("", "v1", "configmaps", "ConfigMap", namespaced=True),
    ResourceSpec("", "v1", "resourcequotas", "ResourceQuota", namespaced=True, has_status=True),
    ResourceSpec("coordination.k8s.io", "v1", "leases", "Lease", namespaced=True),
    ResourceSpec("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", namespaced=False),
)


#: kmock reads ``/api/v1/namespaces/...`` as a namespace prefix, so the Namespace resource
#: itself is served under this internal plural (never shown to clients).
_NAMESPACES_ALIAS = "sits-namespaces"
_NAMESPACE_PATH = re.compile(r"^/api/v1/namespaces(?P<rest>/[^/]+(?:/(?:status|finalize))?)?/?$")


def _status_error(code: int, reason: str, message: str) -> kmock.KubernetesError:
    """An error kmock renders as a ``kind: Status`` body, as the API server does."""
    return kmock.KubernetesError(status=code, reason=reason, message=message, details={})


def _rfc3339(ts: datetime) -> str:
    return ts.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# -- selectors ----------------------------------------------------------------------------


def _parse_selector(text: str, what: str) -> list[tuple[str, str, str | None]]:
    """``a=b,c!=d,e,!f`` -> [(key, op, value)]; set-based syntax answers 400."""
    terms: list[tuple[str, str, str | None]] = []
    for raw in text.split(","):
        term = raw.strip()
        if not term:
            continue
        if "(" in term or " in " in f" {term} " or " notin " in f" {term} ":
            raise _status_error(400, "BadRequest", f"{what} {text!r}: set-based terms unsupported")
        if "!=" in term:
            key, value = term.split("!=", 1)
            terms.append((key.strip(), "!=", value.strip()))
        elif "==" in term:
            key, value = term.split("==", 1)
            terms.append((key.strip(), "=", value.strip()))
        elif "=" in term:
            key, value = term.split("=", 1)
            terms.append((key.strip(), "=", value.strip()))
        elif term.startswith("!"):
            terms.append((term[1:].strip(), "!", None))
        else:
            terms.append((term, "exists", None))
    return terms


def _field_value(obj: JsonObject, path: str) -> str | None:
    node: Any = obj
    for part in path.split("."):
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return None if node is None else str(node)


def _selectors(
    labels: str | None, fields: str | None
) -> tuple[list[tuple[str, str, str | None]], list[tuple[str, str, str | None]]]:
    """Both selectors parsed (400 on anything unsupported)."""
    label_terms = _parse_selector(labels or "", "labelSelector")
    field_terms = _parse_selector(fields or "", "fieldSelector")
    for key, op, _ in field_terms:
        if op not in ("=", "!="):
            raise _status_error(400, "BadRequest", f"fieldSelector term {key!r} needs = or !=")
    return label_terms, field_terms


def _matches(obj: JsonObject, labels: str | None, fields: str | None) -> bool:
    label_terms, field_terms = _selectors(labels, fields)
    meta = obj.get("metadata") or {}
    have = meta.get("labels") or {}
    for key, op, value in label_terms:
        present = key in have
        if (
            (op == "=" and have.get(key) != value)
            or (op == "!=" and present and have.get(key) == value)
            or (op == "!" and present)
            or (op == "exists" and not present)
        ):
            return False
    for key, op, value in field_terms:
        actual = _field_value(obj, key) or ""
        if (op == "=") != (actual == value):
            return False
    return True


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


class _Emulator(kmock.KubernetesEmulator):
    """kmock's emulator with the gaps listed in the module docstring filled.

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
        for spec in RESOURCES:
            res = kmock.resource(spec.group, spec.version, spec.plural)
            self.specs[res] = spec
            if spec.plural == "namespaces":
                self.specs[kmock.resource("", "v1", _NAMESPACES_ALIAS)] = spec
            self.resources[res] = kmock.ResourceInfo(
                kind=spec.kind,
                singular=spec.kind.lower(),
                namespaced=spec.namespaced,
                verbs=set(_ALL_VERBS),
                subresources={"status"} if spec.has_status else set(),
            )

    def next_revision(self) -> str:
        self.revision += 1
        return str(self.revision)

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
        if request.resource is not None:
            if request.method == kmock.method.PUT and request.name is not None:
                return aiohttp.web.json_response(await self._replace(request))
            if request.action == kmock.action.CREATE:
                self._prepare_create(request)
            elif request.action == kmock.action.UPDATE and isinstance(request.data, dict):
                # A merge patch: stamp the new revision into it so the stored object and the
                # MODIFIED event carry it.
                meta = request.data.setdefault("metadata", {})
                if isinstance(meta, dict):
                    meta["resourceVersion"] = self.next_revision()
        return await super()._handle(request)

    def _raise_injected_fault(self, request: kmock.Request) -> None:
        line = f"{request.method.value} {request.url.path_qs}"
        for fault in self.faults:
            if fault.remaining != 0 and fault.pattern.search(line):
                fault.remaining -= 1
                raise _status_error(fault.status, fault.reason, fault.message)

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
            raise _status_error(
                400,
                "BadRequest",
                f"the namespace of the provided object ({sent}) does not match the namespace "
                f"sent on the request ({request.namespace})",
            )

    def _prepare_create(self, request: kmock.Request) -> None:
        body = request.data
        if not isinstance(body, dict):
            raise _status_error(400, "BadRequest", "the request body must be a JSON object")
        meta = body.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise _status_error(400, "BadRequest", "metadata must be a JSON object")
        if not meta.get("name"):
            if not meta.get("generateName"):
                raise _status_error(422, "Invalid", "metadata.name or generateName is required")
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
            raise _status_error(400, "BadRequest", "the request body must be a JSON object")
        body = copy.deepcopy(body)
        meta = body.setdefault("metadata", {})
        if meta.get("name") not in (None, name):
            raise _status_error(
                400, "BadRequest", f"the name of the object ({meta['name']}) does not match {name}"
            )
        self._namespace_for(request, meta)
        if request.subresource not in (None, "status"):
            raise _status_error(
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
                raise _status_error(
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
        for (resource, namespace, _), obj in self._objects.items():
            if resource != request.resource or obj.deleted:
                continue
            if request.namespace is not None and namespace != request.namespace:
                continue
            raw = obj.raw
            if _matches(raw, labels, fields):
                yield raw

    def _encode_token(self, after: tuple[str, str]) -> str:
        payload = json.dumps({"after": list(after), "epoch": self.token_epoch})
        return base64.urlsafe_b64encode(payload.encode()).decode()

    def _decode_token(self, token: str) -> tuple[str, str]:
        try:
            payload = json.loads(base64.urlsafe_b64decode(token.encode()))
            after = (str(payload["after"][0]), str(payload["after"][1]))
            epoch = int(payload["epoch"])
        except (binascii.Error, ValueError, KeyError, IndexError, TypeError) as exc:
            raise _status_error(400, "BadRequest", f"continue key {token!r} is not valid") from exc
        if epoch != self.token_epoch:
            raise _status_error(
                410,
                "Expired",
                "The provided continue parameter is too old to display a consistent list result. "
                "You can start a new list without the continue parameter.",
            )
        return after

    async def _serve_list(self, request: kmock.Request) -> kmock.Payload:
        spec = self._known(request)
        try:
            limit = int(request.params.get("limit") or 0)
        except ValueError as exc:
            raise _status_error(400, "BadRequest", "limit must be an integer") from exc
        token = request.params.get("continue")
        after = self._decode_token(token) if token else None
        async with self._lock:
            items = [copy.deepcopy(raw) for raw in self._visible(request)]
            revision = str(self.revision)

        def sort_key(o: JsonObject) -> tuple[str, str]:
            meta = o.get("metadata") or {}
            return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))

        items.sort(key=sort_key)
        if after is not None:
            items = [o for o in items if sort_key(o) > after]
        metadata: JsonObject = {"resourceVersion": revision}
        if 0 < limit < len(items):
            metadata["continue"] = self._encode_token(sort_key(items[limit - 1]))
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
        _selectors(labels, fields)
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
                if _matches(obj, labels, fields):
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


# -- the runner ---------------------------------------------------------------------------


def _utc_now() -> datetime:
    return datetime.now(UTC)


class KubeEmulator:
    """kmock's Kubernetes emulator served on loopback from a background thread.

    Use as a context manager (``with KubeEmulator() as emu: emu.url``) or call :meth:`start`
    and :meth:`stop`. The server binds ``host`` (loopback only) on ``port`` (0: a free one).
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        now_fn: Callable[[], datetime] | None = None,
        keep_requests: int = 1000,
        startup_timeout_s: float = 10.0,
        shutdown_timeout_s: float = 5.0,
    ) -> None:
        if host not in ("127.0.0.1", "::1", "localhost"):
            raise ValueError(f"host {host!r} is not loopback; the emulator has no auth")
        if keep_requests < 1:
            raise ValueError(f"keep_requests must be >= 1, got {keep_requests}")
        self.host = host
        self.port = port
        self.now_fn = now_fn or _utc_now
        self.keep_requests = keep_requests
        self.startup_timeout_s = startup_timeout_s
        self.shutdown_timeout_s = shutdown_timeout_s
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._handler: _Emulator | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self._url: str | None = None

    # -- life cycle ------------------------------------------------------------------

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:41234``; raises when not running."""
        if self._url is None:
            raise RuntimeError("the emulator is not running; call start() first")
        return self._url

    @property
    def running(self) -> bool:
        """Whether the server thread is serving."""
        return self._url is not None

    def start(self) -> str:
        """Start serving; returns the base URL once the port accepts connections."""
        if self._thread is not None:
            raise RuntimeError("the emulator was already started")
        sock = socket.socket(socket.AF_INET6 if ":" in self.host else socket.AF_INET)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        port = sock.getsockname()[1]
        self._thread = threading.Thread(
            target=self._run, args=(sock,), name="kube-emulator", daemon=True
        )
        self._thread.start()
        if not self._ready.wait(self.startup_timeout_s):
            raise RuntimeError(f"the emulator did not start within {self.startup_timeout_s} s")
        if self._failure is not None:
            raise RuntimeError(f"the emulator failed to start: {self._failure}") from self._failure
        host = f"[{self.host}]" if ":" in self.host else self.host
        self._url = f"http://{host}:{port}"
        return self._url

    def stop(self) -> None:
        """Close open watches, stop serving and join the thread (idempotent)."""
        thread, loop, stop = self._thread, self._loop, self._stop
        self._url = None
        if thread is None or loop is None or stop is None:
            return
        if loop.is_running():
            loop.call_soon_threadsafe(stop.set)
        thread.join(self.shutdown_timeout_s + 5.0)
        self._thread = None

    def __enter__(self) -> KubeEmulator:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self, sock: socket.socket) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._serve(sock))
        except BaseException as exc:  # reported to start(); the thread must not die silently
            self._failure = exc
            self._ready.set()
        finally:
            sock.close()
            loop.close()

    async def _serve(self, sock: socket.socket) -> None:
        self._stop = asyncio.Event()
        handler = _Emulator(now_fn=self.now_fn, keep_requests=self.keep_requests)
        self._handler = handler
        async with handler:
            runner = aiohttp.web.ServerRunner(
                aiohttp.web.Server(handler),
                handle_signals=False,
                shutdown_timeout=self.shutdown_timeout_s,
            )
            await runner.setup()
            try:
                site = aiohttp.web.SockSite(runner, sock)
                await site.start()
                self._ready.set()
                await self._stop.wait()
                handler.closing.set()  # ends open watches so the shutdown is prompt
            finally:
                await runner.cleanup()

    # -- helpers for tests and the demo ----------------------------------------------

    def expire_continue_tokens(self) -> None:
        """Make every outstanding list ``continue`` token answer 410 Expired."""
        handler = self._require_handler()
        assert self._loop is not None

        def bump() -> None:
            handler.token_epoch += 1

        self._call_in_loop(bump)

    def inject_error(
        self,
        pattern: str,
        status: int,
        *,
        reason: str = "InternalError",
        message: str = "injected by the test",
        times: int = -1,
    ) -> None:
        """Answer ``status`` (a ``kind: Status`` body) to requests matching ``pattern``.

        ``pattern`` is a regular expression searched in ``"METHOD /path?query"``, e.g.
        ``r"GET /api/v1/pods"``; ``times`` limits how often it fires (-1: until cleared).
        """
        handler = self._require_handler()
        fault = _Fault(re.compile(pattern), status, reason, message, times)
        self._call_in_loop(lambda: handler.faults.append(fault))

    def clear_errors(self) -> None:
        """Forget every error set by :meth:`inject_error`."""
        handler = self._require_handler()
        self._call_in_loop(handler.faults.clear)

    def objects(self, plural: str, *, group: str = "", version: str = "v1") -> list[JsonObject]:
        """A copy of every live object of one resource (for assertions)."""
        handler = self._require_handler()
        res = kmock.resource(group, version, plural)

        def snapshot() -> list[JsonObject]:
            return [
                copy.deepcopy(obj.raw)
                for (r, _, _), obj in handler.objects.items()
                if r == res and not obj.deleted
            ]

        return self._call_in_loop(snapshot)

    def api_client(self) -> k8s_client.ApiClient:
        """An official-client ``ApiClient`` pointed at this emulator."""
        return api_client_for(self.url)

    def write_kubeconfig(self, path: Path, *, context: str = "kmock") -> Path:
        """Write a kubeconfig for this emulator to ``path``; returns ``path``."""
        return write_kubeconfig(path, self.url, context=context)

    def _require_handler(self) -> _Emulator:
        if self._handler is None or not self.running:
            raise RuntimeError("the emulator is not running; call start() first")
        return self._handler

    def _call_in_loop(self, fn: Callable[[], _T]) -> _T:
        assert self._loop is not None

        async def run() -> _T:
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(self.startup_timeout_s)


def api_client_for(url: str) -> k8s_client.ApiClient:
    """An official ``kubernetes.client.ApiClient`` talking to ``url`` without credentials."""
    configuration = k8s_client.Configuration()
    configuration.host = url.rstrip("/")
    return k8s_client.ApiClient(configuration)


def write_kubeconfig(
    path: Path, url: str, *, context: str = "kmock", namespace: str = "default"
) -> Path:
    """Write a minimal kubeconfig (one cluster, user, context) for ``url`` to ``path``."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": context, "cluster": {"server": url}}],
        "users": [{"name": context, "user": {}}],
        "contexts": [
            {
                "name": context,
                "context": {"cluster": context, "user": context, "namespace": namespace},
            }
        ],
        "current-context": context,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path
