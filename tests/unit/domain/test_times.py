"""The one conversion to the zone-less UTC every ``TIMESTAMP`` column holds."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from sits_observe.domain.times import utc_naive


def test_zoned_times_become_naive_utc() -> None:
    paris = timezone(timedelta(hours=2))
    assert utc_naive(datetime(2026, 6, 1, 14, 0, tzinfo=paris)) == datetime(2026, 6, 1, 12, 0)
    assert utc_naive(datetime(2026, 6, 1, 12, 0, tzinfo=UTC)) == datetime(2026, 6, 1, 12, 0)


def test_naive_times_are_taken_as_utc_already() -> None:
    naive = datetime(2026, 6, 1, 12, 0)
    assert utc_naive(naive) is naive
    assert utc_naive(utc_naive(naive)) == naive
