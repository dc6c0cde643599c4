"""What-if page: replay a trace with placement policies in the scheduling simulator (the
kube-scheduler model with and without the sits extender among them), and run the live-loop
experiment (:mod:`.page_experiment`)."""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from sits_observe.analytics.schedsim import ReplayResult, SimulationSettings
from sits_observe.control.replay_extender import all_policy_names
from sits_observe.store import Store
from sits_observe.surfaces.ui.charts import curve_spec
from sits_observe.surfaces.ui.config import UiSettings
from sits_observe.surfaces.ui.page_experiment import render_experiment
from sits_observe.surfaces.ui.whatif import (
    Trace,
    curve_rows,
    run_whatif,
    trace_from_files,
    trace_from_store,
)

_FIELDS = SimulationSettings.model_fields
_LIVE = "live cluster (inventory in the store)"
_FILES = "trace files (Alibaba v2023 CSV)"


def render(store: Store, settings: UiSettings) -> None:
    """Draw the what-if page; a replay or an experiment runs when its button is pressed."""
    st.title("What-if scheduling")
    replay, experiment = st.tabs(["Replay a trace", "Experiment: sits on versus off"])
    with replay:
        _replay(store, settings)
    with experiment:
        render_experiment()


def _replay(store: Store, settings: UiSettings) -> None:
    st.caption(
        "replays a trace onto an empty cluster with each policy (ATC'23 method); kube-default "
        "is kube-scheduler's defaults, kube-sits the same with the sits extender of the shipped "
        "deploy/scheduler-config.yaml, called through the service's own request handling"
    )
    kind = st.radio("trace", [_LIVE, _FILES], key="trace_kind", horizontal=True)
    trace = _trace(store, settings, kind)
    if trace is None:
        return
    st.write(
        f"**{trace.label}**: {len(trace.nodes):,} nodes, {trace.total_gpus:,} GPUs, "
        f"{len(trace.pods):,} pods"
    )
    names = all_policy_names()
    chosen = st.multiselect(
        "policies", names, default=["fgd", "kube-default", "kube-sits"], key="policies"
    )
    cols = st.columns(3)
    load = cols[0].number_input(
        "load", min_value=0.1, max_value=10.0, value=1.3, help=_FIELDS["load_ratio"].description
    )
    seeds = int(cols[1].number_input("seeds", min_value=1, max_value=20, value=1))
    tie_break = cols[2].selectbox(
        "tie break", ["node_order", "random"], help=_FIELDS["tie_break"].description
    )
    if st.button("Run simulation", key="run", type="primary"):
        sim = SimulationSettings(load_ratio=float(load), tie_break=tie_break)
        total = len(chosen) * seeds
        bar = st.progress(0.0, text="simulating")
        done: list[ReplayResult] = []

        def tick(replay: ReplayResult) -> None:
            done.append(replay)
            bar.progress(len(done) / total, text=f"{replay.policy} seed {replay.seed}")

        st.session_state["whatif"] = run_whatif(trace, chosen, range(seeds), sim, progress=tick)
        bar.progress(1.0, text=f"done: {len(done)} replays")
    documents = st.session_state.get("whatif")
    if documents:
        _results(documents)


def _trace(store: Store, settings: UiSettings, kind: str | None) -> Trace | None:
    if kind == _LIVE:
        return trace_from_store(store, since_s=settings.window_s)
    nodes = st.text_input("node list CSV", value=str(settings.trace_nodes or ""), key="nodes")
    pods = st.text_input("pod list CSV", value=str(settings.trace_pods or ""), key="pods")
    if not nodes or not pods:
        st.info("give the paths of a node list and a pod list")
        return None
    return trace_from_files(Path(nodes), Path(pods))


def _results(documents: list[dict[str, object]]) -> None:
    st.subheader("Result per policy (mean over seeds)")
    rows = []
    for d in documents:
        unalloc = d["unallocated_gpus"]
        alloc = d["alloc_ratio"]
        failure = d["first_failure_arrived"]
        assert isinstance(unalloc, dict) and isinstance(alloc, dict)
        rows.append(
            {
                "policy": d["policy"],
                "alloc_ratio": alloc["mean"],
                "unallocated_gpus": unalloc["mean"],
                "first_failure_arrived": None if not isinstance(failure, dict) else failure["mean"],
                "pods_per_s": d["pods_per_s"],
            }
        )
    st.dataframe(rows, hide_index=True)
    st.vega_lite_chart(spec=curve_spec(curve_rows(documents)), width="stretch")
