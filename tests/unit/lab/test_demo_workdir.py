"""The demo's work folder across runs (sits_observe.lab.demo.workdir), on real folders."""

from __future__ import annotations

from pathlib import Path

import pytest

from sits_observe.errors import ConfigError
from sits_observe.lab.demo.workdir import MARKER, prepare_workdir


def _leave_a_run(workdir: Path, db: Path) -> None:
    """What a run leaves: node files, a spool with one batch, the database and its WAL."""
    scope = workdir / "cluster" / "nodes" / "gpu-node-1" / "cgroup" / "kubepods.slice" / "x.scope"
    scope.mkdir(parents=True)
    (scope / "memory.current").write_text("1\n")
    (workdir / "spool" / "gpu-node-1").mkdir(parents=True)
    (workdir / "spool" / "gpu-node-1" / "0000000000000000_3_abc.batch").write_bytes(b"x")
    (workdir / "ui.log").write_text("log\n")
    db.write_bytes(b"duckdb")
    db.with_name(db.name + ".wal").write_bytes(b"wal")


def test_a_first_run_finds_nothing_and_marks_the_folder(tmp_path: Path) -> None:
    lock, previous = prepare_workdir(
        tmp_path / "demo", tmp_path / "demo" / "sits.duckdb", keep_db=False
    )
    lock.release()
    assert previous.lines() == []
    assert (tmp_path / "demo" / MARKER).exists()


def test_a_rerun_replaces_the_node_files_spools_and_database(tmp_path: Path) -> None:
    workdir, db = tmp_path / "demo", tmp_path / "demo" / "sits.duckdb"
    prepare_workdir(workdir, db, keep_db=False)[0].release()
    _leave_a_run(workdir, db)
    lock, previous = prepare_workdir(workdir, db, keep_db=False)
    lock.release()
    assert not (workdir / "cluster").exists() and not (workdir / "spool").exists()
    assert not db.exists() and not db.with_name("sits.duckdb.wal").exists()
    assert sorted(previous.removed) == ["cluster", "spool", "ui.log"]
    assert previous.db_replaced == db
    text = "\n".join(previous.lines())
    assert "replaced" in text and str(db) in text and "--keep-db" in text


def test_keep_db_keeps_the_database_and_the_undelivered_batches(tmp_path: Path) -> None:
    workdir, db = tmp_path / "demo", tmp_path / "demo" / "sits.duckdb"
    prepare_workdir(workdir, db, keep_db=False)[0].release()
    _leave_a_run(workdir, db)
    lock, previous = prepare_workdir(workdir, db, keep_db=True)
    lock.release()
    assert db.read_bytes() == b"duckdb"
    assert (workdir / "spool" / "gpu-node-1" / "0000000000000000_3_abc.batch").exists()
    assert not (workdir / "cluster").exists()
    assert previous.db_kept == db and previous.spools_kept
    assert any("appending" in line for line in previous.lines())


def test_a_folder_the_demo_did_not_make_is_left_alone(tmp_path: Path) -> None:
    (tmp_path / "cluster").mkdir()
    (tmp_path / "cluster" / "precious.txt").write_text("mine")
    with pytest.raises(ConfigError, match="not made by a demo run"):
        prepare_workdir(tmp_path, tmp_path / "sits.duckdb", keep_db=False)
    assert (tmp_path / "cluster" / "precious.txt").read_text() == "mine"


def test_a_database_no_demo_made_is_not_replaced(tmp_path: Path) -> None:
    workdir = tmp_path / "demo"
    prepare_workdir(workdir, workdir / "sits.duckdb", keep_db=False)[0].release()
    other = tmp_path / "production.duckdb"
    other.write_bytes(b"precious")
    with pytest.raises(ConfigError, match="--keep-db"):
        prepare_workdir(workdir, other, keep_db=False)
    assert other.read_bytes() == b"precious"


def test_a_second_demo_cannot_take_a_folder_in_use(tmp_path: Path) -> None:
    workdir, db = tmp_path / "demo", tmp_path / "demo" / "sits.duckdb"
    lock, _ = prepare_workdir(workdir, db, keep_db=False)
    _leave_a_run(workdir, db)
    try:
        with pytest.raises(ConfigError, match="another sits-observe demo is running"):
            prepare_workdir(workdir, db, keep_db=False)
        assert (workdir / "cluster").exists() and db.exists()  # nothing of the live run removed
    finally:
        lock.release()
    prepare_workdir(workdir, db, keep_db=False)[0].release()  # free again once released
