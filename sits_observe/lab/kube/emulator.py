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

Beyond kmock, two API server behaviours the simulated cluster relies on: the ``pods/binding``
subresource kube-scheduler binds with (:mod:`.server`), and ResourceQuota admission of new pods
with ``status.used`` kept (:mod:`.quota`, its rules in :mod:`.admission`).
It also serves the workloads' owners: Deployments, ReplicaSets, StatefulSets and Jobs (stored
only: no controller acts on them).

Not emulated (lenient on purpose): other admission and defaulting (a pod's ``status`` is stored
as sent), validation beyond the above, namespaces need not exist, strategic-merge list
semantics (PATCH merges dicts and replaces lists), bookmarks, authentication.

Modules: this one is the runner (a thread, a loop, the client helpers); the request handler is
:mod:`.server` (request entry, binding, create, PUT and LIST), built on :mod:`.object_store`
(the revision counter and the index of stored objects), :mod:`.feed` (the in-process watch
feed :meth:`KubeEmulator.informer` reads), :mod:`.watch` (WATCH) and :mod:`.quota`
(ResourceQuota admission); the served resources are :mod:`.resources`, selectors and continue
tokens :mod:`.query`.
"""

from __future__ import annotations

import asyncio
import copy
import re
import socket
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import aiohttp.web
import kmock
import urllib3
import yaml
from kubernetes import client as k8s_client

from sits_observe.lab.kube.informer import Informer
from sits_observe.lab.kube.object_store import JsonObject
from sits_observe.lab.kube.resources import RESOURCES, ResourceSpec
from sits_observe.lab.kube.server import Emulator, _Fault

__all__ = ["RESOURCES", "KubeEmulator", "ResourceSpec", "api_client_for", "write_kubeconfig"]

_T = TypeVar("_T")


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
        self._handler: Emulator | None = None
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
        handler = Emulator(now_fn=self.now_fn, keep_requests=self.keep_requests)
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

    def informer(self, plural: str, *, group: str = "", version: str = "v1") -> Informer:
        """A local copy of one resource kept by the emulator's changes (:mod:`.informer`)."""
        handler = self._require_handler()
        assert self._loop is not None
        res = kmock.resource(group, version, plural)
        initial, queue = asyncio.run_coroutine_threadsafe(
            handler.watch_in_process(res), self._loop
        ).result(self.startup_timeout_s)
        return Informer(
            initial, queue, close=lambda: self._call_in_loop(lambda: handler.unwatch(res, queue))
        )

    def api_client(self) -> k8s_client.ApiClient:
        """An official-client ``ApiClient`` pointed at this emulator."""
        return api_client_for(self.url)

    def write_kubeconfig(self, path: Path, *, context: str = "kmock") -> Path:
        """Write a kubeconfig for this emulator to ``path``; returns ``path``."""
        return write_kubeconfig(path, self.url, context=context)

    def _require_handler(self) -> Emulator:
        if self._handler is None or not self.running:
            raise RuntimeError("the emulator is not running; call start() first")
        return self._handler

    def _call_in_loop(self, fn: Callable[[], _T]) -> _T:
        assert self._loop is not None

        async def run() -> _T:
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(self.startup_timeout_s)


def api_client_for(url: str) -> k8s_client.ApiClient:
    """An official ``kubernetes.client.ApiClient`` talking to ``url`` without credentials,
    whose connections are reused (:class:`_WholeBodies`)."""
    configuration = k8s_client.Configuration()
    configuration.host = url.rstrip("/")
    client = k8s_client.ApiClient(configuration)
    pool = client.rest_client.pool_manager
    client.rest_client.pool_manager = _WholeBodies(**pool.connection_pool_kw)
    return client


#: Query parameters of a streamed answer (a watch, a followed log): read as it arrives.
_STREAMED = re.compile(r"[?&](watch|follow)=", re.IGNORECASE)


class _WholeBodies(urllib3.PoolManager):
    """The client's pool (same settings), reading every answer but a stream to its end
    before handing it back.

    The client asks urllib3 not to preload bodies; a caller that passes
    ``_preload_content=False`` and never reads the answer (a PATCH whose echo it ignores)
    leaves the connection checked out, and the next request opens a new one. In an experiment
    run that was a new TCP connection for about one request in four. Read here, the body is
    the same bytes (``.data``) and the connection goes back to the pool."""

    def urlopen(  # type: ignore[override]  # as urllib3's own PoolManager.urlopen
        self, method: str, url: str, redirect: bool = True, **kw: Any
    ) -> urllib3.BaseHTTPResponse:
        if _STREAMED.search(url) is None:
            kw["preload_content"] = True
        return super().urlopen(method, url, redirect, **kw)


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
