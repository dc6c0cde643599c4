"""``sits-observe demo`` run again in the same folder: after ``--duration``, after a crash.

Real processes: the installed CLI, each run a full simulated cluster with the service, the
agents and the DuckDB file. A rerun must start, say what became of the previous run's files
and database, and leave a database that holds only the new run (or both, with --keep-db).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.k8s]

CLI = [str(Path(sys.executable).with_name("sits-observe"))]


def _demo(workdir: Path, *extra: str, duration_s: int = 4) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            *CLI,
            "demo",
            "--duration",
            str(duration_s),
            "--no-ui",
            "--nodes",
            "1",
            "--gpus-per-node",
            "2",
            "--workdir",
            str(workdir),
            "--db",
            str(workdir / "sits.duckdb"),
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        env={**os.environ, "COLUMNS": "40"},
    )


def _first_sample_at(db: Path) -> object:
    con = duckdb.connect(str(db), read_only=True)
    try:
        row = con.execute("SELECT min(ts), count(*) FROM gpu_samples").fetchone()
    finally:
        con.close()
    assert row is not None
    return row


def test_two_runs_in_a_row_both_succeed_and_the_second_replaces_the_first(
    tmp_path: Path,
) -> None:
    workdir = tmp_path / "demo"
    first = _demo(workdir)
    assert first.returncode == 0, first.stderr
    first_min, first_rows = _first_sample_at(workdir / "sits.duckdb")  # type: ignore[misc]
    assert first_rows > 0
    second = _demo(workdir)
    assert second.returncode == 0, second.stderr
    assert "previous run's node files replaced" in second.stderr
    assert f"database {workdir / 'sits.duckdb'} replaced" in second.stderr
    second_min, _ = _first_sample_at(workdir / "sits.duckdb")  # type: ignore[misc]
    assert second_min > first_min  # the old run's samples are gone


def test_keep_db_appends_to_the_previous_database(tmp_path: Path) -> None:
    workdir = tmp_path / "demo"
    assert _demo(workdir).returncode == 0
    _, rows_before = _first_sample_at(workdir / "sits.duckdb")  # type: ignore[misc]
    again = _demo(workdir, "--keep-db")
    assert again.returncode == 0, again.stderr
    assert "appending to the existing database" in again.stderr
    _, rows_after = _first_sample_at(workdir / "sits.duckdb")  # type: ignore[misc]
    assert rows_after > rows_before


def test_a_rerun_after_a_crash_succeeds(tmp_path: Path) -> None:
    workdir = tmp_path / "demo"
    crashed = subprocess.Popen(
        [
            *CLI,
            "demo",
            "--no-ui",
            "--nodes",
            "1",
            "--gpus-per-node",
            "2",
            "--workdir",
            str(workdir),
            "--db",
            str(workdir / "sits.duckdb"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        scopes: list[Path] = []
        while time.monotonic() < deadline and not scopes:
            scopes = list((workdir / "cluster").rglob("*.scope")) if workdir.exists() else []
            time.sleep(0.5)
        assert scopes, "the demo never laid out its cgroup tree"
    finally:
        crashed.send_signal(signal.SIGKILL)
        crashed.wait(timeout=30)
    rerun = _demo(workdir)
    assert rerun.returncode == 0, rerun.stderr
    assert "replaced" in rerun.stderr
