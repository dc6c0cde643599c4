"""Heatmap page: latency-throughput heatmap per model, knee, SLO line and safe maximum."""

from __future__ import annotations

import streamlit as st

from sits_observe.analytics.heatmap import HeatmapSettings
from sits_observe.store import Store
from sits_observe.surfaces.ui.analyses import heatmap_cells, latency_view
from sits_observe.surfaces.ui.charts import heatmap_spec, p95_curve_spec
from sits_observe.surfaces.ui.config import UiSettings

_FIELDS = HeatmapSettings.model_fields


def render(store: Store, settings: UiSettings) -> None:
    """Draw the heatmap page from ``store``."""
    st.title("Latency and throughput")
    with st.sidebar:
        slo_ms = st.number_input(
            "P95 SLO, ms", min_value=1.0, value=settings.slo_ms, help=_FIELDS["slo_ms"].description
        )
        latency_bin_ms = st.number_input(
            "latency bin, ms",
            min_value=1.0,
            value=100.0,
            help=_FIELDS["latency_bin_ms"].description,
        )
        throughput_bin_rps = st.number_input(
            "throughput bin, requests/s",
            min_value=0.1,
            value=10.0,
            help=_FIELDS["throughput_bin_rps"].description,
        )
        window_s = st.number_input(
            "window, s", min_value=0.1, value=1.0, help=_FIELDS["window_s"].description
        )
    view = latency_view(
        store,
        window_s=settings.window_s,
        slo_ms=float(slo_ms),
        latency_bin_ms=float(latency_bin_ms),
        throughput_bin_rps=float(throughput_bin_rps),
        heatmap_window_s=float(window_s),
    )
    st.subheader("Exact latency quantiles per model, s")
    if view.quantiles.num_rows == 0:
        st.info("no requests in the window: import a request log or let the agent follow one")
        return
    st.dataframe(view.quantiles, hide_index=True)
    models = sorted(view.heatmaps)
    model = st.selectbox("model", models, key="model")
    if model is None:
        return
    doc = view.document(model)
    knee, safe = doc["knee"], doc["safe_max"]
    cols = st.columns(3)
    cols[0].metric("Requests", f"{doc['requests']:,}")
    cols[1].metric("Knee", "none" if knee is None else f"{knee['throughput_lo_rps']:g} rps")
    cols[2].metric(
        "Safe max throughput",
        "none" if safe is None else f"{safe['throughput_lo_rps']:g} rps",
        help=f"highest throughput bin whose P95 (and every lower bin's) meets {slo_ms:g} ms",
    )
    st.vega_lite_chart(
        spec=heatmap_spec(
            heatmap_cells(doc),
            slo_ms=doc["slo_ms"],
            knee_rps=None if knee is None else knee["throughput_lo_rps"],
            safe_max_rps=None if safe is None else safe["throughput_lo_rps"],
            title=f"{model}: requests per cell",
        ),
        width="stretch",
    )
    for note in doc["notes"]:
        st.caption(note)
    st.vega_lite_chart(
        spec=p95_curve_spec(doc["throughput_bins"], slo_ms=doc["slo_ms"]), width="stretch"
    )
    st.subheader("Throughput bins (the evidence)")
    st.dataframe(doc["throughput_bins"], hide_index=True)
