"""The agent loop: isolation of collectors, batching, spooling, replay order, dead letters.

The service is a fake behind an injected httpx transport; the shipper and spool are real.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pyarrow as pa
import pytest

from sits_observe.collectors.agent import AgentLoop, AgentMetrics, Shipper, Spool
from sits_observe.collectors.agent.wire import decode_batch
from sits_observe.domain.collect import CollectResult
from sits_observe.errors import CollectorError, DriverUnavailable

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


class GpuCounter:
    """Yields ``gpus`` gpu_samples rows per call, fb_used_bytes counting up across calls."""

    def __init__(self, name: str = "fake-gpu", gpus: int = 2, dropped: int = 0) -> None:
        self.name = name
        self.gpus = gpus
        self.calls = 0
        self.rows = 0
        self.dropped = dropped

    def collect(self, now: datetime) -> CollectResult:
        self.calls += 1
        n = self.gpus
        table = pa.table(
            {
                "ts": pa.array([now.replace(tzinfo=None)] * n, pa.timestamp("us")),
                "node": ["n1"] * n,
                "gpu_uuid": [f"GPU-{i}" for i in range(n)],
                "fb_used_bytes": [self.calls * 1000 + i for i in range(n)],
            }
        )
        self.rows += n
        dropped = Counter({"sentinel": self.dropped}) if self.dropped else Counter()
        return CollectResult({"gpu_samples": table}, dropped)


class Failing:
    """Raises ``error`` on every call."""

    def __init__(self, name: str, error: Exception) -> None:
        self.name = name
        self.error = error
        self.calls = 0

    def collect(self, now: datetime) -> CollectResult:
        self.calls += 1
        raise self.error


class BadColumns:
    """Returns a table with a column the domain does not know."""

    name = "bad-columns"

    def collect(self, now: datetime) -> CollectResult:
        return CollectResult({"gpu_samples": pa.table({"fb_usd_bytes": [1]})})


class FakeService:
    """Decodes every batch it is sent; ``mode`` decides the answer."""

    def __init__(self) -> None:
        self.mode = "up"
        self.attempts: list[str] = []
        self.stored: dict[str, dict[str, pa.Table]] = {}

    def __call__(self, request: httpx.Request) -> httpx.Response:
        batch_id = request.headers["x-sits-batch-id"]
        self.attempts.append(batch_id)
        if self.mode == "down":
            raise httpx.ConnectError("connection refused")
        if self.mode == "bad":
            return httpx.Response(400, json={"detail": "schema mismatch", "reason": "schema"})
        duplicate = batch_id in self.stored
        self.stored.setdefault(batch_id, decode_batch(request.content))
        return httpx.Response(200, json={"batch_id": batch_id, "duplicate": duplicate})

    def rows(self, table: str = "gpu_samples") -> int:
        return sum(t[table].num_rows for t in self.stored.values() if table in t)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=1)
        return self.now


def make_loop(
    tmp_path: Path, service: FakeService, *collectors: object, max_files: int = 100
) -> AgentLoop:
    client = httpx.Client(transport=httpx.MockTransport(service))
    ids = iter(f"batch{i:04d}" for i in range(10_000))
    return AgentLoop(
        collectors,  # type: ignore[arg-type]
        Shipper("http://svc", "t", node="n1", client=client, retries=1, backoff_s=0.0),
        Spool(tmp_path / "spool", max_bytes=10_000_000, max_files=max_files),
        interval_s=1.0,
        node="n1",
        dead_letter=Spool(tmp_path / "dead", max_bytes=10_000_000, max_files=10),
        metrics=AgentMetrics(),
        clock=Clock(),
        batch_ids=lambda: next(ids),
    )


def metric(loop: AgentLoop, name: str, **labels: str) -> float:
    value = loop.metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


def test_one_batch_per_tick_merges_collectors_and_adds_drop_rows(tmp_path: Path) -> None:
    service = FakeService()
    a, b = GpuCounter("a", gpus=2, dropped=3), GpuCounter("b", gpus=3)
    loop = make_loop(tmp_path, service, a, b)
    report = loop.tick()
    assert report.result == "shipped" and report.batch_id == "batch0000"
    (tables,) = service.stored.values()
    assert tables["gpu_samples"].num_rows == 5
    assert tables["gpu_samples"].schema.names[:3] == ["ts", "node", "gpu_uuid"]
    drops = tables["collector_drops"].to_pylist()
    assert [(d["collector"], d["reason"], d["count"], d["node"]) for d in drops] == [
        ("a", "sentinel", 3, "n1")
    ]
    assert metric(loop, "sits_agent_samples_collected_total", collector="a") == 2
    assert metric(loop, "sits_agent_samples_shipped_total") == 6
    assert metric(loop, "sits_agent_collector_drops_total", collector="a", reason="sentinel") == 3


def test_a_failing_collector_does_not_stop_the_others_and_logs_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    service = FakeService()
    good = GpuCounter()
    dead = Failing("dead-endpoint", CollectorError("GET http://x:9400 failed"))
    buggy = Failing("buggy", RuntimeError("boom"))
    loop = make_loop(tmp_path, service, dead, buggy, good)
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            report = loop.tick()
            assert report.collector_errors == 2
    assert service.rows() == 6 == good.rows
    assert dead.calls == buggy.calls == 3
    assert metric(loop, "sits_agent_collector_errors_total", collector="dead-endpoint") == 3
    assert metric(loop, "sits_agent_collector_errors_total", collector="buggy") == 3
    assert caplog.text.count("collector dead-endpoint failed") == 1
    assert caplog.text.count("collector buggy failed") == 1


def test_a_collector_that_recovers_is_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    flaky = Failing("flaky", CollectorError("down"))
    loop = make_loop(tmp_path, FakeService(), flaky)
    loop.tick()
    flaky.collect = GpuCounter("flaky").collect  # type: ignore[method-assign]
    with caplog.at_level(logging.INFO):
        loop.tick()
    assert "collector flaky recovered" in caplog.text


def test_driver_unavailable_disables_the_collector_after_one_log_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    nvml = Failing("nvml", DriverUnavailable("libnvidia-ml.so.1 not found"))
    loop = make_loop(tmp_path, FakeService(), nvml, GpuCounter())
    with caplog.at_level(logging.WARNING):
        for _ in range(4):
            loop.tick()
    assert nvml.calls == 1
    assert loop.active_collectors == ["fake-gpu"]
    assert caplog.text.count("collector nvml disabled") == 1
    assert metric(loop, "sits_agent_collectors_disabled") == 1


def test_bad_output_of_one_collector_does_not_spoil_the_batch(tmp_path: Path) -> None:
    service = FakeService()
    loop = make_loop(tmp_path, service, BadColumns(), GpuCounter())
    report = loop.tick()
    assert report.result == "shipped" and report.collector_errors == 1
    assert service.rows() == 2


def test_outage_spools_then_replays_in_collection_order_before_new_batches(
    tmp_path: Path,
) -> None:
    service = FakeService()
    gpu = GpuCounter()
    loop = make_loop(tmp_path, service, gpu)
    loop.tick()
    service.mode = "down"
    for _ in range(3):
        assert loop.tick().result == "spooled"
    assert [e.batch_id for e in loop._spool.entries()] == ["batch0001", "batch0002", "batch0003"]
    assert metric(loop, "sits_agent_spool_batches") == 3
    # The first failure is retried once (retries=1); after that each tick only probes with
    # the oldest spooled batch, once, and newer batches queue behind it without a send.
    assert service.attempts == ["batch0000"] + ["batch0001"] * 4
    service.mode = "up"
    report = loop.tick()
    assert (report.result, report.replayed) == ("shipped", 3)
    delivered_order = [b for b in dict.fromkeys(service.attempts) if b in service.stored]
    assert delivered_order == [f"batch{i:04d}" for i in range(5)]
    assert service.rows() == gpu.rows == 10
    assert len(loop._spool) == 0 and metric(loop, "sits_agent_spool_batches") == 0
    assert metric(loop, "sits_agent_batches_total", result="replayed") == 3
    assert metric(loop, "sits_agent_samples_spooled_total") == 6
    assert metric(loop, "sits_agent_samples_shipped_total") == 10


def test_spool_written_by_an_earlier_process_is_replayed_first(tmp_path: Path) -> None:
    service = FakeService()
    service.mode = "down"
    make_loop(tmp_path, service, GpuCounter()).tick()
    service.mode = "up"
    fresh = make_loop(tmp_path, service, GpuCounter())
    fresh._batch_ids = lambda: "newer"
    fresh.tick()
    assert list(service.stored) == ["batch0000", "newer"]


def test_full_spool_drops_the_oldest_batch_and_counts_its_rows(tmp_path: Path) -> None:
    service = FakeService()
    service.mode = "down"
    loop = make_loop(tmp_path, service, GpuCounter(gpus=4), max_files=2)
    for _ in range(5):
        loop.tick()
    assert [e.batch_id for e in loop._spool.entries()] == ["batch0003", "batch0004"]
    assert metric(loop, "sits_agent_samples_dropped_total", reason="spool_full") == 12
    assert metric(loop, "sits_agent_batches_total", result="evicted") == 3
    service.mode = "up"
    loop.tick()
    assert list(service.stored) == ["batch0003", "batch0004", "batch0005"]


def test_rejected_batch_goes_to_dead_letter_and_is_not_retried(tmp_path: Path) -> None:
    service = FakeService()
    service.mode = "bad"
    loop = make_loop(tmp_path, service, GpuCounter())
    assert loop.tick().result == "rejected"
    assert service.attempts == ["batch0000"]
    assert len(loop._spool) == 0
    dead = Spool(tmp_path / "dead", max_bytes=10_000_000, max_files=10)
    (entry,) = dead.entries()
    assert entry.batch_id == "batch0000" and entry.rows == 2
    assert decode_batch(entry.read())["gpu_samples"].num_rows == 2
    service.mode = "up"
    loop.tick()
    assert service.attempts == ["batch0000", "batch0001"]
    assert metric(loop, "sits_agent_samples_dropped_total", reason="rejected") == 2


def test_a_rejected_spooled_batch_does_not_block_the_ones_behind_it(tmp_path: Path) -> None:
    service = FakeService()
    service.mode = "down"
    loop = make_loop(tmp_path, service, GpuCounter())
    loop.tick()
    loop.tick()

    def reject_first(request: httpx.Request) -> httpx.Response:
        if request.headers["x-sits-batch-id"] == "batch0000":
            return httpx.Response(422, json={"detail": "bad", "reason": "bad_header"})
        service.mode = "up"
        return service(request)

    loop._shipper = Shipper(
        "http://svc",
        "t",
        node="n1",
        client=httpx.Client(transport=httpx.MockTransport(reject_first)),
    )
    report = loop.tick()
    assert report.replayed == 1 and report.result == "shipped"
    assert list(service.stored) == ["batch0001", "batch0002"]


def test_ticks_without_rows_send_nothing(tmp_path: Path) -> None:
    service = FakeService()
    loop = make_loop(tmp_path, service, GpuCounter(gpus=0))
    assert loop.tick().result == "empty"
    assert service.attempts == []


def test_run_returns_promptly_when_stopped(tmp_path: Path) -> None:
    service = FakeService()
    gpu = GpuCounter()
    loop = make_loop(tmp_path, service, gpu)
    loop.interval_s = 3600.0
    thread = threading.Thread(target=loop.run)
    thread.start()
    try:
        for _ in range(200):
            if gpu.calls:
                break
            threading.Event().wait(0.01)
        loop.stop()
        thread.join(timeout=10)
        assert not thread.is_alive(), "run() did not return after stop()"
    finally:
        loop.stop()
    assert gpu.calls == 1 and service.rows() == 2


def test_a_crashing_tick_does_not_end_run(tmp_path: Path) -> None:
    service = FakeService()
    loop = make_loop(tmp_path, service, GpuCounter())
    calls = 0
    real_tick = loop.tick

    def tick() -> object:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("bug in a tick")
        loop.stop()
        return real_tick()

    loop.tick = tick  # type: ignore[method-assign]
    loop.interval_s = 0.01
    loop.run()
    assert calls == 2 and service.rows() == 2
    assert metric(loop, "sits_agent_collector_errors_total", collector="agent") == 1
