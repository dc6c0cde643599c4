"""Fragmentation page: FGD (cluster, by cause, by node), SMF per GPU, trend clusters."""

from __future__ import annotations

import streamlit as st

from sits_observe.store import Store
from sits_observe.surfaces.ui.analyses import fgd_document, smf_rows, trend_view
from sits_observe.surfaces.ui.charts import bar_spec, series_spec
from sits_observe.surfaces.ui.config import UiSettings
from sits_observe.surfaces.ui.session import guarded


def render(store: Store, settings: UiSettings) -> None:
    """Draw the fragmentation page from ``store``."""
    st.title("Fragmentation")
    guarded("FGD", lambda: _fgd(store, settings))
    guarded("SMF", lambda: _smf(store, settings))
    guarded("trend clusters", lambda: _trends(store, settings))


def _fgd(store: Store, settings: UiSettings) -> None:
    st.header("Cluster fragmentation (FGD, ATC'23)")
    doc = fgd_document(store, since_s=settings.window_s)
    cols = st.columns(4)
    cols[0].metric("Fragmentation ratio", f"{doc['frag_ratio']:.2%}", help="F / idle GPU")
    cols[1].metric("Fragmentation amount", f"{doc['frag_amount_ratio']:.2%}", help="F / all GPU")
    cols[2].metric("Fragmented GPUs", f"{doc['frag_milli'] / 1000:,.2f}")
    cols[3].metric("GPU allocation", f"{doc['alloc_ratio']:.2%}")
    causes = [
        {"cause": cause, "gpus": v["milli"] / 1000, "share": v["share"]}
        for cause, v in doc["by_cause"].items()
    ]
    st.subheader("By cause")
    st.dataframe(causes, hide_index=True)
    st.vega_lite_chart(spec=bar_spec(causes, x="cause", y="gpus"), width="stretch")
    st.subheader("Nodes, most fragmented first (milli-GPU)")
    st.dataframe(doc["nodes"], hide_index=True)
    for line in doc["warnings"]:
        st.caption(f"warning: {line}")


def _smf(store: Store, settings: UiSettings) -> None:
    st.header("SMF fragmentation rate per GPU")
    rows = smf_rows(store, window_s=settings.window_s)
    if not rows:
        st.info("no SMF samples: no GPU is linked to a container with cgroup samples")
        return
    st.dataframe(rows, hide_index=True)
    chart = [{"gpu": f"{r['node']}/{r['gpu_uuid']}", "mean_smf": r["mean_smf"]} for r in rows]
    st.vega_lite_chart(spec=bar_spec(chart, x="gpu", y="mean_smf"), width="stretch")


def _trends(store: Store, settings: UiSettings) -> None:
    st.header("Fragmentation trend clusters (DBSCAN)")
    view = trend_view(store, window_s=settings.window_s)
    doc = view.document
    st.caption(
        f"{doc['n_series']} GPU series, {doc['bucket_s']} s buckets; eps {doc['eps']:.4g} "
        f"({doc['eps_source']}), min_samples {doc['min_samples']}"
    )
    rows = [
        {
            "cluster": f"cluster {c['label']}",
            "size": c["size"],
            "pattern": ", ".join(c["words"]),
            "description": c["description"],
            "members": ", ".join(m["key"] for m in c["members"]),
        }
        for c in doc["clusters"]
    ] + [
        {
            "cluster": "noise",
            "size": 1,
            "pattern": ", ".join(n["words"]),
            "description": n["description"],
            "members": n["key"],
        }
        for n in doc["noise"]
    ]
    st.dataframe(rows, hide_index=True)
    for note in doc["notes"]:
        st.caption(note)
    if view.points.num_rows:
        points = [{**p, "t": p["t"].isoformat()} for p in view.points.to_pylist()]
        st.vega_lite_chart(spec=series_spec(points, title="Framebuffer occupancy"), width="stretch")
