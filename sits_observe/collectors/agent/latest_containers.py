"""The agent's latest cgroup samples as Prometheus families (cAdvisor's names where they exist).

The family and label table is :mod:`sits_observe.domain.schema.container_fields` (shared with the
PromQL source that reads them back); this module only renders one tick's
``container_samples`` table. Values keep the column's unit (bytes, seconds, ratios 0-1), each
sample carries the row's own time (milliseconds) like the GPU families, and a NULL value
gives no sample (``memory.max`` unlimited is written as 0, cAdvisor's convention).

Called from :class:`~sits_observe.collectors.agent.latest.LatestSamples.collect` in the scrape
thread; an exception here is counted there under ``table="container_samples"``.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime

import pyarrow as pa
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from sits_observe.domain.schema.container_fields import FAMILIES, LABELS

_LABEL_NAMES = [name for name, _ in LABELS]


def container_families(table: pa.Table) -> list[Metric]:
    """One family per ``container_samples`` column present, newest row per label set."""
    columns = table.column_names
    rows = table.num_rows
    label_values = [
        [_text(v) for v in table.column(col).to_pylist()] if col in columns else [""] * rows
        for _, col in LABELS
    ]
    keys = list(zip(*label_values, strict=True)) if rows else []
    ts_values = table.column("ts").to_pylist() if "ts" in columns else [None] * rows
    stamps = [None if t is None else _seconds(t) for t in ts_values]
    out: list[Metric] = []
    for spec in FAMILIES:
        if spec.column not in columns:
            continue
        latest: dict[tuple[str, ...], tuple[float, float | None]] = {}
        values = table.column(spec.column).to_pylist()
        for key, raw, stamp in zip(keys, values, stamps, strict=True):
            value = 0 if raw is None and spec.zero_is_null else raw
            if value is None or not math.isfinite(float(value)):
                continue
            previous = latest.get(key)
            if previous is None or (stamp or 0.0) >= (previous[1] or 0.0):
                latest[key] = (float(value), stamp)
        if not latest:
            continue
        family: GaugeMetricFamily | CounterMetricFamily
        if spec.counter:
            family = CounterMetricFamily(spec.name, spec.help, labels=_LABEL_NAMES)
        else:
            family = GaugeMetricFamily(spec.name, spec.help, labels=_LABEL_NAMES)
        for key, (value, stamp) in latest.items():
            family.add_metric(list(key), value, timestamp=stamp)
        out.append(family)
    return out


def _text(value: object) -> str:
    return "" if value is None else str(value)


def _seconds(at: datetime) -> float:
    """A datetime (naive = UTC) as Unix seconds."""
    return (at if at.tzinfo else at.replace(tzinfo=UTC)).timestamp()
