"""Group commit through a real ``sits-observe serve`` over loopback HTTP: many agents at
once, replays and a conflict among them; every acknowledged row is in the file once, and
concurrent batches shared transactions (one receive time per commit in the ledger)."""

from __future__ import annotations

import threading
import uuid
from datetime import datetime, timedelta
from pathlib import Path

import httpx
import pyarrow as pa
import pytest

from sits_observe.collectors.agent.wire import (
    CONTENT_TYPE,
    HEADER_BATCH_ID,
    HEADER_NODE,
    INGEST_PATH,
    encode_batch,
)
from sits_observe.store import Store
from tests.integration.serve_process import TOKEN, serving

pytestmark = pytest.mark.slow

AGENTS = 16
BATCHES = 6
GPUS = 8


def body(node: str, tick: int, fb_used_bytes: int = 1) -> bytes:
    ts = datetime(2026, 11, 1) + timedelta(seconds=tick)
    table = pa.table(
        {
            "ts": [ts] * GPUS,
            "node": [node] * GPUS,
            "gpu_uuid": [f"GPU-{node}-{g}" for g in range(GPUS)],
            "fb_used_bytes": [fb_used_bytes] * GPUS,
        }
    )
    return encode_batch({"gpu_samples": table})


def post(client: httpx.Client, url: str, batch_id: str, node: str, data: bytes) -> httpx.Response:
    headers = {
        "Authorization": f"Bearer {TOKEN}",
        "Content-Type": CONTENT_TYPE,
        HEADER_BATCH_ID: batch_id,
        HEADER_NODE: node,
    }
    return client.post(url + INGEST_PATH, content=data, headers=headers, timeout=30)


def test_concurrent_agents_share_commits_and_lose_or_double_nothing(tmp_path: Path) -> None:
    answers: dict[str, list[tuple[int, dict[str, object]]]] = {}
    lock = threading.Lock()
    start = threading.Barrier(AGENTS)

    def agent(a: int, url: str) -> None:
        node = f"node-{a}"
        with httpx.Client() as client:
            start.wait()
            for b in range(BATCHES):
                batch_id = f"{node}-{b}-{uuid.uuid4().hex[:8]}"
                data = body(node, b)
                sends = [data, data] if b == 0 else [data]  # the first one replayed
                if b == 1:
                    sends.append(body(node, b, fb_used_bytes=2))  # same id, another body
                for sent in sends:
                    response = post(client, url, batch_id, node, sent)
                    with lock:
                        answers.setdefault(batch_id, []).append(
                            (response.status_code, response.json())
                        )

    with serving(tmp_path) as service:
        threads = [threading.Thread(target=agent, args=(a, service.url)) for a in range(AGENTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        stored = service.metric("sits_ingest_batches_total", result="stored")
    assert len(answers) == AGENTS * BATCHES
    for batch_id, got in answers.items():
        first_status, first = got[0]
        assert first_status == 200 and first["duplicate"] is False, (batch_id, got)
        assert first["rows"] == GPUS
        tick = int(batch_id.split("-")[2])
        if tick == 0:
            assert got[1] == (200, {**first, "duplicate": True, "dropped": {}})
        if tick == 1:
            assert got[1][0] == 409 and got[1][1]["reason"] == "conflict"
    assert stored == AGENTS * BATCHES
    with Store.open(service.db, read_only=True) as store:
        assert store.count("gpu_samples") == AGENTS * BATCHES * GPUS
        assert store.scalar("SELECT count(DISTINCT (node, ts, gpu_uuid)) FROM gpu_samples") == (
            AGENTS * BATCHES * GPUS
        )
        assert store.scalar("SELECT max(fb_used_bytes) FROM gpu_samples") == 1  # no conflict
        assert store.count("ingest_batches") == AGENTS * BATCHES
        commits = store.scalar("SELECT count(DISTINCT received_at) FROM ingest_batches")
    assert commits < AGENTS * BATCHES  # batches that arrived together shared a transaction
