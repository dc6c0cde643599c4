"""``ship_every``: the agent collects every tick and ships every n-th, one batch holding the
n ticks' rows; the batch is then spooled until acknowledged, like any other."""

from __future__ import annotations

import threading
from datetime import datetime
from pathlib import Path

import httpx
import pytest

from sits_observe.collectors.agent import AgentLoop, AgentMetrics, Shipper, Spool
from sits_observe.collectors.agent.settings import AgentSettings
from sits_observe.domain.collect import CollectResult
from tests.unit.collectors.test_agent_loop import Clock, FakeService, GpuCounter


def make_loop(
    tmp_path: Path,
    service: FakeService,
    gpu: GpuCounter,
    ship_every: int,
    stop: threading.Event | None = None,
) -> AgentLoop:
    client = httpx.Client(transport=httpx.MockTransport(service))
    ids = iter(f"batch{i:04d}" for i in range(10_000))
    return AgentLoop(
        [gpu],
        Shipper("http://svc", "t", node="n1", client=client, retries=0, backoff_s=0.0),
        Spool(tmp_path / "spool", max_bytes=10_000_000, max_files=100),
        interval_s=1.0,
        node="n1",
        metrics=AgentMetrics(),
        clock=Clock(),
        batch_ids=lambda: next(ids),
        ship_every=ship_every,
        stop_event=stop,
        monotonic=lambda: 0.0,  # never waits: ticks as fast as the test runs them
    )


def test_n_ticks_make_one_batch_with_every_ticks_rows(tmp_path: Path) -> None:
    service = FakeService()
    gpu = GpuCounter(gpus=8)
    loop = make_loop(tmp_path, service, gpu, ship_every=3)
    reports = [loop.tick() for _ in range(6)]
    assert [r.result for r in reports] == ["held", "held", "shipped"] * 2
    assert [r.rows_collected for r in reports] == [8] * 6
    assert gpu.calls == 6  # sampled every tick
    assert list(service.stored) == ["batch0000", "batch0001"]
    first = service.stored["batch0000"]["gpu_samples"]
    assert first.num_rows == 3 * 8
    assert len(set(first.column("ts").to_pylist())) == 3  # three ticks' timestamps
    assert sorted(first.column("fb_used_bytes").to_pylist()) == sorted(
        c * 1000 + i for c in (1, 2, 3) for i in range(8)
    )
    assert service.rows() == 6 * 8


def test_a_batch_of_held_ticks_is_spooled_until_acknowledged(tmp_path: Path) -> None:
    service = FakeService()
    loop = make_loop(tmp_path, service, GpuCounter(gpus=2), ship_every=2)
    service.mode = "down"
    assert [loop.tick().result for _ in range(4)] == ["held", "spooled", "held", "spooled"]
    assert service.rows() == 0
    service.mode = "up"
    loop.tick()
    report = loop.tick()
    assert report.replayed == 2 and report.result == "shipped"
    assert service.rows() == 6 * 2  # nothing lost, nothing doubled
    assert [t["gpu_samples"].num_rows for t in service.stored.values()] == [4, 4, 4]


class StopsAfter(GpuCounter):
    """Asks the loop to stop during its ``calls``-th collection (SIGTERM mid-interval)."""

    def __init__(self, calls: int, stop: threading.Event) -> None:
        super().__init__(gpus=2)
        self.stop_at = calls
        self.stop = stop

    def collect(self, now: datetime) -> CollectResult:
        result = super().collect(now)
        if self.calls == self.stop_at:
            self.stop.set()
        return result


def test_stopping_ships_what_is_held(tmp_path: Path) -> None:
    service = FakeService()
    stop = threading.Event()
    loop = make_loop(tmp_path, service, StopsAfter(3, stop), ship_every=10, stop=stop)
    loop.run()
    assert list(service.stored) == ["batch0000"]
    assert service.rows() == 3 * 2  # the three held ticks went out at stop, as one batch


def test_ship_every_is_a_bounded_setting() -> None:
    assert AgentSettings().ship_every == 1
    with pytest.raises(ValueError, match="ship_every"):
        AgentSettings(ship_every=0)
