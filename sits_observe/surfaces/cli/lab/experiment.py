"""CLI: ``sits-observe experiment`` — sits on versus off, the same workload on a simulated clock.

``experiment --arms kube-default,kube-sits [--seeds 5] [--hours 1] [--nodes 8]
[--gpus-per-node 8] --format table|json|png [--out FILE]`` runs every arm on every seed
through the production path (:mod:`sits_observe.lab.experiment.experiment`) and prints, per arm, the
mean and min-max over seeds of each measure, the target per seed, and the headline the
SITS documents print (utilisation / P95 latency / fragmentation). ``png`` writes the
fragmentation and allocation over time to ``--out``. Progress and each run's wall time go to
stderr. docs/experiment.md has the method and the measured tables.
"""

from __future__ import annotations

import json
import sys
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich import box

from sits_observe.errors import ConfigError
from sits_observe.lab.experiment.settings import ExperimentSettings
from sits_observe.lab.experiment.table import ablation_rows, headline, measure_rows
from sits_observe.surfaces.cli.common import err, out, run_cli
from sits_observe.surfaces.cli.console import data_table
from sits_observe.surfaces.cli.flags import SettingFlags, with_flags
from sits_observe.surfaces.cli.lab.experiment_progress import ExperimentProgress

if TYPE_CHECKING:  # the runner imports the emulator, the service and the agents: lazily
    from sits_observe.lab.experiment.experiment import ExperimentResult

#: ``experiment``'s settings flags (defaults, bounds and help from the model).
EXPERIMENT = SettingFlags(ExperimentSettings)


class ExperimentFormat(StrEnum):
    """Output formats of ``experiment``."""

    table = "table"
    json = "json"
    png = "png"


def register(app: typer.Typer) -> None:
    """Add ``experiment`` to ``app``."""
    app.command("experiment")(experiment)


@with_flags(EXPERIMENT)
def experiment(
    *,
    fmt: ExperimentFormat = typer.Option(ExperimentFormat.table, "--format"),
    out_path: Path | None = typer.Option(
        None, "--out", help="write json / png here (png: required)"
    ),
    **flags: Any,
) -> None:
    """Sits on versus off: the same seeded workload under each arm on a simulated clock,
    through the production path; progress with an ETA goes to stderr."""

    def go() -> None:
        if fmt is ExperimentFormat.png and out_path is None:
            raise ConfigError("--format png needs --out FILE.png")
        settings = EXPERIMENT.validate(flags, what="experiment")
        from sits_observe.lab.experiment.experiment import result_document
        from sits_observe.lab.experiment.png import render_chart

        result = _run(settings)
        if fmt is ExperimentFormat.png:
            assert out_path is not None
            chart = render_chart([(a.arm, a.series) for a in result.arms], settings.hours * 3600.0)
            out_path.write_bytes(chart)
            err.print(f"wrote {out_path}")
        elif fmt is ExperimentFormat.json:
            text = json.dumps(result_document(result), indent=2) + "\n"
            if out_path is not None:
                out_path.write_text(text, encoding="utf-8")
            else:
                sys.stdout.write(text)
        else:
            print_tables(result)

    run_cli(go)


def _run(settings: ExperimentSettings) -> ExperimentResult:
    from sits_observe.lab.experiment.experiment import run_experiment

    runs = len(settings.arms) * settings.seeds
    with ExperimentProgress(err, runs=runs, run_s=settings.hours * 3600.0) as bar:
        bar.start(
            f"experiment: {runs} run(s) ({', '.join(settings.arms)}; seeds "
            f"{', '.join(str(x) for x in settings.seed_list)}), {settings.nodes} nodes x "
            f"{settings.gpus_per_node} GPUs, {settings.hours:g} h simulated each"
        )
        return run_experiment(settings, on_run=bar.done, progress=bar.progress)


def print_tables(result: ExperimentResult) -> None:
    """The measures table, the per-seed target and the headline, on stdout."""
    s = result.settings
    seeds = ", ".join(str(x) for x in s.seed_list)
    table = data_table(
        title=f"experiment: {s.nodes} nodes x {s.gpus_per_node} GPUs, {s.hours:g} h simulated, "
        f"seeds {seeds}: mean (min-max)",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    table.add_column("measure", no_wrap=True)
    for arm in result.arms:
        table.add_column(arm.arm, justify="right", no_wrap=True)
    for row in measure_rows(result):
        table.add_row(*row.values())
    out.print(table)
    for arm in result.arms:
        text = ", ".join(f"{a} {n}" for a, n in arm.applied.items()) or "nothing"
        out.print(f"controller applied ({arm.arm}, all seeds): {text}")
    for arm_name, check in result.targets:
        marks = (
            f"fragmentation lower {_yes(check.frag_lower)}, waiting or unscheduled GPU pods "
            f"lower {_yes(check.waiting_lower)}, P95 latency no worse {_yes(check.p95_no_worse)}"
        )
        out.print(f"target, {arm_name} vs kube-default, seed {check.seed}: {marks}")
    if result.ablation:
        worth = data_table(
            title="what each module is worth: kube-sits minus kube-sits without it"
            + ("" if s.seeds == 1 else ", mean (min to max) over seeds"),
            box=box.SIMPLE_HEAD,
            pad_edge=False,
        )
        rows = ablation_rows(result.ablation, s.seeds)
        for i, name in enumerate(rows[0]):
            worth.add_column(name, justify="left" if i < 2 else "right")
        for row in rows:
            worth.add_row(*row.values())
        out.print(worth)
    if not result.same_workload:
        out.print("warning: the arms of a seed did not get the same arrivals")
    for arm in result.arms:
        out.print(f"{arm.arm}: {headline(arm)} (seeds {seeds})")


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"
