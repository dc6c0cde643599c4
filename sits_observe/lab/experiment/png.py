"""``experiment --format png``: fragmentation and allocation over time, one line per arm.

A line chart written with numpy and the repository's own PNG encoder
(:func:`sits_observe.analytics.heatmap.png.encode_png`; matplotlib is not a dependency):

- two panels, one above the other, sharing the x axis (simulated time, 0 at the left, the
  run's end at the right): the FGD fragmentation ratio (fragmented share of the idle GPUs)
  on top, the GPU allocation (allocated share of all GPUs) below; each panel's y axis runs
  from 0 % (bottom) to 100 % (top) with grey grid lines every 25 %;
- vertical grid lines every simulated hour (every 10 minutes in runs shorter than 2 hours);
- one 2-pixel line per arm, the mean over seeds at each sample, in the arm's colour:
  :data:`COLOURS` in arm order (the first arm orange, the second blue, ...).

The picture carries no glyphs; its ``tEXt`` chunks name the panels, the axes, the grid and
each arm's colour (``Legend``); docs/experiment.md describes it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from sits_observe.analytics.heatmap.png import encode_png
from sits_observe.lab.experiment.measures import Series

#: Arm colours in order (RGB): orange, blue, green, purple.
COLOURS: tuple[tuple[int, int, int], ...] = (
    (230, 120, 20),
    (30, 100, 200),
    (40, 160, 70),
    (140, 60, 170),
)
#: The colours' names, for legends outside the picture.
COLOUR_NAMES = ("orange", "blue", "green", "purple")
WIDTH_PX = 900
PANEL_PX = 280
MARGIN_PX = 24
_GRID = np.array([215, 215, 215], dtype=np.uint8)
_AXIS = np.array([90, 90, 90], dtype=np.uint8)

Image = npt.NDArray[np.uint8]


def render_chart(arms: Sequence[tuple[str, Series]], end_s: float) -> bytes:
    """The PNG bytes of the chart for ``arms`` (name, mean series) over ``[0, end_s]``."""
    if not arms:
        raise ValueError("a chart needs at least one arm")
    height = 2 * PANEL_PX + 3 * MARGIN_PX
    image = np.full((height, WIDTH_PX, 3), 255, dtype=np.uint8)
    tops = (MARGIN_PX, 2 * MARGIN_PX + PANEL_PX)
    span_s = max(end_s, 1.0)
    for top in tops:
        _panel(image, top, span_s)
    for i, (_, s) in enumerate(arms):
        colour = np.array(COLOURS[i % len(COLOURS)], dtype=np.uint8)
        _line(image, tops[0], t_s=s.t_s, values=s.frag_ratio, span_s=span_s, colour=colour)
        _line(image, tops[1], t_s=s.t_s, values=s.allocation_ratio, span_s=span_s, colour=colour)
    legend = ", ".join(
        f"{name}: #{''.join(f'{c:02x}' for c in COLOURS[i % len(COLOURS)])}"
        for i, (name, _) in enumerate(arms)
    )
    grid = "every hour" if span_s >= 7200 else "every 10 minutes"
    text = {
        "Title": "sits-observe experiment: fragmentation and allocation over time",
        "Description": "top: FGD fragmentation ratio (fragmented share of idle GPUs); "
        "bottom: GPU allocation (allocated share of all GPUs); mean over seeds",
        "Y axis": "0 % at the bottom of each panel, 100 % at the top, grid every 25 %",
        "X axis": f"simulated time, 0 to {span_s / 3600:g} h, grid {grid}",
        "Legend": legend,
    }
    return encode_png(image, text)


def _left() -> int:
    return MARGIN_PX


def _plot_width() -> int:
    return WIDTH_PX - 2 * MARGIN_PX


def _panel(image: Image, top: int, span_s: float) -> None:
    left, width = _left(), _plot_width()
    for quarter in range(5):
        y = top + round((PANEL_PX - 1) * (1 - quarter / 4))
        image[y, left : left + width] = _AXIS if quarter == 0 else _GRID
    step_s = 3600.0 if span_s >= 7200 else 600.0
    t = step_s
    while t < span_s:
        x = left + round((width - 1) * t / span_s)
        image[top : top + PANEL_PX - 1, x] = _GRID
        t += step_s
    image[top : top + PANEL_PX, left] = _AXIS


def _line(
    image: Image,
    top: int,
    *,
    t_s: npt.NDArray[np.float64],
    values: npt.NDArray[np.float64],
    span_s: float,
    colour: npt.NDArray[np.uint8],
) -> None:
    """Draw the polyline through the finite points, 2 pixels thick."""
    keep = np.isfinite(values)
    t, v = t_s[keep], np.clip(values[keep], 0.0, 1.0)
    if t.size == 0:
        return
    width = _plot_width()
    x = _left() + (width - 1) * t / span_s
    y = top + (PANEL_PX - 1) * (1 - v)
    if t.size == 1:
        xs, ys = x, y
    else:
        # Enough points per segment that consecutive ones are at most a pixel apart.
        per = np.maximum(2, np.ceil(np.hypot(np.diff(x), np.diff(y))).astype(np.int64) + 1)
        xs = np.concatenate(
            [np.linspace(a, b, n) for a, b, n in zip(x[:-1], x[1:], per, strict=True)]
        )
        ys = np.concatenate(
            [np.linspace(a, b, n) for a, b, n in zip(y[:-1], y[1:], per, strict=True)]
        )
    cols = np.clip(np.rint(xs).astype(np.int64), 0, image.shape[1] - 1)
    rows = np.clip(np.rint(ys).astype(np.int64), 0, image.shape[0] - 1)
    for dy in (0, 1):
        image[np.clip(rows + dy, 0, image.shape[0] - 1), cols] = colour
