"""The real app in a real browser: ``streamlit run dashboards/app.py`` and headless Chromium.

Streamlit draws client-side over a websocket, so the screenshot is retried with a longer
virtual-time budget until the page is drawn; the PNG is decoded here (zlib, no new
dependency) and must hold a drawn page, not one flat colour.
"""

from __future__ import annotations

import shutil
import socket
import struct
import subprocess
import sys
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from sits_observe.store import Store
from tests.unit.surfaces.test_ui_pages import APP, fill_store

pytestmark = pytest.mark.slow
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
#: A drawn page has text, tables and charts right of the sidebar: many colours, and more than
#: a few percent of the area unlike the background (a loading page has a blank main area).
MIN_COLOURS = 64
MIN_INK_RATIO = 0.03
SIDEBAR_PX = 320


def decode_png(data: bytes) -> tuple[int, int, list[bytes]]:
    """(width, height, rows of RGB(A) bytes) of an 8-bit, non-interlaced RGB or RGBA PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, b"", b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", header)
    assert depth == 8 and colour in (2, 6) and interlace == 0, (depth, colour, interlace)
    bpp = 3 if colour == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows: list[bytes] = []
    previous = bytearray(stride)
    for y in range(height):
        kind, line = (
            raw[y * (stride + 1)],
            bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)]),
        )
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b = previous[x]
            c = previous[x - bpp] if x >= bpp else 0
            if kind == 1:
                line[x] = (line[x] + a) & 0xFF
            elif kind == 2:
                line[x] = (line[x] + b) & 0xFF
            elif kind == 3:
                line[x] = (line[x] + (a + b) // 2) & 0xFF
            elif kind == 4:
                p = a + b - c
                pa_, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa_ <= pb and pa_ <= pc else b if pb <= pc else c
                line[x] = (line[x] + pred) & 0xFF
        rows.append(bytes(line))
        previous = line
    return width, height, rows


def main_area(rows: list[bytes], bpp: int, left: int) -> tuple[int, float]:
    """(distinct colours, share of pixels unlike the most common one) right of the sidebar,
    sampling every 2nd row and column."""
    counts: dict[bytes, int] = {}
    for row in rows[::2]:
        for x in range(left * bpp, len(row) - bpp + 1, bpp * 2):
            pixel = row[x : x + 3]
            counts[pixel] = counts.get(pixel, 0) + 1
    total = sum(counts.values())
    return len(counts), 1 - max(counts.values()) / total


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def app_url(tmp_path: Path) -> Iterator[str]:
    db = tmp_path / "ui.duckdb"
    with Store.open(db) as store:
        fill_store(store)
    port = free_port()
    command = [
        sys.executable, "-m", "streamlit", "run", str(APP),
        "--server.port", str(port), "--server.address", "127.0.0.1",
        "--server.headless", "true", "--browser.gatherUsageStats", "false",
        "--", "--db", str(db), "--since", "7d",
    ]  # fmt: skip
    log = (tmp_path / "streamlit.log").open("wb")
    proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, (tmp_path / "streamlit.log").read_text()
            try:
                if httpx.get(url + "/_stcore/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "streamlit did not start"
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def screenshot(url: str, png: Path, profile: Path, budget_ms: int) -> None:
    assert CHROMIUM is not None
    subprocess.run(
        [
            CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
            "--no-first-run", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", f"--user-data-dir={profile}", "--window-size=1280,900",
            f"--virtual-time-budget={budget_ms}", "--hide-scrollbars",
            f"--screenshot={png}", url,
        ],
        check=False, capture_output=True, timeout=120,
    )  # fmt: skip


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (Debian package chromium)")
def test_the_fleet_page_draws_in_headless_chromium(app_url: str, tmp_path: Path) -> None:
    png = tmp_path / "fleet.png"
    found, ink = 0, 0.0
    for attempt, budget_ms in enumerate((10_000, 20_000, 30_000, 45_000)):
        png.unlink(missing_ok=True)
        screenshot(app_url, png, tmp_path / f"profile{attempt}", budget_ms)
        if png.exists() and png.stat().st_size:
            width, height, rows = decode_png(png.read_bytes())
            assert (width, height) == (1280, 900)
            found, ink = main_area(rows, len(rows[0]) // width, SIDEBAR_PX)
            if found >= MIN_COLOURS and ink >= MIN_INK_RATIO:
                break
        time.sleep(1)
    assert found >= MIN_COLOURS, f"the page looks blank: {found} colours"
    assert ink >= MIN_INK_RATIO, f"the page looks blank: {ink:.1%} of it drawn"
