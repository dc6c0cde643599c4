"""Printing a :class:`~sits_observe.reports.result.Report`: one renderer for every command.

``-o table`` (the default) prints each table of the report with short headers and human
units (:func:`sits_observe.domain.units.human`), one row per line: cells that do not fit the
terminal are cut with an ellipsis rather than wrapped, and ``-o wide`` adds the wide columns
(UUIDs, container ids, raw counts). ``--columns a,b`` picks columns by name or header.
``-o json`` / ``-o yaml`` print the report's document (one shape for every report),
``-o csv`` the main table with raw values. The window and the notes go to stderr, so stdout
holds only data.
"""

from __future__ import annotations

import csv
import json
import math
import sys
from collections.abc import Sequence
from enum import StrEnum
from typing import Any, TextIO

from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.text import Text

from sits_observe.domain.units import Unit, human
from sits_observe.errors import UnknownNameError
from sits_observe.reports.result import Column, Report, ReportTable, json_value
from sits_observe.surfaces.cli.console import data_table, err, note, out, shown


class Output(StrEnum):
    """How a read command prints its report."""

    table = "table"
    wide = "wide"
    json = "json"
    yaml = "yaml"
    csv = "csv"


def pick_columns(table: ReportTable, output: Output, names: Sequence[str] | None) -> list[Column]:
    """The columns to show: ``names`` (by name or header, any case), else the table's
    non-wide ones, or all of them for ``-o wide``."""
    if not names:
        return [c for c in table.columns if output is Output.wide or not c.wide]
    known = {c.name.lower(): c for c in table.columns} | {
        c.header.lower(): c for c in table.columns
    }
    chosen: list[Column] = []
    for name in names:
        column = known.get(name.strip().lower())
        if column is None:
            have = ", ".join(c.name for c in table.columns)
            raise UnknownNameError(f"--columns: no column {name!r} in {table.name}; it has {have}")
        chosen.append(column)
    return chosen


def print_report(
    report: Report,
    output: Output,
    *,
    columns: Sequence[str] | None = None,
    console: Console = out,
    stream: TextIO | None = None,
) -> None:
    """Print ``report`` as ``output`` (see the module docstring)."""
    err.print(f"window: {report.window.describe()}")
    for text in report.notes:
        note(text)
    target = stream or sys.stdout
    if output is Output.json:
        target.write(json.dumps(report.document(), indent=2) + "\n")
        return
    if output is Output.yaml:
        import yaml

        target.write(yaml.safe_dump(report.document(), sort_keys=False, allow_unicode=True))
        return
    if output is Output.csv:
        write_csv(report.main, target)
        return
    shown = [report.main, *(t for t in report.others if t.rows.num_rows)]
    for index, table in enumerate(shown):
        if index:
            console.print()
        print_table(table, output, columns if table is report.main else None, console)


def print_table(
    table: ReportTable, output: Output, names: Sequence[str] | None, console: Console
) -> None:
    """One table of a report, human units, one row per line (see :func:`fit_widths`)."""
    chosen = pick_columns(table, output, names)
    records = table.rows.to_pylist()
    cells = [[human(row.get(c.name), c.unit) for c in chosen] for row in records]
    if names is None:
        kept = fitting_columns(
            [c.header for c in chosen], cells, console.width, wrap=[c.wrap for c in chosen]
        )
        if kept < len(chosen):
            left_out = chosen[kept:]
            note(
                f"{table.name}: {len(left_out)} more column(s) need a wider terminal "
                f"({', '.join(c.header for c in left_out)}; --columns picks them)"
            )
            chosen, cells = chosen[:kept], [line[:kept] for line in cells]
    headers = [c.header for c in chosen]
    widths = fit_widths(headers, cells, console.width, wrap=[c.wrap for c in chosen])
    rows = table.rows.num_rows
    # The title is a line of its own, never wrapped to the table's width (a narrow table
    # would break it mid-phrase); a terminal narrower than the title cuts it with an ellipsis.
    title = f"{table.title} ({rows} row{'' if rows == 1 else 's'})"
    console.print(Text(shown(title), no_wrap=True, overflow="ellipsis"))
    view = data_table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    for c, width in zip(chosen, widths, strict=True):
        numeric = c.unit not in (Unit.text, Unit.time, Unit.flag)
        # Off a terminal the table has its natural width, so nothing folds: one row a line.
        fold = c.wrap and width >= WRAP_MIN
        view.add_column(
            c.header,
            justify="right" if numeric else "left",
            no_wrap=not fold,
            overflow="fold" if fold else "ellipsis",
            width=width,
        )
    for line in cells:
        view.add_row(*line)
    console.print(view)


def fitting_columns(
    headers: Sequence[str],
    cells: Sequence[Sequence[str]],
    width: int,
    *,
    wrap: Sequence[bool] | None = None,
) -> int:
    """How many leading columns fit ``width`` cells at their floors (:func:`_floors`: the
    header whole, a value of up to 12 cells whole): a header cut to ``serv…`` names nothing
    and a number cut to ``10.…`` says nothing, so a column that cannot fit is left out (and
    named in a note) rather than cut below that."""
    floors = _floors(headers, cells, wrap)
    used = 0
    for i, floor in enumerate(floors):
        used += floor + (_GAP if i else 0)
        if used > width and i > 0:
            return i
    return len(headers)


def _natural(headers: Sequence[str], cells: Sequence[Sequence[str]]) -> list[int]:
    return [
        max([shown_len(h), *(shown_len(line[i]) for line in cells)]) for i, h in enumerate(headers)
    ]


def _floors(
    headers: Sequence[str], cells: Sequence[Sequence[str]], wrap: Sequence[bool] | None
) -> list[int]:
    """The narrowest each column is cut: its header whole, and its values up to 12 cells
    (a folding column's up to :data:`WRAP_MIN`) whole."""
    natural = _natural(headers, cells)
    folding = list(wrap) if wrap is not None else [False] * len(headers)
    return [
        max(shown_len(h), min(natural[i], WRAP_MIN if folding[i] else 12))
        for i, h in enumerate(headers)
    ]


def shown_len(text: str) -> int:
    """Terminal cells ``text`` takes as printed: control characters escaped
    (:func:`~.console.shown`), East Asian wide characters two cells."""
    return cell_len(shown(text))


#: Cells between two columns: padding of 1 on each side of the box's blank vertical rule.
_GAP = 3


#: Narrowest a folding column folds at; narrower, it is cut like the others (one line a row).
WRAP_MIN = 16


def fit_widths(
    headers: Sequence[str],
    cells: Sequence[Sequence[str]],
    width: int,
    *,
    wrap: Sequence[bool] | None = None,
) -> list[int]:
    """Column widths for a table ``width`` cells wide: each column's natural width, and
    when they do not fit, the folding (``wrap``) columns narrowed to what the others leave
    (they fold onto more lines) when that is at least :data:`WRAP_MIN`; otherwise the widest
    columns cut down, level by level, never below their floors (:func:`_floors`: the header
    and short values whole), so short columns (a node, a count) stay whole and the long ones
    (a pod name) end in an ellipsis."""
    natural = _natural(headers, cells)
    folding = list(wrap) if wrap is not None else [False] * len(headers)
    floors = _floors(headers, cells, wrap)
    budget = width - _GAP * max(len(headers) - 1, 0)
    widths = list(natural)
    if sum(widths) > budget and any(folding):
        fixed = sum(w for w, f in zip(widths, folding, strict=True) if not f)
        share = (budget - fixed) // sum(folding)
        if share >= WRAP_MIN:
            return [min(w, share) if f else w for w, f in zip(widths, folding, strict=True)]
    while sum(widths) > budget:
        shrinkable = [i for i, w in enumerate(widths) if w > floors[i]]
        if not shrinkable:
            break
        widest = max(widths[i] for i in shrinkable)
        cut = [i for i in shrinkable if widths[i] == widest]
        lower = [widths[i] for i in shrinkable if widths[i] < widest]
        level = max([*lower, *(floors[i] for i in cut)])
        excess = sum(widths) - budget
        step = max(1, min(widest - level, math.ceil(excess / len(cut))))
        for i in cut:
            widths[i] = max(floors[i], widths[i] - step)
    return widths


def write_csv(table: ReportTable, stream: TextIO) -> None:
    """The main table with raw values, every listed column (wide ones too)."""
    names = [c.name for c in table.columns]
    writer = csv.writer(stream)
    writer.writerow(names)
    for row in table.rows.to_pylist():
        writer.writerow([_csv_cell(json_value(row.get(n))) for n in names])


def _csv_cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, list):
        return ";".join(str(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True)
    return value


def table_text(report: Report, width: int, output: Output = Output.table) -> str:
    """Every table of ``report`` as a terminal ``width`` columns wide shows it (no colour):
    what golden-file tests compare."""
    import io

    buffer = io.StringIO()
    console = Console(
        width=width, file=buffer, color_system=None, force_terminal=False, legacy_windows=False
    )
    shown = [report.main, *(t for t in report.others if t.rows.num_rows)]
    for index, table in enumerate(shown):
        if index:
            console.print()
        print_table(table, output, None, console)
    return buffer.getvalue()
