"""``batching`` gives self-consistent advice per server group, readable at 100 columns.

Two replicas of one model, one on H100 and one on A100 GPUs (the demo's servers): each GPU
is a row with its own calibrated step shape. The A100 replica queues: requests wait while
its running batch sits at 64, the cap in force, and it serves 1.5 requests/s then. The
model starts from that point, so max_num_seqs=64 is saturated at what the server did (not
given more capacity than it showed), and the advice for a server whose load is above what it
serves is the most capacity within the P99 limit. The H100 replica does not queue: the least
change with 30 % headroom.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest

from sits_observe.reports.serving import batching
from sits_observe.reports.window import Window
from sits_observe.store import Store
from sits_observe.surfaces.cli.reports.output import table_text

T0 = datetime(2026, 3, 2, 9, 0)
WINDOW = Window(None, T0 + timedelta(minutes=10), "given")
PODS = {"chat-h100": "NVIDIA-H100-80GB-HBM3", "chat-a100": "NVIDIA-A100-SXM4-80GB"}


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store.open(tmp_path / "batching.duckdb")
    windows = []
    for k in range(12):
        at = T0 + timedelta(seconds=10 * (k + 1))
        common = {"ts": at, "window_s": 10.0, "server": "vllm", "model": "chat"}
        windows.append(
            {**common, "pod": "chat-h100", "completed": 20.0, "requests_running": 20.0,
             "requests_waiting": 0.0, "latency_mean_s": 8.0, "latency_p99_s": 20.0}
        )  # fmt: skip
        queueing = k % 2 == 0
        windows.append(
            {**common, "pod": "chat-a100", "completed": 15.0 if queueing else 10.0,
             "requests_running": 64.0 if queueing else 30.0,
             "requests_waiting": 12.0 if queueing else 0.0, "latency_mean_s": 20.0,
             "latency_p99_s": 50.0}
        )  # fmt: skip
    pods = [
        {"ts": T0, "pod_uid": pod, "namespace": "serve", "pod": pod, "gpu_types": types,
         "gpu_request": 4, "phase": "Running"}
        for pod, types in PODS.items()
    ]  # fmt: skip
    s.append_batch(
        {"server_windows": pa.Table.from_pylist(windows), "pods": pa.Table.from_pylist(pods)}
    )
    return s


def test_one_row_per_gpu_with_its_own_step_shape(store: Store) -> None:
    report = batching.build(store, WINDOW, batching.BatchingQuery())
    rows = {r["gpu"]: r for r in report.main.records()}
    assert set(rows) == {"H100", "A100"}
    assert (rows["H100"]["step_shape"], rows["A100"]["step_shape"]) == ("h100", "a100")
    assert rows["H100"]["throughput_rps"] == pytest.approx(2.0)  # per replica


def test_a_queueing_replica_starts_from_the_cap_in_force(store: Store) -> None:
    report = batching.build(store, WINDOW, batching.BatchingQuery())
    a100 = next(r for r in report.main.records() if r["gpu"] == "A100")
    assert (a100["status"], a100["cap_now"]) == ("queues", 64)
    candidates = {
        c["setting"]: c for c in report.table("candidates").records() if c["gpu"] == "A100"
    }
    at_cap = candidates["max_num_seqs=64"]
    # What the server did when it queued: 15 requests per 10 s window at a batch of 64.
    assert at_cap["capacity_rps"] == pytest.approx(1.5) and at_cap["saturated"]
    capacities = [candidates[f"max_num_seqs={m}"]["capacity_rps"] for m in (64, 128, 256, 512)]
    assert capacities == sorted(capacities)
    # The load is above what it serves: the most capacity within the P99 limit.
    assert a100["recommended"] == "max_num_seqs=512"
    assert a100["est_capacity_rps"] == pytest.approx(capacities[-1])
    assert a100["why"].startswith("the most capacity within the P99 limit: the server queues")
    # A continuously batching server is busy whenever a request runs: no GPU busy figure.
    assert a100["est_gpu_busy_ratio"] is None
    assert all(c["gpu_busy_ratio"] is None for c in candidates.values())


def test_a_replica_with_room_gets_the_least_change_and_says_so(store: Store) -> None:
    report = batching.build(store, WINDOW, batching.BatchingQuery())
    h100 = next(r for r in report.main.records() if r["gpu"] == "H100")
    assert h100["status"] == "ok" and h100["recommended"] == "max_num_seqs=64"
    assert h100["why"].startswith("the least change with the headroom")


def test_readable_at_100_columns(store: Store) -> None:
    text = table_text(batching.build(store, WINDOW, batching.BatchingQuery()), 100)
    lines = text.splitlines()
    headers = [lines[1], *(lines[i + 1] for i, li in enumerate(lines) if li.startswith("Every"))]
    assert all("…" not in h for h in headers), headers
    assert all(len(li) <= 100 for li in lines)
