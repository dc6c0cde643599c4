"""Recommendations page: the ``recommend`` report (what the controller would change now) and
the ``decisions`` report (what it decided over the window)."""

from __future__ import annotations

import streamlit as st

from sits_observe.reports.actions.decisions import OUTCOMES
from sits_observe.surfaces.ui.config import UiSettings
from sits_observe.surfaces.ui.reading import Reader
from sits_observe.surfaces.ui.session import guarded
from sits_observe.surfaces.ui.tables import header, show, window_line

QUESTION = (
    "What would the controller change now, from the stored signals, and what did it decide "
    "over the window?"
)


def render(reader: Reader, settings: UiSettings) -> None:
    """Draw the recommendations / decision log page."""
    st.title("Recommendations and decisions")
    header(QUESTION)
    guarded("planned actions", lambda: _planned(reader))
    guarded("decision log", lambda: _log(reader))


def _planned(reader: Reader) -> None:
    st.header("Planned actions")
    st.caption(
        "what to change as of the window's end: the controller's plan, idle GPUs, GPU memory "
        "per workload and replicas at the SLO (it writes nothing)"
    )
    report = reader.report("recommend")
    window_line(report)
    show(report.main, title=False, empty="no recommendations")


def _log(reader: Reader) -> None:
    st.header("Decision log")
    # The filters' widgets come after the counts, so this run reads their values as set.
    chosen = {k: list(st.session_state.get(k, [])) for k in ("actions", "outcomes")}
    report = reader.report("decisions", chosen)
    window_line(report)
    counts = report.table("counts")
    show(counts)
    actions = sorted(a for a in counts.rows.column("action").to_pylist() if a is not None)
    st.multiselect("actions", actions, key="actions")
    st.multiselect("outcomes", list(OUTCOMES), key="outcomes")
    show(report.main, empty="no decision matches the filters")
