"""The derived-signal exporter: analytics results as Prometheus metrics on ``/metrics``.

A prometheus-client custom collector registered on the service's explicit registry. Each
scrape serves the families of the latest complete *passes*:

- the fast pass (latency, throughput, fragmentation, SMF, quotas, collector and controller
  health ...) runs at most once every ``cache_s`` seconds. The first scrape computes it (there
  is nothing older to serve); later, a scrape that finds it older than ``cache_s`` starts the
  next one in the background (``spawn``, a daemon thread by default) and serves the previous
  one, as every scrape does until the new one is complete. So Prometheus replicas or a short
  scrape interval never multiply the work and a scrape never waits for a pass;
- the slow pass (heatmap knee and safe maximum, memory classes, DBSCAN trend clusters, idle
  GPUs) runs in the background too, at most once every ``slow_cache_s``, and is served from
  its first result on. While a slow signal has nothing to export (no data yet) or failed, it
  is retried at the fast cadence, so a fresh service does not wait ``slow_cache_s`` for its
  first data. At shutdown :meth:`DerivedSignals.cancel` starts no new pass and makes a running
  one stop before its next signal; the service waits for it only within its shutdown budget
  (``background_stop_s``).

Passes are incremental (:mod:`.exporter_cache`): a signal whose declared rows
(:mod:`.exporter_reads`) have the same fingerprint as at its last build keeps that build,
and every family is rendered to text once, in the pass that built it; ``/metrics``
(:func:`metrics_text`) joins those texts instead of writing every sample on every scrape.

The slow and cluster builders (``signals_{cluster,slow,idle}.py``) are imported by
the first pass that runs them, not when the service starts: their analytics are imports the
scheduler extender's first answer after a restart would otherwise wait for (docs/extender.md,
cold start).

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
from functools import partial

from fastapi import FastAPI
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from sits_observe.analytics.row_changes import Read
from sits_observe.store import Store
from sits_observe.surfaces.service.exporter.cache import PassFingerprints, SignalCache, render
from sits_observe.surfaces.service.exporter.registry import REGISTRY, SIGNALS, Signal
from sits_observe.surfaces.service.exporter.settings import ExporterSettings
from sits_observe.surfaces.service.exporter.signals.requests import QUANTILES, UNKNOWN, PassInputs
from sits_observe.tracing import traced

__all__ = [
    "QUANTILES",
    "SIGNALS",
    "UNKNOWN",
    "DerivedSignals",
    "ExporterSettings",
    "Signal",
    "metrics_text",
    "register_exporter",
    "utc_now",
]

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]
Monotonic = Callable[[], float]
#: Runs a job without blocking the caller (default: a daemon thread); tests run it inline.
Spawn = Callable[[Callable[[], None]], None]


@dataclass(frozen=True)
class _Pass:
    """One computation: its families and their text, when (monotonic seconds) it started,
    and whether a signal of it had nothing to export or failed (then it is retried sooner)."""

    families: tuple[Metric, ...]
    text: bytes
    at_s: float
    incomplete: bool = False


def _thread(job: Callable[[], None]) -> None:
    threading.Thread(target=job, name="exporter-signals", daemon=True).start()


class DerivedSignals(Collector):
    """The custom collector; ``computations`` / ``slow_computations`` count passes, and
    ``cache`` the signals each pass reused or rebuilt."""

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
        self._fast_idle = threading.Event()  # set while no background fast pass runs
        self._fast_idle.set()
        self._slow_idle = threading.Event()  # set while no slow pass runs
        self._slow_idle.set()
        self._closed = False
        self._cancel = threading.Event()  # set at shutdown: a running pass stops early
        self._errors_lock = threading.Lock()
        self._errors: dict[str, int] = dict.fromkeys((s.name for s in self._signals), 0)
        self._last_error: dict[str, str] = {}
        self.cache = SignalCache()
        self.computations = 0
        self.slow_computations = 0

    def describe(self) -> Iterable[Metric]:
        """The family names (no samples), so the registry detects clashes without a pass."""
        families = [kind(name, "") for s in self._signals for name, kind in s.families]
        families.append(CounterMetricFamily("sits_exporter_errors", ""))
        return families

    def collect(self) -> Iterator[Metric]:
        """The latest passes' families and the error counts (see :meth:`passes`)."""
        fast_pass, slow_pass = self.passes()
        yield from fast_pass.families
        if slow_pass is not None:
            yield from slow_pass.families
        yield self._errors_family()

    def exposition(self) -> bytes:
        """The Prometheus text of :meth:`collect`'s families, from the text each pass rendered
        once (only the error counts are written per call)."""
        fast_pass, slow_pass = self.passes()
        slow_text = b"" if slow_pass is None else slow_pass.text
        return fast_pass.text + slow_text + render([self._errors_family()])

    def passes(self) -> tuple[_Pass, _Pass | None]:
        """The latest complete fast and slow passes. The first call computes the fast pass
        (there is nothing older to serve); later, a fast pass older than ``cache_s`` and a
        slow one older than its due time are recomputed in the background (``spawn``) while
        this and every call until they finish serve the previous ones."""
        jobs: list[tuple[Callable[[], None], threading.Event]] = []
        with self._lock:
            now_s = self._monotonic()
            if self._fast is None:
                self._fast = self._pass(slow=False, at_s=now_s, background=False)
            elif (fast_job := self._fast_job(now_s)) is not None:
                jobs.append((fast_job, self._fast_idle))
            if (slow_job := self._slow_job(now_s)) is not None:
                jobs.append((slow_job, self._slow_idle))
        for job, idle_event in jobs:
            self._launch(job, idle_event)
        with self._lock:
            return self._fast, self._slow

    def cancel(self) -> None:
        """Start no more background passes and make a running one stop before its next
        signal (its partial result is discarded); returns at once."""
        with self._lock:
            self._closed = True
        self._cancel.set()

    def close(self, timeout_s: float = 30.0) -> bool:
        """:meth:`cancel`, then wait up to ``timeout_s`` for the running passes (the store
        should not close under them); False when one is still running."""
        self.cancel()
        deadline = time.monotonic()  # real waits, whatever clock the cache ages run on
        fast_done = self._fast_idle.wait(timeout_s)
        slow_done = self._slow_idle.wait(max(0.0, deadline + timeout_s - time.monotonic()))
        return fast_done and slow_done

    # -- passes ---------------------------------------------------------------------------

    def _fast_job(self, now_s: float) -> Callable[[], None] | None:
        """The background fast pass to start now, or None (caller holds the lock)."""
        done = self._fast
        if self._closed or not self._fast_idle.is_set() or done is None:
            return None
        if now_s - done.at_s < self._settings.cache_s:
            return None
        self._fast_idle.clear()
        return self._job(slow=False, at_s=now_s)

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
        return self._job(slow=True, at_s=now_s)

    def _job(self, *, slow: bool, at_s: float) -> Callable[[], None]:
        idle = self._slow_idle if slow else self._fast_idle

        def job() -> None:
            finished: _Pass | None
            try:
                finished = self._pass(slow=slow, at_s=at_s, background=True)
            except Exception:  # _run isolates each signal; this guards the bookkeeping
                log.exception("%s derived-signal pass failed", "slow" if slow else "fast")
                finished = _Pass((), b"", at_s, True) if slow else None
            with self._lock:
                if finished is not None and not self._cancel.is_set():
                    if slow:
                        self._slow = finished
                    else:
                        self._fast = finished
            idle.set()

        return job

    def _launch(self, job: Callable[[], None], idle: threading.Event) -> None:
        try:
            self._spawn(job)
        except Exception:
            log.exception("cannot start a derived-signal pass")
            idle.set()

    def _pass(self, *, slow: bool, at_s: float, background: bool) -> _Pass:
        families, texts, incomplete = self._run(slow=slow, background=background)
        return _Pass(families, b"".join(texts), at_s, incomplete)

    @traced("sits.analyse", task_type="analyse")
    def _run(
        self, *, slow: bool, background: bool
    ) -> tuple[tuple[Metric, ...], tuple[bytes, ...], bool]:
        """One pass over the signals of one speed: their families and texts, and whether any
        of them failed or had no sample. A signal whose declared rows did not change since
        its last build keeps that build (:mod:`.exporter_cache`)."""
        if slow:
            self.slow_computations += 1
        else:
            self.computations += 1
        inputs = PassInputs(self._store, self._settings, self._clock())
        signals = [signal for signal in self._signals if signal.slow is slow]
        # Each signal's spans are listed once a pass (some read the snapshot times to list
        # them); one whose reads() raised is absent here and counted in the loop below.
        declared: dict[str, tuple[Read, ...] | None] = {}
        for signal in signals:
            if signal.reads is not None:
                try:
                    declared[signal.name] = signal.reads(inputs)
                except Exception:
                    log.debug("listing the rows of %s failed", signal.name, exc_info=True)
        prints = PassFingerprints(self._store)
        # Every span of the pass read together: one scan per table.
        prints.prefetch([span for spans in declared.values() if spans for span in spans])
        families: list[Metric] = []
        texts: list[bytes] = []
        incomplete = False
        for signal in signals:
            if background and self._cancel.is_set():
                log.info("derived-signal pass cancelled before %s (shutdown)", signal.name)
                return tuple(families), tuple(texts), True
            try:
                if signal.reads is None:
                    spans = None
                elif signal.name in declared:
                    spans = declared[signal.name]
                else:  # its reads() raised above: raises again, counted below
                    spans = signal.reads(inputs)
                seen = None if spans is None else prints.of(spans)
                built = self.cache.get(signal.name, seen) or self.cache.build(
                    signal.name, seen, partial(signal.build, inputs)
                )
            except Exception as exc:
                if background and self._cancel.is_set():  # the store went away under it
                    return tuple(families), tuple(texts), True
                # One signal never breaks the scrape: count it, log it, serve the others.
                self._count_error(signal.name, exc)
                incomplete = True
                continue
            self._last_error.pop(signal.name, None)
            incomplete = incomplete or not any(f.samples for f in built.families)
            families.extend(built.families)
            texts.extend(built.texts)
        return tuple(families), tuple(texts), incomplete

    def _errors_family(self) -> CounterMetricFamily:
        errors = CounterMetricFamily(
            "sits_exporter_errors",
            "derived-signal computations that failed, by signal",
            labels=("signal",),
        )
        with self._errors_lock:
            for signal, count in self._errors.items():
                errors.add_metric((signal,), count)
        return errors

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


class _Without:
    """A registry's families except some, for ``generate_latest``."""

    def __init__(self, registry: CollectorRegistry, names: frozenset[str]) -> None:
        self._registry = registry
        self._names = names

    def collect(self) -> Iterator[Metric]:
        for family in self._registry.collect():
            if family.name not in self._names:
                yield family


def metrics_text(registry: CollectorRegistry, exporter: DerivedSignals | None) -> bytes:
    """``/metrics``: the Prometheus text of ``registry``, the exporter's families (when it
    is registered there) taken from the text its passes rendered instead of written again."""
    if exporter is None:
        return generate_latest(registry)
    own = frozenset(family.name for family in exporter.describe())
    return generate_latest(_Without(registry, own)) + exporter.exposition()
