"""``serve`` turns the garbage collector back on once it has started (cli/startup.py).

``main`` pauses the collector before a command's imports; ``serve`` resumes it when its app is
built: after the first view with ``--extender-warm-view`` (a staged start), before listening
without. A child process pauses it as ``main`` does, runs ``run_service`` (the body of
``sits-observe serve``), and a derived signal on ``/metrics`` reports the collector's state
from inside the service once it is ready.
"""

from __future__ import annotations

import sys
from pathlib import Path

import httpx
import pytest

from tests.integration.serve_process import ServeProcess

CHILD = """
import gc, sys
from pathlib import Path
from sits_observe.surfaces.cli import startup
startup.pause_collection()  # as main() does before serve's imports
from sits_observe.surfaces.cli.serve import configure_logging, run_service
from sits_observe.surfaces.service.exporter.exporter import Signal
from sits_observe.surfaces.service.exporter.settings import ExporterSettings
from sits_observe.surfaces.service.extender import ExtenderSettings
from sits_observe.surfaces.service.settings import ServiceSettings

db, port, token_file, marker, warm = sys.argv[1:6]

def report(_inputs):
    # A scrape can start the next pass in the background while the test reads the marker:
    # write it whole (a temporary file, then a rename), never truncated and half-written.
    state = "enabled" if gc.isenabled() else "paused"
    partial = Path(marker + ".partial")
    partial.write_text(f"{state} {gc.get_freeze_count()}", encoding="utf-8")
    partial.replace(marker)
    return []

configure_logging("info")
run_service(
    ServiceSettings(db_path=db, port=int(port), token_file=token_file, retention_interval_s=0),
    exporter=ExporterSettings(cache_s=0, slow_cache_s=0),
    exporter_signals=(Signal("collector", report, ()),),
    extender=ExtenderSettings(warm_view=warm == "warm"),
)
"""


@pytest.mark.parametrize("start", ["warm", "cold"])
def test_the_collector_is_on_and_the_start_frozen_once_serve_is_ready(
    tmp_path: Path, start: str
) -> None:
    marker = tmp_path / "collector"
    service = ServeProcess(tmp_path, name=f"collector-{start}")
    service.command = [
        sys.executable,
        "-c",
        CHILD,
        *map(str, (service.db, service.port, service.token_file, marker, start)),
    ]
    service.start()  # returns once /readyz answers 200: the app is built
    try:
        assert httpx.get(service.url + "/metrics", timeout=30).status_code == 200
        state, frozen = marker.read_text(encoding="utf-8").split()
    finally:
        service.stop()
    assert state == "enabled", service.logs()
    assert int(frozen) > 10_000  # the start's objects (modules, classes, functions)
