"""Per-signal builders of the exporter: requests, collectors and the controller.

A builder takes the :class:`PassInputs` of one pass and returns metric families. It holds no
SQL and calls no analysis: it reads what the reports layer answers for the pass's window (the
``latency`` report's exact quantiles, estimates and bucket counts,
:mod:`sits_observe.reports.serving.request_latency`; the collectors' drops and newest rows,
:mod:`sits_observe.reports.inventory.collector_health`; the decision log's totals,
:mod:`sits_observe.reports.actions.decision_totals`), so ``/metrics`` and the command answer alike,
and only turns their rows into families. A builder raises when its signal cannot be
computed; the collector (:mod:`.exporter`) counts that and carries on. "Nothing to export
yet" is not an error: a builder returns no samples.

Label values are bounded: models by ``max_models`` (the busiest in the window), nodes by
``max_nodes``; :func:`capped` documents the order that decides which values are kept.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from functools import cached_property
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeHistogramMetricFamily,
    GaugeMetricFamily,
    Metric,
)

from sits_observe.reports.actions.decision_totals import (
    decision_totals,
    failure_totals,
    newest_decision_at,
)
from sits_observe.reports.inventory import collector_health
from sits_observe.reports.inventory.names import gpu_identities
from sits_observe.reports.serving import request_latency
from sits_observe.reports.window import Window, to_utc_naive
from sits_observe.store import Store
from sits_observe.surfaces.durations import prom_duration
from sits_observe.surfaces.service.exporter.settings import ExporterSettings
from sits_observe.surfaces.service.exporter.signals.labels import NODE, GpuNames

#: The latency quantiles exported (label ``quantile``): the ``latency`` report's.
QUANTILES: tuple[float, ...] = request_latency.QUANTILES
#: Label value for a group the store has no name for (NULL model, node, namespace ...).
UNKNOWN = "unknown"
#: Failure reasons of the controller always exported (0 until one happens), so the family
#: has samples before the first failure; ``http-<status>`` values appear when they happen.
CONTROLLER_FAILURES: tuple[str, ...] = ("internal", "unreachable")

T = TypeVar("T")


class PassInputs:
    """What one pass reads: the store, the settings, the time, and results shared by several
    builders (computed once per pass, on first use)."""

    def __init__(self, store: Store, settings: ExporterSettings, now: datetime) -> None:
        self.store = store
        self.settings = settings
        self.now = to_utc_naive(now)
        self.since = self.now - timedelta(seconds=settings.window_s)
        # Windows are [since, now]: a row stamped after now (a clock ahead, a bad client) is
        # in no window, so it cannot hold a "last N minutes" signal until the clock catches up.
        self.until = self.now + timedelta(microseconds=1)
        self.window = prom_duration(settings.window_s)
        self._gpu_names: dict[datetime, GpuNames] = {}

    def gpu_names(self, since: datetime | None = None) -> GpuNames:
        """Index and model name of every GPU seen from ``since`` (default: the window's
        start) to now, read once per pass and start (:mod:`.exporter_labels`)."""
        start = self.since if since is None else since
        if start not in self._gpu_names:
            identities = gpu_identities(self.store, Window(start, self.until, "given"))
            self._gpu_names[start] = GpuNames(identities, unknown=UNKNOWN)
        return self._gpu_names[start]

    @cached_property
    def span(self) -> Window:
        """The pass's window as the reports layer reads it (``since <= ts < until``)."""
        return Window(self.since, self.until, "now")

    def ago(self, seconds: float) -> datetime:
        """``seconds`` before now (naive UTC); windows from it end at :attr:`until`."""
        return self.now - timedelta(seconds=seconds)

    @cached_property
    def busiest(self) -> list[dict[str, Any]]:
        """Exact quantiles per model in the window (the ``latency`` report's), the busiest
        ``max_models`` first."""
        table = request_latency.exact_latency(self.store, self.span, quantiles=QUANTILES)
        rows = sorted(table.to_pylist(), key=lambda r: (-int(r["count"]), str(r["model"])))
        return rows[: self.settings.max_models]

    @cached_property
    def latest_estimates(self) -> list[dict[str, Any]]:
        """The newest histogram window per model in the window (of the ``latency`` report's
        estimates), busiest models first."""
        table = request_latency.latency_estimates(self.store, self.span)
        latest: dict[str, dict[str, Any]] = {}
        completed: dict[str, float] = {}
        for row in table.to_pylist():  # sorted by model, then window end
            model = label(row["model"])
            latest[model] = row
            completed[model] = completed.get(model, 0.0) + float(row["count"] or 0.0)
        order = sorted(latest, key=lambda m: (-completed[m], m))
        return [latest[m] for m in order[: self.settings.max_models]]


def label(value: object) -> str:
    """A label value: the text, or :data:`UNKNOWN` for NULL / empty."""
    return str(value) if value not in (None, "") else UNKNOWN


def labels_of(column: pa.ChunkedArray, missing: str = UNKNOWN) -> list[str]:
    """:func:`label` of every value of a string or integer Arrow column, ``missing`` for
    NULL / empty (one vectorised pass instead of a call per value)."""
    text = pc.cast(column, pa.string())
    empty = pc.or_kleene(pc.is_null(text), pc.equal(text, ""))
    return [str(v) for v in pc.if_else(empty, missing, text).to_pylist()]


def capped(items: Iterable[T], limit: int, key: Callable[[T], Any]) -> list[T]:
    """The first ``limit`` of ``items`` in ``key`` order (the documented keep-order)."""
    return sorted(items, key=key)[:limit]


def finite(value: object) -> float | None:
    """``value`` as a float when it is a finite number, else None (never exported)."""
    if value is None:
        return None
    number = float(value)  # type: ignore[arg-type]
    return number if math.isfinite(number) else None


def epoch_s(at: datetime) -> float:
    """Unix seconds of a naive-UTC (or aware) timestamp."""
    return (at if at.tzinfo is not None else at.replace(tzinfo=UTC)).timestamp()


# -- requests ---------------------------------------------------------------------------------


def latency(p: PassInputs) -> list[Metric]:
    """``sits_latency_seconds{model, quantile, window}``: exact quantiles."""
    family = GaugeMetricFamily(
        "sits_latency_seconds",
        f"exact end-to-end request latency quantiles per model over the last "
        f"{p.settings.window_s:g} s (successful requests)",
        labels=("model", "quantile", "window"),
    )
    for row in p.busiest:
        for q in QUANTILES:
            value = finite(row[request_latency.column_of(q)])
            if value is not None:
                family.add_metric((label(row["model"]), f"{q:g}", p.window), value)
    return [family]


def throughput(p: PassInputs) -> list[Metric]:
    """``sits_requests_per_second{model, window}``: completed successful requests / window."""
    window_s = p.settings.window_s
    family = GaugeMetricFamily(
        "sits_requests_per_second",
        f"successful requests completed per second per model, mean over the last {window_s:g} s",
        labels=("model", "window"),
    )
    for row in p.busiest:
        family.add_metric((label(row["model"]), p.window), int(row["count"]) / window_s)
    return [family]


def latency_estimate(p: PassInputs) -> list[Metric]:
    """``sits_latency_estimate_seconds{model, quantile, window}``: the newest histogram
    window's ESTIMATES; ``window`` is that server window's length (whole seconds)."""
    family = GaugeMetricFamily(
        "sits_latency_estimate_seconds",
        "ESTIMATED end-to-end latency quantiles per model from the newest inference-server "
        "histogram window (vLLM / Triton buckets); never mixed with sits_latency_seconds",
        labels=("model", "quantile", "window"),
    )
    for row in p.latest_estimates:
        window = prom_duration(max(round(float(row["window_s"] or 0.0)), 1))
        for q in QUANTILES:
            value = finite(row[request_latency.column_of(q)])
            if value is not None:
                family.add_metric((label(row["model"]), f"{q:g}", window), value)
    return [family]


def latency_slo(p: PassInputs) -> list[Metric]:
    """``sits_latency_slo_seconds{model}``: the P95 SLO setting of every model with exact
    requests or histogram estimates in the window."""
    models = {label(r["model"]) for r in p.busiest}
    models |= {label(r["model"]) for r in p.latest_estimates}
    family = GaugeMetricFamily(
        "sits_latency_slo_seconds",
        "P95 end-to-end latency SLO per model used by the heatmap and the alerts (a setting)",
        labels=("model",),
    )
    for model in sorted(models)[: p.settings.max_models]:
        family.add_metric((model,), p.settings.slo_s(model))
    return [family]


def request_latency_histogram(p: PassInputs) -> list[Metric]:
    """``sits_request_latency_window_seconds{model}``: a gauge histogram of the successful
    requests' latency in the window (cumulative buckets, as Grafana's heatmap reads them)."""
    bounds = p.settings.latency_buckets_s
    table = request_latency.latency_histogram(p.store, p.span, bounds)
    rows = capped(table.to_pylist(), p.settings.max_models, lambda r: (-r["n"], label(r["model"])))
    family = GaugeHistogramMetricFamily(
        "sits_request_latency_window_seconds",
        f"end-to-end latency of the successful requests completed in the last "
        f"{p.settings.window_s:g} s, per model (gauge histogram, fixed buckets)",
        labels=("model",),
    )
    for row in rows:
        buckets = [(repr(float(b)), float(row[f"b{i}"])) for i, b in enumerate(bounds)]
        buckets.append(("+Inf", float(row["n"])))
        family.add_metric((label(row["model"]),), buckets, float(row["total"]))
    return [family]


# -- collectors -------------------------------------------------------------------------------


def collector_drops(p: PassInputs) -> list[Metric]:
    """``sits_collector_drops_total{collector, reason}`` from the ``collector_drops`` rows."""
    rows = collector_health.drop_totals(p.store).to_pylist()
    family = CounterMetricFamily(
        "sits_collector_drops",
        "samples dropped by collectors, by collector and reason (rows kept in the store)",
        labels=("collector", "reason"),
    )
    for row in rows:
        family.add_metric((label(row["collector"]), label(row["reason"])), float(row["n"]))
    return [family]


def collector_last_seen(p: PassInputs) -> list[Metric]:
    """``sits_collector_last_seen_timestamp_seconds{node, source}``: newest row per node in
    each sample table; the stalest ``max_nodes`` nodes are kept (a cap never hides a silent
    node)."""
    rows = collector_health.newest_by_node(p.store).to_pylist()
    stalest: dict[str, datetime] = {}
    for row in rows:
        node = label(row["node"])
        stalest[node] = min(stalest.get(node, row["newest_at"]), row["newest_at"])
    kept = set(capped(stalest, p.settings.max_nodes, lambda n: (stalest[n], n)))
    family = GaugeMetricFamily(
        "sits_collector_last_seen_timestamp_seconds",
        "unix time of the newest stored row per node and source table",
        labels=(NODE, "source"),
    )
    for row in sorted(rows, key=lambda r: (label(r["node"]), r["source"])):
        if label(row["node"]) in kept:
            family.add_metric((label(row["node"]), row["source"]), epoch_s(row["newest_at"]))
    return [family]


# -- controller -------------------------------------------------------------------------------


def controller_decisions(p: PassInputs) -> list[Metric]:
    """``sits_controller_decisions_total{action, outcome}``: stored decision rows."""
    family = CounterMetricFamily(
        "sits_controller_decisions",
        "controller decisions recorded in the store, by action and outcome",
        labels=("action", "outcome"),
    )
    for row in decision_totals(p.store).to_pylist():
        family.add_metric((label(row["action"]), label(row["outcome"])), float(row["n"]))
    return [family]


def controller_errors(p: PassInputs) -> list[Metric]:
    """``sits_controller_errors_total{reason}`` (decisions whose outcome is
    ``failed:<reason>``) and ``sits_controller_last_decision_timestamp_seconds``."""
    errors = CounterMetricFamily(
        "sits_controller_errors",
        "controller decisions that failed (outcome failed:<reason>), by reason",
        labels=("reason",),
    )
    last = GaugeMetricFamily(
        "sits_controller_last_decision_timestamp_seconds",
        "unix time of the latest decision the controller recorded",
    )
    counts: dict[str, float] = dict.fromkeys(CONTROLLER_FAILURES, 0.0)
    for row in failure_totals(p.store).to_pylist():
        counts[label(row["failure"])] = float(row["n"])
    newest = newest_decision_at(p.store)
    for reason in sorted(counts):
        errors.add_metric((reason,), counts[reason])
    families: list[Metric] = [errors]
    if newest is not None:
        last.add_metric((), epoch_s(newest))
        families.append(last)
    return families


def family_names(families: Sequence[Metric]) -> list[str]:
    """Names of ``families`` (for describe and tests)."""
    return [f.name for f in families]
