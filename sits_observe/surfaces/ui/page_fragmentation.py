"""Fragmentation page: the ``fragmentation`` report (FGD, by cause, by node), ``smf`` per GPU
and ``trends`` (GPUs grouped by how their framebuffer occupancy moves)."""

from __future__ import annotations

import streamlit as st

from sits_observe.surfaces.ui.charts import bar_spec
from sits_observe.surfaces.ui.config import UiSettings
from sits_observe.surfaces.ui.reading import Reader
from sits_observe.surfaces.ui.session import guarded
from sits_observe.surfaces.ui.tables import cell, header, records, show, window_line

QUESTION = (
    "How much free GPU capacity can the typical pods not use, why, on which nodes; and whose "
    "framebuffer is fragmented or leaking?"
)


def render(reader: Reader, settings: UiSettings) -> None:
    """Draw the fragmentation page."""
    st.title("Fragmentation")
    header(QUESTION)
    guarded("FGD", lambda: _fgd(reader))
    guarded("SMF", lambda: _smf(reader))
    guarded("trend clusters", lambda: _trends(reader))


def _fgd(reader: Reader) -> None:
    report = reader.report("fragmentation")
    st.header("Cluster fragmentation (FGD, ATC'23)")
    window_line(report)
    main = report.main
    cols = st.columns(4)
    cols[0].metric("Fragmentation ratio", cell(main, 0, "frag_ratio"), help="F / idle GPU")
    cols[1].metric("Fragmentation amount", cell(main, 0, "frag_amount_ratio"), help="F / all GPU")
    cols[2].metric("Fragmented GPUs", cell(main, 0, "frag_milli"))
    cols[3].metric("GPU allocation", cell(main, 0, "alloc_ratio"))
    causes = report.table("causes")
    show(causes)
    st.vega_lite_chart(
        spec=bar_spec(
            records(causes, ["cause", "share"]),
            x="cause",
            y="share",
            x_title="cause",
            y_title="share of F",
            percent=True,
        ),
        width="stretch",
    )
    show(report.table("typical_pods"))
    show(report.table("nodes"))


def _smf(reader: Reader) -> None:
    report = reader.report("smf", {"by": "gpu"})
    st.header("SMF fragmentation rate per GPU")
    window_line(report)
    show(report.main, title=False, empty="no SMF samples in the window")
    if report.main.rows.num_rows:
        st.vega_lite_chart(
            spec=bar_spec(
                records(report.main, ["gpu", "mean_smf"]),
                x="gpu",
                y="mean_smf",
                x_title="GPU",
                y_title="mean SMF",
                percent=True,
            ),
            width="stretch",
        )


def _trends(reader: Reader) -> None:
    report = reader.report("trends", {"level": "gpu"})
    st.header("Fragmentation trend clusters (DBSCAN)")
    window_line(report)
    show(report.main, title=False, empty="no cluster: every series is noise")
    show(report.table("noise"), empty="no noise: every series is in a cluster")
