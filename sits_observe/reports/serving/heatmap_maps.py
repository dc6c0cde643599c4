"""A ``heatmap`` report read back as the analytics' :class:`Heatmap` values.

The picture (``heatmap --png``, :func:`sits_observe.analytics.heatmap.png.render_png`) and the
text grid draw a :class:`Heatmap`; a report may come from a local file or through the
service's JSON, so both are drawn from the report's ``cells`` and ``bins`` tables and its
``facts`` (settings, knee, safe maximum, and a PromQL heatmap's bucket edges) rather than
from a second query. The windows table is
left empty: neither drawing reads it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from sits_observe.analytics.heatmap.grid import Heatmap
from sits_observe.analytics.heatmap.histograms import CELLS_SCHEMA, WINDOWS_SCHEMA
from sits_observe.analytics.heatmap.knee import Knee, SafeMax, ThroughputBin, Verdict
from sits_observe.analytics.heatmap.settings import HeatmapSettings
from sits_observe.errors import ConfigError
from sits_observe.reports.result import Report
from sits_observe.reports.serving.heatmap_query import HeatmapBy, HeatmapTable
from sits_observe.reports.serving.heatmap_tables import key_name

_CELLS = tuple(CELLS_SCHEMA.names)
_NO_WINDOWS = WINDOWS_SCHEMA.empty_table()


def heatmaps_of(report: Report) -> list[Heatmap]:
    """One :class:`Heatmap` per heatmap of ``report`` (which needs its ``cells`` table: a
    report of ``--table cells``)."""
    facts = report.facts
    # The main table's name does not travel in the JSON document: ``facts.table`` names it.
    if report.name != "heatmap" or facts.get("table") != HeatmapTable.cells.value:
        raise ConfigError("drawing a heatmap needs a heatmap report with --table cells")
    by = None if facts.get("by") is None else HeatmapBy(facts["by"])
    cells, bins = report.main.rows, report.table("bins").rows
    key = key_name(by)
    maps = []
    for fact in facts["heatmaps"]:
        # Each heatmap's own SLO (its model's); a report without one per heatmap: the query's.
        settings = HeatmapSettings(
            window_s=facts["bin_s"],
            latency_bin_ms=facts["latency_bin_ms"],
            throughput_bin_rps=facts["throughput_bin_rps"],
            slo_ms=fact.get("slo_ms", facts["slo_ms"]),
            min_bin_requests=facts["min_bin_requests"],
        )
        group = None if key is None else fact.get(key)
        mine = _of_group(bins, key, group).to_pylist()
        notes = list(fact.get("notes") or [])
        edges = fact.get("latency_edges_ms")
        maps.append(
            Heatmap(
                by=None if by is None else by.value,
                group=None if by is None else fact.get(by.value),
                settings=settings,
                requests=int(fact["requests"]),
                cells=_of_group(cells, key, group).select(list(_CELLS)),
                windows=_NO_WINDOWS,
                bins=tuple(_bin(r) for r in mine),
                knee=Verdict(_knee(fact.get("knee")), notes[0] if notes else ""),
                safe_max=None
                if settings.slo_ms is None
                else Verdict(_safe(fact.get("safe_max")), notes[-1] if len(notes) > 1 else ""),
                latency_edges_ms=None if edges is None else tuple(float(e) for e in edges),
            )
        )
    return maps


def _of_group(table: pa.Table, key: str | None, group: Any) -> pa.Table:
    if key is None:
        return table
    column = table.column(key)
    mask = pc.is_null(column) if group is None else pc.fill_null(pc.equal(column, group), False)
    return table.filter(mask)


def _bin(row: Mapping[str, Any]) -> ThroughputBin:
    return ThroughputBin(
        throughput_lo_rps=row["throughput_lo_rps"],
        throughput_hi_rps=row["throughput_hi_rps"],
        windows=row["windows"],
        requests=row["requests"],
        p50_s=row["p50_s"],
        p95_s=row["p95_s"],
        p99_s=row["p99_s"],
    )


def _knee(doc: Mapping[str, Any] | None) -> Knee | None:
    if doc is None:
        return None
    return Knee(doc["throughput_lo_rps"], doc["p95_s"], doc["depth_ratio"])


def _safe(doc: Mapping[str, Any] | None) -> SafeMax | None:
    if doc is None:
        return None
    return SafeMax(
        doc["throughput_lo_rps"],
        doc["throughput_hi_rps"],
        doc["p95_s"],
        doc["slo_ms"] / 1000,
        doc["exceeded_from_rps"],
    )
