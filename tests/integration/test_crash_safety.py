"""Crash safety of the service's store: what was acknowledged survives ``kill -9``.

Writers post batches as fast as they can and record every batch id the service
acknowledged (HTTP 200). The service is killed with SIGKILL (no shutdown, no checkpoint)
in the middle of the stream, several times over the same file. After each kill the database
must open, hold every acknowledged batch with all of its rows, and hold no partial batch:
each ledger entry's row count matches the rows carrying its id, and no row lacks an entry.
"""

from __future__ import annotations

import signal
import threading
import time
import uuid
from pathlib import Path

import httpx
import pyarrow as pa
import pytest

from sits_observe.store import Store
from tests.integration.test_service_agent import ServiceProcess, auth_headers, gpu_batch

pytestmark = pytest.mark.slow

WRITERS = 3
ROUNDS = 3


class Writer(threading.Thread):
    """Posts batches until stopped; remembers acknowledged and attempted ids and sizes."""

    def __init__(self, url: str, stop: threading.Event, index: int) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.stop_event = stop
        self.index = index
        self.acked: dict[str, int] = {}
        self.errors = 0

    def run(self) -> None:
        with httpx.Client(timeout=5.0) as client:
            n = 0
            while not self.stop_event.is_set():
                n += 1
                batch_id = f"w{self.index}-{uuid.uuid4().hex}"
                rows = 1 + n % 7
                try:
                    answer = client.post(
                        self.url + "/api/v1/ingest",
                        content=gpu_batch(batch_id, rows),
                        headers=auth_headers(batch_id),
                    )
                except httpx.HTTPError:
                    self.errors += 1
                    time.sleep(0.01)
                    continue
                if answer.status_code == 200:
                    self.acked[batch_id] = rows


def pairs(table: pa.Table) -> dict[str, int]:
    """A two-column result as {first: second}."""
    return dict(zip(table.column(0).to_pylist(), table.column(1).to_pylist(), strict=True))


def check_store(db: Path, acked: dict[str, int]) -> None:
    with Store.open(db) as store:
        ledger = pairs(store.query("SELECT batch_id, rows FROM ingest_batches"))
        per_id = pairs(store.query("SELECT gpu_uuid, count(*) FROM gpu_samples GROUP BY 1"))
    missing = [b for b in acked if b not in ledger]
    assert not missing, f"{len(missing)} acknowledged batches lost, e.g. {missing[:3]}"
    wrong = {b: (rows, per_id.get(b)) for b, rows in acked.items() if per_id.get(b) != rows}
    assert not wrong, f"acknowledged batches with missing rows: {list(wrong.items())[:3]}"
    partial = {b: (rows, per_id.get(b)) for b, rows in ledger.items() if per_id.get(b) != rows}
    assert not partial, f"ledger entries whose rows do not match: {list(partial.items())[:3]}"
    orphans = set(per_id) - set(ledger)
    assert not orphans, f"rows stored without a ledger entry: {sorted(orphans)[:3]}"


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM], ids=["kill-9", "sigterm"])
def test_every_acknowledged_batch_survives_the_service_being_killed(
    tmp_path: Path, signum: int
) -> None:
    svc = ServiceProcess(tmp_path)
    acked: dict[str, int] = {}
    try:
        for _ in range(ROUNDS):
            svc.start()
            stop = threading.Event()
            writers = [Writer(svc.url, stop, i) for i in range(WRITERS)]
            for w in writers:
                w.start()
            # Kill once every writer has had batches acknowledged, mid-stream.
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and min(len(w.acked) for w in writers) < 20:
                time.sleep(0.02)
            svc.signal(signum)
            stop.set()
            for w in writers:
                w.join(timeout=30)
                assert not w.is_alive()
                acked.update(w.acked)
            check_store(svc.db, acked)
    finally:
        svc.stop()
    assert len(acked) >= ROUNDS * WRITERS * 20
