"""What the range rules dropped from an incoming batch, counted.

An agent's collectors already drop non-finite, negative or out-of-range samples, but a batch
may come from any client with the token, or from an agent whose collector has a bug. The
store applies the same rules to every batch it ingests (:mod:`sits_observe.store.intake`,
which every ``sits-observe ingest`` command goes through too): bad rows are dropped and bad
optional values NULLed, the rest of the batch is stored, and what was dropped is reported
three ways:

- in the 200 answer, ``"dropped": {"<table>.<column>:<why>": count}``;
- as ``collector_drops`` rows (collector ``ingest``, the batch's node, the receive time), in
  the same transaction as the batch, so ``sits_collector_drops_total`` shows them;
- in ``sits_ingest_rows_dropped_total{table, reason}`` (``reason`` = ``<column>:<why>``).

A replayed batch (a duplicate) stores nothing, so its drops are neither stored nor counted
again.
"""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import CollectorRegistry
from prometheus_client import Counter as PromCounter

from sits_observe.domain.ranges import SCREEN_COLLECTOR

__all__ = ["INGEST_COLLECTOR", "RowDropMetrics"]

#: ``collector_drops.collector`` of the rows the service itself drops.
INGEST_COLLECTOR = SCREEN_COLLECTOR


class RowDropMetrics:
    """``sits_ingest_rows_dropped_total``, on the service's registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.dropped = PromCounter(
            "sits_ingest_rows_dropped_total",
            "ingested rows dropped (or optional values NULLed) by the range rules, by table "
            "and reason (<column>:<why>)",
            ("table", "reason"),
            registry=registry,
        )

    def count(self, dropped: Mapping[str, int]) -> None:
        """Count what one stored batch dropped (keys ``<table>.<column>:<why>``)."""
        for key, n in dropped.items():
            table, _, reason = key.partition(".")
            self.dropped.labels(table, reason).inc(n)
