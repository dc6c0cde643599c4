"""``POST /scheduler/filter``, ``/scheduler/prioritize`` and ``/scheduler/bind``: the extender;
``GET /scheduler/readyz``: whether it is warm.

kube-scheduler calls these with ``urlPrefix: http://<service>/scheduler``, ``filterVerb:
filter``, ``prioritizeVerb: prioritize`` and ``bindVerb: bind`` (deploy/scheduler-config.yaml).
The routes only read the body (within the limits below), pick the current view and count the
outcome; the request handling is :class:`sits_observe.control.extender.handler.ExtenderHandler`,
the same code the replay runs (``simulate --policy kube-sits``): the extender wire format
(:mod:`sits_observe.control.extender.wire`), the ``sits`` policy
(:mod:`sits_observe.control.extender.scoring`) over a cached view of the store
(:mod:`sits_observe.control.extender.clusterview.view`) rebuilt in the background plus the pods the
bind verb placed since (:mod:`sits_observe.control.extender.overlay`). The bind verb
(:mod:`sits_observe.control.extender.bind`) is served only when the service has Kubernetes API
access (``serve --in-cluster`` / ``--kubeconfig``); it runs in the thread pool (two API calls).

Authentication: none on these routes. kube-scheduler's extender client sends no
credentials (it sets only ``Content-Type``; TLS client certificates are its one option), so a
token would lock out the one caller that matters. Filter and prioritize are read-only (they
reveal node names and scores); bind binds the pod kube-scheduler names to the node it names,
as kube-scheduler would itself. All must be reachable only from kube-scheduler: ``serve
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
- bind: HTTP 200 with ``ExtenderBindingResult.Error`` for an unreadable or oversized body or a
  refused API call; kube-scheduler then retries the pod (or binds it itself, ``ignorable``).
- an internal error (an exception while reading or scoring a call): no bare HTTP 500; the
  handler logs it and answers in the protocol (filter and bind: ``Error``; prioritize: every
  node 0), counted as ``outcome="error"``.

Handlers run on the event loop: a call against 5,000 names is about a millisecond of numpy
and JSON, less than a thread hand-off would add. Bodies above ``inline_body_bytes`` (full
``Nodes`` objects with ``nodeCacheCapable: false``) are parsed and scored in the thread pool.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from prometheus_client import CollectorRegistry, Counter, Gauge
from pydantic import BaseModel, ConfigDict, Field
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from sits_observe.control.extender.bind import Binder, PodApi
from sits_observe.control.extender.clusterview.cache import ViewCache
from sits_observe.control.extender.clusterview.source import DuckViewSource, ViewSource
from sits_observe.control.extender.clusterview.view import ClusterView, build_view
from sits_observe.control.extender.clusterview.view_settings import ViewSettings
from sits_observe.control.extender.handler import Answer, ExtenderHandler
from sits_observe.control.extender.overlay import AssumedPods
from sits_observe.control.extender.scoring_settings import ScoringSettings
from sits_observe.control.extender.wire import binding_result, encode, filter_error
from sits_observe.store import Store
from sits_observe.surfaces.service.http.json_answers import problem
from sits_observe.surfaces.service.http.limits import HttpLimits, add_limits
from sits_observe.surfaces.service.metrics import ServiceMetrics

log = logging.getLogger(__name__)

URL_PREFIX = "/scheduler"
FILTER_PATH = f"{URL_PREFIX}/filter"
PRIORITIZE_PATH = f"{URL_PREFIX}/prioritize"
BIND_PATH = f"{URL_PREFIX}/bind"
#: The extender's own readiness (``GET``): 200 once a call would be scored, not failed open.
READY_PATH = f"{URL_PREFIX}/readyz"
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
    view: ViewSettings = Field(
        default_factory=ViewSettings,
        description="the cluster view",
        json_schema_extra={"nested_flags": True},
    )
    gpu_hint: bool = Field(
        True,
        description="bind verb: name the GPU the score was computed for (FGD's) in a shared "
        "pod's nvidia.com/use-gpuuuid annotation (HAMi's hint); shares are scored for that GPU "
        "while kube-scheduler binds through the verb, else for the device plugin's own choice",
    )
    assumed_ttl_s: float = Field(
        600.0,
        gt=0,
        le=86400,
        description="seconds a pod bound by the bind verb stays assumed in the view when no "
        "inventory snapshot shows it bound",
    )
    warm_view: bool = Field(
        False,
        description="build the cluster view when the service starts, so the first call after "
        "a restart does not wait for it (off: built on the first call); serve then answers "
        "the extender before the rest of the service has loaded (docs/extender.md)",
    )
    scoring: ScoringSettings = Field(
        default_factory=ScoringSettings,
        description="the sits policy's weights and constants",
        json_schema_extra={"nested_flags": True},
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
    """The routes over one :class:`ExtenderHandler`; ``app.state.extender`` holds one."""

    settings: ExtenderSettings
    cache: ViewCache
    metrics: ExtenderMetrics
    handler: ExtenderHandler
    source: ViewSource

    def close(self) -> None:
        """Release the view's reads at shutdown (the PromQL client's connections)."""
        self.source.close()

    async def filter(self, request: Request) -> Response:
        """Handle ``POST /scheduler/filter``."""
        body = await _read_body(request, self.settings.max_body_bytes)
        if isinstance(body, str):
            self.metrics.calls.labels("filter", "bad_request").inc()
            return _json(encode(filter_error(body)))
        view = await self._view()
        if len(body) > self.settings.inline_body_bytes:
            answer = await run_in_threadpool(self.handler.filter, body, view)
        else:
            answer = self.handler.filter(body, view)
        self.metrics.nodes.labels("passed").inc(answer.passed)
        self.metrics.nodes.labels("failed").inc(answer.failed)
        self.metrics.nodes.labels("unresolvable").inc(answer.unresolvable)
        return self._answer("filter", answer)

    async def prioritize(self, request: Request) -> Response:
        """Handle ``POST /scheduler/prioritize``."""
        body = await _read_body(request, self.settings.max_body_bytes)
        if isinstance(body, str):
            self.metrics.calls.labels("prioritize", "bad_request").inc()
            return problem(413, "too_large", body)
        view = await self._view()
        if len(body) > self.settings.inline_body_bytes:
            answer = await run_in_threadpool(self.handler.prioritize, body, view)
        else:
            answer = self.handler.prioritize(body, view)
        return self._answer("prioritize", answer)

    async def bind(self, request: Request) -> Response:
        """Handle ``POST /scheduler/bind`` (registered only with Kubernetes API access)."""
        body = await _read_body(request, self.settings.max_body_bytes)
        if isinstance(body, str):
            self.metrics.calls.labels("bind", "bad_request").inc()
            return _json(binding_result(body))
        view = await self._view()
        # Two blocking API calls (the hint PATCH, the Binding): off the event loop.
        answer = await run_in_threadpool(self.handler.bind, body, view)
        return self._answer("bind", answer)

    async def ready(self, request: Request) -> Response:
        """Handle ``GET /scheduler/readyz``: 200 once the view is built from the store and
        its inventory snapshot is younger than ``max_snapshot_age_s`` (a call now is scored,
        not failed open), 503 with the reason before. Like a call, it starts the first build
        when none has started; it never waits for one. A startupProbe on it holds
        kube-scheduler back until the extender is warm (deploy/overlays/scheduler-sidecar)."""
        view = self.cache.get()
        if view is None:
            return problem(503, "not_ready", "the extender's cluster view is not built yet")
        age_s = view.age_s(self.handler.clock())
        if age_s is None:
            return problem(503, "not_ready", "the store holds no inventory snapshot yet")
        limit_s = self.handler.max_snapshot_age_s
        if age_s > limit_s:
            detail = (
                f"the inventory snapshot is {age_s:.0f} s old, over the {limit_s:.0f} s allowed"
            )
            return problem(503, "not_ready", detail)
        ready = {"status": "ready", "nodes": len(view), "snapshot_age_s": round(age_s, 3)}
        return JSONResponse(ready)

    def _answer(self, verb: str, answer: Answer) -> Response:
        self.metrics.calls.labels(verb, answer.outcome).inc()
        return Response(answer.body, status_code=answer.status, media_type=JSON)

    async def _view(self) -> ClusterView | None:
        view = self.cache.get()
        if view is None:
            view = await run_in_threadpool(self.cache.wait, self.settings.view.first_view_timeout_s)
        return view


def build_endpoints(
    store: Store,
    registry: CollectorRegistry,
    *,
    settings: ExtenderSettings | None = None,
    clock: Clock | None = None,
    pods: PodApi | None = None,
) -> ExtenderEndpoints | None:
    """The extender's endpoints over ``store`` (None when disabled), metrics on ``registry``.

    ``pods`` (the Kubernetes API, in ``serve`` with ``--kubeconfig`` / ``--in-cluster``)
    enables the bind verb. Nothing is read from the store until the first call (the view
    cache builds lazily, so a service that never gets an extender call never starts the
    rebuild thread) unless ``settings.warm_view`` starts the first build now.
    """
    settings = settings or ExtenderSettings()
    if not settings.enabled:
        return None
    now = clock or _utc_now
    metrics = ExtenderMetrics(registry)

    source = view_source(store, settings.view)

    def build(previous: ClusterView | None) -> ClusterView:
        view = build_view(source, now(), settings.view, previous)
        metrics.view_builds.labels("ok").inc()
        return view

    def failed(_: Exception) -> None:
        metrics.view_builds.labels("error").inc()

    cache = ViewCache(
        build,
        refresh_interval_s=settings.view.refresh_interval_s,
        on_error=failed,
        assumed=AssumedPods(ttl_s=settings.assumed_ttl_s),
    )
    binder = None
    if pods is not None:
        binder = Binder(
            pods, scoring=settings.scoring, gpu_hint=settings.gpu_hint, assume=cache.assume
        )
    handler = ExtenderHandler(
        settings.scoring,
        max_snapshot_age_s=settings.view.max_snapshot_age_s,
        clock=now,
        binder=binder,
        on_view_age=metrics.view_age.set,
    )
    endpoints = ExtenderEndpoints(settings, cache, metrics, handler, source)
    if settings.warm_view:
        cache.get()  # starts the first build in the background
    return endpoints


def add_routes(app: Starlette, endpoints: ExtenderEndpoints) -> None:
    """Serve ``endpoints`` on ``app`` (the service's app, or the extender port's): the verbs,
    bind only when they bind through the Kubernetes API, and the readiness."""
    verbs = [(FILTER_PATH, endpoints.filter), (PRIORITIZE_PATH, endpoints.prioritize)]
    if endpoints.handler.binder is not None:
        verbs.append((BIND_PATH, endpoints.bind))
    for path, handle in verbs:
        app.add_route(path, handle, methods=["POST"], name=f"extender_{path.rsplit('/', 1)[1]}")
    app.add_route(READY_PATH, endpoints.ready, methods=["GET"], name="extender_readyz")
    app.state.extender = endpoints


def create_extender_app(
    endpoints: ExtenderEndpoints | None, metrics: ServiceMetrics, limits: HttpLimits
) -> Starlette:
    """An app serving only the scheduler extender: for ``serve --extender-port``, and on the
    service's port while ``serve`` starts (:mod:`.staged`). A Starlette app, not FastAPI's:
    it answers before FastAPI and the rest of the service are imported. Its metrics are on
    the service's registry, so the main ``/metrics`` shows them."""
    app = Starlette()
    app.state.metrics = metrics
    if endpoints is not None:
        add_routes(app, endpoints)
    add_limits(app, metrics, limits)
    return app


@dataclass(frozen=True)
class ExtenderServing:
    """Where the extender is served: its endpoints (None: disabled) and, with ``serve
    --extender-port``, the app of that port (None: on the service's own app)."""

    endpoints: ExtenderEndpoints | None
    port_app: Starlette | None


def serve_extender(
    store: Store,
    metrics: ServiceMetrics,
    port_limits: HttpLimits | None,
    *,
    settings: ExtenderSettings | None = None,
    clock: Clock | None = None,
    pods: PodApi | None = None,
) -> ExtenderServing:
    """The endpoints, and an app of their own when they have a port (``port_limits``: that
    port's limits; None: the routes go on the service's app)."""
    endpoints = build_endpoints(store, metrics.registry, settings=settings, clock=clock, pods=pods)
    port_app = None
    if port_limits is not None:
        port_app = create_extender_app(endpoints, metrics, port_limits)
    return ExtenderServing(endpoints, port_app)


def view_source(store: Store, view: ViewSettings) -> ViewSource:
    """Where the view reads: the store, or with ``view.promql_url`` kube-state-metrics and
    dcgm-exporter series there (no DuckDB data needed; docs/extender.md)."""
    if view.promql_url is None:
        return DuckViewSource(store)
    from sits_observe.control.extender.clusterview.source_promql import PromQLViewSource
    from sits_observe.store.promql.client import PromQLClient

    return PromQLViewSource(
        PromQLClient(view.promql_url),
        ksm_matchers=view.promql_ksm_matchers,
        gpu_matchers=view.promql_gpu_matchers,
        lookback_s=view.max_snapshot_age_s,
    )


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


def _utc_now() -> datetime:
    return datetime.now(UTC)
