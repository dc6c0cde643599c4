"""The central service: one process owns the DuckDB store; agents write, tools read, over HTTP.

``create_app(settings, store)`` builds the FastAPI app from injected dependencies (tests
pass an in-memory store and a fake clock); the ``serve`` CLI is the composition root that
opens the store and runs uvicorn. Endpoints (see docs/api.md):

- ``POST /api/v1/ingest``: one wire-format batch (see :mod:`.ingest`); bearer token.
- ``GET /api/v1/tables``, ``GET /api/v1/tables/{table}``: reads; bearer token.
- ``POST /v1/traces``: OTLP/HTTP trace export; request spans become ``requests`` rows
  (see :mod:`.otlp`); bearer token.
- ``GET /healthz``: the process answers. ``GET /readyz``: the store is open and writable
  and the service is not shutting down. ``GET /metrics``: Prometheus text, no token (the
  usual scrape set-up; it carries no sample data).

A background task enforces retention every ``retention_interval_s``; a failed run is logged
and counted, and the next run tries again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from datetime import UTC, datetime
from typing import Literal

from fastapi import FastAPI, Query, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sits_observe.collectors.agent.wire import INGEST_PATH
from sits_observe.store import Store, enforce_retention
from sits_observe.surfaces.alerts import AlertingSettings, start_alerting  # alert rules
from sits_observe.surfaces.service.exporter import ExporterSettings, register_exporter
from sits_observe.surfaces.service.extender import register_extender  # scheduler extender
from sits_observe.surfaces.service.ingest import BearerAuth, IngestEndpoint, problem
from sits_observe.surfaces.service.metrics import ServiceMetrics
from sits_observe.surfaces.service.otlp import register_otlp  # POST /v1/traces
from sits_observe.surfaces.service.reads import rows_response, table_counts
from sits_observe.surfaces.service.settings import ServiceSettings

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    """The current time, UTC (the default clock)."""
    return datetime.now(UTC)


def create_app(
    settings: ServiceSettings,
    store: Store,
    *,
    clock: Clock = utc_now,
    metrics: ServiceMetrics | None = None,
    exporter: ExporterSettings | None = None,
    alerting: AlertingSettings | None = None,
) -> FastAPI:
    """The service app over ``store``; raises :class:`ConfigError` without a token."""
    auth = BearerAuth(settings.resolved_token())
    metrics = metrics or ServiceMetrics()
    state = _State()

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        task = None
        if settings.retention_interval_s > 0:
            task = asyncio.create_task(_retention_loop(store, settings, metrics, clock))
        alerts = None  # in-process alert rules -> Alertmanager / webhooks (docs/alerts.md)
        if alerting is not None and alerting.notify.enabled:
            alerts = start_alerting(alerting, metrics.registry, clock=clock)
        state.accepting = True
        try:
            yield
        finally:
            state.accepting = False
            if alerts is not None:
                await run_in_threadpool(alerts.stop)
            if task is not None:
                task.cancel()
                with suppress(asyncio.CancelledError):
                    await task
            derived = getattr(app.state, "exporter", None)
            if derived is not None:  # the store must not close under a slow-signal pass
                await run_in_threadpool(derived.close)

    app = FastAPI(
        title="sits_observe",
        summary="GPU cluster observability: ingest from node agents, reads for tools",
        lifespan=lifespan,
    )
    app.state.metrics = metrics
    ingest = IngestEndpoint(store, auth, metrics, max_body_bytes=settings.max_body_bytes)
    app.add_api_route(
        INGEST_PATH, ingest.handle, methods=["POST"], response_model=None, name="ingest"
    )
    _add_probes(app, store, metrics, state)
    _add_reads(app, store, auth, settings)
    # Scheduler extender (POST /scheduler/filter, /scheduler/prioritize; no token, see extender.py).
    register_extender(app, store, metrics.registry, clock=clock)
    # Derived signals on /metrics (docs/metrics.md).
    register_exporter(app, store, metrics.registry, clock=clock, settings=exporter)
    register_otlp(app, store, auth, metrics, max_body_bytes=settings.max_body_bytes)
    app.add_middleware(_TimingMiddleware, metrics=metrics)
    return app


class _State:
    """Mutable flags shared by the lifespan and the probes."""

    def __init__(self) -> None:
        self.accepting = False


def _add_probes(app: FastAPI, store: Store, metrics: ServiceMetrics, state: _State) -> None:
    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        """The process is alive and serving HTTP."""
        return {"status": "ok"}

    @app.get("/readyz", response_model=None)
    def readyz() -> JSONResponse | dict[str, str]:
        """The store is open and writable and the service takes batches."""
        if not state.accepting:
            return problem(503, "not_ready", "the service is starting or shutting down")
        if store.read_only:
            return problem(503, "not_ready", f"database {store.path!r} is open read-only")
        try:
            store.scalar("SELECT 1")
        except Exception as exc:
            return problem(503, "not_ready", f"database {store.path!r} does not answer: {exc}")
        return {"status": "ready", "db": store.path}

    @app.get("/metrics")
    def prometheus() -> Response:
        """Prometheus text exposition of the service's own registry."""
        try:
            for table, rows in table_counts(store).items():
                metrics.store_rows.labels(table).set(rows)
        except Exception as exc:
            log.warning("cannot refresh sits_store_rows: %s", exc)
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)


def _add_reads(app: FastAPI, store: Store, auth: BearerAuth, settings: ServiceSettings) -> None:
    @app.get("/api/v1/tables", response_model=None)
    async def tables(request: Request) -> JSONResponse:
        """Every readable table and its row count."""
        refusal = auth.check(request)
        if refusal is not None:
            return refusal.response()
        counts = await run_in_threadpool(table_counts, store)
        return JSONResponse({"tables": counts})

    @app.get("/api/v1/tables/{table}", response_model=None)
    async def rows(
        request: Request,
        table: str,
        *,
        since: datetime | None = Query(None, description="first time included (ISO 8601)"),
        until: datetime | None = Query(None, description="first time excluded (ISO 8601)"),
        node: str | None = Query(None, description="only rows of this node"),
        limit: int = Query(
            10_000, ge=1, le=settings.read_max_rows, description="most rows returned"
        ),
        fmt: Literal["arrow", "json"] = Query("arrow", alias="format"),
    ) -> Response:
        """Rows of one table, oldest first, as an Arrow IPC stream or JSON."""
        refusal = auth.check(request)
        if refusal is not None:
            return refusal.response()
        return await rows_response(
            store, table, since=since, until=until, node=node, limit=limit, fmt=fmt
        )


class _TimingMiddleware:
    """Observes every HTTP request's latency by route template (bounded label values)."""

    def __init__(self, app: ASGIApp, metrics: ServiceMetrics) -> None:
        self._app = app
        self._metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_and_note(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self._app(scope, receive, send_and_note)
        finally:
            # The router stores the matched route in the (shared) scope.
            template = getattr(scope.get("route"), "path", "unmatched")
            self._metrics.latency.labels(
                template, str(scope.get("method", "")), f"{status // 100}xx"
            ).observe(time.perf_counter() - started)


async def _retention_loop(
    store: Store, settings: ServiceSettings, metrics: ServiceMetrics, clock: Clock
) -> None:
    while True:
        await asyncio.sleep(settings.retention_interval_s)
        try:
            report = await run_in_threadpool(enforce_retention, store, clock(), settings.retention)
        except Exception:
            # Never let retention kill the service: count, log, try again next interval.
            log.exception("retention run failed; retrying in %s s", settings.retention_interval_s)
            metrics.retention_runs.labels("error").inc()
            continue
        metrics.retention_runs.labels("ok").inc()
        metrics.retention_rows.labels("gpu_rolled").inc(report.gpu_rows_rolled)
        metrics.retention_rows.labels("container_rolled").inc(report.container_rows_rolled)
        metrics.retention_rows.labels("rollup_deleted").inc(report.rollup_rows_deleted)
        metrics.retention_rows.labels("request_deleted").inc(report.request_rows_deleted)
