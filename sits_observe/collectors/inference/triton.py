"""Triton Inference Server collector: per-model windows of throughput and mean latency.

Triton serves Prometheus metrics (default ``:8002/metrics``) with labels ``model`` and
``version``; versions are summed into one row per model. Names and meanings are those of
Triton's ``docs/user_guide/metrics.md``; the ones that fill ``server_windows`` columns come
from Triton's row of the mapping table (:data:`.engines.ENGINES`):

- counters ``nv_inference_request_success`` / ``_failure`` (requests, a batch counts once),
  ``nv_inference_count`` (inferences: a batch of n counts n), ``nv_inference_exec_count``
  (batch executions);
- cumulative durations in MICROSECONDS ``nv_inference_request_duration_us`` (end to end),
  ``nv_inference_queue_duration_us`` and ``nv_inference_compute_infer_duration_us``;
- optional gauge ``nv_inference_pending_request_count`` (queued requests, newer releases);
- optional summaries (``--metrics-config summary_latencies=true``)
  ``nv_inference_request_summary_us{quantile="0.5"|"0.9"|"0.95"|"0.99"|"0.999"}``.

Per window: ``completed`` = success delta, ``throughput_rps`` = completed / window,
``latency_mean_s`` = request-duration delta / success delta / 1e6. Counters cannot give
quantiles, so P50/P95/P99 stay NULL, unless the request summary is exported: then they are
Triton's own summary quantiles (computed by Triton over its sliding time window, not over our
window; their error is a rank error, not a time, so ``latency_error_bound_s`` stays NULL).
A counter that goes down re-primes the model (no row, ``counter reset``). The columns the
``server_windows`` table has no room for (failures, queue and compute means, batch size) are
kept per window in :attr:`TritonCollector.last_details`.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import httpx

from sits_observe.collectors.exposition import Sample
from sits_observe.collectors.inference.common import (
    ScrapingCollector,
    result,
    sum_by,
    window_seconds,
)
from sits_observe.collectors.inference.engines import ENGINES
from sits_observe.domain.collect import CollectResult
from sits_observe.domain.times import utc_naive

_TABLE = ENGINES["triton"]
MODEL_LABEL = _TABLE.model_label
#: the names the mapping table gives for Triton's server_windows columns
SUCCESS = _TABLE.columns["completed"].families[0]
REQUEST_US = _TABLE.columns["latency_s"].families[0]
PENDING = _TABLE.columns["requests_waiting"].families[0]
SUMMARY = _TABLE.columns["latency_p50_s"].families[0]
#: the counters only TritonDetail keeps (server_windows has no column for them)
FAILURE = "nv_inference_request_failure"
INFERENCES = "nv_inference_count"
EXECUTIONS = "nv_inference_exec_count"
QUEUE_US = "nv_inference_queue_duration_us"
COMPUTE_US = "nv_inference_compute_infer_duration_us"
COUNTERS = (SUCCESS, FAILURE, INFERENCES, EXECUTIONS, REQUEST_US, QUEUE_US, COMPUTE_US)
US_PER_S = 1e6
#: server_windows column -> summary quantile it takes
SUMMARY_COLUMNS = {"latency_p50_s": 0.5, "latency_p95_s": 0.95, "latency_p99_s": 0.99}


@dataclass(frozen=True, slots=True)
class TritonDetail:
    """What one Triton window measured beyond the ``server_windows`` columns."""

    model: str
    window_s: float
    failed: float
    inferences: float
    executions: float
    queue_mean_s: float | None
    compute_mean_s: float | None

    @property
    def mean_batch_size(self) -> float | None:
        """Inferences per batch execution (None without executions)."""
        return self.inferences / self.executions if self.executions > 0 else None


@dataclass(frozen=True, slots=True)
class TritonSnapshot:
    """One model's cumulative counters at one scrape."""

    at: datetime
    counters: dict[str, float]


class TritonCollector(ScrapingCollector):
    """Scrapes one Triton ``/metrics`` URL; see the module docstring for the window rules."""

    name = "triton"

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
        self._state: dict[str, TritonSnapshot] = {}
        #: the details of the windows the last collect produced
        self.last_details: list[TritonDetail] = []

    def collect_text(self, text: str, now: datetime) -> CollectResult:
        """One exposition body read at ``now`` -> a window row per primed model."""
        now = utc_naive(now)
        dropped: Counter[str] = Counter()
        samples = self._parse(text, dropped)
        per_counter = {name: sum_by(samples, name, MODEL_LABEL, dropped) for name in COUNTERS}
        pending = sum_by(samples, PENDING, MODEL_LABEL, dropped)
        summaries = _summary_quantiles(samples, dropped)
        snapshots = {
            model: TritonSnapshot(
                now, {n: per_counter[n][model] for n in COUNTERS if model in per_counter[n]}
            )
            for model in per_counter[SUCCESS]
        }
        rows: list[dict[str, Any]] = []
        details: list[TritonDetail] = []
        for model, current in sorted(snapshots.items()):
            previous = self._state.get(model)
            self._state[model] = current
            if previous is None:
                continue
            window = self._window(model, previous, current, dropped)
            if window is None:
                continue
            row, detail = window
            row["requests_waiting"] = pending.get(model)
            row.update(summaries.get(model, {}))
            rows.append(row)
            details.append(detail)
        for gone in set(self._state) - set(snapshots):
            del self._state[gone]
        self.last_details = details
        return result(rows, dropped)

    def _window(
        self,
        model: str,
        previous: TritonSnapshot,
        current: TritonSnapshot,
        dropped: Counter[str],
    ) -> tuple[dict[str, Any], TritonDetail] | None:
        window_s = window_seconds(previous.at, current.at)
        if window_s <= 0:
            dropped["non-increasing scrape time"] += 1
            return None
        deltas: dict[str, float] = {}
        for name, after in current.counters.items():
            before = previous.counters.get(name)
            if before is None:
                continue
            if after < before:
                self._count_reset(dropped)
                return None
            deltas[name] = after - before
        completed = deltas[SUCCESS]

        def mean_s(counter: str, per: float) -> float | None:
            if counter not in deltas or per <= 0:
                return None
            return deltas[counter] / per / US_PER_S

        row = self._identity(current.at, window_s, model)
        row.update(
            completed=completed,
            throughput_rps=completed / window_s,
            latency_mean_s=mean_s(REQUEST_US, completed),
        )
        detail = TritonDetail(
            model=model,
            window_s=window_s,
            failed=deltas.get(FAILURE, 0.0),
            inferences=deltas.get(INFERENCES, 0.0),
            executions=deltas.get(EXECUTIONS, 0.0),
            queue_mean_s=mean_s(QUEUE_US, completed),
            compute_mean_s=mean_s(COMPUTE_US, completed),
        )
        return row, detail


def _summary_quantiles(samples: list[Sample], dropped: Counter[str]) -> dict[str, dict[str, Any]]:
    """model -> {latency_pXX_s: seconds} from the request summary, when Triton exports it.

    A summary's quantiles cannot be merged across versions, so a model with several versions
    exporting the summary gets none (counted). A NaN quantile (no request in Triton's window)
    becomes NULL and is counted.
    """
    per_version: dict[str, dict[str, dict[float, float]]] = defaultdict(dict)
    for sample in samples:
        if sample.name != SUMMARY:
            continue
        model, q_text = sample.label(MODEL_LABEL), sample.label("quantile")
        if model is None or q_text is None:
            dropped[f"{SUMMARY}: no model or quantile label"] += 1
            continue
        try:
            q = float(q_text)
        except ValueError:
            dropped[f"{SUMMARY}: malformed quantile label"] += 1
            continue
        version = sample.label("version") or ""
        per_version[model].setdefault(version, {})[q] = sample.value
    out: dict[str, dict[str, Any]] = {}
    for model, versions in per_version.items():
        if len(versions) != 1:
            dropped[f"{SUMMARY}: several versions, quantiles left NULL"] += 1
            continue
        (quantiles,) = versions.values()
        columns: dict[str, Any] = {}
        for column, q in SUMMARY_COLUMNS.items():
            value = next((v for k, v in quantiles.items() if math.isclose(k, q)), None)
            if value is None:
                continue
            if not math.isfinite(value):
                dropped[f"{SUMMARY}: non-finite quantile"] += 1
                continue
            columns[column] = value / US_PER_S
        out[model] = columns
    return out
