"""The derived-signal exporter: analytics results as Prometheus metrics on ``/metrics``.

A prometheus-client custom collector registered on the service's explicit registry. Each
scrape yields the families computed by the latest *pass*; a pass reads the store through the
analytics functions and runs at most once every ``cache_s`` seconds (a scrape within that
time returns the cached families), so Prometheus replicas or a short scrape interval never
multiply the work.

Every signal (latency, throughput, fragmentation, interference, collector drops, controller
decisions) is computed in isolation: a signal that fails (no inventory yet, a missing table,
a bug) is logged, counted in ``sits_exporter_errors_total{signal}`` and left out of that
pass, never breaking the scrape or the other signals. Metric names, labels and cardinality
bounds are documented in docs/metrics.md.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from fastapi import FastAPI
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from pydantic import BaseModel, ConfigDict, Field

from sits_observe.analytics.fgd import fragmentation
from sits_observe.analytics.fgd_live import live_cluster
from sits_observe.analytics.fgd_workload import typical_pods
from sits_observe.analytics.interference import interference_report, load_gpu_samples
from sits_observe.analytics.latency import RequestSelection, exact_quantiles, quantile_column
from sits_observe.analytics.settings import InterferenceSettings
from sits_observe.store import Store

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]
Monotonic = Callable[[], float]

#: The latency quantiles exported (label ``quantile``), as in the ``latency`` command.
QUANTILES: tuple[float, ...] = (0.5, 0.95, 0.99)
#: Label value for a group the store has no name for (NULL model or node).
UNKNOWN = "unknown"

#: Every signal name used in ``sits_exporter_errors_total{signal}`` (a bounded label set).
SIGNALS: tuple[str, ...] = (
    "latency",
    "throughput",
    "fragmentation",
    "interference",
    "collector_drops",
    "controller_decisions",
)


class ExporterSettings(BaseModel):
    """How often the derived signals are recomputed and over what window."""

    model_config = ConfigDict(frozen=True)

    enabled: bool = Field(True, description="export the derived signals on /metrics")
    cache_s: float = Field(
        15.0,
        ge=0,
        le=3600,
        description="seconds a computed set of signals is served before the next scrape "
        "recomputes it (0 = every scrape)",
    )
    window_s: float = Field(
        300.0,
        gt=0,
        le=7 * 86400,
        description="seconds of requests and GPU samples (up to now) behind latency, "
        "throughput and interference",
    )
    fgd_since_s: float = Field(
        86400.0,
        gt=0,
        le=30 * 86400,
        description="seconds of pod snapshots before the latest one that form the FGD workload",
    )
    max_models: int = Field(
        100,
        ge=1,
        le=10_000,
        description="most model label values exported (the busiest models in the window)",
    )
    interference: InterferenceSettings = Field(
        default_factory=InterferenceSettings, description="interference score settings"
    )


@dataclass(frozen=True)
class _Pass:
    """One computation: its families and when (monotonic seconds) it ran."""

    families: tuple[Metric, ...]
    at_s: float


class DerivedSignals(Collector):
    """The custom collector; ``computations`` counts passes (for tests and debugging)."""

    def __init__(
        self,
        store: Store,
        settings: ExporterSettings | None = None,
        *,
        clock: Clock,
        monotonic: Monotonic = time.monotonic,
    ) -> None:
        self._store = store
        self._settings = settings or ExporterSettings()
        self._clock = clock
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._last: _Pass | None = None
        self._errors: dict[str, int] = dict.fromkeys(SIGNALS, 0)
        self._last_error: dict[str, str] = {}
        self.computations = 0

    def describe(self) -> Iterable[Metric]:
        """The family names (no samples), so the registry detects clashes without a pass."""
        return [
            GaugeMetricFamily("sits_latency_seconds", ""),
            GaugeMetricFamily("sits_requests_per_second", ""),
            GaugeMetricFamily("sits_fgd_fragmentation_ratio", ""),
            GaugeMetricFamily("sits_fgd_fragmentation_amount_ratio", ""),
            GaugeMetricFamily("sits_interference_score_ratio", ""),
            CounterMetricFamily("sits_collector_drops", ""),
            CounterMetricFamily("sits_controller_decisions", ""),
            CounterMetricFamily("sits_exporter_errors", ""),
        ]

    def collect(self) -> Iterator[Metric]:
        """The cached families (recomputed when older than ``cache_s``) and the error counts."""
        with self._lock:
            now_s = self._monotonic()
            last = self._last
            if last is None or now_s - last.at_s >= self._settings.cache_s:
                last = _Pass(self._compute(), now_s)
                self._last = last
            errors = CounterMetricFamily(
                "sits_exporter_errors",
                "derived-signal computations that failed, by signal",
                labels=("signal",),
            )
            for signal, count in self._errors.items():
                errors.add_metric((signal,), count)
        yield from last.families
        yield errors

    # -- one pass -----------------------------------------------------------------------------

    def _compute(self) -> tuple[Metric, ...]:
        self.computations += 1
        now = self._clock()
        since = now - timedelta(seconds=self._settings.window_s)
        steps: tuple[tuple[str, Callable[[], list[Metric]]], ...] = (
            ("latency", lambda: self._latency(since)),
            ("throughput", lambda: self._throughput(since)),
            ("fragmentation", self._fragmentation),
            ("interference", lambda: self._interference(since)),
            ("collector_drops", self._collector_drops),
            ("controller_decisions", self._controller_decisions),
        )
        families: list[Metric] = []
        for signal, step in steps:
            try:
                families.extend(step())
            except Exception as exc:
                # One signal never breaks the scrape: count it, log it, serve the others.
                self._errors[signal] += 1
                message = f"{type(exc).__name__}: {exc}"
                if self._last_error.get(signal) != message:
                    log.warning("derived signal %s not exported: %s", signal, message)
                else:
                    log.debug("derived signal %s not exported: %s", signal, message)
                self._last_error[signal] = message
                continue
            self._last_error.pop(signal, None)
        return tuple(families)

    def _busiest(self, since: datetime) -> list[dict[str, Any]]:
        """Rows of the exact quantiles per model in the window, busiest ``max_models`` first."""
        table = exact_quantiles(
            self._store,
            by="model",
            selection=RequestSelection(since=since),
            quantiles=QUANTILES,
        )
        rows = sorted(table.to_pylist(), key=lambda r: (-int(r["count"]), str(r["model"])))
        return rows[: self._settings.max_models]

    def _latency(self, since: datetime) -> list[Metric]:
        family = GaugeMetricFamily(
            "sits_latency_seconds",
            f"exact end-to-end request latency quantiles per model over the last "
            f"{self._settings.window_s:g} s (successful requests)",
            labels=("model", "quantile"),
        )
        for row in self._busiest(since):
            for q in QUANTILES:
                value = row[quantile_column(q)]
                if value is not None:
                    family.add_metric((_name(row["model"]), f"{q:g}"), float(value))
        return [family]

    def _throughput(self, since: datetime) -> list[Metric]:
        window_s = self._settings.window_s
        family = GaugeMetricFamily(
            "sits_requests_per_second",
            f"successful requests completed per second per model, mean over the last "
            f"{window_s:g} s",
            labels=("model",),
        )
        for row in self._busiest(since):
            family.add_metric((_name(row["model"]),), int(row["count"]) / window_s)
        return [family]

    def _fragmentation(self) -> list[Metric]:
        cluster = live_cluster(self._store, since_s=self._settings.fgd_since_s)
        report = fragmentation(cluster.state, typical_pods(cluster.shapes))
        ratio = GaugeMetricFamily(
            "sits_fgd_fragmentation_ratio",
            "cluster FGD fragmentation: fragmented share of the idle GPU capacity (0-1), "
            "latest inventory",
            value=report.frag_ratio,
        )
        amount = GaugeMetricFamily(
            "sits_fgd_fragmentation_amount_ratio",
            "cluster FGD fragmentation: fragmented share of all GPU capacity (0-1), "
            "latest inventory",
            value=report.frag_amount_ratio,
        )
        return [ratio, amount]

    def _interference(self, since: datetime) -> list[Metric]:
        samples = load_gpu_samples(self._store, since=since)
        report = interference_report(samples, self._settings.interference)
        family = GaugeMetricFamily(
            "sits_interference_score_ratio",
            f"interference score per node (0-1: 0.4 bandwidth + 0.35 NVLink conflict + "
            f"0.25 NUMA miss) over the last {self._settings.window_s:g} s",
            labels=("node",),
        )
        for node in report.nodes:
            family.add_metric((_name(node.node),), node.score.score)
        return [family]

    def _collector_drops(self) -> list[Metric]:
        rows = self._store.query(
            "SELECT collector, reason, sum(count) AS n FROM collector_drops "
            "GROUP BY collector, reason ORDER BY collector, reason"
        ).to_pylist()
        family = CounterMetricFamily(
            "sits_collector_drops",
            "samples dropped by collectors, by collector and reason (rows kept in the store)",
            labels=("collector", "reason"),
        )
        for row in rows:
            family.add_metric((_name(row["collector"]), _name(row["reason"])), float(row["n"]))
        return [family]

    def _controller_decisions(self) -> list[Metric]:
        present = self._store.scalar(
            "SELECT count(*) FROM information_schema.tables WHERE table_name = 'decisions'"
        )
        family = CounterMetricFamily(
            "sits_controller_decisions",
            "controller decisions recorded in the store, by action and outcome",
            labels=("action", "outcome"),
        )
        if not present:
            return [family]
        rows = self._store.query(
            "SELECT action, outcome, count(*) AS n FROM decisions "
            "GROUP BY action, outcome ORDER BY action, outcome"
        ).to_pylist()
        for row in rows:
            family.add_metric((_name(row["action"]), _name(row["outcome"])), float(row["n"]))
        return [family]


def _name(value: object) -> str:
    """A label value: the text, or :data:`UNKNOWN` for NULL / empty."""
    return str(value) if value not in (None, "") else UNKNOWN


def utc_now() -> datetime:
    """The current time, UTC."""
    return datetime.now(UTC)


def register_exporter(
    app: FastAPI,
    store: Store,
    registry: CollectorRegistry,
    *,
    clock: Clock = utc_now,
    settings: ExporterSettings | None = None,
    monotonic: Monotonic = time.monotonic,
) -> DerivedSignals | None:
    """Register the derived signals on ``registry``; the collector is kept on
    ``app.state.exporter`` (None when disabled)."""
    settings = settings or ExporterSettings()
    exporter = (
        DerivedSignals(store, settings, clock=clock, monotonic=monotonic)
        if settings.enabled
        else None
    )
    if exporter is not None:
        registry.register(exporter)
    app.state.exporter = exporter
    return exporter
