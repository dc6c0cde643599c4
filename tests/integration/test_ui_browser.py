"""The real app in a real browser: ``streamlit run dashboards/app.py`` read by headless Chromium.

One Streamlit process serves every test (a module-scoped fixture) on a store filled by
:func:`~tests.unit.surfaces.test_ui_pages.fill_store`, its rows starting at 18:00 UTC (an
afternoon hour, so a 12-hour clock shows) and the heatmap's SLO at 1 s. One Chromium, driven
over the DevTools protocol (:mod:`tests.integration.browser`), opens each page by its address
(``/``, ``/heatmap``, ... from ``dashboards/app.py``'s pages) and reads what Streamlit drew,
once the script run is over and two reads 0.25 s apart agree: headings, metric labels and
values, the accessible ``<table>`` the data grid keeps beside its canvas, and each Vega-Lite
chart's SVG (axis tick labels, the ARIA labels of its rule marks, their x positions). The
browser runs in Honolulu's zone (UTC-10), so a label that depends on the browser's zone does
not read the UTC hours the tables write. Expected values come from the same reports on the
same file (as the page computes them) and the hand-checked ones of ``fill_store``'s docstring.
"""

from __future__ import annotations

import re
import socket
import struct
import subprocess
import sys
import time
import zlib
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from sits_observe.domain.units import Unit, human
from sits_observe.lab.replay import whatif
from sits_observe.reports.result import ReportTable
from sits_observe.store import Store
from sits_observe.surfaces.ui.app import PAGES
from sits_observe.surfaces.ui.tables import frame
from tests.integration.browser import CHROMIUM, Tab, chromium
from tests.unit.surfaces.test_ui_pages import APP, SINCE, fill_store, report_on

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (Debian package chromium)"),
]
#: A drawn page has text, tables and charts right of the sidebar: many colours, and more than
#: a few percent of the area unlike the background (a loading page has a blank main area).
MIN_COLOURS = 64
MIN_INK_RATIO = 0.03
SIDEBAR_PX = 320
SCREEN = (1280, 900)
#: The heatmap page's P95 SLO (``--slo-ms``): fill_store's 50 rps bin (P95 1.5 s) breaks it.
SLO_MS = 1000.0
#: The browser's zone: UTC-10 all year (no daylight saving), far from UTC.
BROWSER_ZONE = "Pacific/Honolulu"
#: Per page (file stem under dashboards/views/): its address, its title and how many charts
#: it draws (the what-if page after the replay its ``?run=1`` address starts).
ADDRESS = {"fleet": "", "whatif": "whatif?run=1"}
TITLE = {
    "fleet": "Fleet",
    "heatmap": "Latency and throughput",
    "fragmentation": "Fragmentation",
    "whatif": "What-if scheduling",
    "decisions": "Recommendations and decisions",
}
CHARTS = {"fleet": 3, "heatmap": 2, "fragmentation": 2, "whatif": 1, "decisions": 0}
NAMES = [Path(file).stem for file, _title, _icon in PAGES]
TIME_SCALE = re.compile(r"for an? (time|utc) scale")
CLOCK_24 = re.compile(r"([01]\d|2[0-3]):[0-5]\d")

#: What a page shows, read from the DOM in one go (see the module docstring).
SNAPSHOT = """(() => {
  const app = document.querySelector('[data-testid=stApp]');
  const main = document.querySelector('[data-testid=stMain]');
  const text = e => (e ? e.textContent : '').trim();
  const centre = e => {
    const r = e.getBoundingClientRect();
    return Math.round((r.left + r.width / 2) * 10) / 10;
  };
  const all = (root, selector) => [...root.querySelectorAll(selector)];
  return {
    state: app ? app.getAttribute('data-test-script-state') : null,
    headings: all(document, '[data-testid=stMain] h1').map(text),
    text: main ? main.innerText : '',
    body: document.body ? document.body.innerText : '',
    exceptions: all(document, '[data-testid=stException]').length,
    problems: all(document, ['Error', 'Warning'].map(k => `[data-testid=stAlertContent${k}]`)
      .join(', ')).map(e => e.innerText),
    metrics: Object.fromEntries(all(document, '[data-testid=stMetric]').map(m => [
      text(m.querySelector('[data-testid=stMetricLabel]')),
      text(m.querySelector('[data-testid=stMetricValue]')),
    ])),
    tables: all(document, '[data-testid=stDataFrame] table').map(
      t => all(t, 'tr').map(r => all(r, 'th, td').map(text))),
    charts: all(document, '[data-testid=stVegaLiteChart]').map(c => ({
      svg: all(c, 'svg').length,
      title: all(c, '.role-title-text').map(text).join(' '),
      axes: all(c, 'g.role-axis').map(a => ({
        aria: a.getAttribute('aria-label') || '',
        labels: all(a, '.role-axis-label text').map(t => ({text: text(t), x: centre(t)})),
      })),
      rules: all(c, '[aria-roledescription="rule mark"]')
        .map(r => ({aria: r.getAttribute('aria-label') || '', x: centre(r)})),
    })),
  };
})()"""

Snapshot = dict[str, Any]


def afternoon(now: datetime) -> datetime:
    """The latest 18:00 (naive UTC) at least an hour before ``now``: inside the app's window
    (``--since 7d``), its ten minutes of rows all in the past."""
    t0 = now.replace(tzinfo=None, hour=18, minute=0, second=0, microsecond=0)
    while t0 > now.replace(tzinfo=None) - timedelta(hours=1):
        t0 -= timedelta(days=1)
    return t0


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


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, datetime]]:
    """(address, store file, first row's time) of ``streamlit run dashboards/app.py``."""
    tmp = tmp_path_factory.mktemp("ui")
    db, t0 = tmp / "ui.duckdb", afternoon(datetime.now(UTC))
    with Store.open(db) as store:
        fill_store(store, t0)
    port = free_port()
    command = [
        sys.executable, "-m", "streamlit", "run", str(APP),
        "--server.port", str(port), "--server.address", "127.0.0.1",
        "--server.headless", "true", "--browser.gatherUsageStats", "false",
        "--", "--db", str(db), "--since", SINCE, "--slo-ms", str(SLO_MS),
    ]  # fmt: skip
    log_path = tmp / "streamlit.log"
    log = log_path.open("wb")
    proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, log_path.read_text()
            try:
                if httpx.get(url + "/_stcore/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "streamlit did not start"
            time.sleep(0.2)
        yield url, db, t0
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


@pytest.fixture(scope="module")
def tab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tab]:
    """One Chromium tab in :data:`BROWSER_ZONE`."""
    with chromium(tmp_path_factory.mktemp("chromium")) as tab:
        tab.call("Emulation.setTimezoneOverride", timezoneId=BROWSER_ZONE)
        tab.goto("about:blank")
        assert tab.evaluate("new Date('2020-01-01T18:00:00Z').getHours()") == 8, BROWSER_ZONE
        yield tab


def read(tab: Tab, url: str, name: str, timeout_s: float = 60.0) -> Snapshot:
    """Open page ``name`` and read it once drawn: the script run over, the page's title shown,
    its charts drawn with tick labels, and two reads 0.25 s apart the same. A page showing a
    traceback is returned at once (the caller's checks say so)."""
    tab.goto(f"{url}/{ADDRESS.get(name, name)}")
    deadline = time.monotonic() + timeout_s
    previous: Snapshot | None = None
    while True:
        snap: Snapshot = tab.evaluate(SNAPSHOT)
        if snap["exceptions"] or "Traceback" in snap["body"]:
            return snap
        drawn = (
            snap["state"] == "notRunning"
            and snap["headings"] == [TITLE[name]]
            and len(snap["charts"]) == CHARTS[name]
            and all(c["svg"] and any(a["labels"] for a in c["axes"]) for c in snap["charts"])
        )
        if drawn and snap == previous:
            return snap
        previous = snap if drawn else None
        if time.monotonic() > deadline:
            seen = (snap["state"], snap["headings"], len(snap["charts"]))
            raise AssertionError(
                f"/{ADDRESS.get(name, name)} not drawn in {timeout_s:.0f} s (script state, "
                f"titles, charts: {seen}; want {TITLE[name]!r} and {CHARTS[name]} charts); "
                f"the page reads:\n{snap['body']}"
            )
        time.sleep(0.25)


@pytest.fixture(scope="module")
def page(app: tuple[str, Path, datetime], tab: Tab) -> Callable[[str], Snapshot]:
    """Page ``name`` as read by :func:`read`, read once per module."""
    url = app[0]
    seen: dict[str, Snapshot] = {}

    def get(name: str) -> Snapshot:
        if name not in seen:
            seen[name] = read(tab, url, name)
        return seen[name]

    return get


# -- what the page shows ------------------------------------------------------------------


def time_axes(snap: Snapshot) -> list[list[str]]:
    """The tick labels of every time axis (Vega's ARIA: "X-axis titled ... for a utc scale")."""
    return [
        [label["text"] for label in axis["labels"]]
        for chart in snap["charts"]
        for axis in chart["axes"]
        if TIME_SCALE.search(axis["aria"])
    ]


def rules(chart: Snapshot) -> dict[str, tuple[float, float]]:
    """Each rule mark of a chart: label -> (value, x position), from its ARIA label
    ("value: 30; label: knee, requests/s")."""
    out = {}
    for rule in chart["rules"]:
        fields = dict(part.split(": ", 1) for part in rule["aria"].split("; "))
        out[fields["label"]] = (float(fields["value"]), rule["x"])
    return out


def x_ticks(chart: Snapshot) -> dict[str, float]:
    """The x axis's tick labels and their x positions."""
    (axis,) = [a for a in chart["axes"] if a["aria"].startswith("X-axis")]
    return {label["text"]: label["x"] for label in axis["labels"]}


def shown_table(table: ReportTable) -> list[list[str]]:
    """A report's table as the page must draw it: the short headers, then human-unit rows
    (the page's own :func:`~sits_observe.surfaces.ui.tables.frame`, as the CLI prints)."""
    rows = frame(table)
    return [rows.column_names, *[[str(v) for v in r.values()] for r in rows.to_pylist()]]


def limits_of(table: ReportTable) -> tuple[dict[str, Any], dict[str, Unit]]:
    """The one row of a report's table and its columns' units."""
    (row,) = table.rows.to_pylist()
    return row, {c.name: c.unit for c in table.columns}


# -- every page ---------------------------------------------------------------------------


def test_these_tests_know_every_page_of_the_app() -> None:
    """The pages of dashboards/app.py, in menu order (a new page fails here until its title
    and charts are listed above): fleet is the default (``/``), Streamlit serves the others
    at their file's stem (``/heatmap``)."""
    assert NAMES == ["fleet", "heatmap", "fragmentation", "whatif", "decisions"]
    assert set(TITLE) == set(CHARTS) == set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_each_page_shows_its_title_and_no_error(page: Callable[[str], Snapshot], name: str) -> None:
    snap = page(name)
    assert snap["exceptions"] == 0 and "Traceback" not in snap["body"], snap["body"]
    assert snap["problems"] == [], snap["problems"]
    assert snap["headings"] == [TITLE[name]]
    # Every time axis drawn on any page reads hours on a 24-hour clock, no AM/PM.
    for labels in time_axes(snap):
        assert labels and all(CLOCK_24.fullmatch(t) for t in labels), (name, labels)


def test_the_fleet_page_draws_in_headless_chromium(
    app: tuple[str, Path, datetime], tab: Tab
) -> None:
    """A screenshot of the drawn page (PNG decoded here with zlib, no new dependency): not one
    flat colour."""
    read(tab, app[0], "fleet")
    width, height, rows = decode_png(tab.screenshot(*SCREEN))
    assert (width, height) == SCREEN
    found, ink = main_area(rows, len(rows[0]) // width, SIDEBAR_PX)
    assert found >= MIN_COLOURS, f"the page looks blank: {found} colours"
    assert ink >= MIN_INK_RATIO, f"the page looks blank: {ink:.1%} of it drawn"


# -- what each page shows -----------------------------------------------------------------


def test_fleet_page_shows_the_report_and_time_on_a_24_hour_utc_clock(
    app: tuple[str, Path, datetime], page: Callable[[str], Snapshot]
) -> None:
    _url, db, t0 = app
    snap = page("fleet")
    report = report_on(db, "fleet")
    facts = {
        "Nodes": ("nodes", Unit.integer),
        "GPUs": ("gpus", Unit.integer),
        "Allocated GPUs": ("allocated_gpus", Unit.number),
        "Idle GPUs": ("idle_gpus", Unit.integer),
        "GPU utilisation": ("gpu_util_ratio", Unit.ratio),
        "Fragmentation": ("frag_ratio", Unit.ratio),
    }
    assert snap["metrics"] == {
        label: human(report.facts[name], unit) for label, (name, unit) in facts.items()
    }
    # By hand (fill_store): two nodes of two GPUs, 50% and 25% busy, node-a's free GPU
    # fragmented of three free.
    assert [snap["metrics"][k] for k in ("Nodes", "GPUs", "GPU utilisation", "Fragmentation")] == [
        "2", "4", "37.5%", "33.3%",
    ]  # fmt: skip
    # The three charts over time: ticks at whole minutes over the rows' ten minutes, written
    # in UTC on a 24-hour clock: 18:00, 18:01, ... (with the axis format lost, Vega drew
    # "06 PM", "06:01" in a UTC browser and "04 AM" in Honolulu).
    assert t0.hour >= 13
    axes = time_axes(snap)
    assert len(axes) == 3, [c["title"] for c in snap["charts"]]
    starts = [
        r["start_at"]
        for name in ("over_time", "latency_over_time")
        for r in report.table(name).rows.to_pylist()
    ]
    first = min(starts).replace(second=0, microsecond=0)
    for labels in axes:
        assert f"{t0:%H:%M}" in labels, labels
        for label in labels:
            assert CLOCK_24.fullmatch(label) and not re.search("[AP]M", label, re.I), labels
            hour, minute = map(int, label.split(":"))
            tick = first.replace(hour=hour, minute=minute)
            assert first <= tick <= max(starts), (label, first, max(starts))


def test_heatmap_page_shows_the_knee_and_safe_max_the_data_gives(
    app: tuple[str, Path, datetime], page: Callable[[str], Snapshot]
) -> None:
    _url, db, _t0 = app
    snap = page("heatmap")
    # The first model is llm-a; its heatmap report at the app's SLO, as the page asks for it.
    heat = report_on(db, "heatmap", model="llm-a", table="cells", slo_ms=SLO_MS)
    row, units = limits_of(heat.table("limits"))
    # fill_store's bins (its docstring): the knee is the 30 rps bin; the 50 rps bin (P95
    # 1.5 s) is the first over the 1 s SLO, so the safe maximum is 40 rps.
    assert (row["knee_rps"], row["safe_max_rps"], row["slo_s"]) == (30, 40, 1.0)
    shown = snap["metrics"]
    assert shown == {
        "Requests": human(row["requests"], units["requests"]),
        "Knee": human(row["knee_rps"], units["knee_rps"]),
        "P95 SLO": human(row["slo_s"], units["slo_s"]),
        "Safe max throughput": human(row["safe_max_rps"], units["safe_max_rps"]),
    }
    assert (shown["Knee"], shown["Safe max throughput"], shown["P95 SLO"]) == (
        "30/s", "40/s", "1.00s",
    )  # fmt: skip
    assert not {"none", "none set", "needs an SLO"} & set(shown.values()), shown
    for note in heat.notes:  # "knee at 30 rps (P95 0.15 s) ...", "safe maximum 40 rps ..."
        assert note in snap["text"], note
    # The heatmap draws the knee and the safe maximum as rules at 30 and 40 on its x axis
    # (each rule where the axis writes its value), and the SLO at 1 s.
    heatmap, curve = snap["charts"]
    assert heatmap["title"] == "llm-a: requests per cell"
    drawn, ticks = rules(heatmap), x_ticks(heatmap)
    assert {k: v for k, (v, _x) in drawn.items()} == {
        "SLO (P95), s": 1.0,
        "knee, requests/s": 30.0,
        "safe maximum, requests/s": 40.0,
    }
    for label, value in (("knee, requests/s", 30), ("safe maximum, requests/s", 40)):
        assert abs(drawn[label][1] - ticks[str(value)]) <= 1.5, (label, drawn, ticks)
    assert curve["title"] == "Latency per throughput bin"
    assert {k: v for k, (v, _x) in rules(curve).items()} == {"SLO (P95), s": 1.0}


def test_fragmentation_page_shows_fgd_and_its_causes(
    app: tuple[str, Path, datetime], page: Callable[[str], Snapshot]
) -> None:
    _url, db, _t0 = app
    snap = page("fragmentation")
    fgd = report_on(db, "fragmentation")
    row, units = limits_of(fgd.main)
    labels = {
        "Fragmentation ratio": "frag_ratio",
        "Fragmentation amount": "frag_amount_ratio",
        "Fragmented GPUs": "frag_milli",
        "GPU allocation": "alloc_ratio",
    }
    assert snap["metrics"] == {k: human(row[n], units[n]) for k, n in labels.items()}
    # By hand: node-a's free GPU cannot take the typical pod (no CPU left): 1 of 3 idle GPUs.
    assert snap["metrics"]["Fragmentation ratio"] == "33.3%"
    causes = snap["tables"][0]
    assert causes == shown_table(fgd.table("causes"))
    assert ["lack_cpu", "1", "100%"] in causes
    # The bar chart of the causes: one bar per cause, named on its x axis in the table's order.
    bars = snap["charts"][0]
    assert list(x_ticks(bars)) == [r[0] for r in causes[1:]]


def test_whatif_page_replays_the_live_cluster_from_its_address(
    page: Callable[[str], Snapshot],
) -> None:
    snap = page("whatif")
    assert "Result per policy (mean over seeds)" in snap["text"]
    # fill_store's inventory: two nodes of two GPUs, one pod.
    assert "live cluster: 2 nodes, 1 pods" in snap["text"]
    assert "4 GPUs" in snap["text"]
    results = snap["tables"][0]
    policies = list(whatif.SPEC.settings.model_fields["policies"].default)
    assert [r[0] for r in results[1:]] == policies, results
    (curve,) = snap["charts"]
    assert "X-axis titled 'arrived GPU load'" in " ".join(a["aria"] for a in curve["axes"])


def test_decisions_page_shows_the_log_on_a_24_hour_utc_clock(
    app: tuple[str, Path, datetime], page: Callable[[str], Snapshot]
) -> None:
    _url, db, t0 = app
    snap = page("decisions")
    assert "Planned actions" in snap["text"] and "Decision log" in snap["text"]
    planned, counts, log = snap["tables"]
    plan = report_on(db, "recommend").main
    names = [c.header for c in plan.columns if c.name in ("name", "action")]
    index = [planned[0].index(h) for h in names]
    assert {tuple(r[i] for i in index) for r in planned[1:]} == set(
        zip(*(plan.rows.column(c).to_pylist() for c in ("name", "action")), strict=True)
    )
    decisions = report_on(db, "decisions", actions=[], outcomes=[])
    assert counts == shown_table(decisions.table("counts"))
    assert log == shown_table(decisions.main)
    # Newest first, at t0 + 2 s, 1 s, 0 s: UTC on a 24-hour clock (18:00:02Z).
    times = [r[log[0].index("time")] for r in log[1:]]
    assert times == [human(t0 + timedelta(seconds=s), Unit.time) for s in (2, 1, 0)]
    assert all(f" {t0:%H}:" in t for t in times), times
