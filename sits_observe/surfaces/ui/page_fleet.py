"""Fleet page: the ``fleet`` report: nodes, GPUs, and allocation, fragmentation, idle GPUs
and P95 latency over the window."""

from __future__ import annotations

import streamlit as st

from sits_observe.domain.units import Unit
from sits_observe.reports.result import Report
from sits_observe.surfaces.ui.charts import grouped_over_time_spec, over_time_spec
from sits_observe.surfaces.ui.config import UiSettings
from sits_observe.surfaces.ui.reading import Reader
from sits_observe.surfaces.ui.tables import fact, header, records, show, window_line

QUESTION = (
    "How much of the cluster's GPU capacity is allocated, used and fragmented, node by node, "
    "and how did that go over the window?"
)


def render(reader: Reader, settings: UiSettings) -> None:
    """Draw the fleet page."""
    st.title("Fleet")
    header(QUESTION)
    report = reader.report("fleet")
    window_line(report)
    _metrics(report)
    show(report.main, empty="no nodes in the window")
    _charts(report)
    show(report.table("gpus"), empty="no GPU samples in the window")
    show(report.table("freshness"), empty="no samples in the window")
    show(report.table("drops"), empty="no samples dropped in the window")


def _metrics(report: Report) -> None:
    cols = st.columns(6)
    cols[0].metric("Nodes", fact(report, "nodes", Unit.integer))
    cols[1].metric("GPUs", fact(report, "gpus", Unit.integer))
    cols[2].metric("Allocated GPUs", fact(report, "allocated_gpus", Unit.number))
    cols[3].metric("Idle GPUs", fact(report, "idle_gpus", Unit.integer))
    cols[4].metric("GPU utilisation", fact(report, "gpu_util_ratio", Unit.ratio))
    cols[5].metric(
        "Fragmentation",
        fact(report, "frag_ratio", Unit.ratio),
        help="FGD (ATC'23): share of the unallocated GPU capacity the typical pods cannot use",
    )


def _charts(report: Report) -> None:
    over = report.table("over_time")
    st.subheader(over.title)
    if over.rows.num_rows == 0:
        st.info("no GPU samples or inventory snapshots in the window")
    else:
        rows = records(
            over, ["start_at", "alloc_ratio", "frag_ratio", "gpu_util_ratio", "idle_gpus"]
        )
        left, right = st.columns(2)
        left.vega_lite_chart(
            spec=over_time_spec(
                rows,
                x="start_at",
                lines={
                    "alloc_ratio": "allocation",
                    "frag_ratio": "fragmentation",
                    "gpu_util_ratio": "utilisation",
                },
                title="Allocation, fragmentation and utilisation",
                y_title="share of the GPUs",
                percent=True,
            ),
            width="stretch",
        )
        right.vega_lite_chart(
            spec=over_time_spec(
                rows,
                x="start_at",
                lines={"idle_gpus": "idle GPUs"},
                title="Idle GPUs",
                y_title="GPUs",
            ),
            width="stretch",
        )
    latency = report.table("latency_over_time")
    if latency.rows.num_rows:
        st.vega_lite_chart(
            spec=grouped_over_time_spec(
                records(latency, ["start_at", "model", "p95_s", "requests"]),
                x="start_at",
                y="p95_s",
                group="model",
                title=latency.title,
                y_title="P95 latency, s",
            ),
            width="stretch",
        )
