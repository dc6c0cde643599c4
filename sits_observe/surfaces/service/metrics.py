"""The service's Prometheus metrics, on an explicit registry created per app.

``sits_`` prefix, base units, ``_total`` counters (project rules). ``sits_store_rows`` is
refreshed from the store when ``/metrics`` is scraped, so it is exact at scrape time.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sits_observe.store.health import StoreHealth

#: Request latencies in seconds: from a cache hit on /healthz to a large batch commit.
LATENCY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


@dataclass
class ServiceMetrics:
    """Every metric the service exports."""

    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        reg = self.registry
        self.batches = Counter(
            "sits_ingest_batches_total",
            "ingest requests by result: stored, duplicate, rejected, failed",
            ("result",),
            registry=reg,
        )
        self.rows = Counter(
            "sits_ingest_rows_total", "rows stored, by table", ("table",), registry=reg
        )
        self.group_batches = Histogram(
            "sits_ingest_group_batches",
            "batches stored per DuckDB transaction by group commit",
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512),
            registry=reg,
        )
        self.rejected = Counter(
            "sits_ingest_rejected_total",
            "ingest requests refused, by reason (unauthorized, too_large, bad_header, ...)",
            ("reason",),
            registry=reg,
        )
        self.bytes = Counter("sits_ingest_bytes_total", "ingest body bytes read", registry=reg)
        self.latency = Histogram(
            "sits_http_request_duration_seconds",
            "HTTP request latency, by route template, method and status class",
            ("route", "method", "status"),
            buckets=LATENCY_BUCKETS_S,
            registry=reg,
        )
        self.dropped = Counter(
            "sits_http_dropped_total",
            "requests or connections the HTTP server dropped, by reason: header_timeout, "
            "header_too_large, body_timeout, connection_limit, bad_request, busy, client_busy, "
            "client_disconnect",
            ("reason",),
            registry=reg,
        )
        self.auth_refused = Counter(
            "sits_auth_refused_total",
            "read and scrape requests refused by authentication, by role and reason "
            "(unauthorized, forbidden); ingest refusals are in sits_ingest_rejected_total",
            ("role", "reason"),
            registry=reg,
        )
        self.store_rows = Gauge(
            "sits_store_rows", "rows in each store table at scrape time", ("table",), registry=reg
        )
        self.retention_runs = Counter(
            "sits_retention_runs_total",
            "retention runs by result: ok, error",
            ("result",),
            registry=reg,
        )
        self.retention_rows = Counter(
            "sits_retention_rows_total",
            "rows rolled up or deleted by retention, by kind",
            ("kind",),
            registry=reg,
        )


class StoreHealthCollector:
    """The store's write health at scrape time, from its record (no statement runs):
    ``sits_store_writable``, ``sits_store_failing_seconds``, ``sits_store_reopens_total``."""

    def __init__(self, health: Callable[[], StoreHealth]) -> None:
        self._health = health

    def collect(self) -> Iterator[Metric]:
        """One sample of each (prometheus_client's collector protocol)."""
        health = self._health()
        yield GaugeMetricFamily(
            "sits_store_writable",
            "1 while no write failed for the store's sake (full disk, I/O error, damaged "
            "block, invalidated database) since the last commit, else 0",
            value=1.0 if health.writable else 0.0,
        )
        yield GaugeMetricFamily(
            "sits_store_failing_seconds",
            "seconds since the first store fault of the current failing spell (0 while writable)",
            value=health.failing_for_s,
        )
        reopens = CounterMetricFamily(
            "sits_store_reopens",
            "times the store opened its file again after DuckDB invalidated the database, by "
            "result: ok, error",
            labels=("result",),
        )
        reopens.add_metric(("ok",), health.reopens)
        reopens.add_metric(("error",), health.reopen_failures)
        yield reopens


class TimingMiddleware:
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
