"""What the CLI prints, end to end: the real ``sits-observe`` process and real DuckDB files
(issue 9, items 1 and 3).

- Diagnostics are one line whatever the terminal width and however long the paths: run with
  ``COLUMNS=40`` from a folder whose path is over 150 characters long.
- Data tables off a terminal print whole rows (``COLUMNS`` is ignored there); on a terminal
  (a real pseudo-terminal here) they fit its width.
- Markup in paths, labels, model names and flag values prints as written, and the command
  works (it used to raise ``rich.errors.MarkupError``, some after rows were committed).
"""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sits_observe.store import Store
from sits_observe.surfaces.cli.main import app

EXE = Path(sys.executable).parent / "sits-observe"
BODY = (
    '# TYPE DCGM_FI_DEV_GPU_UTIL gauge\nDCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-0",'
    'modelName="NVIDIA H100 80GB HBM3",Hostname="%s"} 40\n'
    'DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-0",modelName="NVIDIA H100 80GB HBM3",'
    'Hostname="%s"} 2048\n'
)


@pytest.fixture
def deep(tmp_path: Path) -> Path:
    """A folder whose path is over 150 characters long (a CI checkout can be that deep)."""
    folder = tmp_path / ("a-rather-long-folder-name-" * 6)
    folder.mkdir()
    assert len(str(folder)) > 150
    return folder


def sits(*args: str | Path, columns: int = 40) -> subprocess.CompletedProcess[str]:
    """The installed console script in its own process, in a 40-column environment."""
    if not EXE.exists():
        pytest.skip(f"console script not installed at {EXE}")
    env = {**os.environ, "COLUMNS": str(columns)}
    env.pop("FORCE_COLOR", None)
    env.pop("TTY_COMPATIBLE", None)
    return subprocess.run(
        [str(EXE), *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def test_errors_are_one_line_at_40_columns_from_a_long_path(deep: Path) -> None:
    db = deep / "nope.duckdb"
    missing = sits("recommend", "--db", db)
    assert missing.returncode == 2
    assert missing.stderr == (
        f"error: database {db} does not exist; give the --db of an ingest or serve\n"
    )
    absent = deep / "absent-metrics.txt"
    unreadable = sits("ingest", "dcgm", absent, "--db", deep / "s.duckdb")
    assert unreadable.returncode == 2
    assert unreadable.stderr == (f"error: cannot read {absent}: No such file or directory\n")
    usage = sits("ingest", "dcgm", absent, "--db", db, "--timeout-s", "soon")
    assert usage.returncode == 2
    assert "Error: Invalid value for '--timeout-s'" in usage.stderr
    [error] = [line for line in usage.stderr.splitlines() if line.startswith("Error:")]
    assert error.endswith("unable to parse string as a number")


def test_tables_off_a_terminal_print_whole_rows(deep: Path) -> None:
    body = deep / "metrics.txt"
    body.write_text(BODY % ("gpu-node-with-a-long-name-7", "gpu-node-with-a-long-name-7"))
    db = deep / "s.duckdb"
    stored = sits("ingest", "dcgm", body, "--db", db)
    assert stored.returncode == 0, stored.stderr
    lines = stored.stdout.splitlines()
    assert f"GPUs read from {body}" in lines
    assert f"stored in {db} (1 node(s))" in lines
    [gpu] = [line for line in lines if "gpu-node-with-a-long-name-7" in line]
    cells = [cell.strip() for cell in gpu.split("│")[1:-1]]
    assert cells == ["gpu-node-with-a-long-name-7", "0", "", "", "2.00", "", "40%", "", ""]
    tables = sits("tables", "--db", db).stdout.splitlines()
    assert tables[0] == str(db)
    [samples] = [line for line in tables if " gpu_samples " in line]
    assert [cell.strip() for cell in samples.split("│")[1:-1]] == ["gpu_samples", "1"]


def test_tables_on_a_terminal_fit_its_width(deep: Path) -> None:
    body = deep / "metrics.txt"
    body.write_text(BODY % ("n1", "n1"))
    db = deep / "s.duckdb"
    assert sits("ingest", "dcgm", body, "--db", db).returncode == 0
    master, slave = pty.openpty()
    env = {**os.environ, "COLUMNS": "40"}
    with subprocess.Popen(
        [str(EXE), "tables", "--db", str(db)], stdout=slave, stderr=slave, env=env
    ) as proc:
        os.close(slave)
        chunks: list[bytes] = []
        while True:
            ready, _, _ = select.select([master], [], [], 60)
            if not ready:
                break
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
        assert proc.wait(timeout=60) == 0
    os.close(master)
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", b"".join(chunks).decode())
    lines = [line for line in text.replace("\r", "").split("\n") if line]
    assert any("gpu_samples" in line for line in lines)
    assert max(len(line) for line in lines) <= 40


# -- markup in data, paths and flags ---------------------------------------------------------


def test_markup_in_a_missing_path_is_an_error_message_not_a_crash(tmp_path: Path) -> None:
    source = tmp_path / "[" / "x]"  # the path '.../[/x]'
    db = tmp_path / "x.duckdb"
    result = CliRunner().invoke(app, ["ingest", "dcgm", str(source), "--db", str(db)])
    assert result.exit_code == 2, result.output
    assert result.stderr == f"error: cannot read {source}: No such file or directory\n"
    assert not db.exists()


def test_markup_in_paths_labels_and_flags_prints_as_written(tmp_path: Path) -> None:
    folder = tmp_path / "[bold]data" / "["
    folder.mkdir(parents=True)
    body = folder / "x].txt"  # '.../[bold]data/[/x].txt'
    body.write_text(BODY % ("node[/x]", "node[/x]"))
    db = folder / "[red]s.duckdb"
    result = CliRunner().invoke(app, ["ingest", "dcgm", str(body), "--db", str(db)])
    assert result.exit_code == 0, result.output
    assert f"GPUs read from {body}\n" in result.stdout
    assert f"stored in {db} (1 node(s))\n" in result.stdout
    assert " node[/x] " in result.stdout
    flagged = CliRunner().invoke(
        app, ["ingest", "dcgm", str(body), "--db", str(db), "--node", "[/n] :smile:"]
    )
    assert flagged.exit_code == 0, flagged.output
    assert " [/n] :smile: " in flagged.stdout
    with Store.open(db, read_only=True) as store:
        nodes = store.query("SELECT node FROM gpu_samples ORDER BY node").column("node")
    assert nodes.to_pylist() == ["[/n] :smile:", "node[/x]"]


def test_a_model_named_like_markup_reaches_latency_and_heatmap(tmp_path: Path) -> None:
    log = tmp_path / "log.csv"
    rows = "".join(f"[/evil],{0.1 + i / 1000},2026-01-02T03:04:{i:02d}Z\n" for i in range(50))
    log.write_text("model,latency,ts\n" + rows)
    db = tmp_path / "s.duckdb"
    imported = CliRunner().invoke(
        app,
        [
            *("ingest", "requests", str(log), "--db", str(db), "--model-column", "model"),
            *("--latency-column", "latency", "--timestamp-column", "ts"),
        ],
    )
    assert imported.exit_code == 0, imported.output
    latency = CliRunner().invoke(app, ["latency", "--db", str(db)])
    assert latency.exit_code == 0, latency.output
    [row] = [line for line in latency.stdout.splitlines() if "[/evil]" in line]
    assert " 50 " in row
    heatmap = CliRunner().invoke(app, ["heatmap", "--db", str(db), "--by", "model", "--grid"])
    assert heatmap.exit_code == 0, heatmap.output
    assert "model = [/evil]: 50 requests" in heatmap.stdout
    *_bins, limits = [line for line in heatmap.stdout.splitlines() if line.startswith("[/evil] ")]
    assert " 50 " in limits  # the knee / safe maximum row of the one model
