"""Helpers shared by CLI commands: consoles, error reporting, output formats."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from enum import StrEnum
from typing import Any, TypeVar

import typer
from rich.console import Console
from rich.table import Table

from sits_observe.errors import SitsError

#: Data goes to stdout, diagnostics to stderr.
out = Console()
err = Console(stderr=True)

T = TypeVar("T")


class OutputFormat(StrEnum):
    """How a command prints its result."""

    table = "table"
    json = "json"
    csv = "csv"


@contextmanager
def cli_errors() -> Iterator[None]:
    """Turn package errors into a one-line message on stderr and exit code 2."""
    try:
        yield
    except SitsError as exc:
        err.print(f"[bold red]error:[/] {exc}")
        raise typer.Exit(code=2) from exc


def run_cli(fn: Callable[[], T]) -> T:
    """Call ``fn`` under :func:`cli_errors`."""
    with cli_errors():
        return fn()


def print_rows(
    rows: Sequence[dict[str, Any]], fmt: OutputFormat, *, title: str | None = None
) -> None:
    """Print ``rows`` (same keys each) as a Rich table, JSON list or CSV on stdout."""
    if fmt is OutputFormat.json:
        sys.stdout.write(json.dumps(list(rows), default=str, indent=2) + "\n")
        return
    columns = list(rows[0]) if rows else []
    if fmt is OutputFormat.csv:
        import csv

        writer = csv.DictWriter(sys.stdout, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
        return
    table = Table(title=title)
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*("" if row[c] is None else str(row[c]) for c in columns))
    out.print(table)
