"""``kubectl sits`` offers the read commands only: one per report, nothing that writes."""

from __future__ import annotations

import typer
from typer.testing import CliRunner

from sits_observe.lab.catalog import all_reports
from sits_observe.surfaces.cli.main import app, kubectl_app

REPORTS = all_reports()


def commands(of: typer.Typer) -> set[str]:
    group = typer.main.get_group(of)
    return set(group.commands)


def test_the_plugin_has_one_command_per_report_and_no_other() -> None:
    assert commands(kubectl_app()) == set(REPORTS)
    assert set(REPORTS) < commands(app)  # the same commands as `sits-observe`, and fewer


def test_writing_commands_are_unknown_to_the_plugin() -> None:
    runner = CliRunner()
    for name in ("serve", "demo", "controller", "ingest", "agent"):
        outcome = runner.invoke(kubectl_app(), [name])
        assert outcome.exit_code == 2, name
        assert f"No such command '{name}'" in outcome.output
    usage = runner.invoke(kubectl_app(), ["--help"])
    assert usage.exit_code == 0 and "Usage: kubectl sits" in usage.output
