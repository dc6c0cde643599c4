"""What the demo shows while it runs: a title that says how long it will run when it has a
``--duration`` (no "Ctrl-C to stop" then), the status in short lines that no terminal cuts
(stderr is never wrapped), and a read token for reading its data meanwhile."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from sits_observe.lab.demo.demo import Demo
from sits_observe.lab.demo.settings import DemoSettings
from sits_observe.surfaces.cli.lab.demo import _progress


def _shown(demo: Demo, duration_s: float | None, width: int) -> str:
    buffer = io.StringIO()
    console = Console(width=width, file=buffer, force_terminal=False, color_system=None)
    console.print(_progress(demo, 42.0, duration_s))
    return buffer.getvalue()


def test_the_title_and_the_status_line(tmp_path: Path) -> None:
    demo = Demo(
        DemoSettings(nodes=1, gpus_per_node=2, db_path=tmp_path / "d.duckdb", workdir=tmp_path)
    )
    timed = _shown(demo, 360.0, 40)
    assert "42 of 360 s (Ctrl-C stops it early)" in " ".join(timed.split())
    assert "Ctrl-C to stop" not in timed
    assert "Ctrl-C to stop" in _shown(demo, None, 80)
    # The status in short lines, each whole within 60 cells (stderr is never wrapped).
    status = [li for li in timed.splitlines() if li.startswith("pods running:")]
    assert status == ["pods running: 0, queued requests: 0"]


def test_a_read_token_file_only_its_owner_reads(tmp_path: Path) -> None:
    demo = Demo(
        DemoSettings(nodes=1, gpus_per_node=2, db_path=tmp_path / "d.duckdb", workdir=tmp_path)
    )
    path = demo.read_token_file()
    assert path.read_text(encoding="utf-8") == demo.read_token != demo.token
    assert oct(path.stat().st_mode & 0o777) == "0o600"
