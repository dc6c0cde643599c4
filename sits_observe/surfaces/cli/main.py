"""The composition root of the command line: builds the Typer app from one module per
command group. Each module exposes ``register(app)`` and builds its own concrete objects
from its flags; nothing here holds logic.

Typer's Rich formatting is off (``rich_markup_mode=None``): with it, a usage error is drawn
in a box at the terminal's width and its message wraps mid-phrase, so a CI log could not
grep it. Click's plain output keeps each error on one line (see :mod:`.console` for the rules
the commands' own output follows)."""

from __future__ import annotations

import importlib
import sys

import typer

from sits_observe.surfaces.cli.startup import pause_collection, resume_collection

#: The command modules, each with ``register(app)``, in the order ``--help`` lists them.
_MODULES = (
    "serve",
    "agent",
    "lab.demo",
    "store_cmds",
    "reports.commands",
    "controller",
    "lab.simulate",
    "lab.simulate_dra",
    "lab.experiment",
    "grafana",
    "ui",
)
#: Long-running commands started on their own (a Deployment's or DaemonSet's entry): ``main``
#: imports only their module, so a restarted ``serve`` answers sooner (the extender's cold
#: start, docs/extender.md) and imports nothing of the other commands.
_ALONE = ("serve", "agent", "controller")
#: Commands that turn the garbage collector back on themselves, once started (:mod:`.startup`).
_RESUME_THEMSELVES = ("serve",)
_HELP = "Observability and capacity analytics for AI GPU clusters on Kubernetes."


def _typer(**extra: object) -> typer.Typer:
    return typer.Typer(pretty_exceptions_enable=False, rich_markup_mode=None, **extra)  # type: ignore[arg-type]


def build_app(only: str | None = None) -> typer.Typer:
    """The ``sits-observe`` app: every command, or only the long-running one ``only``."""
    root = _typer(name="sits-observe", help=_HELP, no_args_is_help=True)
    if only is not None:

        @root.callback()
        def _one() -> None:
            """Observability and capacity analytics for AI GPU clusters on Kubernetes."""

        importlib.import_module(f"sits_observe.surfaces.cli.{only}").register(root)
        return root
    ingest_app = _typer(help="Load samples into a DuckDB store once (files, URLs, trees).")
    root.add_typer(ingest_app, name="ingest")
    importlib.import_module("sits_observe.surfaces.cli.ingest.commands").register(ingest_app)
    for name in _MODULES:
        importlib.import_module(f"sits_observe.surfaces.cli.{name}").register(root)
    return root


def __getattr__(name: str) -> typer.Typer:
    """``app``, every command (built on first use: tests and docs/cli.md's generator)."""
    if name != "app":
        raise AttributeError(name)
    app = build_app()
    globals()["app"] = app
    return app


def main() -> None:
    """Entry point of ``sits-observe``."""
    name = sys.argv[1] if len(sys.argv) > 1 else None
    pause_collection()  # while the command's modules import (startup.py)
    app = build_app(name if name in _ALONE else None)
    if name not in _RESUME_THEMSELVES:
        resume_collection()
    app()


def kubectl_app() -> typer.Typer:
    """The ``kubectl sits`` plug-in: the read commands only (one per report), reading a
    DuckDB file (``--db``) or, in a cluster, the service (``--service URL``)."""
    plugin = _typer(
        name="kubectl sits",
        help="Read sits-observe reports (fleet, latency, recommend, ...) from a DuckDB file "
        "(--db) or a running sits-observe service (--service URL with a read token).",
        no_args_is_help=True,
    )
    from sits_observe.surfaces.cli.reports import commands as report_commands

    report_commands.register(plugin)
    return plugin


def kubectl_main() -> None:
    """Entry point of ``kubectl-sits`` (``kubectl sits ...``)."""
    kubectl_app()(prog_name="kubectl sits", args=sys.argv[1:])
