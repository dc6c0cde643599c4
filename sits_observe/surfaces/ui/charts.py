"""Vega-Lite specifications of the app's charts (plain dicts; Streamlit draws them natively).

The data travel inside each spec (``data.values``), so a chart shows exactly the rows given
and a test can read them back from the page.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

Spec = dict[str, Any]


def heatmap_spec(
    cells: Sequence[dict[str, Any]],
    *,
    slo_ms: float | None,
    knee_rps: float | None,
    safe_max_rps: float | None,
    title: str,
) -> Spec:
    """Requests per (window throughput, latency) cell; the SLO as a horizontal rule, the knee
    and the safe maximum as vertical rules."""
    layers: list[Spec] = [
        {
            "data": {"values": list(cells)},
            "mark": {"type": "rect", "tooltip": True},
            "encoding": {
                "x": {
                    "field": "throughput_lo_rps",
                    "type": "quantitative",
                    "title": "window throughput, requests/s",
                },
                "x2": {"field": "throughput_hi_rps"},
                "y": {"field": "latency_lo_ms", "type": "quantitative", "title": "latency, ms"},
                "y2": {"field": "latency_hi_ms"},
                "color": {
                    "field": "count",
                    "type": "quantitative",
                    "title": "requests",
                    "scale": {"type": "log", "scheme": "viridis"},
                },
            },
        }
    ]
    if slo_ms is not None:
        layers.append(_rule("y", slo_ms, "SLO (P95), ms", "#d62728"))
    if knee_rps is not None:
        layers.append(_rule("x", knee_rps, "knee, requests/s", "#ff7f0e"))
    if safe_max_rps is not None:
        layers.append(_rule("x", safe_max_rps, "safe maximum, requests/s", "#2ca02c"))
    return {"title": title, "layer": layers, "height": 380}


def _rule(axis: str, value: float, label: str, colour: str) -> Spec:
    return {
        "data": {"values": [{"value": value, "label": label}]},
        "mark": {"type": "rule", "color": colour, "strokeWidth": 2, "strokeDash": [6, 3]},
        "encoding": {
            axis: {"field": "value", "type": "quantitative"},
            "tooltip": [{"field": "label"}, {"field": "value"}],
        },
    }


def p95_curve_spec(bins: Sequence[Mapping[str, Any]], *, slo_ms: float | None) -> Spec:
    """P95 (and P50, P99) per throughput bin, the evidence for the knee and safe maximum."""
    rows = [
        {
            "throughput_lo_rps": b["throughput_lo_rps"],
            "quantile": q,
            "latency_ms": b[f"{q}_s"] * 1e3,
        }
        for b in bins
        for q in ("p50", "p95", "p99")
    ]
    layers: list[Spec] = [
        {
            "data": {"values": rows},
            "mark": {"type": "line", "point": True, "tooltip": True},
            "encoding": {
                "x": {"field": "throughput_lo_rps", "type": "quantitative", "title": "requests/s"},
                "y": {"field": "latency_ms", "type": "quantitative", "title": "latency, ms"},
                "color": {"field": "quantile", "type": "nominal"},
            },
        }
    ]
    if slo_ms is not None:
        layers.append(_rule("y", slo_ms, "SLO (P95), ms", "#d62728"))
    return {"title": "Latency per throughput bin", "layer": layers, "height": 260}


def bar_spec(rows: Sequence[dict[str, Any]], *, x: str, y: str, colour: str | None = None) -> Spec:
    """A bar chart of ``y`` per ``x`` (nominal), coloured by ``colour``."""
    encoding: Spec = {
        "x": {"field": x, "type": "nominal", "sort": None},
        "y": {"field": y, "type": "quantitative"},
    }
    if colour is not None:
        encoding["color"] = {"field": colour, "type": "nominal"}
    return {
        "data": {"values": list(rows)},
        "mark": {"type": "bar", "tooltip": True},
        "encoding": encoding,
    }


def series_spec(rows: Sequence[dict[str, Any]], *, title: str) -> Spec:
    """Framebuffer occupancy per GPU over time, coloured by trend cluster."""
    return {
        "title": title,
        "data": {"values": list(rows)},
        "mark": {"type": "line", "tooltip": True, "opacity": 0.8},
        "encoding": {
            "x": {"field": "t", "type": "temporal", "title": "time (UTC)"},
            "y": {
                "field": "fb_used_ratio",
                "type": "quantitative",
                "title": "framebuffer used (0-1)",
            },
            "color": {"field": "cluster", "type": "nominal"},
            "detail": {"field": "gpu", "type": "nominal"},
        },
        "height": 280,
    }


def curve_spec(rows: Sequence[dict[str, Any]]) -> Spec:
    """Simulator curves: allocation and fragmentation by arrived load, per policy."""
    return {
        "data": {"values": list(rows)},
        "mark": {"type": "line", "tooltip": True},
        "encoding": {
            "x": {"field": "arrived_ratio", "type": "quantitative", "title": "arrived GPU load"},
            "y": {"field": "value", "type": "quantitative", "title": "ratio (0-1)"},
            "color": {"field": "policy", "type": "nominal"},
            "strokeDash": {"field": "measure", "type": "nominal"},
        },
        "height": 320,
    }
