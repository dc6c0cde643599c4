"""Report ``batching`` on a DuckDB file: a vLLM-style server (running batch reported), a
sub-10 ms server (P99 under 10 ms, no running batch) and one without a latency series."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest

from sits_observe.errors import NoDataError
from sits_observe.reports.registry import find_report
from sits_observe.reports.serving import batching
from sits_observe.reports.window import Window
from sits_observe.store import Store

T0 = datetime(2026, 3, 2, 9, 0)
WINDOW = Window(None, T0 + timedelta(minutes=10), "given")


def _window(k: int, **values: object) -> dict[str, object]:
    return {"ts": T0 + timedelta(seconds=10 * (k + 1)), "window_s": 10.0, **values}


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store.open(tmp_path / "batching.duckdb")
    rows = []
    for k in range(6):
        rows.append(
            _window(
                k,
                server="vllm",
                model="chat",
                completed=50.0,
                throughput_rps=5.0,
                requests_running=10.0,
                requests_waiting=0.0,
                latency_mean_s=2.0,
                latency_p99_s=4.0,
            )
        )
        rows.append(
            _window(
                k,
                server="triton",
                model="embed",
                completed=5000.0,
                throughput_rps=500.0,
                latency_mean_s=0.001,
                latency_p99_s=0.006,
            )
        )
        rows.append(_window(k, server="triton", model="blind", completed=10.0, throughput_rps=1.0))
    s.append("server_windows", pa.Table.from_pylist(rows))
    return s


def test_each_server_gets_its_kind_and_a_recommendation(store: Store) -> None:
    report = batching.build(store, WINDOW, batching.BatchingQuery())
    rows = {r["model"]: r for r in report.main.records()}
    chat, embed, blind = rows["chat"], rows["embed"], rows["blind"]
    assert chat["kind"] == "max_num_seqs" and chat["running"] == pytest.approx(10.0)
    # Every cap above the running batch of 10 keeps the P99 (the batch stays 10); the
    # smallest with 30 % headroom over 5/s is the least change.
    assert chat["recommended"] == "max_num_seqs=64"
    assert chat["est_p99_s"] == pytest.approx(4.0)
    assert embed["kind"] == "window" and embed["p99_source"] == "estimate"
    # Step at batch 1 = the mean latency, 1 ms; at 500/s greedy batching (no window) keeps
    # b = 1, busy 0.5: P99 = 1 ms + 1 ms x (1 - 0.01 / 0.5) = 1.98 ms, below the window ones;
    # max batch 8 and 16 tie, the smaller wins. Capacity 8 / t(8), t(8) = 1 ms x 31.4 / 29.4.
    assert embed["recommended"] == "window=0ms max_batch=8"
    assert embed["est_p99_s"] == pytest.approx(0.00198)
    assert embed["est_capacity_rps"] == pytest.approx(8 / (0.001 * 31.4 / 29.4))
    assert blind["status"].startswith(batching.NOT_ENOUGH)
    assert blind["recommended"] is None
    chosen = [c for c in report.table("candidates").records() if c["recommended"]]
    assert {c["model"] for c in chosen} == {"chat", "embed"}


def test_a_tight_limit_leaves_no_setting(store: Store) -> None:
    query = batching.BatchingQuery(model="embed", p99_limit_s=0.0005)
    (row,) = batching.build(store, WINDOW, query).main.records()
    assert row["recommended"] is None and row["status"].startswith("no candidate")


def test_exact_latencies_take_precedence(store: Store) -> None:
    requests = [
        {"ts": T0 + timedelta(seconds=i / 10), "model": "chat", "latency_s": 1.0 + i / 100}
        for i in range(101)
    ]
    store.append("requests", pa.Table.from_pylist(requests))
    rows = {
        r["model"]: r
        for r in batching.build(store, WINDOW, batching.BatchingQuery()).main.records()
    }
    assert rows["chat"]["p99_source"] == "exact"
    assert rows["chat"]["p99_s"] == pytest.approx(1.99)


def test_no_series_is_no_data(tmp_path: Path) -> None:
    with pytest.raises(NoDataError, match="server_windows"):
        batching.build(Store.open(tmp_path / "e.duckdb"), WINDOW, batching.BatchingQuery())


def test_registered() -> None:
    assert find_report("batching") is batching.SPEC
