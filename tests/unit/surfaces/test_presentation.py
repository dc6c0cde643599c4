"""How tables read on a terminal: titles on one line, headers whole or the column left out
(and named), rows in natural order; the example affinity rules ship with the package."""

from __future__ import annotations

import io
import tomllib
from pathlib import Path

import pyarrow as pa
from rich.console import Console

from sits_observe.analytics.topology.affinity import EXAMPLE_RULES, load_affinity_rules
from sits_observe.domain.units import Unit
from sits_observe.reports.result import ReportTable, col, natural_key, sorted_rows
from sits_observe.surfaces.cli.reports.output import Output, fitting_columns, print_table

ROOT = Path(__file__).resolve().parents[3]


def _table(title: str, n_columns: int = 2) -> ReportTable:
    columns = tuple(col(f"c{i}", f"column number {i}", Unit.integer) for i in range(n_columns))
    rows = pa.table({f"c{i}": [i] for i in range(n_columns)})
    return ReportTable("t", title, rows, columns)


def _printed(table: ReportTable, width: int) -> list[str]:
    buffer = io.StringIO()
    console = Console(width=width, file=buffer, force_terminal=True, color_system=None)
    print_table(table, Output.table, None, console)
    return buffer.getvalue().splitlines()


def test_a_title_is_one_line_not_wrapped_to_a_narrow_table() -> None:
    title = "Latency per model over the whole window, exact quantiles"
    lines = _printed(_table(title, 1), 100)
    assert lines[0] == f"{title} (1 row)"  # whole, though the table is 16 cells wide


def test_a_column_whose_header_cannot_show_is_left_out_not_cut() -> None:
    lines = _printed(_table("t", 12), 100)
    header = lines[1]
    assert "…" not in header and len(header) <= 100
    headers = [c.header for c in _table("t", 12).columns]
    kept = fitting_columns(headers, [["1"] * 12], 100)
    assert 0 < kept < 12
    assert header.split("   ")[-1].strip() == headers[kept - 1]


def test_rows_sort_numbers_by_value() -> None:
    names = ["gpu-node-2/10", "gpu-node-10/0", "gpu-node-2/9", None, "gpu-node-1/3"]
    assert sorted(names, key=natural_key) == [
        "gpu-node-1/3",
        "gpu-node-2/9",
        "gpu-node-2/10",
        "gpu-node-10/0",
        None,
    ]
    rows = [{"ns": "b", "pod": "p-10"}, {"ns": "a", "pod": "p-2"}, {"ns": "b", "pod": "p-9"}]
    assert [r["pod"] for r in sorted_rows(rows, ("ns", "pod"))] == ["p-2", "p-9", "p-10"]


def test_the_example_affinity_rules_ship_with_the_package() -> None:
    assert EXAMPLE_RULES.read_text() == (ROOT / "deploy" / "affinity-rules.yaml").read_text()
    assert load_affinity_rules("example") == load_affinity_rules(EXAMPLE_RULES)
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    shipped = data["tool"]["setuptools"]["package-data"]["sits_observe"]
    assert str(EXAMPLE_RULES.relative_to(ROOT / "sits_observe")) in shipped
