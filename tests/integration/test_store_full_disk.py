"""A full disk under the service's database: it recovers by itself once space returns.

The database lives on a 150 MiB tmpfs of its own, 70 MiB of it taken by a filler file written
beside it (so space can be freed at once by deleting it); the 80 MiB left hold the store's
write-ahead log up to its 64 MiB checkpoint threshold. The real ``serve`` process takes
batches of incompressible rows until the disk is full: DuckDB then invalidates the database
(a checkpoint could not write its blocks) and every statement on it fails. Once the filler is
deleted the store must take batches again without a restart, hold every acknowledged batch
exactly once, and store each batch that was answered 503 exactly once when it is resent.
``/readyz`` is 503 while the store cannot write and 200 again after; ``/healthz`` fails once
the store has failed every write for ``--store-unhealthy-after-s``.

Needs ``mount -t tmpfs`` (root, or CAP_SYS_ADMIN); skipped where it cannot mount one.
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import numpy as np
import pyarrow as pa
import pytest

from sits_observe.collectors.agent.wire import CONTENT_TYPE, encode_batch
from sits_observe.store import Store
from tests.integration.serve_process import TOKEN, ServeProcess, wait_until

pytestmark = pytest.mark.slow

DISK_MIB = 150
FILLER_MIB = 70
ROWS = 20_000  # about 0.7 MB per batch in the database: four random 8-byte columns


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    """A 150 MiB tmpfs mounted for the test (unmounted after)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_MIB}m", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {made.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(path: Path, mib: int | None = None) -> None:
    """Write ``mib`` MiB of zeros to ``path`` (None: until the disk is full, to the byte)."""
    chunk = b"\0" * (1024 * 1024)
    with path.open("wb", buffering=0) as out:
        written = 0
        while mib is None or written < mib:
            try:
                out.write(chunk)
            except OSError:
                break
            written += 1
        if mib is None:  # the last pages, byte by byte down to 1
            for size in (65536, 4096, 512, 1):
                while True:
                    try:
                        out.write(b"\0" * size)
                    except OSError:
                        break


def batch(marker: str, rows: int = ROWS) -> bytes:
    """``rows`` GPU samples tagged with ``marker`` as their GPU UUID, of random values."""
    rng = np.random.default_rng()
    at = datetime.now(UTC).replace(tzinfo=None) - timedelta(minutes=1)
    return encode_batch(
        {
            "gpu_samples": pa.table(
                {
                    "ts": pa.array([at] * rows, pa.timestamp("us")),
                    "node": ["disk-node"] * rows,
                    "gpu_uuid": [marker] * rows,
                    "fb_used_bytes": rng.integers(0, 2**40, rows),
                    "fb_free_bytes": rng.integers(0, 2**40, rows),
                    "energy_j": rng.random(rows) * 1e12,
                    "pcie_tx_bytes_per_s": rng.random(rows) * 1e10,
                }
            )
        }
    )


#: Each batch's body, kept to be resent byte for byte (as an agent's spool does).
BODIES: dict[str, bytes] = {}


def post(service: ServeProcess, marker: str) -> httpx.Response:
    """Send the batch ``marker`` (the same bytes every time)."""
    body = BODIES.setdefault(marker, batch(marker))
    return httpx.post(
        service.url + "/api/v1/ingest",
        content=body,
        headers={
            "Authorization": f"Bearer {TOKEN}",
            "Content-Type": CONTENT_TYPE,
            "X-Sits-Batch-Id": marker,
            "X-Sits-Node": "disk-node",
        },
        timeout=60,
    )


def status(service: ServeProcess, path: str) -> int:
    return httpx.get(service.url + path, timeout=30).status_code


def pairs(table: pa.Table) -> dict[str, int]:
    """A two-column result as {first: second}."""
    return dict(zip(table.column(0).to_pylist(), table.column(1).to_pylist(), strict=True))


def check_exactly_once(db: Path, stored: set[str]) -> None:
    """Every id in ``stored`` has one ledger entry and ROWS rows; nothing else is there."""
    with Store.open(db) as store:
        ledger = pairs(store.query("SELECT batch_id, rows FROM ingest_batches"))
        per_id = pairs(store.query("SELECT gpu_uuid, count(*) FROM gpu_samples GROUP BY 1"))
    assert set(ledger) == stored, (sorted(set(ledger) ^ stored))[:3]
    assert all(ledger[b] == ROWS for b in stored), "a ledger entry with a wrong row count"
    wrong = {b: n for b, n in per_id.items() if n != ROWS or b not in stored}
    assert not wrong, f"rows stored twice, partly, or without a ledger entry: {wrong}"


def test_the_store_recovers_by_itself_once_disk_space_returns(disk: Path, tmp_path: Path) -> None:
    filler = disk / "filler"
    fill(filler, FILLER_MIB)
    service = ServeProcess(
        tmp_path, "--retention-interval-s", "0", "--store-unhealthy-after-s", "3", name="full"
    )
    service.db = disk / "full.duckdb"  # the token and the log stay off the small disk
    acked: set[str] = set()
    refused: list[str] = []
    service.start()
    try:
        # Fill the disk through the service until a batch is refused.
        while not refused:
            marker = uuid.uuid4().hex
            answer = post(service, marker)
            if answer.status_code == 200:
                acked.add(marker)
                assert len(acked) < 200, "the disk never filled"
                continue
            assert answer.status_code == 503, answer.text
            assert answer.json()["reason"] == "store"
            refused.append(marker)
        assert len(acked) >= 5, "the disk filled before the service took a few batches"

        # Keep it full: a reopened database checkpoints its write-ahead log into less space
        # and frees the log, which the next top-up takes, until nothing is left to free.
        # The kubelet's probes then find every write failing: readiness first, liveness
        # once that has lasted --store-unhealthy-after-s.
        def unhealthy() -> bool:
            fill(disk / f"top-up-{uuid.uuid4().hex}")
            status(service, "/readyz")
            return status(service, "/healthz") == 503

        wait_until(unhealthy, 60, "/healthz to fail while the disk stays full")
        assert status(service, "/readyz") == 503
        marker = uuid.uuid4().hex
        assert post(service, marker).status_code == 503
        refused.append(marker)

        for path in disk.iterdir():  # space returns
            if path != service.db and not path.name.startswith(f"{service.db.name}."):
                path.unlink()
        wait_until(lambda: status(service, "/readyz") == 200, 30, "/readyz to recover")
        assert status(service, "/healthz") == 200
        for marker in refused:  # the refused batches, resent, are stored once
            answer = post(service, marker)
            assert answer.status_code == 200, answer.text
            assert answer.json()["rows"] == ROWS
        again = post(service, refused[0])  # a replay of one: a duplicate, not stored again
        assert again.status_code == 200 and again.json()["duplicate"] is True
        fresh = uuid.uuid4().hex
        assert post(service, fresh).status_code == 200
        assert service.metric("sits_store_reopens_total", result="ok") >= 1
        assert service.metric("sits_store_writable") == 1
        assert service.proc is not None and service.proc.poll() is None  # never restarted
    finally:
        service.stop()
    check_exactly_once(service.db, acked | set(refused) | {fresh})
    assert "Traceback" not in service.logs()


def test_readyz_is_503_while_the_store_cannot_write(disk: Path, tmp_path: Path) -> None:
    """No batch at all: the readiness probe's own write finds the full disk. (Reads still
    work, so a read-only readiness check would say ready while every ingest fails.)"""
    service = ServeProcess(tmp_path, "--retention-interval-s", "0", name="ready")
    service.db = disk / "ready.duckdb"
    Store.open(service.db).close()  # checkpointed: no write-ahead log, nothing to free
    fill(disk / "filler")  # every byte
    with service.log.open("ab") as log:  # not start(): it waits for /readyz to say 200
        service.proc = subprocess.Popen(service.args(), stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: answers(service, "/healthz"), 60, "the service to answer")

        def refused_as_unwritable() -> bool:
            answer = httpx.get(service.url + "/readyz", timeout=30)
            return answer.status_code == 503 and "cannot write" in answer.json()["detail"]

        wait_until(refused_as_unwritable, 30, "/readyz to say the store cannot write")
        answer = httpx.get(service.url + "/readyz", timeout=30).json()
        assert answer["reason"] == "not_ready"
        assert "No space left on device" in answer["detail"], answer
        assert status(service, "/healthz") == 200  # not failing for 300 s yet
        refused = post(service, uuid.uuid4().hex)
        assert refused.status_code == 503 and refused.json()["reason"] == "store"

        (disk / "filler").unlink()
        wait_until(lambda: status(service, "/readyz") == 200, 30, "/readyz to recover")
        assert post(service, uuid.uuid4().hex).status_code == 200
    finally:
        service.stop()
    assert "Traceback" not in service.logs()


def answers(service: ServeProcess, path: str) -> bool:
    """The service answers ``path`` with 200 (AssertionError once it has exited)."""
    assert service.proc is not None
    if service.proc.poll() is not None:
        raise AssertionError(f"serve exited with {service.proc.returncode}:\n{service.logs()}")
    try:
        return status(service, path) == 200
    except httpx.HTTPError:
        return False
