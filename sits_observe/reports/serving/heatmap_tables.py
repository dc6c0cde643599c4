"""The tables and facts of the ``heatmap`` report.

Tables: the one ``table`` names is the main one (``-o csv`` writes it): ``bins`` (per
throughput bin, the default), ``cells`` (requests per latency x throughput cell) or
``windows`` (per time bin). ``limits`` (knee and safe maximum per heatmap) is always there,
and so is ``bins`` when it is not the main table; the knee and the safe maximum are in
``facts.heatmaps`` too. With ``--by``, every table starts with the group's columns
(:func:`key_columns`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sits_observe.analytics.heatmap.document import HeatmapJson
from sits_observe.analytics.heatmap.grid import Heatmap
from sits_observe.analytics.serving.latency import RequestSelection
from sits_observe.domain.units import Unit
from sits_observe.reports.result import Column, ReportTable, col, table_of
from sits_observe.reports.serving.heatmap_query import HeatmapBy, HeatmapQuery, HeatmapTable


def key_columns(by: HeatmapBy | None) -> tuple[Column, ...]:
    """The group columns of every table (none for one heatmap over all requests)."""
    if by is None:
        return ()
    if by is HeatmapBy.gpu:
        return (col("gpu", "GPU"), col("gpu_uuid", "GPU UUID", wide=True))
    return (col(by.value, by.value),)


def key_name(by: HeatmapBy | None) -> str | None:
    """The row key that tells the heatmaps apart (the UUID for GPUs)."""
    if by is None:
        return None
    return "gpu_uuid" if by is HeatmapBy.gpu else by.value


def _bins_columns(by: HeatmapBy | None, slo: bool, *, estimate: bool = False) -> tuple[Column, ...]:
    return (
        *key_columns(by),
        col("throughput_lo_rps", "rps bin", Unit.rate),
        col("throughput_hi_rps", "rps to", Unit.rate, wide=True),
        col("windows", "time bins", Unit.integer, wide=True),
        col("requests", "requests", Unit.integer),
        col("p50_s", "P50", Unit.seconds),
        col("p95_s", "P95", Unit.seconds),
        *((col("p95_error_s", "P95 +-", Unit.seconds),) if estimate else ()),
        col("p99_s", "P99", Unit.seconds),
        col("used", "used", Unit.flag),
        *((col("within_slo", "in SLO", Unit.flag),) if slo else ()),
    )


def _cells_columns(by: HeatmapBy | None) -> tuple[Column, ...]:
    return (
        *key_columns(by),
        col("latency_lo_ms", "latency ms", Unit.number),
        col("throughput_lo_rps", "rps bin", Unit.rate),
        col("count", "requests", Unit.integer),
        col("throughput_bin", "rps bin no", Unit.integer, wide=True),
        col("latency_bin", "latency bin no", Unit.integer, wide=True),
    )


def _windows_columns(by: HeatmapBy | None) -> tuple[Column, ...]:
    return (
        *key_columns(by),
        col("start", "start", Unit.time),
        col("throughput_rps", "throughput", Unit.rate),
        col("count", "requests", Unit.integer),
        col("p50_s", "P50", Unit.seconds),
        col("p95_s", "P95", Unit.seconds),
        col("p99_s", "P99", Unit.seconds),
        col("throughput_bin", "rps bin no", Unit.integer, wide=True),
    )


def _limits_columns(by: HeatmapBy | None) -> tuple[Column, ...]:
    return (
        *key_columns(by),
        col("requests", "requests", Unit.integer),
        col("windows", "time bins", Unit.integer, wide=True),
        col("knee_rps", "knee", Unit.rate),
        col("knee_p95_s", "knee P95", Unit.seconds),
        col("depth_ratio", "knee depth", Unit.ratio, wide=True),
        col("slo_s", "SLO P95", Unit.seconds),
        col("safe_max_rps", "safe max", Unit.rate),
        col("safe_max_p95_s", "max P95", Unit.seconds),
        col("exceeded_from_rps", "over SLO at", Unit.rate),
        col("safe_max_hi_rps", "safe max to", Unit.rate, wide=True),
    )


def limits_table(
    query: HeatmapQuery,
    maps: Sequence[Heatmap],
    keys: Sequence[Mapping[str, Any]],
    docs: Sequence[HeatmapJson],
) -> ReportTable:
    """The ``limits`` table: knee and safe maximum per heatmap."""
    return table_of(
        "limits",
        "knee, and safe maximum throughput at the P95 SLO",
        [_limits_row(k, h, d) for k, h, d in zip(keys, maps, docs, strict=True)],
        _limits_columns(query.by),
    )


def bins_table(
    query: HeatmapQuery,
    keys: Sequence[Mapping[str, Any]],
    docs: Sequence[HeatmapJson],
    errors: Sequence[Mapping[float, float]] | None = None,
) -> ReportTable:
    """Per throughput bin; with ``errors`` (per heatmap, P95 error bound by bin) estimates."""
    if errors is None:
        return table_of(
            "bins",
            "P95 per throughput bin (exact; the evidence for knee and safe max)",
            [{**k, **b} for k, d in zip(keys, docs, strict=True) for b in d["throughput_bins"]],
            _bins_columns(query.by, _any_slo(docs)),
        )
    return table_of(
        "bins",
        "P95 per throughput bin (ESTIMATES from histogram buckets; the evidence for knee and "
        "safe max)",
        [
            {**k, **b, "p95_error_s": e[b["throughput_lo_rps"]]}
            for k, d, e in zip(keys, docs, errors, strict=True)
            for b in d["throughput_bins"]
        ],
        _bins_columns(query.by, _any_slo(docs), estimate=True),
    )


def _any_slo(docs: Sequence[HeatmapJson]) -> bool:
    return any(d["slo_ms"] is not None for d in docs)


def main_table(
    query: HeatmapQuery,
    maps: Sequence[Heatmap],
    keys: Sequence[Mapping[str, Any]],
    docs: Sequence[HeatmapJson],
) -> ReportTable:
    """The table ``query.table`` names, the main one."""
    if query.table is HeatmapTable.bins:
        return bins_table(query, keys, docs)
    pairs = zip(keys, maps, strict=True)
    if query.table is HeatmapTable.cells:
        return table_of(
            "cells",
            "requests per cell (latency bin x throughput bin of its time bin)",
            [{**k, **c} for k, h in pairs for c in h.cells.to_pylist()],
            _cells_columns(query.by),
        )
    return table_of(
        "windows",
        f"time bins of {query.bin_s:g} s (bins without requests do not appear)",
        [{**k, **w} for k, h in pairs for w in h.windows.to_pylist()],
        _windows_columns(query.by),
    )


def row_keys(by: HeatmapBy | None, group: str | None, labels: Mapping[str, str]) -> dict[str, Any]:
    """The group columns' values of a heatmap's rows (the GPU's label from ``labels``)."""
    if by is None:
        return {}
    if by is HeatmapBy.gpu:
        return {"gpu": None if group is None else labels.get(group, group), "gpu_uuid": group}
    return {by.value: group}


def _limits_row(key: Mapping[str, Any], h: Heatmap, doc: Mapping[str, Any]) -> dict[str, Any]:
    knee, safe = doc["knee"] or {}, doc["safe_max"] or {}
    return {
        **key,
        "requests": h.requests,
        "windows": h.windows.num_rows,
        "knee_rps": knee.get("throughput_lo_rps"),
        "knee_p95_s": knee.get("p95_s"),
        "depth_ratio": knee.get("depth_ratio"),
        "slo_s": None if h.settings.slo_ms is None else h.settings.slo_ms / 1000,
        "safe_max_rps": safe.get("throughput_lo_rps"),
        "safe_max_hi_rps": safe.get("throughput_hi_rps"),
        "safe_max_p95_s": safe.get("p95_s"),
        "exceeded_from_rps": safe.get("exceeded_from_rps"),
    }


def report_facts(
    query: HeatmapQuery,
    selection: RequestSelection,
    maps: Sequence[Heatmap],
    keys: Sequence[Mapping[str, Any]],
    docs: Sequence[Mapping[str, Any]],
) -> dict[str, Any]:
    """The report's facts: the query, the first time bin, and per heatmap its requests, knee,
    safe maximum and notes."""
    return {
        **query.model_dump(mode="json"),
        "first_bin_at": selection.since,
        "requests": sum(h.requests for h in maps),
        "heatmaps": [
            {
                **k,
                "requests": h.requests,
                "windows": h.windows.num_rows,
                "slo_ms": h.settings.slo_ms,
                "knee": d["knee"],
                "safe_max": d["safe_max"],
                "notes": d["notes"],
                # A histogram's uneven latency bins (PromQL), for the grid read back.
                **(
                    {}
                    if h.latency_edges_ms is None
                    else {"latency_edges_ms": list(h.latency_edges_ms)}
                ),
            }
            for k, h, d in zip(keys, maps, docs, strict=True)
        ],
    }
