"""CLI: ``sits-observe grafana`` — write the generated Grafana dashboards and provisioning
files, or check (``--check``) that the committed ones equal the generator's output."""

from __future__ import annotations

from pathlib import Path

import typer

from sits_observe.surfaces.grafana import differences, write


def register(app: typer.Typer) -> None:
    """Add the ``grafana`` command to ``app``."""

    @app.command("grafana")
    def grafana(
        *,
        out_dir: Path = typer.Option(
            Path("grafana"),
            "--out",
            help="the grafana/ folder: dashboards/ and provisioning/ are written under it",
        ),
        check: bool = typer.Option(
            False,
            "--check",
            help="write nothing; exit 1 when a file under --out differs from the generator",
        ),
    ) -> None:
        """Generate the Grafana dashboards (from the exported metric names) and the
        Grafana file-provisioning YAML (docs/grafana.md)."""
        if check:
            problems = differences(out_dir)
            for problem in problems:
                typer.echo(f"{out_dir}/{problem}", err=True)
            if problems:
                typer.echo("out of date: run `sits-observe grafana` to regenerate", err=True)
                raise typer.Exit(code=1)
            typer.echo(f"{out_dir}: up to date")
            return
        for path in write(out_dir):
            typer.echo(f"wrote {path}")
