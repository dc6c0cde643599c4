"""The DuckDB store: migrations, schema checks, idempotent batches, retention, export."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sits_observe.domain.tables import TABLES
from sits_observe.errors import SchemaError, StoreError
from sits_observe.store import RetentionSettings, Store, enforce_retention
from sits_observe.store.duck import LEDGER_ROWS_PER_STATEMENT, record_batches
from sits_observe.store.migrations import latest_version

T0 = datetime(2026, 11, 1, 12, 0, 0)


def gpu_rows(n: int, start: datetime = T0, step_s: float = 1.0) -> pa.Table:
    return pa.table(
        {
            "ts": [start + timedelta(seconds=i * step_s) for i in range(n)],
            "node": ["n1"] * n,
            "gpu_uuid": ["GPU-a"] * n,
            "fb_used_bytes": list(range(n)),
            "gpu_util_ratio": [0.5] * n,
        }
    )


def test_new_file_is_migrated_and_matches_domain_schema(tmp_path: Path) -> None:
    """Every domain table exists with exactly the domain's columns, in order."""
    with Store.open(tmp_path / "s.duckdb") as store:
        assert store.schema_version() == latest_version()
        for name, spec in TABLES.items():
            assert store.columns(name) == spec.schema.names, name


def test_reopen_keeps_data_and_does_not_remigrate(tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    with Store.open(path) as store:
        store.append("gpu_samples", gpu_rows(3))
    with Store.open(path) as store:
        assert store.count("gpu_samples") == 3
        assert store.scalar("SELECT count(*) FROM schema_version") == latest_version()


def test_missing_columns_become_null_and_unknown_columns_are_rejected() -> None:
    store = Store.open(":memory:")
    store.append("gpu_samples", gpu_rows(2))
    assert store.scalar("SELECT count(*) FROM gpu_samples WHERE fb_total_bytes IS NULL") == 2
    bad = gpu_rows(1).append_column("fb_usd_bytes", pa.array([1]))
    with pytest.raises(SchemaError, match="fb_usd_bytes"):
        store.append("gpu_samples", bad)
    with pytest.raises(SchemaError, match="valid tables"):
        store.append("gpu_sample", gpu_rows(1))
    assert store.count("gpu_samples") == 2


def test_a_bad_table_in_a_batch_stores_nothing() -> None:
    store = Store.open(":memory:")
    bad = pa.table({"ts": [T0], "latency_s": ["not a number"]})
    with pytest.raises(SchemaError):
        store.append_batch({"gpu_samples": gpu_rows(2), "requests": bad})
    assert store.count("gpu_samples") == 0


def test_batch_ids_make_replays_idempotent() -> None:
    store = Store.open(":memory:")
    first = store.append_batch({"gpu_samples": gpu_rows(4)}, batch_id="b-1", node="n1")
    again = store.append_batch({"gpu_samples": gpu_rows(4)}, batch_id="b-1", node="n1")
    assert (first.duplicate, again.duplicate) == (False, True)
    assert again.rows == 4
    assert store.count("gpu_samples") == 4
    assert store.count("ingest_batches") == 1


def test_retention_forgets_batch_ids_past_the_ledger_retention() -> None:
    """The ledger of batch ids is pruned: an id inside ``ledger_retention_s`` is still a
    duplicate, one past it is forgotten (its replay would be stored again)."""
    store = Store.open(":memory:")
    store.append_batch({"gpu_samples": gpu_rows(2)}, batch_id="old", node="n1")
    received = store.scalar("SELECT received_at FROM ingest_batches")
    store.execute(
        "UPDATE ingest_batches SET received_at = ? WHERE batch_id = 'old'",
        [received - timedelta(hours=3)],
    )
    store.append_batch(
        {"gpu_samples": gpu_rows(2, start=T0 + timedelta(minutes=1))}, batch_id="new", node="n1"
    )
    settings = RetentionSettings(raw_retention_s=10**9, ledger_retention_s=2 * 3600)
    report = enforce_retention(store, received, settings)
    assert report.ledger_rows_deleted == 1
    assert store.query("SELECT batch_id FROM ingest_batches").column(0).to_pylist() == ["new"]
    assert store.append_batch({"gpu_samples": gpu_rows(2)}, batch_id="new").duplicate
    assert not store.append_batch({"gpu_samples": gpu_rows(2)}, batch_id="old").duplicate
    assert RetentionSettings().ledger_retention_s == 86400


def test_times_the_store_stamps_are_utc_on_a_host_that_is_not(tmp_path: Path) -> None:
    """``received_at`` (and every ``now()`` the store writes) is UTC whatever the host's time
    zone: DuckDB's sessions default to the host's, read once per process, hence the child."""
    script = (
        "import sys\n"
        "from datetime import UTC, datetime\n"
        "from sits_observe.store import Store\n"
        "import pyarrow as pa\n"
        "with Store.open(sys.argv[1]) as store:\n"
        "    store.append_batch({'gpu_samples': pa.table({'ts': [datetime(2026, 11, 1)]})},"
        " batch_id='b')\n"
        "    stamped = store.scalar('SELECT received_at FROM ingest_batches')\n"
        "print((datetime.now(UTC).replace(tzinfo=None) - stamped).total_seconds())\n"
    )
    env = {**os.environ, "TZ": "Asia/Shanghai"}  # UTC+8, no daylight saving
    run = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "s.duckdb")],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert 0 <= float(run.stdout) < 60, run.stdout


def test_retention_rolls_up_exactly_and_merges_late_rows() -> None:
    store = Store.open(":memory:")
    store.append("gpu_samples", gpu_rows(120))  # two full minutes, fb_used 0..119
    settings = RetentionSettings(raw_retention_s=3600)
    now = T0 + timedelta(hours=2)
    report = enforce_retention(store, now, settings)
    assert report.gpu_rows_rolled == 120
    assert store.count("gpu_samples") == 0
    rows = store.query(
        "SELECT minute, samples, fb_used_bytes_sum, fb_used_bytes_max "
        "FROM gpu_samples_1m ORDER BY minute"
    ).to_pylist()
    assert [(r["samples"], int(r["fb_used_bytes_sum"]), r["fb_used_bytes_max"]) for r in rows] == [
        (60, sum(range(60)), 59),
        (60, sum(range(60, 120)), 119),
    ]
    # A late row for the first minute merges into the existing rollup row.
    store.append("gpu_samples", gpu_rows(1, start=T0 + timedelta(seconds=5)))
    enforce_retention(store, now, settings)
    first = store.query("SELECT samples FROM gpu_samples_1m ORDER BY minute LIMIT 1")
    assert first.column("samples").to_pylist() == [61]


def test_retention_deletes_old_rollups_and_requests() -> None:
    store = Store.open(":memory:")
    store.append("gpu_samples", gpu_rows(10))
    store.append("requests", pa.table({"ts": [T0], "model": ["m"], "latency_s": [0.1]}))
    store.append("pods", pa.table({"ts": [T0, T0 + timedelta(days=1)], "pod": ["a", "b"]}))
    for table in ("numa_samples", "sync_delays"):  # the topology collectors' tables too
        store.append(table, pa.table({"ts": [T0, T0 + timedelta(days=1)], "node": ["n1", "n2"]}))
    settings = RetentionSettings(
        raw_retention_s=60,
        rollup_retention_s=3600,
        requests_retention_s=3600,
        other_retention_s=7200,
    )
    report = enforce_retention(store, T0 + timedelta(days=1), settings)
    assert report.request_rows_deleted == 1
    assert report.other_rows_deleted == 3
    assert store.query("SELECT pod FROM pods").column("pod").to_pylist() == ["b"]
    for table in ("numa_samples", "sync_delays"):
        assert store.query(f"SELECT node FROM {table}").column("node").to_pylist() == ["n2"]
    assert report.rollup_rows_deleted == 1  # rolled up, then past its own retention
    assert store.count("gpu_samples_1m") == 0
    assert store.count("requests") == 0


def test_parquet_export_round_trips(tmp_path: Path) -> None:
    store = Store.open(":memory:")
    store.append("gpu_samples", gpu_rows(5))
    dest = tmp_path / "gpu.parquet"
    assert store.export_parquet("gpu_samples", dest) == 5
    table = pq.read_table(dest)
    assert table.column("fb_used_bytes").to_pylist() == [0, 1, 2, 3, 4]
    with pytest.raises(StoreError, match="unknown table"):
        store.export_parquet("gpu_samples; DROP TABLE requests", dest)


def test_second_writer_gets_a_clear_lock_error(tmp_path: Path) -> None:
    """DuckDB locks the file per process; a second process is told who owns it."""
    import subprocess
    import sys

    path = tmp_path / "s.duckdb"
    with Store.open(path):
        code = (
            "import sys\n"
            "from sits_observe.store import Store\n"
            "from sits_observe.errors import StoreLocked\n"
            f"try:\n    Store.open({str(path)!r})\nexcept StoreLocked as e:\n"
            "    print('LOCKED', e); sys.exit(0)\nsys.exit(1)\n"
        )
        result = subprocess.run(
            [sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=60
        )
    assert result.returncode == 0, result.stderr
    assert "owned by another process" in result.stdout


def test_read_only_open_refuses_writes(tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    Store.open(path).close()
    with Store.open(path, read_only=True) as store, pytest.raises(StoreError, match="read-only"):
        store.append("gpu_samples", gpu_rows(1))
    with pytest.raises(StoreError, match="does not exist"):
        Store.open(tmp_path / "missing.duckdb", read_only=True)


def test_duckdb_file_written_by_store_opens_with_plain_duckdb(tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    with Store.open(path) as store:
        store.append("gpu_samples", gpu_rows(3))
    con = duckdb.connect(str(path), read_only=True)
    assert con.execute("SELECT sum(fb_used_bytes) FROM gpu_samples").fetchone() == (3,)


def test_a_memory_limit_bounds_duckdb(tmp_path: Path) -> None:
    with Store.open(tmp_path / "bounded.duckdb", memory_limit="256MiB") as store:
        assert store.scalar("SELECT current_setting('memory_limit')") == "256.0 MiB"
    with Store.open(tmp_path / "bounded.duckdb") as store:  # DuckDB's default again
        assert store.scalar("SELECT current_setting('memory_limit')") != "256.0 MiB"


def test_a_writable_store_checkpoints_at_its_own_threshold(tmp_path: Path) -> None:
    with Store.open(tmp_path / "wal.duckdb") as store:
        assert store.scalar("SELECT current_setting('checkpoint_threshold')") == "64.0 MiB"


def test_ledger_rows_past_one_statement_are_all_recorded() -> None:
    """``record_batches`` splits a large group's ledger into several statements; every row
    lands with its own fields."""
    store = Store.open(":memory:")
    entries = [(f"b-{i}", f"n{i % 3}", i, None if i % 2 else f"{i:064x}") for i in range(600)]
    assert len(entries) > 2 * LEDGER_ROWS_PER_STATEMENT
    with store.transaction() as con:
        record_batches(con, entries)
    stored = store.query("SELECT batch_id, node, rows, body_sha256 FROM ingest_batches")
    assert sorted(tuple(r.values()) for r in stored.to_pylist()) == sorted(entries)
