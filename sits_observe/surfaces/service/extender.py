"""``POST /scheduler/filter`` and ``POST /scheduler/prioritize``: the kube-scheduler extender.

kube-scheduler calls these with ``urlPrefix: http://<service>/scheduler``, ``filterVerb:
filter`` and ``prioritizeVerb: prioritize`` (deploy/scheduler-config.yaml). Bodies and answers
are the extender wire format (:mod:`sits_observe.control.extender_wire`); decisions come from
the ``sits`` policy (:mod:`sits_observe.control.extender_scoring`) over a cached view of the
store (:mod:`sits_observe.control.extender_view`) that is rebuilt in the background, so a call
only parses, scores in numpy and writes JSON.

Authentication: none on these two routes. kube-scheduler's extender client sends no
credentials (it sets only ``Content-Type``; TLS client certificates are its one option), so a
token would lock out the one caller that matters. The routes are read-only (they reveal node
names and scores, change nothing) and must be reachable only from kube-scheduler: ``serve
--extender-port`` serves them alone on a port of their own (``create_extender_app``), which a
NetworkPolicy opens to kube-scheduler only (deploy/deployment.yaml). Ingest and reads keep
their tokens.

Limits, since anyone who reaches the port may call: a body limit sized to real payloads
(``max_body_bytes``, 24 MiB: 500 full Node objects as the API server returns them, images and
managedFields included, are about 9.2 MiB; kube-scheduler sends at most about 780 of them, at
3,125 nodes; 5,000 ``NodeNames`` are 80 KB), and the extender port's own header and body
timeouts and caps on connections and calls in flight (``ServiceSettings.extender_http``), so
memory stays bounded at about ``max_concurrent_requests x max_body_bytes``.

Failure answers, chosen for what kube-scheduler does with them:

- filter: an unreadable body gets HTTP 200 with the reason in ``Error``; kube-scheduler fails
  that scheduling attempt and reports the message (or skips the extender when ``ignorable``).
  An oversized body is treated the same way. Without a usable view (no inventory yet, or a
  snapshot older than ``max_snapshot_age_s``) the filter *fails open*: every node passes.
- prioritize: an unreadable body gets HTTP 400 with a JSON reason; kube-scheduler ignores
  a failed prioritize call (the pod is scheduled on the other scores). Without a usable view
  every node scores 0, which changes no ranking.

Handlers run on the event loop: a call against 5,000 names is about a millisecond of numpy
and JSON, less than a thread hand-off would add. Bodies above ``inline_body_bytes`` (full
``Nodes`` objects with ``nodeCacheCapable: false``) are parsed and scored in the thread pool.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from fastapi import FastAPI, Request, Response
from prometheus_client import CollectorRegistry, Counter, Gauge
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from sits_observe.control.extender_cache import ViewCache
from sits_observe.control.extender_scoring import (
    ScoringSettings,
    filter_nodes,
    prioritize,
)
from sits_observe.control.extender_view import ClusterView, ViewSettings, build_view
from sits_observe.control.extender_wire import (
    ExtenderCall,
    encode,
    filter_error,
    filter_result,
    host_priority_json,
    parse_extender_args,
)
from sits_observe.errors import ParseError
from sits_observe.store import Store
from sits_observe.surfaces.service.ingest import problem

log = logging.getLogger(__name__)

URL_PREFIX = "/scheduler"
FILTER_PATH = f"{URL_PREFIX}/filter"
PRIORITIZE_PATH = f"{URL_PREFIX}/prioritize"
JSON = "application/json"
MIB = 1024 * 1024

Clock = Callable[[], datetime]


class ExtenderSettings(BaseModel):
    """The extender's switches, limits, view and scoring settings."""

    model_config = ConfigDict(frozen=True)

    enabled: bool = Field(True, description="serve /scheduler/filter and /scheduler/prioritize")
    max_body_bytes: int = Field(
        24 * MIB,
        ge=1024,
        le=1024 * MIB,
        description="largest extender request body, in bytes (500 full Node objects are "
        "about 9.2 MiB, see docs/extender.md)",
    )
    inline_body_bytes: int = Field(
        256 * 1024,
        ge=0,
        le=1024 * MIB,
        description="bodies up to this many bytes are handled on the event loop, larger ones "
        "in the thread pool",
    )
    view: ViewSettings = Field(default_factory=ViewSettings, description="the cluster view")
    scoring: ScoringSettings = Field(
        default_factory=ScoringSettings, description="the sits policy's weights and constants"
    )


class ExtenderMetrics:
    """The extender's Prometheus metrics, on the service's registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.calls = Counter(
            "sits_extender_calls_total",
            "extender calls by verb and outcome: scored, fail_open, bad_request, error",
            ("verb", "outcome"),
            registry=registry,
        )
        self.nodes = Counter(
            "sits_extender_filter_nodes_total",
            "candidate nodes seen by the filter, by result: passed, failed, unresolvable",
            ("result",),
            registry=registry,
        )
        self.view_builds = Counter(
            "sits_extender_view_builds_total",
            "cluster view rebuilds by result: ok, error",
            ("result",),
            registry=registry,
        )
        self.view_age = Gauge(
            "sits_extender_view_age_seconds",
            "age of the inventory snapshot behind the view at the last call",
            registry=registry,
        )


@dataclass
class ExtenderEndpoints:
    """The two handlers and their dependencies; ``app.state.extender`` holds one."""

    settings: ExtenderSettings
    cache: ViewCache
    metrics: ExtenderMetrics
    clock: Clock

    async def filter(self, request: Request) -> Response:
        """Handle ``POST /scheduler/filter``."""
        body = await _read_body(request, self.settings.max_body_bytes)
        if isinstance(body, str):
            self.metrics.calls.labels("filter", "bad_request").inc()
            return _json(encode(filter_error(body)))
        if len(body) > self.settings.inline_body_bytes:
            return await run_in_threadpool(self._filter, body, await self._view())
        return self._filter(body, await self._view())

    async def prioritize(self, request: Request) -> Response:
        """Handle ``POST /scheduler/prioritize``."""
        body = await _read_body(request, self.settings.max_body_bytes)
        if isinstance(body, str):
            self.metrics.calls.labels("prioritize", "bad_request").inc()
            return problem(413, "too_large", body)
        if len(body) > self.settings.inline_body_bytes:
            return await run_in_threadpool(self._prioritize, body, await self._view())
        return self._prioritize(body, await self._view())

    def _filter(self, body: bytes, view: ClusterView | None) -> Response:
        try:
            call = parse_extender_args(body)
        except ParseError as exc:
            self.metrics.calls.labels("filter", "bad_request").inc()
            return _json(encode(filter_error(str(exc))))
        view = self._usable(view)
        if view is None:
            self.metrics.calls.labels("filter", "fail_open").inc()
            self.metrics.nodes.labels("passed").inc(len(call.nodes))
            return _json(encode(filter_result(call, call.nodes, {}, {})))
        try:
            outcome = filter_nodes(call.pod, view, call.nodes, self.settings.scoring)
        except Exception as exc:
            # One bad call must not take the endpoint down: report it to kube-scheduler.
            log.exception("extender filter failed for pod %s", _who(call))
            self.metrics.calls.labels("filter", "error").inc()
            return _json(encode(filter_error(f"sits-observe extender internal error: {exc}")))
        self.metrics.calls.labels("filter", "scored").inc()
        self.metrics.nodes.labels("passed").inc(len(outcome.passing))
        self.metrics.nodes.labels("failed").inc(len(outcome.failed))
        self.metrics.nodes.labels("unresolvable").inc(len(outcome.unresolvable))
        result = filter_result(call, outcome.passing, outcome.failed, outcome.unresolvable)
        return _json(encode(result))

    def _prioritize(self, body: bytes, view: ClusterView | None) -> Response:
        try:
            call = parse_extender_args(body)
        except ParseError as exc:
            self.metrics.calls.labels("prioritize", "bad_request").inc()
            return problem(400, "bad_request", str(exc))
        view = self._usable(view)
        if view is None:
            self.metrics.calls.labels("prioritize", "fail_open").inc()
            return _json(host_priority_json(call.nodes, [0] * len(call.nodes)))
        try:
            result = prioritize(call.pod, view, call.nodes, self.settings.scoring)
        except Exception as exc:
            log.exception("extender prioritize failed for pod %s", _who(call))
            self.metrics.calls.labels("prioritize", "error").inc()
            return problem(500, "internal", f"sits-observe extender internal error: {exc}")
        self.metrics.calls.labels("prioritize", "scored").inc()
        return _json(host_priority_json(result.hosts, result.scores.tolist()))

    async def _view(self) -> ClusterView | None:
        view = self.cache.get()
        if view is None:
            view = await run_in_threadpool(self.cache.wait, self.settings.view.first_view_timeout_s)
        return view

    def _usable(self, view: ClusterView | None) -> ClusterView | None:
        """``view`` when it has a fresh enough inventory snapshot, else None (fail open)."""
        age_s = view.age_s(self.clock()) if view is not None else None
        if age_s is None:
            return None
        self.metrics.view_age.set(age_s)
        return view if age_s <= self.settings.view.max_snapshot_age_s else None


def register_extender(
    app: FastAPI,
    store: Store,
    registry: CollectorRegistry,
    *,
    settings: ExtenderSettings | None = None,
    clock: Clock | None = None,
) -> ExtenderEndpoints | None:
    """Add the extender routes to ``app`` (unless disabled); returns the endpoints.

    Nothing is read from the store until the first call: the view cache builds lazily, so an
    app that never gets an extender call never starts the rebuild thread.
    """
    settings = settings or ExtenderSettings()
    if not settings.enabled:
        return None
    now = clock or _utc_now
    metrics = ExtenderMetrics(registry)

    def build(previous: ClusterView | None) -> ClusterView:
        view = build_view(store, now(), settings.view, previous)
        metrics.view_builds.labels("ok").inc()
        return view

    def failed(_: Exception) -> None:
        metrics.view_builds.labels("error").inc()

    cache = ViewCache(build, refresh_interval_s=settings.view.refresh_interval_s, on_error=failed)
    endpoints = ExtenderEndpoints(settings, cache, metrics, now)
    app.add_api_route(
        FILTER_PATH, endpoints.filter, methods=["POST"], response_model=None, name="extender_filter"
    )
    app.add_api_route(
        PRIORITIZE_PATH,
        endpoints.prioritize,
        methods=["POST"],
        response_model=None,
        name="extender_prioritize",
    )
    app.state.extender = endpoints
    return endpoints


async def _read_body(request: Request, limit: int) -> bytes | str:
    """The body, or why it is refused (over ``limit`` bytes)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        return f"request body of {declared} bytes is over the extender limit of {limit} bytes"
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return f"request body is over the extender limit of {limit} bytes"
        chunks.append(chunk)
    return b"".join(chunks)


def _json(body: bytes) -> Response:
    return Response(body, media_type=JSON)


def _who(call: ExtenderCall) -> str:
    return f"{call.pod.namespace}/{call.pod.name}"


def _utc_now() -> datetime:
    return datetime.now(UTC)
