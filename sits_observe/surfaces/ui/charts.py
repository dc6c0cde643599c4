"""Vega-Lite specifications of the app's charts (plain dicts; Streamlit draws them natively).

The data travel inside each spec (``data.values``): the raw values of a report's table
(ratios 0-1, seconds, times as ISO-8601), so a chart shows exactly the rows the report gave
and a test can read them back from the page. Reshaping (long format, bin edges, units on the
axis) is done by Vega-Lite transforms, not here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

Spec = dict[str, Any]


def _axis(percent: bool) -> Spec:
    return {"format": ".0%"} if percent else {}


#: A time axis as the tables write times: UTC, 24-hour clock (Vega-Lite's default is the
#: browser's zone and a 12-hour clock, 06:51 for 18:51).
TIME_FORMAT = "%H:%M"
#: Vega-Lite's format types are "number" and "time" (plus registered custom ones); a "time"
#: format on a ``utc`` scale is written with ``utcFormat``. ("utc" is no format type: the
#: browser dropped the format for it and drew "06 PM", "06:01", ...)
TIME_FORMAT_TYPE = "time"


def time_axis(field: str) -> Spec:
    """The x encoding of a time series: UTC scale, 24-hour labels, the date in the tooltip."""
    return {
        "field": field,
        "type": "temporal",
        "title": "time (UTC)",
        "scale": {"type": "utc"},
        "axis": {"format": TIME_FORMAT, "formatType": TIME_FORMAT_TYPE, "labelOverlap": True},
    }


def over_time_spec(
    rows: Sequence[Mapping[str, Any]],
    *,
    x: str,
    lines: Mapping[str, str],
    title: str,
    y_title: str,
    percent: bool = False,
) -> Spec:
    """One line per field of ``lines`` (field -> legend label) over time ``x``."""
    labelled = [{x: r[x], **{label: r[f] for f, label in lines.items()}} for r in rows]
    return {
        "title": title,
        "data": {"values": labelled},
        "transform": [{"fold": list(lines.values()), "as": ["measure", "value"]}],
        "mark": {"type": "line", "point": True, "tooltip": True},
        "encoding": {
            "x": time_axis(x),
            "y": {
                "field": "value",
                "type": "quantitative",
                "title": y_title,
                "axis": _axis(percent),
            },
            "color": {"field": "measure", "type": "nominal", "title": None},
        },
        "height": 240,
    }


def grouped_over_time_spec(
    rows: Sequence[Mapping[str, Any]],
    *,
    x: str,
    y: str,
    group: str,
    title: str,
    y_title: str,
    scale: float = 1.0,
) -> Spec:
    """``y`` (times ``scale``) over time ``x``, one line per ``group``."""
    return {
        "title": title,
        "data": {"values": list(rows)},
        "transform": [{"calculate": f"datum.{y} * {scale!r}", "as": "value"}],
        "mark": {"type": "line", "point": True, "tooltip": True},
        "encoding": {
            "x": time_axis(x),
            "y": {"field": "value", "type": "quantitative", "title": y_title},
            "color": {"field": group, "type": "nominal"},
        },
        "height": 240,
    }


def heatmap_spec(
    cells: Sequence[Mapping[str, Any]],
    *,
    latency_bin_ms: float,
    throughput_bin_rps: float,
    slo_s: float | None,
    knee_rps: float | None,
    safe_max_rps: float | None,
    title: str,
) -> Spec:
    """Requests per (throughput, latency) cell, latency in seconds as the tables give it; the
    SLO as a horizontal rule, the knee and the safe maximum as vertical rules."""
    bin_s = latency_bin_ms / 1000
    layers: list[Spec] = [
        {
            "data": {"values": list(cells)},
            "transform": [
                {"calculate": f"datum.throughput_lo_rps + {throughput_bin_rps!r}", "as": "hi_rps"},
                {"calculate": "datum.latency_lo_ms / 1000", "as": "latency_lo_s"},
                {"calculate": f"datum.latency_lo_s + {bin_s!r}", "as": "hi_s"},
            ],
            "mark": {"type": "rect", "tooltip": True},
            "encoding": {
                "x": {
                    "field": "throughput_lo_rps",
                    "type": "quantitative",
                    "title": "throughput of the time bin, requests/s",
                },
                "x2": {"field": "hi_rps"},
                "y": {"field": "latency_lo_s", "type": "quantitative", "title": "latency, s"},
                "y2": {"field": "hi_s"},
                "color": {
                    "field": "count",
                    "type": "quantitative",
                    "title": "requests",
                    "scale": {"type": "log", "scheme": "viridis"},
                },
            },
        }
    ]
    if slo_s is not None:
        layers.append(_rule("y", slo_s, "SLO (P95), s", "#d62728"))
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


def p95_curve_spec(bins: Sequence[Mapping[str, Any]], *, slo_s: float | None) -> Spec:
    """P50, P95 and P99 per throughput bin, in seconds as the tables give them: the evidence
    for the knee and the safe maximum."""
    layers: list[Spec] = [
        {
            "data": {"values": list(bins)},
            "transform": [
                {"fold": ["p50_s", "p95_s", "p99_s"], "as": ["field", "latency_s"]},
                {"calculate": "upper(substring(datum.field, 0, 3))", "as": "quantile"},
            ],
            "mark": {"type": "line", "point": True, "tooltip": True},
            "encoding": {
                "x": {"field": "throughput_lo_rps", "type": "quantitative", "title": "requests/s"},
                "y": {"field": "latency_s", "type": "quantitative", "title": "latency, s"},
                "color": {"field": "quantile", "type": "nominal"},
            },
        }
    ]
    if slo_s is not None:
        layers.append(_rule("y", slo_s, "SLO (P95), s", "#d62728"))
    return {"title": "Latency per throughput bin", "layer": layers, "height": 260}


def bar_spec(
    rows: Sequence[Mapping[str, Any]], *, x: str, y: str, x_title: str, y_title: str,
    percent: bool = False,
) -> Spec:  # fmt: skip
    """A bar chart of ``y`` per ``x`` (nominal, in the rows' order)."""
    return {
        "data": {"values": list(rows)},
        "mark": {"type": "bar", "tooltip": True},
        "encoding": {
            "x": {
                "field": x,
                "type": "nominal",
                "sort": None,
                "title": x_title,
                "axis": {"labelAngle": 0},
            },
            "y": {"field": y, "type": "quantitative", "title": y_title, "axis": _axis(percent)},
        },
        "height": 220,
    }


def curve_spec(rows: Sequence[Mapping[str, Any]]) -> Spec:
    """Simulator curves: allocation and fragmentation by arrived load, per policy."""
    return {
        "data": {"values": list(rows)},
        "transform": [
            {"fold": ["alloc_ratio", "frag_ratio"], "as": ["field", "value"]},
            {
                "calculate": "datum.field == 'alloc_ratio' ? 'allocation' : 'fragmentation'",
                "as": "measure",
            },
        ],
        "mark": {"type": "line", "tooltip": True},
        "encoding": {
            "x": {
                "field": "arrived_ratio",
                "type": "quantitative",
                "title": "arrived GPU load",
                "axis": _axis(True),
            },
            "y": {"field": "value", "type": "quantitative", "title": None, "axis": _axis(True)},
            "color": {"field": "policy", "type": "nominal"},
            "strokeDash": {"field": "measure", "type": "nominal"},
        },
        "height": 320,
    }
