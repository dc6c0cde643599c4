"""The JSON form of a :class:`~sits_observe.analytics.heatmap.grid.Heatmap`, as typed dicts.

These are the keys ``sits-observe heatmap --format json`` prints (one object per heatmap) and
docs/analytics/latency.md documents. Times are ISO-8601 UTC with a ``Z``; every other value
carries its unit in its name.
"""

from __future__ import annotations

from datetime import datetime
from typing import TypedDict

from sits_observe.analytics.heatmap.grid import Heatmap
from sits_observe.analytics.heatmap.knee import used_bins


class CellJson(TypedDict):
    """One heatmap cell: requests with this latency bin in windows of this throughput bin."""

    latency_lo_ms: float
    throughput_lo_rps: float
    count: int


class WindowJson(TypedDict):
    """One time window that had requests."""

    start: str
    throughput_rps: float
    count: int
    p50_s: float
    p95_s: float
    p99_s: float


class BinJson(TypedDict):
    """One throughput bin: the evidence for the knee and the safe maximum."""

    throughput_lo_rps: float
    throughput_hi_rps: float
    windows: int
    requests: int
    p50_s: float
    p95_s: float
    p99_s: float
    used: bool
    within_slo: bool | None


class KneeJson(TypedDict):
    """Where P95 starts rising fastest."""

    throughput_lo_rps: float
    p95_s: float
    depth_ratio: float


class SafeMaxJson(TypedDict):
    """The highest throughput bin meeting the P95 SLO, every lower bin meeting it too."""

    throughput_lo_rps: float
    throughput_hi_rps: float
    p95_s: float
    slo_ms: float
    exceeded_from_rps: float | None


class HeatmapJson(TypedDict):
    """One heatmap."""

    by: str | None
    group: str | None
    window_s: float
    latency_bin_ms: float
    throughput_bin_rps: float
    slo_ms: float | None
    min_bin_requests: int
    requests: int
    cells: list[CellJson]
    windows: list[WindowJson]
    throughput_bins: list[BinJson]
    knee: KneeJson | None
    safe_max: SafeMaxJson | None
    notes: list[str]


def iso_utc(ts: datetime) -> str:
    """A naive-UTC timestamp as ISO-8601 with ``Z``."""
    return ts.isoformat() + "Z"


def heatmap_json(heatmap: Heatmap) -> HeatmapJson:
    """The JSON form of ``heatmap``."""
    s = heatmap.settings
    slo_s = None if s.slo_ms is None else s.slo_ms / 1000
    used = {b.throughput_lo_rps for b in used_bins(heatmap.bins, s.min_bin_requests)}
    knee, safe = heatmap.knee.value, heatmap.safe_max.value if heatmap.safe_max else None
    notes = [heatmap.knee.note] + ([heatmap.safe_max.note] if heatmap.safe_max else [])
    return {
        "by": heatmap.by,
        "group": heatmap.group,
        "window_s": s.window_s,
        "latency_bin_ms": s.latency_bin_ms,
        "throughput_bin_rps": s.throughput_bin_rps,
        "slo_ms": s.slo_ms,
        "min_bin_requests": s.min_bin_requests,
        "requests": heatmap.requests,
        "cells": [
            CellJson(
                latency_lo_ms=r["latency_lo_ms"],
                throughput_lo_rps=r["throughput_lo_rps"],
                count=r["count"],
            )
            for r in heatmap.cells.to_pylist()
        ],
        "windows": [
            WindowJson(
                start=iso_utc(r["start"]),
                throughput_rps=r["throughput_rps"],
                count=r["count"],
                p50_s=r["p50_s"],
                p95_s=r["p95_s"],
                p99_s=r["p99_s"],
            )
            for r in heatmap.windows.to_pylist()
        ],
        "throughput_bins": [
            BinJson(
                throughput_lo_rps=b.throughput_lo_rps,
                throughput_hi_rps=b.throughput_hi_rps,
                windows=b.windows,
                requests=b.requests,
                p50_s=b.p50_s,
                p95_s=b.p95_s,
                p99_s=b.p99_s,
                used=b.throughput_lo_rps in used,
                within_slo=None if slo_s is None else b.p95_s <= slo_s,
            )
            for b in heatmap.bins
        ],
        "knee": None
        if knee is None
        else KneeJson(
            throughput_lo_rps=knee.throughput_lo_rps, p95_s=knee.p95_s, depth_ratio=knee.depth_ratio
        ),
        "safe_max": None
        if safe is None
        else SafeMaxJson(
            throughput_lo_rps=safe.throughput_lo_rps,
            throughput_hi_rps=safe.throughput_hi_rps,
            p95_s=safe.p95_s,
            slo_ms=s.slo_ms if s.slo_ms is not None else safe.slo_s * 1000,
            exceeded_from_rps=safe.exceeded_from_rps,
        ),
        "notes": notes,
    }
