"""A heatmap as a PNG picture, written with numpy and zlib alone (no plotting library).

matplotlib is not a dependency of sits_observe, and a heatmap is a coloured grid: a PNG of
one (RFC 2083 / ISO 15948: signature, ``IHDR``, ``IDAT`` with zlib-compressed scanlines,
``IEND``, each chunk with a CRC-32) takes a few lines. The picture:

- x: throughput bins, lowest at the left; y: latency bins, lowest at the bottom; one square
  of ``cell_px`` pixels per cell, the grid spanning the lowest to the highest populated bin.
- colour: ``log(count) / log(largest count)`` on a viridis-like scale (dark purple = one
  request, yellow = the fullest cell); empty cells are white.
- overlays: the per-throughput-bin P95 as a white mark in its latency row, the knee as a red
  vertical line at its lower edge, the safe maximum as a green one and the SLO as an orange
  horizontal line.
- tick labels in a 3x5 pixel digit font: throughput (requests/s) below, latency (ms) left.
  The axes' meaning, the bin widths and the largest count are in ``tEXt`` chunks.
"""

from __future__ import annotations

import math
import struct
import zlib
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from sits_observe.analytics.heatmap.grid import Heatmap
from sits_observe.errors import ConfigError

#: Largest grid (cells) drawn; wider bins are needed beyond it.
MAX_CELLS = 4_000_000
#: Target size of the grid's longer side, in pixels.
TARGET_PX = 720
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

# viridis at 0, 0.25, 0.5, 0.75 and 1 (matplotlib's colormap data, sampled)
_SCALE = np.array(
    [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]], dtype=np.float64
)
_WHITE = np.array([255, 255, 255], dtype=np.uint8)
_RED = np.array([220, 30, 30], dtype=np.uint8)
_GREEN = np.array([30, 170, 60], dtype=np.uint8)
_ORANGE = np.array([245, 140, 0], dtype=np.uint8)
_INK = np.array([40, 40, 40], dtype=np.uint8)

# 3x5 glyphs, rows top to bottom, 3 bits each (4 = left pixel)
_GLYPHS: dict[str, tuple[int, int, int, int, int]] = {
    "0": (7, 5, 5, 5, 7),
    "1": (2, 6, 2, 2, 7),
    "2": (7, 1, 7, 4, 7),
    "3": (7, 1, 7, 1, 7),
    "4": (5, 5, 7, 1, 1),
    "5": (7, 4, 7, 1, 7),
    "6": (7, 4, 7, 5, 7),
    "7": (7, 1, 1, 1, 1),
    "8": (7, 5, 7, 5, 7),
    "9": (7, 5, 7, 1, 7),
    ".": (0, 0, 0, 0, 2),
    "-": (0, 0, 7, 0, 0),
    "e": (0, 7, 7, 4, 7),
}
_FONT_PX = 2  # each glyph pixel drawn as 2x2


def encode_png(rgb: npt.NDArray[np.uint8], text: dict[str, str] | None = None) -> bytes:
    """PNG bytes of an ``(height, width, 3)`` uint8 RGB image, with optional ``tEXt``."""
    if rgb.ndim != 3 or rgb.shape[2] != 3 or rgb.dtype != np.uint8:
        raise ValueError(f"need an (h, w, 3) uint8 array, got {rgb.shape} {rgb.dtype}")
    height, width = rgb.shape[0], rgb.shape[1]
    # each scanline is prefixed with filter type 0 (none)
    raw = np.concatenate([np.zeros((height, 1), np.uint8), rgb.reshape(height, -1)], axis=1)
    chunks = [_chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))]
    for key, value in (text or {}).items():
        chunks.append(_chunk(b"tEXt", key.encode("latin-1") + b"\0" + value.encode("latin-1")))
    chunks.append(_chunk(b"IDAT", zlib.compress(raw.tobytes(), 6)))
    chunks.append(_chunk(b"IEND", b""))
    return PNG_SIGNATURE + b"".join(chunks)


def _chunk(kind: bytes, data: bytes) -> bytes:
    crc = zlib.crc32(kind + data) & 0xFFFFFFFF
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)


def colour_scale(fraction: npt.NDArray[np.float64]) -> npt.NDArray[np.uint8]:
    """Colours of ``fraction`` values in [0, 1] on the viridis-like scale."""
    position = np.clip(fraction, 0.0, 1.0) * (len(_SCALE) - 1)
    low = np.minimum(position.astype(np.int64), len(_SCALE) - 2)
    weight = (position - low)[..., None]
    mixed = _SCALE[low] * (1 - weight) + _SCALE[low + 1] * weight
    colours: npt.NDArray[np.uint8] = np.rint(mixed).astype(np.uint8)
    return colours


@dataclass(frozen=True)
class _Grid:
    """Where the cells go: the lowest bins drawn, the grid size and pixels per cell."""

    lat0: int
    thr0: int
    rows: int
    cols: int
    px: int


def render_png(heatmap: Heatmap) -> bytes:
    """The PNG picture of ``heatmap`` (layout in the module docstring)."""
    cells = heatmap.cells
    if cells.num_rows == 0:
        raise ConfigError("the heatmap has no cells to draw")
    lat = np.asarray(cells.column("latency_bin").to_numpy(), dtype=np.int64)
    thr = np.asarray(cells.column("throughput_bin").to_numpy(), dtype=np.int64)
    counts = np.asarray(cells.column("count").to_numpy(), dtype=np.float64)
    lat0, thr0 = int(lat.min()), int(thr.min())
    rows, cols = int(lat.max()) - lat0 + 1, int(thr.max()) - thr0 + 1
    if rows * cols > MAX_CELLS:
        raise ConfigError(
            f"the grid would be {cols} throughput x {rows} latency bins; draw at most "
            f"{MAX_CELLS:,} cells: widen --latency-bin-ms or --throughput-bin-rps"
        )
    grid = _Grid(lat0, thr0, rows, cols, max(1, min(24, TARGET_PX // max(rows, cols))))
    colours = np.full((rows, cols, 3), _WHITE, dtype=np.uint8)
    top = float(counts.max())
    shade = np.log(counts) / math.log(top) if top > 1 else np.ones_like(counts)
    colours[rows - 1 - (lat - lat0), thr - thr0] = colour_scale(shade)
    image = np.repeat(np.repeat(colours, grid.px, axis=0), grid.px, axis=1)
    _overlay(image, heatmap, grid)
    s = heatmap.settings
    text = {
        "Title": f"sits-observe latency-throughput heatmap{_group(heatmap)}",
        "Description": (
            f"x: window throughput, bins of {s.throughput_bin_rps:g} requests/s from "
            f"{thr0 * s.throughput_bin_rps:g}; y: latency, bins of {s.latency_bin_ms:g} ms "
            f"from {lat0 * s.latency_bin_ms:g} ms; colour log(count) from 1 (purple) to max count "
            f"{int(counts.max())}; windows of {s.window_s:g} s; white mark = P95 of the "
            "throughput bin, red line = knee, green = safe maximum, orange = SLO"
        ),
        "Software": "sits-observe",
    }
    return encode_png(_frame(image, heatmap, grid), text)


def _group(heatmap: Heatmap) -> str:
    return "" if heatmap.group is None else f" ({heatmap.by}={heatmap.group})"


def _overlay(image: npt.NDArray[np.uint8], heatmap: Heatmap, grid: _Grid) -> None:
    """Draw the P95 marks, knee, safe maximum and SLO onto ``image`` in place."""
    s, px = heatmap.settings, grid.px
    height, width = image.shape[0], image.shape[1]
    mark = max(1, px // 3)
    for b in heatmap.bins:
        col = round(b.throughput_lo_rps / s.throughput_bin_rps) - grid.thr0
        row = grid.rows - 1 - (int(b.p95_s * 1000 // s.latency_bin_ms) - grid.lat0)
        if 0 <= row < grid.rows and 0 <= col < grid.cols:
            y, x = row * px + px // 2, col * px + px // 2
            image[max(0, y - mark) : y + mark + 1, max(0, x - mark) : x + mark + 1] = _WHITE
    lines = []
    if heatmap.knee.value is not None:
        lines.append((heatmap.knee.value.throughput_lo_rps, _RED))
    if heatmap.safe_max is not None and heatmap.safe_max.value is not None:
        lines.append((heatmap.safe_max.value.throughput_lo_rps, _GREEN))
    thick = max(1, px // 6)
    for rps, colour in lines:
        x = (round(rps / s.throughput_bin_rps) - grid.thr0) * px
        if 0 <= x < width:
            image[:, x : x + thick + 1] = colour
    if s.slo_ms is not None:
        y = height - round((s.slo_ms / s.latency_bin_ms - grid.lat0) * px)
        if 0 <= y < height:
            image[y : y + thick + 1, :] = _ORANGE


def _frame(image: npt.NDArray[np.uint8], heatmap: Heatmap, grid: _Grid) -> npt.NDArray[np.uint8]:
    """``image`` in a white margin with ticks and labels (latency left, throughput below)."""
    s, px = heatmap.settings, grid.px
    glyph_w, glyph_h = 4 * _FONT_PX, 6 * _FONT_PX
    left, bottom, pad, tick = glyph_w * 9 + 4, glyph_h + 8, 6, 3
    height, width = image.shape[0], image.shape[1]
    canvas = np.full((height + bottom + pad, width + left + pad, 3), _WHITE, dtype=np.uint8)
    canvas[pad : pad + height, left : left + width] = image
    for i in _ticks(grid.rows):
        y = pad + height - i * px - 1
        canvas[y, left - tick : left] = _INK
        label = _number((grid.lat0 + i) * s.latency_bin_ms)
        _write(canvas, label, max(0, y - glyph_h // 2), left - tick - 2 - len(label) * glyph_w)
    for j in _ticks(grid.cols):
        x = left + j * px
        canvas[pad + height : pad + height + tick, x] = _INK
        label = _number((grid.thr0 + j) * s.throughput_bin_rps)
        start = min(max(0, x - len(label) * glyph_w // 2), canvas.shape[1] - len(label) * glyph_w)
        _write(canvas, label, pad + height + tick + 2, start)
    return canvas


def _ticks(n: int) -> list[int]:
    """About five evenly spaced bin offsets, always including 0."""
    step = max(1, math.ceil(n / 5))
    return list(range(0, n, step))


def _number(value: float) -> str:
    return f"{value:.6g}".replace("e+0", "e").replace("e+", "e")


def _write(canvas: npt.NDArray[np.uint8], text: str, top: int, left: int) -> None:
    """Draw ``text`` (digits, '.', '-', 'e') with its top-left corner at (top, left)."""
    for k, char in enumerate(text):
        for r, bits in enumerate(_GLYPHS.get(char, (0, 0, 0, 0, 0))):
            for c in range(3):
                if bits & (4 >> c):
                    y = top + r * _FONT_PX
                    x = left + (k * 4 + c) * _FONT_PX
                    if (
                        0 <= y <= canvas.shape[0] - _FONT_PX
                        and 0 <= x <= canvas.shape[1] - _FONT_PX
                    ):
                        canvas[y : y + _FONT_PX, x : x + _FONT_PX] = _INK
