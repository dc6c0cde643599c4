"""``serve``'s staged start: the scheduler extender answers before the rest of the service
is imported.

kube-scheduler calls the extender for every pod; after a restart its first answer is what
the scheduler waits for (the SITS documents: within 850 ms on 1,024 nodes). The service's
FastAPI app, with the exporter, the report routes, OTLP and their imports, takes about as
long to import as everything the extender needs, so ``serve`` starts in two stages:

1. The extender (:func:`~.extender.create_extender_app`, a Starlette app over the same
   :class:`~.extender.ExtenderEndpoints` and limits) serves ``/scheduler/*`` on the
   service's port at once; ``/healthz`` answers (the process is up) and ``/readyz`` says
   503 "starting".
2. In a worker thread, once the first cluster view is built (with ``warm_view``, as
   deploy/deployment.yaml runs it: the view build and the imports would otherwise share
   the GIL), ``build`` imports and creates the service's app, which then serves every
   path, the extender's included (the same endpoints: one view cache, one set of
   counters); its lifespan (retention, alerting, the group-commit writer) runs from then
   until shutdown.

A request for any other path during stage 1 waits for stage 2 (up to ``wait_s``, then 503
with ``Retry-After: 1``), so an agent's batch is delayed, not refused. A failure in stage 2
(a damaged database file found by ``serve``'s check, a configuration error found by
``create_app``) makes every waiting request get 503, and ``on_failure`` stops the servers;
``serve`` then exits with that error (one line for a :class:`SitsError`, which is not logged
here; anything else is logged with its traceback).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from contextlib import AsyncExitStack, suppress

from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.types import Receive, Scope, Send

from sits_observe.errors import SitsError
from sits_observe.surfaces.service.extender import URL_PREFIX
from sits_observe.surfaces.service.http.json_answers import Refusal

log = logging.getLogger(__name__)

HEALTH_PATH = "/healthz"
READY_PATH = "/readyz"
STARTING = "the service is starting"


class StagedApp:
    """The service's port during a staged start (module docstring); an ASGI app."""

    def __init__(
        self,
        build: Callable[[], Starlette],
        *,
        extender: Starlette | None,
        first_view: Callable[[], object] | None = None,
        wait_s: float = 30.0,
        on_failure: Callable[[BaseException], None] | None = None,
    ) -> None:
        """``build`` makes the service's app (it runs in a worker thread); ``extender``
        serves ``/scheduler/*`` until then (None: the extender is not on this port);
        ``first_view`` blocks until the extender's first view is built or given up on (None:
        build at once); ``wait_s`` bounds how long another request waits for the app."""
        self._build = build
        self._extender = extender
        self._first_view = first_view
        self._wait_s = wait_s
        self._on_failure = on_failure
        self.app: Starlette | None = None
        self.failure: BaseException | None = None
        self._settled: asyncio.Event | None = None
        self._lifespans = AsyncExitStack()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        app = self.app
        if app is not None:
            await app(scope, receive, send)
            return
        path = str(scope.get("path", ""))
        if self._extender is not None and path.startswith(f"{URL_PREFIX}/"):
            await self._extender(scope, receive, send)
            return
        if scope["type"] != "http":
            return  # no WebSocket routes (the servers run with ws="none")
        if path == HEALTH_PATH:
            await JSONResponse({"status": "ok"})(scope, receive, send)
            return
        if path == READY_PATH:
            await Refusal(503, "not_ready", STARTING)(scope, receive, send)
            return
        if self._settled is not None:
            with suppress(TimeoutError):
                await asyncio.wait_for(self._settled.wait(), self._wait_s)
        app = self.app
        if app is None:
            why = "the service failed to start" if self.failure else STARTING
            await Refusal(503, "not_ready", why, {"Retry-After": "1"})(scope, receive, send)
            return
        await app(scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        await receive()  # lifespan.startup
        self._settled = asyncio.Event()
        starting = asyncio.create_task(self._start(self._settled))
        await send({"type": "lifespan.startup.complete"})
        await receive()  # lifespan.shutdown
        # The build runs in a thread and cannot be cancelled: wait for it, so that what it
        # started (the app's writer thread) is stopped by the app's lifespan below.
        await asyncio.wait({starting})
        try:
            await self._lifespans.aclose()
        except Exception:
            log.exception("the service's shutdown failed")
        await send({"type": "lifespan.shutdown.complete"})

    async def _start(self, settled: asyncio.Event) -> None:
        try:
            if self._first_view is not None:
                await asyncio.to_thread(self._first_view)
            app = await asyncio.to_thread(self._build)
            await self._lifespans.enter_async_context(app.router.lifespan_context(app))
            self.app = app
        except Exception as exc:
            if not isinstance(exc, SitsError):  # a SitsError is serve's one line at exit
                log.exception("the service failed to start; stopping")
            self.failure = exc
            if self._on_failure is not None:
                self._on_failure(exc)
        finally:
            settled.set()
