"""The what-if page's experiment tab: ``sits-observe experiment`` from the browser.

The same settings, the same run (:func:`sits_observe.lab.experiment.experiment.run_experiment`) and
the same rows (:mod:`sits_observe.lab.experiment.table`) as the command, with a progress
bar over the simulated time, and the chart of fragmentation and allocation over time. The
defaults here are smaller than the command's (a few minutes of simulated time on four nodes)
so that a first click answers within about a minute; the command line for the same run is
shown next to the button.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import streamlit as st
from pydantic import ValidationError

from sits_observe.lab.experiment.settings import ARM_DOCS, ExperimentSettings

if TYPE_CHECKING:  # the experiment imports the emulator, the service and the agents: lazily
    from sits_observe.lab.experiment.experiment import ExperimentResult

_FIELDS = ExperimentSettings.model_fields
_DEFAULTS = ExperimentSettings()


def render_experiment() -> None:
    """Draw the experiment's inputs; run it when the button is pressed; show the last result."""
    st.caption(
        "the same seeded workload under each arm on a simulated clock, through the production "
        "path: the emulator, the agents' formats, the store, the service's extender handler, "
        "the controller's plan and apply (docs/experiment.md)"
    )
    arms = st.multiselect(
        "arms",
        list(ARM_DOCS),
        default=list(_DEFAULTS.arms),
        key="exp_arms",
        help="; ".join(f"{a}: {d}" for a, d in ARM_DOCS.items()),
    )
    cols = st.columns(4)
    seeds = int(cols[0].number_input("seeds", 1, 10, 1, key="exp_seeds"))
    hours = float(
        cols[1].number_input(
            "simulated hours", 0.01, 48.0, 0.1, key="exp_hours", help=_FIELDS["hours"].description
        )
    )
    nodes = int(
        cols[2].number_input("nodes", 1, 200, 4, key="exp_nodes", help=_FIELDS["nodes"].description)
    )
    gpus = int(cols[3].number_input("GPUs per node", 1, 16, 8, key="exp_gpus"))
    st.code(
        f"sits-observe experiment --arms {','.join(arms)} --seeds {seeds} --hours {hours:g} "
        f"--nodes {nodes} --gpus-per-node {gpus}",
        language="bash",
    )
    if st.button("Run experiment", key="exp_run", type="primary"):
        try:
            settings = ExperimentSettings(
                arms=tuple(arms), seeds=seeds, hours=hours, nodes=nodes, gpus_per_node=gpus
            )
        except ValidationError as exc:
            st.error("; ".join(str(e["msg"]) for e in exc.errors()))
            return
        st.session_state["experiment"] = _run(settings)
    result = st.session_state.get("experiment")
    if result is not None:
        _results(result)


def _run(settings: ExperimentSettings) -> ExperimentResult:
    from sits_observe.lab.experiment.experiment import run_experiment

    runs = len(settings.arms) * settings.seeds
    finished: list[float] = []
    bar = st.progress(0.0, text="experiment")

    def progress(arm: str, seed: int, done_s: float, total_s: float) -> None:
        share = (len(finished) + min(done_s / total_s, 1.0)) / runs
        bar.progress(min(share, 1.0), text=f"{arm} seed {seed}: {done_s / total_s:.0%} simulated")

    def done(arm: str, seed: int, wall_s: float) -> None:
        finished.append(wall_s)

    result = run_experiment(settings, on_run=done, progress=progress)
    bar.progress(1.0, text=f"done: {runs} runs in {sum(finished):.0f} s")
    return result


def _results(result: ExperimentResult) -> None:
    from sits_observe.lab.experiment.png import COLOUR_NAMES, render_chart
    from sits_observe.lab.experiment.table import headline, measure_rows

    seeds = ", ".join(str(s) for s in result.settings.seed_list)
    st.subheader(f"Per arm, seeds {seeds}")
    st.dataframe(measure_rows(result), hide_index=True)
    for arm in result.arms:
        st.markdown(f"**{arm.arm}**: {headline(arm)}")
    for arm_name, check in result.targets:
        verdict = "met" if check.met else "not met"
        st.markdown(
            f"target, {arm_name} against kube-default, seed {check.seed}: **{verdict}** "
            f"(fragmentation lower: {check.frag_lower}, waiting GPU pods lower: "
            f"{check.waiting_lower}, P95 latency no worse: {check.p95_no_worse})"
        )
    chart = render_chart([(a.arm, a.series) for a in result.arms], result.settings.hours * 3600)
    legend = ", ".join(
        f"{a.arm} {COLOUR_NAMES[i % len(COLOUR_NAMES)]}" for i, a in enumerate(result.arms)
    )
    st.image(chart, caption=f"FGD fragmentation ratio (top) and GPU allocation (bottom); {legend}")
