"""Collective sync delays from an exposition series the user names -> ``sync_delays`` rows.

Nothing standard exports "how long did the last all-reduce wait": NCCL has no metrics
endpoint, and training frameworks expose their own timings. So the user names the series
(``--metric``) of their own exporter, and this collector reads it from the Prometheus text
format, one of two shapes:

- a gauge (or untyped series): each sample is one delay; one row per sample and series;
- a histogram or summary (the name without ``_sum`` / ``_count``): the mean delay of the
  syncs since the previous read, delta ``<name>_sum`` / delta ``<name>_count``, one row per
  series and read in which the count grew. The first read of a series primes it; a count or
  sum that went down (the exporter restarted) primes it again and is counted as
  ``sync_delay:reset``.

``scale_s`` converts the series' unit to seconds (1 for a ``_seconds`` series, 0.001 for
milliseconds). Non-finite and negative delays are dropped and counted. The ``pod`` label, when
the series has one, is kept (the SPEC's rule counts delays per node, in time order:
``three consecutive sync delays above 80 ms -> best-effort``).
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime

import httpx
import pyarrow as pa

from sits_observe.collectors.exposition import Labels, Sample, is_finite, parse_exposition
from sits_observe.collectors.http import fetch_text, new_client
from sits_observe.domain.collect import CollectResult
from sits_observe.domain.schema.topology_tables import SYNC_DELAYS
from sits_observe.domain.times import utc_naive

_CUMULATIVE = ("histogram", "summary")


class SyncDelayCollector:
    """Scrapes one URL for the named series; see the module docstring for the two shapes."""

    name = "sync_delay"

    def __init__(
        self,
        url: str,
        metric: str,
        *,
        node: str,
        scale_s: float = 1.0,
        client: httpx.Client | None = None,
    ) -> None:
        if not scale_s > 0:
            raise ValueError(f"scale_s must be > 0 (seconds per unit of {metric}), got {scale_s}")
        self.url = url
        self.metric = metric
        self.node = node
        self.scale_s = scale_s
        self._own_client = client is None
        self._client = client if client is not None else new_client()
        self._cumulative: dict[Labels, tuple[float, float]] = {}  # labels -> (sum, count)

    def collect(self, now: datetime) -> CollectResult:
        """Scrape the endpoint once; raises :class:`CollectorError` when it is unreachable."""
        return self.collect_text(fetch_text(self._client, self.url), now)

    def collect_text(self, text: str, now: datetime) -> CollectResult:
        """One exposition body read at ``now`` -> ``sync_delays`` rows."""
        body = parse_exposition(text)
        dropped: Counter[str] = Counter(body.dropped)
        if body.types.get(self.metric) in _CUMULATIVE:
            delays = self._means(body.samples, dropped)
        else:
            delays = [(s.labels, s.value) for s in body.samples if s.name == self.metric]
        rows: list[dict[str, object]] = []
        for labels, value in delays:
            if not is_finite(value) or value < 0:
                dropped["sync_delay:not_finite_or_negative"] += 1
                continue
            rows.append({"pod": dict(labels).get("pod"), "delay_s": value * self.scale_s})
        at = utc_naive(now)
        columns = {
            "ts": [at] * len(rows),
            "node": [self.node] * len(rows),
            "pod": [r["pod"] for r in rows],
            "metric": [self.metric] * len(rows),
            "delay_s": [r["delay_s"] for r in rows],
        }
        return CollectResult(
            {SYNC_DELAYS.name: pa.table(columns, schema=SYNC_DELAYS.schema)}, dropped
        )

    def _means(self, samples: list[Sample], dropped: Counter[str]) -> list[tuple[Labels, float]]:
        """Mean delay per series since the previous read (delta sum / delta count)."""
        sums = {s.labels: s.value for s in samples if s.name == f"{self.metric}_sum"}
        counts = {s.labels: s.value for s in samples if s.name == f"{self.metric}_count"}
        out: list[tuple[Labels, float]] = []
        for labels, total in sums.items():
            count = counts.get(labels)
            if count is None or not (is_finite(total) and is_finite(count)):
                dropped["sync_delay:incomplete_series"] += 1
                continue
            previous = self._cumulative.get(labels)
            self._cumulative[labels] = (total, count)
            if previous is None:
                continue
            d_sum, d_count = total - previous[0], count - previous[1]
            if d_sum < 0 or d_count < 0:
                dropped["sync_delay:reset"] += 1
            elif d_count > 0:
                out.append((labels, d_sum / d_count))
        return out

    def close(self) -> None:
        """Close the HTTP client when this collector opened it."""
        if self._own_client:
            self._client.close()
