"""CLI: ``sits-observe simulate`` — what-if scheduling replay of a trace (ATC'23 method).

Replays a pod list (Alibaba cluster-trace-gpu-v2023 schema), or a workload variant generated
from it (``--workload``), onto the empty cluster of a node list with one placement policy or
all of them, over several seeds, and prints per policy the GPU allocation and fragmentation
along the arrived load, the arrived load of the first failure and the GPUs left unallocated
at the end. ``kube-sits`` and ``kube-sits-gpuhint`` run kube-scheduler with the extenders of
``--scheduler-config`` and the service's own extender handler in process
(:mod:`sits_observe.lab.replay.extender`). Method and policies:
docs/analytics/simulator.md; engine: :mod:`sits_observe.lab.replay.engine.replay`.
"""

from __future__ import annotations

import json
import os
import sys
from enum import StrEnum
from pathlib import Path
from typing import Any

import typer
from rich import box
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from sits_observe.analytics.fragmentation.fgd.model import CAUSES
from sits_observe.analytics.traces.cluster_trace import (
    NodeList,
    PodList,
    load_node_list,
    load_pod_list,
)
from sits_observe.analytics.traces.variants import make_variant
from sits_observe.errors import ConfigError
from sits_observe.lab.replay.engine.policies import Policy
from sits_observe.lab.replay.engine.replay import (
    PolicyResult,
    ReplayResult,
    SimulationSettings,
    simulate,
)
from sits_observe.lab.replay.extender import (
    DEFAULT_SCHEDULER_CONFIG,
    REPLAY_POLICIES,
    all_policy_names,
    choose_policies,
)
from sits_observe.lab.replay.settings import SimulateRunSettings
from sits_observe.lab.replay.whatif import result_document
from sits_observe.surfaces.cli.common import err, out, run_cli
from sits_observe.surfaces.cli.console import data_table
from sits_observe.surfaces.cli.flags import SectionedCommand, SettingFlags, with_flags

#: Curve rows printed in the table format (every 10% of arrived load, plus the end).
_TABLE_STEP = 10
#: Arrived-load step of the fragmentation column (the paper quotes it at 90%).
_FRAG_AT_STEP = 90


class SimFormat(StrEnum):
    """Output formats of ``simulate``."""

    table = "table"
    json = "json"


#: ``simulate``'s settings flags: the replay's (shared with ``whatif``) and the run's.
REPLAY = SettingFlags(SimulationSettings, panel="Replay")
RUN = SettingFlags(SimulateRunSettings, panel="Policies, workload and seeds")


def register(app: typer.Typer) -> None:
    """Add the ``simulate`` command to ``app``."""
    app.command("simulate", cls=SectionedCommand)(simulate_cmd)


@with_flags(REPLAY, RUN)
def simulate_cmd(
    *,
    nodes: Path = typer.Option(
        ..., "--nodes", help="node list CSV (sn, cpu_milli, memory_mib, gpu, model)"
    ),
    pods: Path = typer.Option(
        ...,
        "--pods",
        help="pod list CSV (name, cpu_milli, memory_mib, num_gpu, gpu_milli, gpu_spec, ...)",
    ),
    scheduler_config: Path | None = typer.Option(
        None,
        "--scheduler-config",
        help="KubeSchedulerConfiguration whose extenders kube-sits and kube-sits-gpuhint "
        "run [default: deploy/scheduler-config.yaml]",
    ),
    fmt: SimFormat = typer.Option(SimFormat.table, "--format"),
    **flags: Any,
) -> None:
    """Replay a trace with placement policies; GPU allocation and fragmentation by load."""

    def go() -> None:
        settings = REPLAY.validate(flags, what="simulation")
        run = RUN.validate(flags, what="simulation")
        node_list = load_node_list(nodes)
        pod_list = make_variant(load_pod_list(pods), node_list, run.workload)
        chosen = _policies(run.policy, pod_list, scheduler_config)
        try:
            results = _run(
                node_list,
                pod_list,
                chosen,
                run.seed_list,
                settings=settings,
                workers=run.workers or min(2, os.cpu_count() or 1),
            )
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc
        total_gpus = int(node_list.gpu_count.sum())
        docs = [result_document(r, settings, total_gpus, run.workload) for r in results]
        if fmt is SimFormat.json:
            doc: Any = docs[0] if run.policy != "all" else docs
            sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        else:
            _print_tables(results, total_gpus, run.workload)

    run_cli(go)


def _policies(policy: str, pods: PodList, config: Path | None) -> list[str | Policy]:
    """The policies to replay: ``policy``, or every one for ``all`` (which leaves the
    replay-extender ones out when no configuration is given and the shipped one is not
    installed)."""
    known = all_policy_names()
    if policy != "all" and policy not in known:
        raise ConfigError(f"--policy {policy!r}: choose one of {', '.join(known)}, or all")
    names = known if policy == "all" else [policy]
    if policy == "all" and config is None and not DEFAULT_SCHEDULER_CONFIG.is_file():
        names = [n for n in names if n not in REPLAY_POLICIES]
    return choose_policies(names, pods, config)


def _run(
    node_list: NodeList,
    pod_list: PodList,
    chosen: list[str | Policy],
    seed_list: list[int],
    *,
    settings: SimulationSettings,
    workers: int,
) -> list[PolicyResult]:
    with Progress(
        TextColumn("simulating"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.description}", markup=False),
        TimeElapsedColumn(),
        console=err,
        transient=True,
    ) as bar:
        task = bar.add_task("", total=len(chosen) * len(seed_list))

        def tick(replay: ReplayResult) -> None:
            bar.update(task, advance=1, description=f"{replay.policy} seed {replay.seed}")

        return simulate(
            node_list, pod_list, chosen, seed_list, settings, workers=workers, progress=tick
        )


def _print_tables(results: list[PolicyResult], total_gpus: int, workload: str) -> None:
    seeds = len(results[0].seeds)
    arrived = results[0].arrived_ratio
    at = min(_FRAG_AT_STEP, len(arrived) - 1)
    summary = data_table(
        title=f"Replay of the {workload} workload onto {total_gpus:,} GPUs, {seeds} seed(s)",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    # Short headers keep the table inside 80 columns (docs/analytics/simulator.md explains them).
    columns = (
        "policy",
        "alloc",
        "unalloc GPUs",
        "range",
        "1st fail",
        f"frag@{arrived[at]:.0%}",
        "pods/s",
    )
    summary.add_column(columns[0], no_wrap=True)
    for column in columns[1:]:
        summary.add_column(column, justify="right", overflow="fold")
    for r in results:
        failure = r.first_failure_arrived
        summary.add_row(
            r.policy,
            f"{r.final_alloc_ratio.mean:.2%}",
            f"{r.unallocated_gpus.mean:,.0f}",
            f"{r.unallocated_gpus.min:,.0f}-{r.unallocated_gpus.max:,.0f}",
            "none" if failure is None else f"{failure.mean:.1%}",
            f"{r.frag_ratio[0, at]:.1%}",
            f"{r.pods_per_s:,.0f}",
        )
    out.print(summary)
    curve = data_table(title="GPU allocation by arrived load", box=box.SIMPLE_HEAD, pad_edge=False)
    curve.add_column("arrived", justify="right")
    for r in results:
        curve.add_column(r.policy, justify="right", overflow="fold")
    rows = [i for i in range(len(arrived)) if i % _TABLE_STEP == 0 or i == len(arrived) - 1]
    for i in rows:
        curve.add_row(f"{arrived[i]:.0%}", *(f"{r.alloc_ratio[0, i]:.2%}" for r in results))
    out.print(curve)
    _print_causes(results, arrived[-1])
    _print_failed(results)


def _print_causes(results: list[PolicyResult], load: float) -> None:
    """F(M) at the end by cause (means over seeds)."""
    table = data_table(
        title=f"Why the idle GPUs are fragmented at {load:.0%}: F(M) by cause, GPUs",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    table.add_column("policy", no_wrap=True)
    for cause in CAUSES:
        table.add_column(str(cause), justify="right", overflow="fold")
    for r in results:
        table.add_row(r.policy, *(f"{r.frag_by_cause_gpus[c].mean:,.1f}" for c in CAUSES))
    out.print(table)


def _print_failed(results: list[PolicyResult]) -> None:
    """The pods that failed by kind, and the GPUs they asked for (means over seeds)."""
    table = data_table(
        title="Pods that failed by kind: pods / GPUs requested",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    table.add_column("policy", no_wrap=True)
    kinds = list(results[0].failed_pods_by_kind)
    for kind in kinds:
        table.add_column(kind, justify="right", overflow="fold")
    for r in results:
        cells = (
            f"{r.failed_pods_by_kind[k].mean:,.0f} / {r.failed_gpus_by_kind[k].mean:,.1f}"
            for k in kinds
        )
        table.add_row(r.policy, *cells)
    out.print(table)
