"""The one exit-code rule of the file imports (``ingest dcgm``, ``cgroup``, ``requests``), with
real files, real DuckDB files in tmp_path and the real command line (issue 9, items 18, 20,
21b): 0 all stored, 2 nothing usable (no database created or touched), 3 stored with some
input rejected; a ragged CSV is one line naming the line; a missing ``--db`` folder is refused.
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from sits_observe.lab.cluster.cgroupfs import CgroupTree, CgroupValues
from sits_observe.store import Store
from sits_observe.surfaces.cli.ingest.outcome import (
    EXIT_NOTHING_STORED,
    EXIT_PARTIAL,
    EXIT_STORED,
)
from sits_observe.surfaces.cli.main import app

UID = "6f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0"
REQUEST_FLAGS = ["--model-column", "model", "--latency-column", "latency"]


def dcgm_body(gpus: int = 2) -> str:
    """A dcgm-exporter body: HELP/TYPE lines and three families for each GPU."""
    lines = []
    for family, value in (("DCGM_FI_DEV_GPU_UTIL", 40), ("DCGM_FI_DEV_FB_USED", 1024)):
        lines += [f"# HELP {family} x", f"# TYPE {family} gauge"]
        for gpu in range(gpus):
            labels = f'gpu="{gpu}",UUID="GPU-{gpu}",modelName="NVIDIA H100",Hostname="n1"'
            lines.append(f"{family}{{{labels}}} {value + gpu}")
    return "\n".join(lines) + "\n"


def run(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


def one_line(text: str) -> str:
    """``text`` when it is exactly one line (with its newline)."""
    assert text.endswith("\n") and text.count("\n") == 1, repr(text)
    return text


# -- ingest dcgm -----------------------------------------------------------------------------


def test_dcgm_whole_body_exits_0(tmp_path: Path) -> None:
    body = tmp_path / "metrics.txt"
    body.write_text(dcgm_body())
    db = tmp_path / "s.duckdb"
    result = run("ingest", "dcgm", str(body), "--db", str(db))
    assert result.exit_code == EXIT_STORED, result.output
    assert result.stderr == ""
    with Store.open(db, read_only=True) as store:
        assert store.count("gpu_samples") == 2


def test_dcgm_truncated_body_stores_what_it_can_and_exits_3(tmp_path: Path) -> None:
    text = dcgm_body()
    cut = text[: text.rindex("1025")]  # mid-value: the last GPU's framebuffer line is cut
    body = tmp_path / "cut.txt"
    body.write_text(cut + "10")
    db = tmp_path / "s.duckdb"
    result = run("ingest", "dcgm", str(body), "--db", str(db))
    assert result.exit_code == EXIT_PARTIAL, result.output
    last = cut.count("\n") + 1
    warning = one_line(result.stderr)
    assert "2 rows stored, 1 samples rejected" in warning
    assert f"first rejected line {last} (unterminated last line (body truncated?))" in warning
    assert "unterminated last line" in result.stdout  # the rejected table
    with Store.open(db, read_only=True) as store:
        assert store.count("gpu_samples") == 2
        assert (
            store.scalar("SELECT fb_used_bytes FROM gpu_samples WHERE gpu_uuid = 'GPU-1'") is None
        )
        assert store.scalar("SELECT sum(count) FROM collector_drops") == 1


def test_dcgm_malformed_line_is_named_with_its_number(tmp_path: Path) -> None:
    lines = dcgm_body().splitlines()
    lines.insert(3, 'DCGM_FI_DEV_GPU_UTIL{gpu="7",UUID="GPU-7" 12')
    body = tmp_path / "bad.txt"
    body.write_text("\n".join(lines) + "\n")
    result = run("ingest", "dcgm", str(body), "--db", str(tmp_path / "s.duckdb"))
    assert result.exit_code == EXIT_PARTIAL, result.output
    assert "first rejected line 4 (malformed line): 'DCGM_FI_DEV_GPU_UTIL{gpu=" in result.stderr


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"<html><body>502 Bad Gateway</body></html>\n",
        b"DCGM_FI_DEV_GPU_UTIL{gpu=",  # cut in the first line
        random.Random(9).randbytes(4096),
        dcgm_body().replace("gpu=", "xgpu=").replace("UUID=", "xUUID=").encode(),
    ],
    ids=["empty", "garbage", "truncated-first-line", "random-bytes", "no-gpu-labels"],
)
def test_dcgm_nothing_usable_exits_2_and_creates_no_database(
    tmp_path: Path, content: bytes
) -> None:
    body = tmp_path / "body.txt"
    body.write_bytes(content)
    db = tmp_path / "s.duckdb"
    result = run("ingest", "dcgm", str(body), "--db", str(db))
    assert result.exit_code == EXIT_NOTHING_STORED, result.output
    message = one_line(result.stderr)
    assert message.startswith(f"error: no GPU samples could be read from {body}")
    assert "nothing was stored" in message
    assert result.stdout == ""
    assert not db.exists() and not Path(f"{db}.wal").exists()


def test_dcgm_nothing_usable_leaves_an_existing_database_untouched(tmp_path: Path) -> None:
    good, bad = tmp_path / "good.txt", tmp_path / "bad.txt"
    good.write_text(dcgm_body())
    bad.write_bytes(random.Random(3).randbytes(2048))
    db = tmp_path / "s.duckdb"
    assert run("ingest", "dcgm", str(good), "--db", str(db)).exit_code == EXIT_STORED
    before = db.read_bytes()
    assert run("ingest", "dcgm", str(bad), "--db", str(db)).exit_code == EXIT_NOTHING_STORED
    assert db.read_bytes() == before


def test_dcgm_samples_stamped_in_2100_or_1975_are_rejected_as_serve_rejects_them(
    tmp_path: Path,
) -> None:
    """A saved body keeps its samples' own timestamps: GPU 0's are in 2100, GPU 1's in 1975,
    GPU 2 has none (stamped now). Only GPU 2 is stored; the others are
    ``gpu_samples.ts:future`` / ``ts:too_old`` (serve's rules), exit 3, and stored as
    collector_drops rows of collector ``ingest``."""
    stamps = {0: " 4102444800000", 1: " 157766400000", 2: ""}  # ms: 2100-01-01, 1975-01-01
    lines = []
    for family, value in (("DCGM_FI_DEV_GPU_UTIL", 40), ("DCGM_FI_DEV_FB_USED", 1024)):
        lines += [f"# HELP {family} x", f"# TYPE {family} gauge"]
        for gpu, stamp in stamps.items():
            labels = f'gpu="{gpu}",UUID="GPU-{gpu}",modelName="NVIDIA H100",Hostname="n1"'
            lines.append(f"{family}{{{labels}}} {value}{stamp}")
    body = tmp_path / "dated.txt"
    body.write_text("\n".join(lines) + "\n")
    db = tmp_path / "s.duckdb"
    result = run("ingest", "dcgm", str(body), "--db", str(db))
    assert result.exit_code == EXIT_PARTIAL, result.output
    assert "1 rows stored, 2 samples rejected" in one_line(result.stderr)
    assert "gpu_samples.ts:future" in result.stdout
    with Store.open(db, read_only=True) as store:
        kept = store.query("SELECT gpu_uuid FROM gpu_samples").column("gpu_uuid").to_pylist()
        drops = store.query(
            "SELECT node, collector, reason, count FROM collector_drops ORDER BY reason"
        ).to_pylist()
    assert kept == ["GPU-2"]
    assert drops == [
        {"node": "n1", "collector": "ingest", "reason": "gpu_samples.ts:future", "count": 1},
        {"node": "n1", "collector": "ingest", "reason": "gpu_samples.ts:too_old", "count": 1},
    ]


# -- ingest cgroup ---------------------------------------------------------------------------


def test_cgroup_tree_without_containers_exits_2_and_creates_no_database(tmp_path: Path) -> None:
    tree = CgroupTree(tmp_path / "cgroup")
    tree.add_container(UID, "a" * 64)
    shutil.rmtree(tree.container("a" * 64).path)
    db = tmp_path / "s.duckdb"
    result = run("ingest", "cgroup", str(tree.root), "--db", str(db), "--node", "n1")
    assert result.exit_code == EXIT_NOTHING_STORED, result.output
    assert one_line(result.stderr).startswith("error: no container cgroups could be read")
    assert not db.exists()


def test_cgroup_whole_tree_exits_0(tmp_path: Path) -> None:
    tree = CgroupTree(tmp_path / "cgroup")
    tree.add_container(UID, "a" * 64, values=CgroupValues(memory_current_bytes=1 << 20))
    db = tmp_path / "s.duckdb"
    result = run("ingest", "cgroup", str(tree.root), "--db", str(db), "--node", "n1")
    assert result.exit_code == EXIT_STORED, result.output


def test_cgroup_malformed_file_exits_3_naming_where(tmp_path: Path) -> None:
    tree = CgroupTree(tmp_path / "cgroup")
    tree.add_container(UID, "a" * 64)
    path = tree.container("a" * 64).path
    (path / "memory.current").write_text("lots\n")
    result = run("ingest", "cgroup", str(tree.root), "--db", str(tmp_path / "s.duckdb"))
    assert result.exit_code == EXIT_PARTIAL, result.output
    assert f"first rejected at {path} (malformed:memory.current)" in one_line(result.stderr)


# -- ingest requests -------------------------------------------------------------------------


def test_requests_all_rejected_exits_2_and_creates_no_database(tmp_path: Path) -> None:
    log = tmp_path / "log.csv"
    log.write_text("model,latency\nm,slow\nm,-1\n,2\n")
    db = tmp_path / "s.duckdb"
    result = run("ingest", "requests", str(log), "--db", str(db), *REQUEST_FLAGS)
    assert result.exit_code == EXIT_NOTHING_STORED, result.output
    message = one_line(result.stderr)
    assert "no requests could be read from" in message
    assert "first rejected record 1 (non-numeric latency)" in message
    assert not db.exists()


def test_requests_ragged_csv_is_one_line_naming_the_line(tmp_path: Path) -> None:
    log = tmp_path / "ragged.csv"
    log.write_text('model,latency\nm,1\n"a, quoted",2\nm,3,extra\nm,4\n')
    db = tmp_path / "s.duckdb"
    result = run("ingest", "requests", str(log), "--db", str(db), *REQUEST_FLAGS)
    assert result.exit_code == EXIT_NOTHING_STORED, result.output
    assert one_line(result.stderr) == (
        f"error: cannot read csv file {log}: line 4 has 3 fields but the header has 2; remove "
        "the extra fields or quote the values that contain commas, then import again\n"
    )
    assert not db.exists()


def test_requests_clean_log_exits_0(tmp_path: Path) -> None:
    log = tmp_path / "log.csv"
    log.write_text("model,latency\nm,1\nm,2\n")
    result = run("ingest", "requests", str(log), "--db", str(tmp_path / "s.duckdb"), *REQUEST_FLAGS)
    assert result.exit_code == EXIT_STORED, result.output


# -- a --db whose folder is missing ----------------------------------------------------------


def write_commands(tmp_path: Path) -> dict[str, list[str]]:
    """Every command in the CLI's own area that opens a store for writing, with good input."""
    body = tmp_path / "metrics.txt"
    body.write_text(dcgm_body())
    tree = CgroupTree(tmp_path / "cgroup")
    tree.add_container(UID, "a" * 64)
    log = tmp_path / "log.csv"
    log.write_text("model,latency\nm,1\n")
    return {
        "ingest dcgm": ["ingest", "dcgm", str(body)],
        "ingest cgroup": ["ingest", "cgroup", str(tree.root), "--node", "n1"],
        "ingest requests": ["ingest", "requests", str(log), *REQUEST_FLAGS],
        "ingest vllm": ["ingest", "vllm", "http://127.0.0.1:9/metrics", "--windows", "1"],
        "ingest triton": ["ingest", "triton", "http://127.0.0.1:9/metrics", "--windows", "1"],
        "retention": ["retention"],
    }


@pytest.mark.parametrize(
    "command",
    [
        "ingest dcgm",
        "ingest cgroup",
        "ingest requests",
        "ingest vllm",
        "ingest triton",
        "retention",
    ],
)
def test_a_missing_db_folder_is_refused_not_created(tmp_path: Path, command: str) -> None:
    folder = tmp_path / "typo" / "nested"
    db = folder / "s.duckdb"
    result = run(*write_commands(tmp_path)[command], "--db", str(db))
    assert result.exit_code == EXIT_NOTHING_STORED, result.output
    assert one_line(result.stderr) == (
        f"error: the folder {str(folder)!r} of database {str(db)!r} does not exist; "
        f"create it first (mkdir -p {folder})\n"
    )
    assert not (tmp_path / "typo").exists()


def test_a_db_folder_that_is_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    db = tmp_path / "afile" / "s.duckdb"
    result = run(*write_commands(tmp_path)["ingest dcgm"], "--db", str(db))
    assert result.exit_code == EXIT_NOTHING_STORED, result.output
    assert "is not a folder; pick another --db" in one_line(result.stderr)
