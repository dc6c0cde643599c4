"""Heatmap page: the ``latency`` report per model, and the ``heatmap`` report of one model
(cells, knee, SLO line, safe maximum and the throughput bins behind them)."""

from __future__ import annotations

from typing import Any

import streamlit as st

from sits_observe.reports.registry import find_report
from sits_observe.surfaces.ui.charts import heatmap_spec, p95_curve_spec
from sits_observe.surfaces.ui.config import UiSettings
from sits_observe.surfaces.ui.reading import Reader
from sits_observe.surfaces.ui.tables import cell, header, records, show, window_line

QUESTION = (
    "Up to what throughput does each model meet its P95 latency SLO, and where does its "
    "latency start to climb (the knee)?"
)


def _inputs(settings: UiSettings) -> dict[str, Any]:
    """The heatmap's settings from the sidebar (help from its settings model). Left empty, a
    bin is the report's own choice from the data and the SLO the app's setting (none: the
    page says so), as ``sits-observe heatmap`` does without flags."""
    fields = find_report("heatmap").settings.model_fields
    with st.sidebar:
        st.caption("heatmap (empty: chosen from the data)")
        slo_ms = st.number_input(
            "P95 SLO, ms",
            min_value=1.0,
            value=settings.slo_ms,
            placeholder="none set",
            help=fields["slo_ms"].description,
        )
        latency_bin_ms = st.number_input(
            "latency bin, ms",
            min_value=1.0,
            value=None,
            placeholder="from the data",
            help=fields["latency_bin_ms"].description,
        )
        throughput_bin_rps = st.number_input(
            "throughput bin, requests/s",
            min_value=0.001,
            value=None,
            placeholder="from the data",
            help=fields["throughput_bin_rps"].description,
        )
        bin_s = st.number_input(
            "time bin, s",
            min_value=0.001,
            value=None,
            placeholder="from the data",
            help=fields["bin_s"].description,
        )
    chosen = {
        "slo_ms": slo_ms,
        "latency_bin_ms": latency_bin_ms,
        "throughput_bin_rps": throughput_bin_rps,
        "bin_s": bin_s,
    }
    return {k: float(v) for k, v in chosen.items() if v is not None}


def render(reader: Reader, settings: UiSettings) -> None:
    """Draw the heatmap page."""
    st.title("Latency and throughput")
    header(QUESTION)
    values = _inputs(settings)
    latency = reader.report("latency", {"by": "model"})
    window_line(latency)
    show(latency.main)
    models = [m for m in latency.main.rows.column("model").to_pylist() if m is not None]
    model = st.selectbox("model", models, key="model")
    if model is None:
        return
    heat = reader.report("heatmap", {**values, "model": model, "table": "cells"})
    limits = heat.table("limits")
    slo_s = limits.rows.column("slo_s")[0].as_py()
    cols = st.columns(4)
    cols[0].metric("Requests", cell(limits, 0, "requests"))
    cols[1].metric("Knee", cell(limits, 0, "knee_rps"))
    cols[2].metric("P95 SLO", cell(limits, 0, "slo_s") if slo_s is not None else "none set")
    cols[3].metric(
        "Safe max throughput",
        cell(limits, 0, "safe_max_rps") if slo_s is not None else "needs an SLO",
        help="highest throughput bin whose P95 (and every lower bin's) meets the P95 SLO",
    )
    knee = limits.rows.column("knee_rps")[0].as_py()
    safe = limits.rows.column("safe_max_rps")[0].as_py()
    facts = heat.facts
    st.vega_lite_chart(
        spec=heatmap_spec(
            records(heat.main, ["throughput_lo_rps", "latency_lo_ms", "count"]),
            latency_bin_ms=float(facts["latency_bin_ms"]),
            throughput_bin_rps=float(facts["throughput_bin_rps"]),
            slo_s=slo_s,
            knee_rps=knee,
            safe_max_rps=safe,
            title=f"{model}: requests per cell",
        ),
        width="stretch",
    )
    for note in heat.notes:
        st.caption(note)
    bins = heat.table("bins")
    st.vega_lite_chart(
        spec=p95_curve_spec(
            records(bins, ["throughput_lo_rps", "p50_s", "p95_s", "p99_s"]),
            slo_s=slo_s,
        ),
        width="stretch",
    )
    show(bins)
