"""``heatmap --grid`` of a PromQL store's heatmap: its rows are the histogram's buckets.

A bucket between two non-empty ones has no cell; its row is still labelled with the
bucket's lower bound (ms), read from the heatmap, also when the report travelled as JSON
(``--service``) and was read back.
"""

from __future__ import annotations

import io
from contextlib import redirect_stdout
from dataclasses import replace

from sits_observe.analytics.heatmap.grid import Heatmap
from sits_observe.analytics.heatmap.histograms import histogram_heatmaps
from sits_observe.surfaces.cli.reports.heatmap_extras import print_grid
from tests.unit.analytics.test_heatmap_histograms import SETTINGS, _rows, _table


def grid_rows(h: Heatmap) -> list[str]:
    """The first column of each data row of the printed grid."""
    stdout = io.StringIO()
    with redirect_stdout(stdout):
        print_grid(h)
    labels = []
    for line in stdout.getvalue().splitlines():
        cells = [c.strip() for c in line.replace("│", "|").split("|") if c.strip()]
        if cells and cells[0].replace(".", "", 1).isdigit():
            labels.append(cells[0])
    return labels


def test_rows_between_two_non_empty_buckets_are_labelled_with_their_bounds() -> None:
    table = _table(_rows("p0", [[0, 0, 0, 0], [4, 4, 4, 10]]))  # buckets 0 and 3 only
    (heatmap,) = histogram_heatmaps(table, SETTINGS).maps
    assert grid_rows(heatmap) == ["2000", "1000", "500", "0"]  # highest first
    # Without the edges (a request heatmap) the rows are latency_bin_ms multiples.
    even = replace(heatmap, latency_edges_ms=None)
    step = SETTINGS.latency_bin_ms
    assert grid_rows(even) == ["2000", f"{2 * step:g}", f"{step:g}", "0"]
