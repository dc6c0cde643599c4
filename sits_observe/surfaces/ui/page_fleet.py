"""Fleet page: nodes, GPUs, utilisation, collector freshness and dropped samples."""

from __future__ import annotations

from datetime import UTC, datetime

import streamlit as st

from sits_observe.store import Store
from sits_observe.surfaces.ui.charts import bar_spec
from sits_observe.surfaces.ui.config import UiSettings
from sits_observe.surfaces.ui.data import fleet_view


def render(store: Store, settings: UiSettings) -> None:
    """Draw the fleet page from ``store``."""
    st.title("Fleet")
    view = fleet_view(store, now=datetime.now(UTC), window_s=settings.window_s)
    mean = view.mean_gpu_util_ratio
    cols = st.columns(4)
    cols[0].metric("Nodes", view.nodes.num_rows or view.utilisation.num_rows)
    cols[1].metric("GPUs", view.gpu_count)
    cols[2].metric("GPUs sampled", view.gpus.num_rows)
    cols[3].metric("Mean GPU utilisation", "n/a" if mean is None else f"{mean:.1%}")
    st.caption(f"samples from {view.since:%Y-%m-%d %H:%M:%S} UTC to the newest one")

    st.subheader("Nodes (latest inventory snapshot)")
    if view.nodes.num_rows:
        st.dataframe(view.nodes, hide_index=True)
    else:
        st.info("no node inventory yet (the inventory loop of `serve`, or `ingest k8s`)")

    st.subheader("Utilisation per node")
    if view.utilisation.num_rows:
        st.dataframe(view.utilisation, hide_index=True)
        st.vega_lite_chart(
            spec=bar_spec(view.utilisation.to_pylist(), x="node", y="mean_gpu_util_ratio"),
            width="stretch",
        )
    else:
        st.info("no GPU samples in the window")

    st.subheader("GPUs (newest sample of each)")
    st.dataframe(view.gpus, hide_index=True)

    st.subheader("Collector freshness")
    st.caption("newest row per node and source table; age in seconds at page load")
    st.dataframe(view.freshness, hide_index=True)

    st.subheader("Dropped samples")
    if view.drops.num_rows:
        st.dataframe(view.drops, hide_index=True)
    else:
        st.success("no samples dropped in the window")
