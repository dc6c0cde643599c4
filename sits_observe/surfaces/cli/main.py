"""The composition root of the command line: builds the Typer app from one module per
command group. Each module exposes ``register(app)`` and builds its own concrete objects
from its flags; nothing here holds logic.

Typer's Rich formatting is off (``rich_markup_mode=None``): with it, a usage error is drawn
in a box at the terminal's width and its message wraps mid-phrase, so a CI log could not
grep it. Click's plain output keeps each error on one line (see :mod:`.console` for the rules
the commands' own output follows)."""

from __future__ import annotations

import sys

import typer

from sits_observe.surfaces.cli import (
    agent,
    controller,
    demo,
    experiment,
    grafana,
    ingest,
    report_commands,
    serve,
    simulate,
    store_cmds,
    ui,
)

app = typer.Typer(
    name="sits-observe",
    help="Observability and capacity analytics for AI GPU clusters on Kubernetes.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
ingest_app = typer.Typer(
    help="Load samples into a DuckDB store once (files, URLs, trees).", rich_markup_mode=None
)
app.add_typer(ingest_app, name="ingest")

ingest.register(ingest_app)
serve.register(app)
agent.register(app)
demo.register(app)
store_cmds.register(app)
report_commands.register(app)
controller.register(app)
simulate.register(app)
experiment.register(app)
grafana.register(app)
ui.register(app)


def main() -> None:
    """Entry point of ``sits-observe``."""
    app()


def kubectl_app() -> typer.Typer:
    """The ``kubectl sits`` plug-in: the read commands only (one per report), reading a
    DuckDB file (``--db``) or, in a cluster, the service (``--service URL``)."""
    plugin = typer.Typer(
        name="kubectl sits",
        help="Read sits-observe reports (fleet, latency, recommend, ...) from a DuckDB file "
        "(--db) or a running sits-observe service (--service URL with a read token).",
        no_args_is_help=True,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
    )
    report_commands.register(plugin)
    return plugin


def kubectl_main() -> None:
    """Entry point of ``kubectl-sits`` (``kubectl sits ...``)."""
    kubectl_app()(prog_name="kubectl sits", args=sys.argv[1:])
