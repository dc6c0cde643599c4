"""The central service: one process owns the DuckDB store; agents write, tools read, over HTTP.

``create_app(settings, store)`` builds the FastAPI app from injected dependencies (tests
pass an in-memory store and a fake clock); the ``serve`` CLI is the composition root that
binds the ports, opens the store and runs the servers (:mod:`.server`). Endpoints (see
docs/api.md):

- ``POST /api/v1/ingest``: one wire-format batch (see :mod:`.ingest`); ingest token.
  Concurrent batches share transactions (``group_commit``; a writer thread started here and
  drained at shutdown).
- ``GET /api/v1/tables``, ``GET /api/v1/tables/{table}``: reads; read token.
- ``GET /api/v1/reports/{name}``: any report as its JSON document (:mod:`.report_routes`);
  read token.
- ``POST /v1/traces``: OTLP/HTTP trace export; request spans become ``requests`` rows
  (see :mod:`.otlp`); ingest token.
- ``GET /healthz``: the process answers, and the store has not failed every write for
  ``store_unhealthy_after_s``. ``GET /readyz``: the store is open and commits a write (a
  probe when nothing committed for a few seconds, :meth:`Store.check_writable`) and the
  service is not shutting down. ``GET /metrics``: Prometheus text, including derived
  per-pod and per-model data; open unless a scrape token is configured.
- ``POST /scheduler/*``: the scheduler extender, no token (:mod:`.extender`); with
  ``extender_port`` it moves to an app of its own, ``app.state.extender_app``. Its bind verb
  only with Kubernetes API access (``extender_pods``).
- ``/docs``, ``/openapi.json``: only with ``api_docs``.

Who may call what is :mod:`.auth`; time and concurrency limits are :mod:`.limits` and
:mod:`.server`. A background task enforces retention every ``retention_interval_s``; a
failed run is logged and counted, and the next run tries again. Shutdown gives background
work ``background_stop_s`` in all and then lets go (a slow-signal pass is cancelled).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from fastapi import FastAPI, Query, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.concurrency import run_in_threadpool

from sits_observe.collectors.agent.wire import HEADER_NODE, INGEST_PATH
from sits_observe.store import GroupCommitter, Store, enforce_retention
from sits_observe.surfaces.service.exporter.exporter import (
    ExporterSettings,
    metrics_text,
    register_exporter,
)
from sits_observe.surfaces.service.exporter.registry import REGISTRY, Signal
from sits_observe.surfaces.service.extender import (  # scheduler extender
    ExtenderServing,
    ExtenderSettings,
    add_routes,
    serve_extender,
)
from sits_observe.surfaces.service.http.auth import AuthMiddleware, Role, TokenAuth
from sits_observe.surfaces.service.http.json_answers import problem
from sits_observe.surfaces.service.http.limits import add_limits
from sits_observe.surfaces.service.ingest import IngestEndpoint
from sits_observe.surfaces.service.metrics import ServiceMetrics, StoreHealthCollector
from sits_observe.surfaces.service.otlp import register_otlp  # POST /v1/traces
from sits_observe.surfaces.service.reads import rows_response, table_counts
from sits_observe.surfaces.service.report_routes import (
    Catalog,
    add_report_routes,
    product_reports,
)
from sits_observe.surfaces.service.settings import ServiceSettings

if TYPE_CHECKING:
    from sits_observe.control.extender.bind import PodApi
    from sits_observe.surfaces.alerts.runtime import AlertingRuntime
    from sits_observe.surfaces.alerts.settings import AlertingSettings

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
    extender: ExtenderSettings | None = None,
    exporter_signals: Sequence[Signal] | None = None,
    extender_pods: PodApi | None = None,
    kube_api: Any = None,
    extender_serving: ExtenderServing | None = None,
    reports: Catalog = product_reports,
) -> FastAPI:
    """The service app over ``store``; raises :class:`ConfigError` without a token.
    ``exporter_signals`` are the derived signals on ``/metrics`` (all of them by default);
    ``extender_pods`` (the Kubernetes API) serves the extender's bind verb; ``kube_api``
    (an official-client ``ApiClient``) lets reports read what the store does not keep;
    ``extender_serving`` is the extender already serving (``serve``'s staged start,
    :mod:`.staged`), else it is set up here from ``extender`` and ``extender_pods``;
    ``reports`` gives the reports ``/api/v1/reports/{name}`` answers (the product's by
    default; ``serve`` adds the lab's)."""
    auth = TokenAuth(settings.resolved_tokens())
    metrics = metrics or ServiceMetrics()
    state = _State()
    writer = None
    if settings.group_commit.enabled and not store.read_only:
        writer = GroupCommitter(
            store, settings.group_commit, on_group=metrics.group_batches.observe
        )

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        task = None
        if settings.retention_interval_s > 0:
            task = asyncio.create_task(_retention_loop(store, settings, metrics, clock))
        alerts = None  # in-process alert rules -> Alertmanager / webhooks (docs/alerts.md)
        if alerting is not None and alerting.notify.enabled:
            from sits_observe.surfaces.alerts.runtime import start_alerting  # httpx: when used

            alerts = start_alerting(alerting, metrics.registry, clock=clock)
        state.accepting = True
        try:
            yield
        finally:
            state.accepting = False
            ingest.close()
            await _stop_background(app, settings.background_stop_s, task, alerts)
            if writer is not None and not await run_in_threadpool(
                writer.close, settings.background_stop_s
            ):
                log.warning("batches still being committed at shutdown; not waiting longer")

    docs = settings.api_docs
    app = FastAPI(
        title="sits_observe",
        summary="GPU cluster observability: ingest from node agents, reads for tools",
        lifespan=lifespan,
        docs_url="/docs" if docs else None,
        redoc_url=None,
        openapi_url="/openapi.json" if docs else None,
    )
    app.state.metrics = metrics
    ingest = IngestEndpoint(
        store,
        auth.guard(Role.ingest, node_header=HEADER_NODE),
        metrics,
        max_body_bytes=settings.max_body_bytes,
        decode_limits=settings.decode_limits(),
        clock=clock,
        max_future_skew_s=settings.max_future_skew_s,
        writer=writer,
    )
    app.add_api_route(
        INGEST_PATH, ingest.handle, methods=["POST"], response_model=None, name="ingest"
    )
    _add_probes(app, store, metrics, state, settings.store_unhealthy_after_s)
    _add_reads(app, store, settings)
    add_report_routes(app, store, clock, kube_api, reports)
    # Scheduler extender (POST /scheduler/filter, /scheduler/prioritize; no token, see
    # extender.py): on this app, or alone on the extender port.
    serving = extender_serving or serve_extender(
        store,
        metrics,
        None if settings.extender_port is None else settings.extender_http,
        settings=extender,
        clock=clock,
        pods=extender_pods,
    )
    app.state.extender_app = serving.port_app
    if serving.port_app is None and serving.endpoints is not None:
        add_routes(app, serving.endpoints)
    # Derived signals on /metrics (docs/metrics.md).
    register_exporter(
        app,
        store,
        metrics.registry,
        clock=clock,
        settings=exporter,
        signals=REGISTRY if exporter_signals is None else exporter_signals,
    )
    register_otlp(
        app,
        store,
        auth.guard(Role.ingest),
        metrics,
        max_body_bytes=settings.max_body_bytes,
        max_spans=settings.max_table_rows,
        clock=clock,
        max_future_skew_s=settings.max_future_skew_s,
    )
    rules = [("/api/", Role.read)]
    if auth.scrape_protected:
        rules.append(("/metrics", Role.scrape))

    def refused(role: Role, reason: str) -> None:
        metrics.auth_refused.labels(role.value, reason).inc()

    app.add_middleware(
        AuthMiddleware,
        auth=auth,
        rules=tuple(rules),
        exempt=frozenset({INGEST_PATH}),  # authenticates in its handler (its own counters)
        on_refused=refused,
    )
    add_limits(app, metrics, settings.http)
    return app


async def _stop_background(
    app: FastAPI,
    budget_s: float,
    retention: asyncio.Task[None] | None,
    alerts: AlertingRuntime | None,
) -> None:
    """Stop alerting, retention and the exporter's slow pass within ``budget_s`` in all; what
    has not stopped by then is left to die with the process (logged)."""
    deadline = time.monotonic() + budget_s

    def left_s() -> float:
        return max(0.0, deadline - time.monotonic())

    derived = getattr(app.state, "exporter", None)
    if derived is not None:
        derived.cancel()  # a running slow pass stops at its next step
    if alerts is not None:
        await run_in_threadpool(alerts.stop, left_s() / 2)  # it joins two threads
    if retention is not None:
        retention.cancel()
        await asyncio.wait({retention}, timeout=left_s())
        if not retention.done():
            log.warning("a retention run is still in progress at shutdown; not waiting for it")
    if derived is not None and not await run_in_threadpool(derived.close, left_s()):
        log.warning("a derived-signal pass is still running at shutdown; not waiting for it")
    _close_extender(app)


def _close_extender(app: FastAPI) -> None:
    """Release the extender view's reads, on this app or on the extender port's."""
    for holder in (app, getattr(app.state, "extender_app", None)):
        endpoints = None if holder is None else getattr(holder.state, "extender", None)
        if endpoints is not None:
            endpoints.close()


class _State:
    """Mutable flags shared by the lifespan and the probes."""

    def __init__(self) -> None:
        self.accepting = False


def _add_probes(
    app: FastAPI,
    store: Store,
    metrics: ServiceMetrics,
    state: _State,
    unhealthy_after_s: float,
) -> None:
    metrics.registry.register(StoreHealthCollector(store.health))

    @app.get("/healthz", response_model=None)
    def healthz() -> JSONResponse | dict[str, str]:
        """The process is alive and serving HTTP, and its store has not failed every
        write for ``store_unhealthy_after_s`` (then a restart is the remedy left)."""
        failing = _failing_too_long(store, unhealthy_after_s)
        if failing is not None:
            return problem(503, "store_failing", failing)
        return {"status": "ok"}

    @app.get("/readyz", response_model=None)
    def readyz() -> JSONResponse | dict[str, str]:
        """The store is open and commits a write, and the service takes batches."""
        if not state.accepting:
            return problem(503, "not_ready", "the service is starting or shutting down")
        if store.read_only:
            return problem(503, "not_ready", f"database {store.path!r} is open read-only")
        health = store.check_writable()
        if not health.writable:
            detail = f"database {store.path!r} cannot write: {health.error}"
            return problem(503, "not_ready", detail)
        try:
            store.ping()
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
        body = metrics_text(metrics.registry, getattr(app.state, "exporter", None))
        return Response(body, media_type=CONTENT_TYPE_LATEST)


def _failing_too_long(store: Store, after_s: float) -> str | None:
    """Why ``/healthz`` fails: the store failed every write (its reopens and probes
    included) for ``after_s`` or longer; None otherwise, or when ``after_s`` is 0."""
    if after_s <= 0 or store.read_only or store.health().failing_for_s < after_s:
        return None
    health = store.check_writable()  # one more try (at most one a second) before giving up
    if health.failing_for_s < after_s:
        return None
    return (
        f"database {store.path!r} has failed every write for {health.failing_for_s:.0f} s "
        f"({health.error}); the service needs a restart, or its disk space"
    )


def _add_reads(app: FastAPI, store: Store, settings: ServiceSettings) -> None:
    # Authenticated by AuthMiddleware before FastAPI validates the query (401 before 422).
    @app.get("/api/v1/tables", response_model=None)
    async def tables() -> JSONResponse:
        """Every readable table and its row count."""
        counts = await run_in_threadpool(table_counts, store)
        return JSONResponse({"tables": counts})

    @app.get("/api/v1/tables/{table}", response_model=None)
    async def rows(
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
        return await rows_response(
            store, table, since=since, until=until, node=node, limit=limit, fmt=fmt
        )


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
        metrics.retention_rows.labels("other_deleted").inc(report.other_rows_deleted)
        metrics.retention_rows.labels("ledger_deleted").inc(report.ledger_rows_deleted)
