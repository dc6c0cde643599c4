"""The exporter's slow pass is cancellable: shutdown never waits on it for long.

The slow signals are injected (``signals=``): one blocks until the test releases it, the way a
long DuckDB scan or DBSCAN would, and the pass runs in a real thread (the default spawn).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from prometheus_client.core import GaugeMetricFamily, Metric

from sits_observe.store import Store
from sits_observe.surfaces.service.exporter.exporter import DerivedSignals, ExporterSettings
from sits_observe.surfaces.service.exporter.registry import Signal
from sits_observe.surfaces.service.exporter.signals.requests import PassInputs

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path / "cancel.duckdb") as s:
        yield s


class Blocking:
    """A slow builder that holds its pass until released (or fails when told to)."""

    def __init__(self, name: str, *, fail: bool = False) -> None:
        self.name = name
        self.fail = fail
        self.entered = threading.Event()
        self.release = threading.Event()
        self.ran = 0

    def __call__(self, _: PassInputs) -> list[Metric]:
        self.ran += 1
        self.entered.set()
        self.release.wait(60)
        if self.fail:
            raise RuntimeError("the store went away")
        family = GaugeMetricFamily(f"sits_test_{self.name}", "test")
        family.add_metric((), 1.0)
        return [family]

    def signal(self) -> Signal:
        return Signal(self.name, self, ((f"sits_test_{self.name}", GaugeMetricFamily),), slow=True)


def exporter(store: Store, *signals: Blocking) -> DerivedSignals:
    return DerivedSignals(
        store,
        ExporterSettings(cache_s=0, slow_cache_s=0),
        clock=lambda: NOW,
        signals=[s.signal() for s in signals],
    )


def names(derived: DerivedSignals) -> set[str]:
    return {family.name for family in derived.collect()}


def test_cancel_stops_a_running_pass_before_its_next_signal(store: Store) -> None:
    first, second = Blocking("first"), Blocking("second")
    derived = exporter(store, first, second)
    names(derived)  # the scrape starts the slow pass in its thread
    assert first.entered.wait(30)
    derived.cancel()
    first.release.set()
    assert derived.close(30)
    assert second.ran == 0
    assert "sits_test_first" not in names(derived)  # a cancelled pass is not published
    assert first.ran == 1  # and no new pass starts after cancel


def test_close_gives_up_on_a_pass_that_does_not_stop(store: Store) -> None:
    stuck = Blocking("stuck")
    derived = exporter(store, stuck)
    names(derived)
    assert stuck.entered.wait(30)
    assert derived.close(0.05) is False  # still running: the caller goes on without it
    stuck.release.set()
    assert derived.close(30) is True


def test_a_signal_failing_because_of_the_shutdown_is_not_counted(store: Store) -> None:
    failing = Blocking("failing", fail=True)
    derived = exporter(store, failing)
    names(derived)
    assert failing.entered.wait(30)
    derived.cancel()
    failing.release.set()
    assert derived.close(30)
    errors = next(f for f in derived.collect() if f.name == "sits_exporter_errors")
    assert {s.labels["signal"]: s.value for s in errors.samples} == {"failing": 0}
