"""The PNG writer: a valid file (signature, chunk CRCs, sizes) whose pixels are the grid."""

from __future__ import annotations

import dataclasses
import struct
import zlib
from datetime import datetime, timedelta

import numpy as np
import pyarrow as pa
import pytest

from sits_observe.analytics.heatmap.grid import compute_heatmaps, heatmap_settings
from sits_observe.analytics.heatmap.png import (
    PNG_SIGNATURE,
    colour_scale,
    encode_png,
    render_png,
)
from sits_observe.errors import ConfigError
from sits_observe.store import Store

T0 = datetime(2026, 5, 4, 10, 0, 0)


def decode(data: bytes) -> tuple[np.ndarray, dict[str, str]]:
    """A minimal PNG reader for 8-bit RGB, filter 0 (what encode_png writes); checks CRCs."""
    assert data[:8] == PNG_SIGNATURE
    pos, idat, text = 8, b"", {}
    width = height = 0
    kinds = []
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length : pos + 12 + length])
        assert crc == zlib.crc32(kind + body) & 0xFFFFFFFF, kind
        kinds.append(kind)
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert (depth, colour, interlace) == (8, 2, 0)
        elif kind == b"IDAT":
            idat += body
        elif kind == b"tEXt":
            key, value = body.split(b"\0", 1)
            text[key.decode("latin-1")] = value.decode("latin-1")
        pos += 12 + length
    assert kinds[0] == b"IHDR" and kinds[-1] == b"IEND"
    raw = np.frombuffer(zlib.decompress(idat), dtype=np.uint8).reshape(height, 1 + 3 * width)
    assert (raw[:, 0] == 0).all()
    return raw[:, 1:].reshape(height, width, 3), text


def test_encode_round_trips_pixels() -> None:
    image = np.array([[[255, 0, 0], [0, 255, 0]], [[0, 0, 255], [9, 8, 7]]], dtype=np.uint8)
    pixels, text = decode(encode_png(image, {"Title": "x"}))
    assert (pixels == image).all()
    assert text == {"Title": "x"}
    with pytest.raises(ValueError, match="uint8"):
        encode_png(np.zeros((2, 2), dtype=np.uint8))


def test_colour_scale_ends() -> None:
    ends = colour_scale(np.array([0.0, 1.0]))
    assert ends.tolist() == [[68, 1, 84], [253, 231, 37]]


def test_render_draws_the_grid() -> None:
    with Store.open(":memory:") as store:
        # window 1: 3 requests at 0.05 s; window 2: 1 request at 0.25 s
        ts = [T0, T0 + timedelta(milliseconds=1), T0 + timedelta(milliseconds=2)]
        ts.append(T0 + timedelta(seconds=1))
        store.append(
            "requests",
            pa.table(
                {
                    "ts": pa.array(ts, pa.timestamp("us")),
                    "model": ["m"] * 4,
                    "latency_s": [0.05, 0.05, 0.05, 0.25],
                }
            ),
        )
        [h] = compute_heatmaps(store, heatmap_settings(throughput_bin_rps=1, min_bin_requests=1))
    pixels, text = decode(render_png(h))
    assert "max count 3" in text["Description"]
    # grid: throughput bins 1..3 (3 columns) x latency bins 0..2 (3 rows), 24 px cells,
    # inside a margin; the most-populated cell (3 rps, 0-100 ms) is the top of the scale
    yellow = np.all(pixels == [253, 231, 37], axis=2)
    dark = np.all(pixels == [68, 1, 84], axis=2)
    assert yellow.sum() > 0 and dark.sum() > 0
    ys, xs = np.nonzero(yellow)
    yd, xd = np.nonzero(dark)
    assert xs.min() > xd.max()  # 3 rps is right of 1 rps
    assert ys.min() > yd.max()  # 0.05 s is below 0.25 s


def test_empty_or_huge_grids_are_refused_clearly() -> None:
    with Store.open(":memory:") as store:
        store.append(
            "requests",
            pa.table(
                {
                    "ts": pa.array([T0, T0], pa.timestamp("us")),
                    "model": ["m", "m"],
                    "latency_s": [0.0, 5.0],
                }
            ),
        )
        [h] = compute_heatmaps(store, heatmap_settings(latency_bin_ms=0.001))
    with pytest.raises(ConfigError, match="widen --latency-bin-ms"):
        render_png(h)  # 5,000,001 latency bins of 1 us
    empty = dataclasses.replace(h, cells=h.cells.slice(0, 0))
    with pytest.raises(ConfigError, match="no cells"):
        render_png(empty)
