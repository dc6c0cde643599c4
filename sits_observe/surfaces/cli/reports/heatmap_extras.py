"""What ``sits-observe heatmap`` adds to its generated command: the picture and the text grid.

- ``--png FILE``: the heatmap as a PNG (:mod:`sits_observe.analytics.heatmap.png`); with
  ``--by``, one file per group, ``FILE-<group>.png``.
- ``--grid``: after the tables, the requests per cell as a grid (latency bins as rows,
  throughput bins as columns), when it fits the terminal (``-o table`` / ``wide`` only).

Both draw the report's ``cells``; when the report lists another table (``--table bins``,
the default), the cells are read once more for the same window.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import typer

from sits_observe.analytics.heatmap.grid import Heatmap
from sits_observe.analytics.heatmap.png import render_png
from sits_observe.errors import ConfigError
from sits_observe.reports.result import Report
from sits_observe.reports.serving.heatmap import SPEC
from sits_observe.reports.serving.heatmap_maps import heatmaps_of
from sits_observe.reports.serving.heatmap_query import HeatmapTable
from sits_observe.surfaces.cli.console import data_table, err, note, out, styled
from sits_observe.surfaces.cli.reports.output import Output
from sits_observe.surfaces.cli.reports.reads import promql_reader, read_report

_MAX_GRID_COLUMNS = 30
_MAX_GRID_ROWS = 60


def parameters() -> list[inspect.Parameter]:
    """``--png FILE`` and ``--grid``."""
    keyword = inspect.Parameter.KEYWORD_ONLY
    return [
        inspect.Parameter(
            "png",
            keyword,
            default=typer.Option(
                None, "--png", help="also write the picture here (with --by: FILE-<group>.png)"
            ),
            annotation=Path | None,
        ),
        inspect.Parameter(
            "grid",
            keyword,
            default=typer.Option(
                False, "--grid/--no-grid", help="also print requests per cell as a text grid"
            ),
            annotation=bool,
        ),
    ]


def after(report: Report, flags: dict[str, Any]) -> None:
    """Write the pictures and print the grids ``flags`` ask for."""
    png: Path | None = flags.get("png")
    grid = bool(flags.get("grid"))
    if png is None and not grid:
        return
    if png is not None and report.facts.get("store") == "promql":
        raise ConfigError(
            "--png draws latency bins of --latency-bin-ms; a PromQL store's histogram buckets "
            "are not evenly wide: use --grid or --table cells -o csv"
        )
    cells = report.facts.get("table") == HeatmapTable.cells.value
    maps = heatmaps_of(report if cells else _with_cells(report, flags))
    if grid:
        if flags.get("output") in (Output.table, Output.wide):
            for h in maps:
                print_grid(h)
        else:
            note("--grid prints with -o table or wide only")
    if png is not None:
        for h, path in zip(maps, png_paths(png, maps), strict=True):
            path.write_bytes(render_png(h))
            err.print(f"wrote {path} ({h.requests} requests)")


def _with_cells(report: Report, flags: dict[str, Any]) -> Report:
    """The same report with ``--table cells``, over exactly ``report``'s window."""
    window = report.window
    values = {name: flags.get(name) for name in SPEC.settings.model_fields}
    reader = promql_reader(flags)
    try:
        return read_report(
            SPEC,
            db=flags.get("db"),
            service=flags.get("service"),
            token_file=flags.get("token_file"),
            since=None if window.seconds is None else f"{window.seconds}s",
            until=window.until.isoformat(),
            values={**values, "table": HeatmapTable.cells.value},
            promql=reader,
        )
    finally:
        if reader is not None:
            reader.client.close()


def png_paths(path: Path, maps: Sequence[Heatmap]) -> list[Path]:
    """``path`` for one heatmap; ``<stem>-<group><suffix>`` for each of several."""
    if len(maps) == 1:
        return [path]
    safe = [re.sub(r"[^A-Za-z0-9_.-]+", "_", str(h.group)) for h in maps]
    return [path.with_name(f"{path.stem}-{name}{path.suffix}") for name in safe]


def print_grid(h: Heatmap) -> None:
    """Requests per cell of ``h``: latency bins (ms, highest first) x throughput bins (rps)."""
    head = "every selected request" if h.by is None else f"{h.by} = {h.group}"
    out.print(styled((head, "bold"), f": {h.requests} requests"))
    cells = h.cells.to_pylist()
    lat_bins = sorted({c["latency_bin"] for c in cells})
    thr_bins = sorted({c["throughput_bin"] for c in cells})
    rows = lat_bins[-1] - lat_bins[0] + 1
    cols = thr_bins[-1] - thr_bins[0] + 1
    max_columns = max(3, min(_MAX_GRID_COLUMNS, (out.width - 10) // 7))
    if cols > max_columns or rows > _MAX_GRID_ROWS:
        out.print(
            f"(grid of {cols} throughput x {rows} latency bins is too large for a terminal; "
            "use --png, --table cells -o csv, or wider bins)"
        )
        return
    count = {(c["latency_bin"], c["throughput_bin"]): c["count"] for c in cells}
    lat_lo = {c["latency_bin"]: c["latency_lo_ms"] for c in cells}
    thr_lo = {c["throughput_bin"]: c["throughput_lo_rps"] for c in cells}
    s = h.settings
    table = data_table(title="requests per cell: latency (ms, rows) x time-bin throughput (rps)")
    table.add_column("ms \\ rps", justify="right")
    for j in range(thr_bins[0], thr_bins[-1] + 1):
        table.add_column(f"{thr_lo.get(j, j * s.throughput_bin_rps):g}", justify="right")
    for i in range(lat_bins[-1], lat_bins[0] - 1, -1):
        label = f"{lat_lo.get(i, h.latency_lo_ms(i)):g}"
        table.add_row(
            label, *(compact(count.get((i, j))) for j in range(thr_bins[0], thr_bins[-1] + 1))
        )
    out.print(table)


def compact(count: int | None) -> str:
    """A cell count in at most 4 characters: 7, 950, 9.5k, 12k, 3.1M."""
    if count is None:
        return ""
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if count >= limit * 10:
            return f"{count / limit:.0f}{suffix}"
        if count >= limit:
            return f"{count / limit:.1f}{suffix}"
    return str(count)


#: The ``COMMAND_EXTRAS`` entry of ``heatmap``.
EXTRAS = (parameters(), after)
