"""The experiment's line chart: a valid PNG whose lines sit where the values say."""

from __future__ import annotations

import numpy as np
import pytest

from sits_observe.lab.experiment.measures import Series
from sits_observe.lab.experiment.png import (
    COLOURS,
    MARGIN_PX,
    PANEL_PX,
    WIDTH_PX,
    render_chart,
)
from tests.unit.analytics.test_heatmap_png import decode


def _series(frag: float, alloc: float) -> Series:
    t = np.array([0.0, 1800.0, 3600.0])
    return Series(t, np.full(3, alloc), np.full(3, frag), np.full(3, frag * 4))


def _rows_of(image: np.ndarray, colour: tuple[int, int, int], top: int) -> set[int]:
    """Rows of the panel starting at ``top`` holding a pixel of ``colour``."""
    hit = np.all(image[top : top + PANEL_PX] == np.array(colour, dtype=np.uint8), axis=2)
    return {int(r) + top for r in np.flatnonzero(hit.any(axis=1))}


def test_each_arm_is_a_line_at_its_value_in_both_panels() -> None:
    image, text = decode(render_chart([("a", _series(0.5, 0.75)), ("b", _series(0.25, 1.0))], 3600))
    assert image.shape == (2 * PANEL_PX + 3 * MARGIN_PX, WIDTH_PX, 3)
    top, bottom = MARGIN_PX, 2 * MARGIN_PX + PANEL_PX

    def row(panel_top: int, value: float) -> int:
        return panel_top + round((PANEL_PX - 1) * (1 - value))

    # A constant series is a horizontal line, two pixels thick, at its value.
    assert _rows_of(image, COLOURS[0], top) == {row(top, 0.5), row(top, 0.5) + 1}
    assert _rows_of(image, COLOURS[1], top) == {row(top, 0.25), row(top, 0.25) + 1}
    assert _rows_of(image, COLOURS[0], bottom) == {row(bottom, 0.75), row(bottom, 0.75) + 1}
    assert row(bottom, 1.0) in _rows_of(image, COLOURS[1], bottom)
    # The line spans the plot from the first sample to the last.
    line = np.all(image[row(top, 0.5)] == np.array(COLOURS[0], dtype=np.uint8), axis=1)
    assert np.flatnonzero(line)[[0, -1]].tolist() == [MARGIN_PX, WIDTH_PX - MARGIN_PX - 1]
    assert text["Legend"] == "a: #e67814, b: #1e64c8"
    assert "0 to 1 h" in text["X axis"]


def test_missing_values_leave_a_gap_and_no_arm_is_refused() -> None:
    t = np.array([0.0, 1200.0, 2400.0, 3600.0])
    gappy = Series(t, np.full(4, 0.5), np.array([np.nan, np.nan, 0.5, 0.5]), np.zeros(4))
    image, _ = decode(render_chart([("a", gappy)], 3600))
    line = np.all(image[MARGIN_PX + round((PANEL_PX - 1) * 0.5)] == COLOURS[0], axis=1)
    # Nothing is drawn before the first finite sample (two thirds of the way across).
    assert np.flatnonzero(line)[0] >= MARGIN_PX + (WIDTH_PX - 2 * MARGIN_PX - 1) * 2 // 3
    with pytest.raises(ValueError, match="at least one arm"):
        render_chart([], 3600)
