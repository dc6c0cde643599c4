"""What-if page: the ``whatif`` report (a trace replayed with placement policies, the
kube-scheduler model with and without the sits extender among them), and the live-loop
experiment (:mod:`.page_experiment`)."""

from __future__ import annotations

from typing import Any

import streamlit as st

from sits_observe.domain.units import Unit
from sits_observe.lab.replay import whatif
from sits_observe.lab.replay.extender import all_policy_names
from sits_observe.reports.result import Report
from sits_observe.surfaces.ui.charts import curve_spec
from sits_observe.surfaces.ui.config import UiSettings
from sits_observe.surfaces.ui.page_experiment import render_experiment
from sits_observe.surfaces.ui.reading import Reader
from sits_observe.surfaces.ui.session import guarded
from sits_observe.surfaces.ui.tables import fact, header, records, show, window_line

QUESTION = (
    "Would another placement policy (or kube-scheduler with the sits extender) fit more of "
    "this workload onto these GPUs, and how fragmented would it leave them?"
)
_LIVE = "live cluster (the inventory of the window)"
_FILES = "trace files (Alibaba v2023 CSV)"


def render(reader: Reader, settings: UiSettings) -> None:
    """Draw the what-if page; a replay or an experiment runs when its button is pressed."""
    st.title("What-if scheduling")
    header(QUESTION)
    replay, experiment = st.tabs(["Replay a trace", "Experiment: sits on versus off"])
    with replay:
        _replay(reader, settings)
    with experiment:
        render_experiment()


def _replay(reader: Reader, settings: UiSettings) -> None:
    st.caption(
        "replays a trace onto an empty cluster with each policy (ATC'23 method); kube-default "
        "is kube-scheduler's defaults, kube-sits the same with the sits extender of the shipped "
        "deploy/scheduler-config.yaml, called through the service's own request handling"
    )
    values = _inputs(settings)
    if values is None:
        return
    # ``?run=1`` in the address runs the replay at once (a link to a result, a screenshot).
    clicked = st.button("Run simulation", key="run", type="primary")
    if clicked or (st.query_params.get("run") == "1" and "whatif" not in st.session_state):
        guarded("replay", lambda: _run(reader, values))
    report = st.session_state.get("whatif")
    if isinstance(report, Report):
        _results(report)


def _run(reader: Reader, values: dict[str, Any]) -> None:
    runs = len(values["policies"]) * values["seeds"]
    with st.spinner(f"simulating {runs} replays ..."):
        st.session_state["whatif"] = reader.report("whatif", values)


def _inputs(settings: UiSettings) -> dict[str, Any] | None:
    fields = whatif.SPEC.settings.model_fields
    kind = st.radio("trace", [_LIVE, _FILES], key="trace_kind", horizontal=True)
    values: dict[str, Any] = {}
    if kind == _FILES:
        nodes = st.text_input("node list CSV", value=str(settings.trace_nodes or ""), key="nodes")
        pods = st.text_input("pod list CSV", value=str(settings.trace_pods or ""), key="pods")
        if not nodes or not pods:
            st.info("give the paths of a node list and a pod list")
            return None
        values |= {"trace_nodes": nodes, "trace_pods": pods}
    chosen = st.multiselect(
        "policies",
        all_policy_names(),
        default=list(fields["policies"].default),
        key="policies",
        help=fields["policies"].description,
    )
    cols = st.columns(3)
    load = cols[0].number_input(
        "load",
        min_value=0.1,
        max_value=10.0,
        value=float(fields["load_ratio"].default),
        help=fields["load_ratio"].description,
    )
    seeds = cols[1].number_input(
        "seeds",
        min_value=1,
        max_value=20,
        value=int(fields["seeds"].default),
        help=fields["seeds"].description,
    )
    tie_break = cols[2].selectbox(
        "tie break",
        [str(t) for t in fields["tie_break"].annotation or ()],
        help=fields["tie_break"].description,
    )
    return values | {
        "policies": chosen,
        "seeds": int(seeds),
        "load_ratio": float(load),
        "tie_break": tie_break,
    }


def _results(report: Report) -> None:
    st.subheader("Result per policy (mean over seeds)")
    st.markdown(
        f"**{report.facts.get('trace')}**: {fact(report, 'gpus', Unit.integer)} GPUs; "
        f"{fact(report, 'replays', Unit.integer)} replays at load "
        f"{fact(report, 'load_ratio', Unit.number)}"
    )
    window_line(report)
    show(report.main, title=False)
    curve = report.table("curve")
    rows = records(curve, ["policy", "arrived_ratio", "alloc_ratio", "frag_ratio"])
    st.vega_lite_chart(spec=curve_spec(rows), width="stretch")
    show(report.table("causes"))
    show(report.table("failed"))
