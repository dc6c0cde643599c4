"""vLLM collector: per-model windows of throughput and ESTIMATED latency quantiles.

vLLM serves Prometheus metrics at ``/metrics`` with the label ``model_name`` (plus ``engine``
with data parallelism, summed over here). Metric names and bucket bounds are those of
``vllm/v1/metrics/loggers.py`` (vllm-project/vllm, e.g. commit 005a810b):

- histograms ``vllm:e2e_request_latency_seconds``, ``vllm:time_to_first_token_seconds`` and
  ``vllm:inter_token_latency_seconds`` (older releases: ``vllm:time_per_output_token_seconds``,
  used when the newer name is absent);
- counter ``vllm:request_success_total`` (label ``finished_reason``, summed);
- gauges ``vllm:num_requests_running``, ``vllm:num_requests_waiting`` (summed over engines)
  and ``vllm:kv_cache_usage_perc`` (older: ``vllm:gpu_cache_usage_perc``; averaged over
  engines). Despite the name the KV gauge is a 0-1 fraction: vLLM documents it as
  "KV-cache usage. 1 means 100 percent usage." and sets it from ``SchedulerStats.kv_cache_usage``.

The first scrape of a model only primes its state. Each later scrape yields one row per model
from the counter differences: ``completed`` (e2e ``_count`` delta, or the success counter when
the histogram is absent), ``throughput_rps``, the exact window mean ``_sum``/``_count`` delta,
and P50/P95/P99 estimated from the delta buckets (:mod:`.histogram`), with
``latency_error_bound_s`` the widest bucket they fell in (``inf`` in the +Inf bucket).
A counter that goes down (restart) re-primes the model: no row, counted as ``counter reset``.
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
from sits_observe.domain.collect import CollectResult
from sits_observe.domain.times import utc_naive

MODEL_LABEL = "model_name"
E2E = "vllm:e2e_request_latency_seconds"
TTFT = "vllm:time_to_first_token_seconds"
ITL = "vllm:inter_token_latency_seconds"
ITL_OLD = "vllm:time_per_output_token_seconds"
SUCCESS = "vllm:request_success_total"
RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
KV_USAGE = "vllm:kv_cache_usage_perc"
KV_USAGE_OLD = "vllm:gpu_cache_usage_perc"


@dataclass(frozen=True, slots=True)
class VllmSnapshot:
    """One model's cumulative state at one scrape."""

    at: datetime
    e2e: hist.Histogram | None
    ttft: hist.Histogram | None
    itl: hist.Histogram | None
    success_total: float | None


class VllmCollector(ScrapingCollector):
    """Scrapes one vLLM ``/metrics`` URL; see the module docstring for the window rules."""

    name = "vllm"

    def __init__(
        self,
        url: str,
        *,
        node: str | None = None,
        namespace: str | None = None,
        pod: str | None = None,
        client: httpx.Client | None = None,
    ) -> None:
        super().__init__(url, node=node, namespace=namespace, pod=pod, client=client)
        self._state: dict[str, VllmSnapshot] = {}

    def collect_text(self, text: str, now: datetime) -> CollectResult:
        """One exposition body read at ``now`` -> a window row per primed model."""
        now = utc_naive(now)
        dropped: Counter[str] = Counter()
        samples = self._parse(text, dropped)
        snapshots = _snapshots(samples, now, dropped)
        running = sum_by(samples, RUNNING, MODEL_LABEL, dropped)
        waiting = sum_by(samples, WAITING, MODEL_LABEL, dropped)
        kv = mean_by(samples, KV_USAGE, MODEL_LABEL, dropped)
        if not kv:
            kv = mean_by(samples, KV_USAGE_OLD, MODEL_LABEL, dropped)
        rows: list[dict[str, Any]] = []
        for model, current in sorted(snapshots.items()):
            previous = self._state.get(model)
            self._state[model] = current
            if previous is None:
                continue
            row = self._window(model, previous, current, dropped)
            if row is None:
                continue
            row["requests_running"] = running.get(model)
            row["requests_waiting"] = waiting.get(model)
            row["kv_cache_usage_ratio"] = kv.get(model)
            rows.append(row)
        for gone in set(self._state) - set(snapshots):
            del self._state[gone]
        return result(rows, dropped)

    def _window(
        self,
        model: str,
        previous: VllmSnapshot,
        current: VllmSnapshot,
        dropped: Counter[str],
    ) -> dict[str, Any] | None:
        window_s = window_seconds(previous.at, current.at)
        if window_s <= 0:
            dropped["non-increasing scrape time"] += 1
            return None
        before_total, after_total = previous.success_total, current.success_total
        if before_total is not None and after_total is not None and after_total < before_total:
            self._count_reset(dropped)
            return None
        pairs = [(previous.e2e, current.e2e), (previous.ttft, current.ttft)]
        pairs.append((previous.itl, current.itl))
        deltas: list[hist.Histogram | None] = []
        for before, after in pairs:
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
        e2e, ttft, itl = deltas
        if e2e is not None:
            completed = e2e.count
        elif before_total is not None and after_total is not None:
            completed = after_total - before_total
        else:
            dropped["no request counter"] += 1
            return None
        latency = estimate_latency(e2e)
        row = self._identity(current.at, window_s, model)
        row.update(
            completed=completed,
            throughput_rps=completed / window_s,
            latency_mean_s=None if e2e is None else hist.mean(e2e),
            latency_p50_s=latency.p50_s,
            latency_p95_s=latency.p95_s,
            latency_p99_s=latency.p99_s,
            latency_error_bound_s=latency.error_bound_s,
            ttft_p95_s=p95_of(ttft),
            inter_token_p95_s=p95_of(itl),
        )
        return row


def _snapshots(
    samples: list[Sample], now: datetime, dropped: Counter[str]
) -> dict[str, VllmSnapshot]:
    e2e = histograms_by(samples, E2E, MODEL_LABEL, dropped)
    ttft = histograms_by(samples, TTFT, MODEL_LABEL, dropped)
    itl = histograms_by(samples, ITL, MODEL_LABEL, dropped)
    itl_old = histograms_by(samples, ITL_OLD, MODEL_LABEL, dropped)
    success = sum_by(samples, SUCCESS, MODEL_LABEL, dropped)
    models = set(e2e) | set(success)
    return {
        model: VllmSnapshot(
            at=now,
            e2e=e2e.get(model),
            ttft=ttft.get(model),
            itl=itl.get(model, itl_old.get(model)),
            success_total=success.get(model),
        )
        for model in models
    }
