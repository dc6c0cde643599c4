"""CLI: ``sits-observe simulate-dra`` — first fit's device waste on DRA-shaped nodes by node choice.

Replays a generated DRA workload (MIG-profile and whole-GPU claims) onto A100 nodes, some of
whose GPUs are partitionable, under kube-scheduler's default node choice and under the sits
extender's, with the DRA allocator's first-fit device choice on the chosen node, and prints
per policy and seed the stranded memory slices under first fit and under a best-fit device
choice (:mod:`sits_observe.lab.replay.dra`; docs/extender.md, "DRA devices").
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from enum import StrEnum
from pathlib import Path
from typing import Any

import typer

from sits_observe.lab.replay.dra import POLICIES, DraArmResult, DraReplaySettings, dra_replay
from sits_observe.surfaces.cli.common import out, run_cli
from sits_observe.surfaces.cli.console import data_table
from sits_observe.surfaces.cli.flags import SectionedCommand, SettingFlags, with_flags

DRA = SettingFlags(DraReplaySettings, panel="DRA cluster and workload")


class DraFormat(StrEnum):
    """Output formats of ``simulate-dra``."""

    table = "table"
    json = "json"


def register(app: typer.Typer) -> None:
    """Add the ``simulate-dra`` command to ``app``."""
    app.command("simulate-dra", cls=SectionedCommand)(simulate_dra_cmd)


@with_flags(DRA)
def simulate_dra_cmd(
    *,
    seeds: int = typer.Option(5, "--seeds", min=1, max=100, help="replays per policy"),
    scheduler_config: Path | None = typer.Option(
        None,
        "--scheduler-config",
        help="KubeSchedulerConfiguration whose extenders kube-sits runs "
        "[default: deploy/scheduler-config.yaml]",
    ),
    fmt: DraFormat = typer.Option(DraFormat.table, "--format"),
    **flags: Any,
) -> None:
    """First fit's DRA device waste under kube-scheduler's and the extender's node choice."""

    def go() -> None:
        settings = DRA.validate(flags, what="DRA replay")
        results = dra_replay(
            settings,
            list(range(seeds)),
            scheduler_config=str(scheduler_config) if scheduler_config else None,
        )
        if fmt is DraFormat.json:
            sys.stdout.write(json.dumps([asdict(r) for r in results], indent=2) + "\n")
            return
        _print(results)

    run_cli(go)


_COLUMNS = (
    ("placed", "pods_placed"),
    ("failed", "pods_failed"),
    ("alloc", "alloc_ratio"),
    ("free slices", "slices_free"),
    ("stranded FF", "first_fit_stranded_slices"),
    ("stranded BF", "best_fit_stranded_slices"),
    ("wasted", "wasted_slices"),
    ("split FF", "first_fit_split_gpus"),
    ("split BF", "best_fit_split_gpus"),
    ("BF failed", "best_fit_failed"),
)


def _print(results: list[DraArmResult]) -> None:
    rows = []
    for policy in POLICIES:
        mine = [r for r in results if r.policy == policy]
        for r in mine:
            rows.append([policy, str(r.seed), *(_cell(getattr(r, f)) for _, f in _COLUMNS)])
        if len(mine) > 1:
            means = [sum(float(getattr(r, f)) for r in mine) / len(mine) for _, f in _COLUMNS]
            rows.append([policy, "mean", *(_cell(m, mean=True) for m in means)])
    table = data_table("first fit's DRA device waste by node choice (memory slices)")
    for header in ("policy", "seed", *(h for h, _ in _COLUMNS)):
        table.add_column(header, justify="left" if header == "policy" else "right")
    for row in rows:
        table.add_row(*row)
    out.print(table)


def _cell(value: float, *, mean: bool = False) -> str:
    if isinstance(value, float) and (mean or not value.is_integer()):
        return f"{value:.3f}" if value < 1 else f"{value:.1f}"
    return str(int(value))
