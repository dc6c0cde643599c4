"""The table-driven serving-engine collector: per-model windows of throughput and ESTIMATED
latency quantiles from any engine of :data:`.engines.ENGINES` that exports histograms.

vLLM, SGLang, TensorRT-LLM, the Dynamo frontend, the llm-d endpoint picker and OpenTelemetry
GenAI server metrics all serve cumulative latency histograms, a request counter and a few
gauges in the Prometheus text format; only the names, units and model label differ, and
those come from the engine's row of the mapping table. Triton, whose durations are counters
and whose quantiles are summaries, has its own collector (:mod:`.triton`);
:func:`new_collector` picks the right one for an engine name.

The first scrape of a model only primes its state. Each later scrape yields one row per model
from the counter differences: ``completed`` (latency ``_count`` delta, or the request counter
when the histogram is absent), ``throughput_rps``, the exact window mean ``_sum``/``_count``
delta, and P50/P95/P99 estimated from the delta buckets (:mod:`..histogram`), with
``latency_error_bound_s`` the widest bucket they fell in (``inf`` in the +Inf bucket);
``ttft_p95_s`` and ``inter_token_p95_s`` the same way from their histograms. Gauges are read
at the window end (running and waiting summed over the model's series, the KV-cache fraction
averaged). A counter that goes down (restart) re-primes the model: no row, counted as
``counter reset``. All times are seconds and all fractions 0-1 past this module.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import httpx

from sits_observe.collectors import histogram as hist
from sits_observe.collectors.exposition import Sample
from sits_observe.collectors.inference.common import (
    ScrapingCollector,
    estimate_latency,
    histograms_by,
    mean_by,
    p95_of,
    result,
    sum_by,
    window_seconds,
)
from sits_observe.collectors.inference.engines import EngineMetrics, Kind, Source, find
from sits_observe.collectors.inference.triton import TritonCollector
from sits_observe.domain.collect import CollectResult
from sits_observe.domain.times import utc_naive
from sits_observe.errors import ConfigError

#: table keys read as histograms, in the order the window keeps them
HISTOGRAMS = ("latency_s", "ttft_p95_s", "inter_token_p95_s")
#: table keys read as gauges at the window end (they are also the row's column names)
GAUGES = ("requests_running", "requests_waiting", "kv_cache_usage_ratio")


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One model's cumulative state at one scrape."""

    at: datetime
    histograms: tuple[hist.Histogram | None, ...]
    completed_total: float | None


class EngineCollector(ScrapingCollector):
    """Scrapes one engine's ``/metrics`` URL; see the module docstring for the window rules.

    ``engine`` is a name of :data:`.engines.ENGINES` (its ``name`` stamps the rows' ``server``
    column) or a mapping row of one's own.
    """

    def __init__(
        self,
        url: str,
        engine: str | EngineMetrics,
        *,
        node: str | None = None,
        namespace: str | None = None,
        pod: str | None = None,
        client: httpx.Client | None = None,
    ) -> None:
        metrics = find(engine) if isinstance(engine, str) else engine
        latency = metrics.get("latency_s")
        if latency is not None and latency.kind is not Kind.histogram:
            raise ConfigError(
                f"{metrics.engine}: its latency is a {latency.kind}, not a histogram; "
                "use new_collector(), which picks that engine's own collector"
            )
        super().__init__(url, node=node, namespace=namespace, pod=pod, client=client)
        self.metrics = metrics
        self.name = metrics.engine
        self._state: dict[str, Snapshot] = {}

    def collect_text(self, text: str, now: datetime) -> CollectResult:
        """One exposition body read at ``now`` -> a window row per primed model."""
        now = utc_naive(now)
        dropped: Counter[str] = Counter()
        samples = self._parse(text, dropped)
        snapshots = self._snapshots(samples, now, dropped)
        gauges = {column: self._gauge(samples, column, dropped) for column in GAUGES}
        rows: list[dict[str, Any]] = []
        for model, current in sorted(snapshots.items()):
            previous = self._state.get(model)
            self._state[model] = current
            if previous is None:
                continue
            row = self._window(model, previous, current, dropped)
            if row is None:
                continue
            row.update({column: values.get(model) for column, values in gauges.items()})
            rows.append(row)
        for gone in set(self._state) - set(snapshots):
            del self._state[gone]
        return result(rows, dropped)

    def _per_model(
        self, samples: list[Sample], source: Source | None, dropped: Counter[str]
    ) -> dict[str, Any]:
        """model -> value of ``source``, the newest family present per model winning."""
        out: dict[str, Any] = {}
        if source is None:
            return out
        label = self.metrics.model_label
        for family in reversed(source.families):
            if source.kind is Kind.histogram:
                out.update(histograms_by(samples, family, label, dropped, scale=source.scale))
            elif source.merge == "mean":
                out.update(mean_by(samples, family, label, dropped, scale=source.scale))
            else:
                out.update(sum_by(samples, family, label, dropped, scale=source.scale))
        return out

    def _gauge(self, samples: list[Sample], column: str, dropped: Counter[str]) -> dict[str, Any]:
        return self._per_model(samples, self.metrics.get(column), dropped)

    def _snapshots(
        self, samples: list[Sample], now: datetime, dropped: Counter[str]
    ) -> dict[str, Snapshot]:
        histograms = [self._per_model(samples, self.metrics.get(k), dropped) for k in HISTOGRAMS]
        completed = self._per_model(samples, self.metrics.get("completed"), dropped)
        models = set(histograms[0]) | set(completed)
        return {
            model: Snapshot(
                at=now,
                histograms=tuple(h.get(model) for h in histograms),
                completed_total=completed.get(model),
            )
            for model in models
        }

    def _window(
        self,
        model: str,
        previous: Snapshot,
        current: Snapshot,
        dropped: Counter[str],
    ) -> dict[str, Any] | None:
        window_s = window_seconds(previous.at, current.at)
        if window_s <= 0:
            dropped["non-increasing scrape time"] += 1
            return None
        before_total, after_total = previous.completed_total, current.completed_total
        if before_total is not None and after_total is not None and after_total < before_total:
            self._count_reset(dropped)
            return None
        deltas: list[hist.Histogram | None] = []
        for before, after in zip(previous.histograms, current.histograms, strict=True):
            if before is None or after is None:
                deltas.append(None)
                continue
            if not hist.same_layout(before, after):
                dropped["bucket layout changed"] += 1
                return None
            if hist.is_reset(before, after):
                self._count_reset(dropped)
                return None
            deltas.append(hist.delta(before, after))
        latency, ttft, itl = deltas
        if latency is not None:
            completed = latency.count
        elif before_total is not None and after_total is not None:
            completed = after_total - before_total
        else:
            dropped["no request counter"] += 1
            return None
        estimates = estimate_latency(latency)
        row = self._identity(current.at, window_s, model)
        row.update(
            completed=completed,
            throughput_rps=completed / window_s,
            latency_mean_s=None if latency is None else hist.mean(latency),
            latency_p50_s=estimates.p50_s,
            latency_p95_s=estimates.p95_s,
            latency_p99_s=estimates.p99_s,
            latency_error_bound_s=estimates.error_bound_s,
            ttft_p95_s=p95_of(ttft),
            inter_token_p95_s=p95_of(itl),
        )
        return row


def new_collector(
    engine: str,
    url: str,
    *,
    node: str | None = None,
    namespace: str | None = None,
    pod: str | None = None,
    client: httpx.Client | None = None,
) -> ScrapingCollector:
    """The collector for ``engine`` (a name of :data:`.engines.ENGINES`) scraping ``url``."""
    metrics = find(engine)
    if metrics.engine == TritonCollector.name:
        return TritonCollector(url, node=node, namespace=namespace, pod=pod, client=client)
    return EngineCollector(url, metrics, node=node, namespace=namespace, pod=pod, client=client)
