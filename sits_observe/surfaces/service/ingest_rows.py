"""Rows of an incoming batch checked against the domain's range rules before they are stored.

An agent's collectors already drop non-finite, negative or out-of-range samples, but a batch
may come from any client with the token, or from an agent whose collector has a bug. The
service applies the same rules (:mod:`sits_observe.domain.ranges`) to every batch: bad rows
are dropped and bad optional values NULLed, the rest of the batch is stored, and what was
dropped is reported three ways:

- in the 200 answer, ``"dropped": {"<table>.<column>:<why>": count}``;
- as ``collector_drops`` rows (collector ``ingest``, the batch's node, the receive time), in
  the same transaction as the batch, so ``sits_collector_drops_total`` shows them;
- in ``sits_ingest_rows_dropped_total{table, reason}`` (``reason`` = ``<column>:<why>``).

A replayed batch (a duplicate) stores nothing, so its drops are neither stored nor counted
again.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import pyarrow as pa
from prometheus_client import CollectorRegistry
from prometheus_client import Counter as PromCounter

from sits_observe.domain.collect import drops_table
from sits_observe.domain.ranges import check_rows
from sits_observe.store import utc_naive
from sits_observe.store.duck import conform_batch

#: ``collector_drops.collector`` of the rows the service itself drops.
INGEST_COLLECTOR = "ingest"


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


@dataclass(frozen=True)
class Screened:
    """A batch after the range rules: the tables to store and what was dropped, by reason."""

    tables: dict[str, pa.Table]
    dropped: Counter[str] = field(default_factory=Counter)


def screen_batch(
    tables: Mapping[str, pa.Table], *, now: datetime, max_future_skew_s: float
) -> Screened:
    """Conform every table (raises :class:`SchemaError`) and apply the range rules; rows
    stamped after ``now + max_future_skew_s`` are dropped as ``ts:future``."""
    latest = utc_naive(now) + timedelta(seconds=max_future_skew_s)
    kept: dict[str, pa.Table] = {}
    dropped: Counter[str] = Counter()
    for name, table in conform_batch(tables).items():
        checked = check_rows(name, table, latest=latest)
        kept[name] = checked.table
        dropped.update(checked.dropped)
    return Screened(kept, dropped)


def with_drop_rows(screened: Screened, *, at: datetime, node: str | None) -> dict[str, pa.Table]:
    """The tables to store: ``screened.tables`` plus one ``collector_drops`` row per reason."""
    if not screened.dropped:
        return screened.tables
    tables = dict(screened.tables)
    rows = drops_table(screened.dropped, at=utc_naive(at), node=node, collector=INGEST_COLLECTOR)
    sent = tables.get("collector_drops")
    tables["collector_drops"] = rows if sent is None else pa.concat_tables([sent, rows])
    return tables
