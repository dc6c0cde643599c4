"""What makes a batch or a span the same one: body digests, span ids, duplicated columns."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

from sits_observe.errors import BatchConflict, SchemaError
from sits_observe.store import Store
from sits_observe.store.migrations import migrations

T0 = datetime(2026, 11, 1, 12, 0, 0)
DIGEST_A = "a" * 64
DIGEST_B = "b" * 64


def gpu_rows(n: int) -> pa.Table:
    return pa.table(
        {
            "ts": [T0 + timedelta(seconds=i) for i in range(n)],
            "node": ["n1"] * n,
            "fb_used_bytes": list(range(n)),
        }
    )


def span_rows(ids: list[tuple[str | None, str | None]], start: datetime = T0) -> pa.Table:
    n = len(ids)
    return pa.table(
        {
            "ts": [start + timedelta(milliseconds=i) for i in range(n)],
            "model": ["m"] * n,
            "latency_s": [0.5] * n,
            "trace_id": [t for t, _ in ids],
            "span_id": [s for _, s in ids],
        }
    )


def test_a_duplicated_column_name_is_a_schema_error_and_stores_nothing() -> None:
    store = Store.open(":memory:")
    doubled = pa.Table.from_arrays(
        [pa.array([T0]), pa.array([1]), pa.array([2])],
        names=["ts", "fb_used_bytes", "fb_used_bytes"],
    )
    with pytest.raises(SchemaError, match=r"fb_used_bytes.*more than once"):
        store.append_batch({"gpu_samples": doubled}, batch_id="b-1")
    assert store.count("gpu_samples") == 0 and store.count("ingest_batches") == 0


def test_the_same_batch_id_with_another_body_is_a_conflict() -> None:
    store = Store.open(":memory:")
    first = store.append_batch({"gpu_samples": gpu_rows(2)}, batch_id="b-1", body_sha256=DIGEST_A)
    replay = store.append_batch({"gpu_samples": gpu_rows(2)}, batch_id="b-1", body_sha256=DIGEST_A)
    assert (first.duplicate, replay.duplicate) == (False, True)
    with pytest.raises(BatchConflict, match="b-1"):
        store.append_batch({"gpu_samples": gpu_rows(5)}, batch_id="b-1", body_sha256=DIGEST_B)
    assert store.count("gpu_samples") == 2
    assert store.scalar("SELECT body_sha256 FROM ingest_batches") == DIGEST_A


def test_batches_stored_before_digests_existed_stay_duplicates(tmp_path: Path) -> None:
    """A file written by schema version 2 has ledger rows without a digest: a replay of one
    of those ids (whatever its body) is still acknowledged as a duplicate."""
    path = tmp_path / "v2.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at TIMESTAMP)")
    for migration in migrations()[:2]:
        con.execute(migration.sql)
        con.execute("INSERT INTO schema_version VALUES (?, now()::TIMESTAMP)", [migration.version])
    con.execute("INSERT INTO ingest_batches VALUES ('old-1', now()::TIMESTAMP, 'n1', 7)")
    con.close()
    with Store.open(path) as store:
        assert store.scalar("SELECT body_sha256 FROM ingest_batches") is None
        again = store.append_batch(
            {"gpu_samples": gpu_rows(3)}, batch_id="old-1", body_sha256=DIGEST_B
        )
        assert again.duplicate and again.rows == 7
        assert store.count("gpu_samples") == 0


def test_a_span_is_stored_once_within_and_across_batches() -> None:
    store = Store.open(":memory:")
    trace = "0" * 31 + "1"
    same = [(trace, "00000000000000aa")] * 3 + [(trace, "00000000000000bb")]
    first = store.append_batch({"requests": span_rows(same)})
    assert first.rows == 2
    # The same spans again (an exporter's retry with a different body), plus a new one.
    second = store.append_batch(
        {"requests": span_rows([(trace, "00000000000000aa"), (trace, "00000000000000cc")])}
    )
    assert second.rows == 1
    assert store.scalar("SELECT count(*) FROM requests WHERE span_id = '00000000000000aa'") == 1
    assert store.count("requests") == 3


def test_requests_without_span_ids_are_never_merged() -> None:
    store = Store.open(":memory:")
    store.append_batch({"requests": span_rows([(None, None)] * 3)})
    store.append_batch({"requests": span_rows([(None, None)] * 3)})
    assert store.count("requests") == 6
