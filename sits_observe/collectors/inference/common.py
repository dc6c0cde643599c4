"""Shared parts of the inference-server collectors (:mod:`.engine`, :mod:`.triton`).

All servers expose cumulative counters and histograms in the Prometheus text format. The
collectors keep the previous scrape per model and turn the difference into one
``server_windows`` row per model and window. This module holds what all need: grouping
exposition samples per model (summing over every other label, e.g. vLLM's ``engine`` or
Triton's ``version``; converting units to seconds), the scrape/lifecycle base class, and
the row builder.

Invariants: nothing here raises for bad exposition input; a non-finite or unlabelled sample is
dropped and counted under a reason. Only an unreachable endpoint raises
:class:`~sits_observe.errors.CollectorError` (from :func:`~.http.fetch_text`).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import httpx
import pyarrow as pa

from sits_observe.collectors import histogram as hist
from sits_observe.collectors.exposition import Sample, parse_exposition
from sits_observe.collectors.http import fetch_text, new_client
from sits_observe.domain.collect import CollectResult
from sits_observe.domain.histogram_bounds import parse_le
from sits_observe.domain.tables import SERVER_WINDOWS


def values_by(
    samples: Iterable[Sample],
    name: str,
    key_label: str,
    dropped: Counter[str],
    *,
    scale: float = 1.0,
) -> dict[str, list[float]]:
    """The values of metric ``name`` grouped by the value of ``key_label``, times ``scale``.

    Samples without the label, or with a non-finite value, are dropped and counted in
    ``dropped``; a key whose every sample was dropped is absent from the result.
    """
    values: dict[str, list[float]] = defaultdict(list)
    for sample in samples:
        if sample.name != name:
            continue
        key = sample.label(key_label)
        if key is None:
            dropped[f"{name}: no {key_label} label"] += 1
            continue
        if not math.isfinite(sample.value):
            dropped[f"{name}: non-finite value"] += 1
            continue
        values[key].append(sample.value * scale)
    return values


def sum_by(
    samples: Iterable[Sample],
    name: str,
    key_label: str,
    dropped: Counter[str],
    *,
    scale: float = 1.0,
) -> dict[str, float]:
    """Sum of the values of metric ``name`` per value of ``key_label`` (see :func:`values_by`)."""
    by_key = values_by(samples, name, key_label, dropped, scale=scale)
    return {k: sum(v) for k, v in by_key.items()}


def mean_by(
    samples: Iterable[Sample],
    name: str,
    key_label: str,
    dropped: Counter[str],
    *,
    scale: float = 1.0,
) -> dict[str, float]:
    """Mean of the values of gauge ``name`` per value of ``key_label`` (see :func:`values_by`)."""
    by_key = values_by(samples, name, key_label, dropped, scale=scale)
    return {k: sum(v) / len(v) for k, v in by_key.items()}


def histograms_by(
    samples: Iterable[Sample],
    base: str,
    key_label: str,
    dropped: Counter[str],
    *,
    scale: float = 1.0,
) -> dict[str, hist.Histogram]:
    """The histogram ``base`` per value of ``key_label``, summed over every other label.

    Reads ``<base>_bucket{le=...}``, ``<base>_sum`` and ``<base>_count``. A key with any
    non-finite part, a bucket without a readable ``le``, or no ``_count`` is dropped whole and
    counted: a partial histogram would give wrong quantiles. ``scale`` converts the observed
    unit (bucket bounds and the sum) to seconds, e.g. 1e-3 for a histogram in milliseconds.
    """
    bucket_name, sum_name, count_name = f"{base}_bucket", f"{base}_sum", f"{base}_count"
    buckets: dict[str, dict[float, float]] = defaultdict(dict)
    sums: dict[str, float] = defaultdict(float)
    counts: dict[str, float] = defaultdict(float)
    bad: set[str] = set()
    for sample in samples:
        if sample.name not in (bucket_name, sum_name, count_name):
            continue
        key = sample.label(key_label)
        if key is None:
            dropped[f"{base}: no {key_label} label"] += 1
            continue
        if not math.isfinite(sample.value):
            bad.add(key)
            continue
        if sample.name == bucket_name:
            le = parse_le(sample.label("le"))
            if le is None:
                bad.add(key)
                continue
            per_le = buckets[key]
            le *= scale
            per_le[le] = per_le.get(le, 0.0) + sample.value
        elif sample.name == sum_name:
            sums[key] += sample.value * scale
        else:
            counts[key] += sample.value
    result: dict[str, hist.Histogram] = {}
    for key in set(buckets) | set(counts) | bad:
        if key in bad:
            dropped[f"{base}: non-finite or malformed part"] += 1
        elif key not in counts or key not in buckets:
            dropped[f"{base}: incomplete histogram"] += 1
        else:
            result[key] = hist.build(buckets[key].items(), sums[key], counts[key])
    return result


@dataclass(frozen=True, slots=True)
class LatencyEstimates:
    """Bucket estimates of one window's latency distribution, in seconds."""

    p50_s: float | None = None
    p95_s: float | None = None
    p99_s: float | None = None
    error_bound_s: float | None = None


def estimate_latency(window: hist.Histogram | None) -> LatencyEstimates:
    """P50/P95/P99 of a window histogram and the largest error bound among them.

    The bound is the width of the widest bucket any of the three fell in, ``inf`` when one
    fell in the ``+Inf`` bucket (that estimate is then the highest finite bound, a lower limit).
    """
    if window is None:
        return LatencyEstimates()
    estimates = [hist.quantile(q, window) for q in (0.5, 0.95, 0.99)]
    if any(e is None for e in estimates):
        return LatencyEstimates()
    p50, p95, p99 = (e for e in estimates if e is not None)
    bound = max(p50.error_bound, p95.error_bound, p99.error_bound)
    return LatencyEstimates(p50.value, p95.value, p99.value, bound)


def p95_of(window: hist.Histogram | None) -> float | None:
    """The P95 estimate of a window histogram (None when it is absent or empty)."""
    if window is None:
        return None
    estimate = hist.quantile(0.95, window)
    return None if estimate is None else estimate.value


def window_table(rows: list[dict[str, Any]]) -> pa.Table:
    """``server_windows`` rows as an Arrow table with exactly the domain schema."""
    schema = SERVER_WINDOWS.schema
    return pa.Table.from_pylist(
        [{name: row.get(name) for name in schema.names} for row in rows], schema=schema
    )


def finite_or_none(value: float | None) -> float | None:
    """``value`` when it is an ordinary number, else None."""
    return value if value is not None and math.isfinite(value) else None


class ScrapingCollector:
    """Base of the HTTP-scraping inference collectors: URL, identity, client lifecycle.

    Subclasses implement :meth:`collect_text`, which turns one exposition body into a result
    and updates the per-model state; :meth:`collect` fetches the body and calls it. A client
    passed in is borrowed (the caller closes it); without one the collector opens its own and
    :meth:`close` closes it.
    """

    name = "inference"

    def __init__(
        self,
        url: str,
        *,
        node: str | None = None,
        namespace: str | None = None,
        pod: str | None = None,
        client: httpx.Client | None = None,
    ) -> None:
        self.url = url
        self.node = node
        self.namespace = namespace
        self.pod = pod
        self._own_client = client is None
        self._client = client if client is not None else new_client()
        #: scrapes in which a model's counters went down (server restart), total
        self.resets_total = 0

    def collect(self, now: datetime) -> CollectResult:
        """Scrape the endpoint once; raises :class:`CollectorError` when it is unreachable."""
        return self.collect_text(fetch_text(self._client, self.url), now)

    def collect_text(self, text: str, now: datetime) -> CollectResult:
        """Turn one exposition body read at ``now`` into window rows (subclasses)."""
        raise NotImplementedError

    def close(self) -> None:
        """Close the HTTP client when this collector opened it."""
        if self._own_client:
            self._client.close()

    def __enter__(self) -> ScrapingCollector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _identity(self, now: datetime, window_s: float, model: str) -> dict[str, Any]:
        return {
            "ts": now,
            "window_s": window_s,
            "node": self.node,
            "namespace": self.namespace,
            "pod": self.pod,
            "server": self.name,
            "model": model,
            "estimate": True,
        }

    def _count_reset(self, dropped: Counter[str]) -> None:
        """A model's counters went down (server restart): its window restarts."""
        dropped["counter reset"] += 1
        self.resets_total += 1

    @staticmethod
    def _parse(text: str, dropped: Counter[str]) -> list[Sample]:
        exposition = parse_exposition(text)
        for reason, n in exposition.dropped.items():
            dropped[f"exposition: {reason}"] += n
        return exposition.samples


def window_seconds(previous_at: datetime, now: datetime) -> float:
    """Seconds between two scrape times (both naive UTC)."""
    return (now - previous_at).total_seconds()


def result(rows: list[dict[str, Any]], dropped: Mapping[str, int]) -> CollectResult:
    """A :class:`CollectResult` holding ``server_windows`` rows (no table when none)."""
    tables = {SERVER_WINDOWS.name: window_table(rows)} if rows else {}
    return CollectResult(tables, Counter(dropped))
