"""The derived-signal exporter: analytics results as Prometheus metrics on ``/metrics``.

A prometheus-client custom collector registered on the service's explicit registry. Each
scrape yields the families of the latest *passes*:

- the fast pass (latency, throughput, fragmentation, SMF, quotas, collector and controller
  health ...) runs in the scrape at most once every ``cache_s`` seconds; a scrape within that
  time returns the cached families, so Prometheus replicas or a short scrape interval never
  multiply the work;
- the slow pass (heatmap knee and safe maximum, memory classes, DBSCAN trend clusters, idle
  GPUs) runs in the background (``spawn``, a daemon thread by default) at most once every
  ``slow_cache_s``; a scrape never waits for it and serves its latest result (nothing before
  the first one finished). While a slow signal has nothing to export (no data yet) or
  failed, it is retried at the fast cadence, so a fresh service does not wait
  ``slow_cache_s`` for its first data. At shutdown :meth:`DerivedSignals.cancel` makes a
  running slow pass stop before its next signal; the service waits for it only within its
  shutdown budget (``background_stop_s``).

Every signal (:data:`SIGNALS`) is computed in isolation: a signal that fails (a missing
table, a bug) is logged, counted in ``sits_exporter_errors_total{signal}`` once per pass, and
left out of that pass, never breaking the scrape or the other signals. "No inventory yet" is
not a failure: the signals that need one export nothing. The builders live in
``exporter_signals*.py``; names, labels and cardinality bounds are in docs/metrics.md.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from fastapi import FastAPI
from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeHistogramMetricFamily,
    GaugeMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from sits_observe.store import Store
from sits_observe.surfaces.service import exporter_signals as fast
from sits_observe.surfaces.service import exporter_signals_cluster as cluster
from sits_observe.surfaces.service import exporter_signals_idle as idle
from sits_observe.surfaces.service import exporter_signals_slow as slow
from sits_observe.surfaces.service.exporter_settings import ExporterSettings
from sits_observe.surfaces.service.exporter_signals import QUANTILES, UNKNOWN, PassInputs
from sits_observe.tracing import traced

__all__ = [
    "QUANTILES",
    "SIGNALS",
    "UNKNOWN",
    "DerivedSignals",
    "ExporterSettings",
    "Signal",
    "register_exporter",
    "utc_now",
]

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]
Monotonic = Callable[[], float]
#: Runs a job without blocking the caller (default: a daemon thread); tests run it inline.
Spawn = Callable[[Callable[[], None]], None]
Builder = Callable[[PassInputs], list[Metric]]


@dataclass(frozen=True)
class Signal:
    """One isolated unit of the exporter: its error-label name, builder, families and pass."""

    name: str
    build: Builder
    families: tuple[tuple[str, Callable[[str, str], Metric]], ...]
    slow: bool = False


_G, _C, _H = GaugeMetricFamily, CounterMetricFamily, GaugeHistogramMetricFamily

#: Every signal, in pass order; ``name`` is the bounded ``signal`` label of
#: ``sits_exporter_errors_total``.
REGISTRY: tuple[Signal, ...] = (
    Signal("latency", fast.latency, (("sits_latency_seconds", _G),)),
    Signal("throughput", fast.throughput, (("sits_requests_per_second", _G),)),
    Signal("latency_estimate", fast.latency_estimate, (("sits_latency_estimate_seconds", _G),)),
    Signal("latency_slo", fast.latency_slo, (("sits_latency_slo_seconds", _G),)),
    Signal(
        "latency_histogram",
        fast.request_latency_histogram,
        (("sits_request_latency_window_seconds", _H),),
    ),
    Signal(
        "fragmentation",
        cluster.fragmentation,
        (
            ("sits_fgd_fragmentation_ratio", _G),
            ("sits_fgd_fragmentation_amount_ratio", _G),
            ("sits_fgd_node_fragmentation_gpus", _G),
        ),
    ),
    Signal("interference", cluster.interference, (("sits_interference_score_ratio", _G),)),
    Signal(
        "smf",
        cluster.smf,
        (("sits_smf_ratio", _G), ("sits_smf_node_ratio", _G), ("sits_smf_namespace_ratio", _G)),
    ),
    Signal("framebuffer", cluster.framebuffer, (("sits_gpu_framebuffer_used_ratio", _G),)),
    Signal(
        "gpu_attribution",
        cluster.gpu_attribution,
        (("sits_gpu_framebuffer_used_bytes", _G), ("sits_gpu_shared_pods", _G)),
    ),
    Signal("quotas", cluster.quotas, (("sits_quota", _G),)),
    Signal("pod_start", cluster.pod_start, (("sits_pod_start_seconds", _G),)),
    Signal("collector_drops", fast.collector_drops, (("sits_collector_drops", _C),)),
    Signal(
        "collector_last_seen",
        fast.collector_last_seen,
        (("sits_collector_last_seen_timestamp_seconds", _G),),
    ),
    Signal("controller_decisions", fast.controller_decisions, (("sits_controller_decisions", _C),)),
    Signal(
        "controller_errors",
        fast.controller_errors,
        (("sits_controller_errors", _C), ("sits_controller_last_decision_timestamp_seconds", _G)),
    ),
    Signal(
        "heatmap",
        slow.heatmap,
        (("sits_knee_requests_per_second", _G), ("sits_safe_max_requests_per_second", _G)),
        slow=True,
    ),
    Signal(
        "memory_classes", slow.memory_classes, (("sits_memory_class_workloads", _G),), slow=True
    ),
    Signal("gpu_trends", slow.gpu_trends, (("sits_gpu_trend_cluster", _G),), slow=True),
    Signal(
        "gpu_idle",
        idle.gpu_idle,
        (
            ("sits_gpu_idle_gpus", _G),
            ("sits_gpu_idle_wasted_gpu_hours", _G),
            ("sits_gpu_idle_ratio", _G),
        ),
        slow=True,
    ),
)

#: Every signal name used in ``sits_exporter_errors_total{signal}`` (a bounded label set).
SIGNALS: tuple[str, ...] = tuple(s.name for s in REGISTRY)


@dataclass(frozen=True)
class _Pass:
    """One computation: its families, when (monotonic seconds) it started, and whether a
    signal of it had nothing to export or failed (then it is retried sooner)."""

    families: tuple[Metric, ...]
    at_s: float
    incomplete: bool = False


def _thread(job: Callable[[], None]) -> None:
    threading.Thread(target=job, name="exporter-slow-signals", daemon=True).start()


class DerivedSignals(Collector):
    """The custom collector; ``computations`` / ``slow_computations`` count passes."""

    def __init__(
        self,
        store: Store,
        settings: ExporterSettings | None = None,
        *,
        clock: Clock,
        monotonic: Monotonic = time.monotonic,
        spawn: Spawn = _thread,
        signals: Sequence[Signal] = REGISTRY,
    ) -> None:
        self._store = store
        self._signals = tuple(signals)
        self._settings = settings or ExporterSettings()
        self._clock = clock
        self._monotonic = monotonic
        self._spawn = spawn
        self._lock = threading.Lock()
        self._fast: _Pass | None = None
        self._slow: _Pass | None = None
        self._slow_idle = threading.Event()  # set while no slow pass runs
        self._slow_idle.set()
        self._closed = False
        self._cancel = threading.Event()  # set at shutdown: a running slow pass stops early
        self._errors_lock = threading.Lock()
        self._errors: dict[str, int] = dict.fromkeys((s.name for s in self._signals), 0)
        self._last_error: dict[str, str] = {}
        self.computations = 0
        self.slow_computations = 0

    def describe(self) -> Iterable[Metric]:
        """The family names (no samples), so the registry detects clashes without a pass."""
        families = [kind(name, "") for s in self._signals for name, kind in s.families]
        families.append(CounterMetricFamily("sits_exporter_errors", ""))
        return families

    def collect(self) -> Iterator[Metric]:
        """The cached families (fast ones recomputed when older than ``cache_s``; slow ones
        refreshed in the background) and the error counts."""
        with self._lock:
            now_s = self._monotonic()
            last = self._fast
            if last is None or now_s - last.at_s >= self._settings.cache_s:
                families, incomplete = self._run(slow=False)
                last = _Pass(families, now_s, incomplete)
                self._fast = last
            job = self._slow_job(now_s)
        if job is not None:
            self._launch(job)
        with self._lock:
            slow_pass = self._slow
        yield from last.families
        if slow_pass is not None:
            yield from slow_pass.families
        errors = CounterMetricFamily(
            "sits_exporter_errors",
            "derived-signal computations that failed, by signal",
            labels=("signal",),
        )
        with self._errors_lock:
            for signal, count in self._errors.items():
                errors.add_metric((signal,), count)
        yield errors

    def cancel(self) -> None:
        """Start no more slow passes and make a running one stop before its next signal
        (its partial result is discarded); returns at once."""
        with self._lock:
            self._closed = True
        self._cancel.set()

    def close(self, timeout_s: float = 30.0) -> bool:
        """:meth:`cancel`, then wait up to ``timeout_s`` for a running slow pass (the store
        should not close under it); False when it is still running."""
        self.cancel()
        return self._slow_idle.wait(timeout_s)

    # -- passes ---------------------------------------------------------------------------

    def _slow_job(self, now_s: float) -> Callable[[], None] | None:
        """The slow pass to start now, or None when none is due (caller holds the lock)."""
        if self._closed or not self._slow_idle.is_set():
            return None
        done = self._slow
        if done is not None:
            due_s = self._settings.cache_s if done.incomplete else self._settings.slow_cache_s
            if now_s - done.at_s < min(due_s, self._settings.slow_cache_s):
                return None
        self._slow_idle.clear()

        def job() -> None:
            try:
                families, incomplete = self._run(slow=True)
                finished = _Pass(families, now_s, incomplete)
            except Exception:  # _run isolates each signal; this guards the bookkeeping
                log.exception("slow derived-signal pass failed")
                finished = _Pass((), now_s, True)
            with self._lock:
                if not self._cancel.is_set():
                    self._slow = finished
            self._slow_idle.set()

        return job

    def _launch(self, job: Callable[[], None]) -> None:
        try:
            self._spawn(job)
        except Exception:
            log.exception("cannot start the slow derived-signal pass")
            self._slow_idle.set()

    @traced("sits.analyse", task_type="analyse")
    def _run(self, *, slow: bool) -> tuple[tuple[Metric, ...], bool]:
        """One pass over the signals of one speed: their families, and whether any of them
        failed or had no sample."""
        if slow:
            self.slow_computations += 1
        else:
            self.computations += 1
        inputs = PassInputs(self._store, self._settings, self._clock())
        families: list[Metric] = []
        incomplete = False
        for signal in self._signals:
            if signal.slow is not slow:
                continue
            if slow and self._cancel.is_set():
                log.info("slow derived-signal pass cancelled before %s (shutdown)", signal.name)
                return tuple(families), True
            try:
                built = signal.build(inputs)
            except Exception as exc:
                if slow and self._cancel.is_set():  # the store went away under it
                    return tuple(families), True
                # One signal never breaks the scrape: count it, log it, serve the others.
                self._count_error(signal.name, exc)
                incomplete = True
                continue
            self._last_error.pop(signal.name, None)
            incomplete = incomplete or not any(f.samples for f in built)
            families.extend(built)
        return tuple(families), incomplete

    def _count_error(self, signal: str, exc: Exception) -> None:
        with self._errors_lock:
            self._errors[signal] += 1
        message = f"{type(exc).__name__}: {exc}"
        if self._last_error.get(signal) != message:
            log.warning("derived signal %s not exported: %s", signal, message)
        else:
            log.debug("derived signal %s not exported: %s", signal, message)
        self._last_error[signal] = message


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
    signals: Sequence[Signal] = REGISTRY,
) -> DerivedSignals | None:
    """Register the derived signals (``signals``, every one by default) on ``registry``; the
    collector is kept on ``app.state.exporter`` (None when disabled)."""
    settings = settings or ExporterSettings()
    exporter = (
        DerivedSignals(store, settings, clock=clock, monotonic=monotonic, signals=signals)
        if settings.enabled
        else None
    )
    if exporter is not None:
        registry.register(exporter)
    app.state.exporter = exporter
    return exporter
