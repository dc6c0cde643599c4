"""Helpers shared by CLI commands: error reporting, output formats, flag parsing.

The consoles and the rules every printed line follows (no markup read from data, control
characters escaped, diagnostics never wrapped, natural-width tables off a terminal) live in
:mod:`.console`; ``out`` and ``err`` are re-exported here for the commands. That module (and
Rich, about 55 ms) loads on first use, not when a command module imports this one: ``serve``
prints nothing on a good start, and its extender's first answer waits for every import
before the port (docs/extender.md, cold start).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from enum import StrEnum
from typing import TYPE_CHECKING, Any, TypeVar

import typer
from pydantic import BaseModel

from sits_observe.domain.validation import validate_settings
from sits_observe.errors import SitsError

if TYPE_CHECKING:
    from sits_observe.surfaces.cli.console import PlainConsole, err, out  # re-exported

__all__ = [
    "OutputFormat",
    "cli_errors",
    "err",
    "out",
    "print_error",
    "print_rejected",
    "print_rows",
    "run_cli",
    "settings_from_flags",
]

T = TypeVar("T")


def __getattr__(name: str) -> PlainConsole:
    """``out`` and ``err``, from :mod:`.console` on first use (module docstring)."""
    if name in ("out", "err"):
        from sits_observe.surfaces.cli import console

        return getattr(console, name)  # type: ignore[no-any-return]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
        print_error(str(exc))
        raise typer.Exit(code=2) from exc


def print_error(message: str) -> None:
    """``error: message`` as one line on stderr (the message shown as written)."""
    from sits_observe.surfaces.cli.console import err, styled

    err.print(styled(("error:", "bold red"), " ", message))


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
    from sits_observe.surfaces.cli.console import data_table, out

    table = data_table(title=title)
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*("" if row[c] is None else str(row[c]) for c in columns))
    out.print(table)


M = TypeVar("M", bound=BaseModel)


def settings_from_flags(model: type[M], what: str, **values: object) -> M:
    """``model`` validated from CLI values (None = the model's default); a bad value is a
    :class:`ConfigError` that names the flag (``--field-name``) and what is allowed."""
    return validate_settings(model, values, what=what)


def print_rejected(
    dropped: Mapping[str, int], *, title: str = "rejected, by reason", column: str = "count"
) -> None:
    """What an ingest command did not store, one row per reason (or "rejected: nothing")."""
    if not dropped:
        from sits_observe.surfaces.cli.console import out

        out.print("rejected: nothing")
        return
    print_rows(
        [{"reason": r, column: dropped[r]} for r in sorted(dropped)],
        OutputFormat.table,
        title=title,
    )
