"""A damaged database file is refused at start: exit 2 and one line on stderr.

A real store file (batches with ids, the ledger, checkpointed at close, about 5 MB) is damaged
the ways a disk or a careless copy damages one, and ``sits-observe serve`` is started on it:

- cut short to 800 KB: DuckDB opens it and answers ``SELECT 1``, ingests commit, reads of
  the lost blocks fail;
- a few bytes overwritten in the middle (of the data block nearest the file's middle):
  DuckDB opens it, the block fails its checksum only when something reads it;
- the header overwritten: DuckDB refuses to open it (refused before this check existed).

Each must end ``serve`` with exit code 2 and one ``error:`` line saying the file is damaged,
with and without the staged start (``--extender-warm-view``: the extender answers before the
check ends). An undamaged copy of the same file starts.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from datetime import datetime, timedelta
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pytest

from sits_observe.store import Store
from tests.integration.serve_process import ServeProcess

pytestmark = pytest.mark.slow

BATCHES = 40
ROWS = 5_000
HEADERS_BYTES = 3 * 4096


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store file of 40 ledgered batches of GPU samples, closed (checkpointed)."""
    path = tmp_path_factory.mktemp("pristine") / "sits.duckdb"
    rng = np.random.default_rng(7)
    start = datetime(2026, 11, 1)
    with Store.open(path) as store:
        for i in range(BATCHES):
            table = pa.table(
                {
                    "ts": pa.array(
                        [start + timedelta(seconds=i * ROWS + k) for k in range(ROWS)],
                        pa.timestamp("us"),
                    ),
                    "node": [f"node-{i % 8}"] * ROWS,
                    "gpu_uuid": [f"GPU-{i % 32}"] * ROWS,
                    "fb_used_bytes": rng.integers(0, 2**40, ROWS),
                    "gpu_util_ratio": rng.random(ROWS),
                }
            )
            batch_id = f"batch-{i:04d}"
            digest = hashlib.sha256(batch_id.encode()).hexdigest()
            store.append_batch(
                {"gpu_samples": table}, batch_id=batch_id, node=f"node-{i % 8}", body_sha256=digest
            )
    assert path.stat().st_size > 4_000_000
    return path


def truncate(path: Path) -> None:
    with path.open("r+b") as f:
        f.truncate(800_000)


def overwrite_middle(path: Path) -> None:
    """16 bytes at the first segment of the ``gpu_samples`` data block nearest the middle of
    the file.

    Not the block's middle: DuckDB packs small segments into one partial block and checks
    only the part of it they use: bytes past the last segment are never checked (a partial
    block's middle was unused in some layouts, which depend on DuckDB's threads: the damage
    went unseen, ``serve`` started and the test hung). Not the file's middle either: that may
    lie in a free block, which nothing reads. :func:`reads_damaged` checks the damage holds.
    """
    with duckdb.connect(str(path), read_only=True) as con:
        found = con.execute("SELECT block_size FROM pragma_database_size()").fetchone()
        segments = con.execute(
            "SELECT block_id, min(block_offset) FROM pragma_storage_info('gpu_samples') "
            "WHERE block_id >= 0 GROUP BY block_id"
        ).fetchall()
    assert found is not None and segments
    block_bytes = int(found[0])
    # A block's place in the file: after DuckDB's three 4 KiB headers (its file format);
    # its data after its 8-byte checksum.
    starts = {HEADERS_BYTES + int(b) * block_bytes: int(first) for b, first in segments}
    middle = path.stat().st_size // 2
    start = min(starts, key=lambda at: abs(at + block_bytes // 2 - middle))
    with path.open("r+b") as f:
        f.seek(start + 8 + starts[start])
        f.write(b"\xde\xad\xbe\xef" * 4)


def reads_damaged(path: Path) -> bool:
    """Whether DuckDB itself fails to read every row of ``gpu_samples`` (the damage is real)."""
    try:
        with duckdb.connect(str(path), read_only=True) as con:
            con.execute("SELECT count(*), bit_xor(hash(COLUMNS(*))) FROM gpu_samples").fetchall()
    except duckdb.Error:
        return True
    return False


def overwrite_header(path: Path) -> None:
    with path.open("r+b") as f:
        f.seek(8)
        f.write(b"\xde\xad\xbe\xef" * 4)


DAMAGES = {
    "cut-short": (truncate, "is damaged: it is 800000 bytes, but its header counts"),
    "corrupt-block": (overwrite_middle, "is damaged: Corrupt database file"),
    "corrupt-header": (overwrite_header, "cannot open database"),
}


def serve_once(tmp_path: Path, db: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    """``serve`` on ``db`` until it exits (at most 60 s)."""
    service = ServeProcess(tmp_path, *flags)
    service.db = db
    return subprocess.run(service.args(), capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.parametrize("warm", [False, True], ids=["plain", "staged"])
@pytest.mark.parametrize("damage", list(DAMAGES))
def test_serve_refuses_a_damaged_database(
    tmp_path: Path, pristine: Path, damage: str, warm: bool
) -> None:
    db = tmp_path / "damaged.duckdb"
    shutil.copy(pristine, db)
    harm, says = DAMAGES[damage]
    harm(db)
    if damage == "corrupt-block":
        assert reads_damaged(db), "the overwritten bytes are not ones DuckDB reads"
    done = serve_once(tmp_path, db, *(["--extender-warm-view"] if warm else []))
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("error: ") and says in lines[0], lines[0]
    assert str(db) in lines[0]
    assert done.stdout == ""


def test_an_undamaged_copy_starts_and_is_ready(tmp_path: Path, pristine: Path) -> None:
    service = ServeProcess(tmp_path)
    shutil.copy(pristine, service.db)
    service.start()  # returns once /readyz says 200
    try:
        assert service.metric("sits_store_rows", table="gpu_samples") == BATCHES * ROWS
    finally:
        service.stop()
