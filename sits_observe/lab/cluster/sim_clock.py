"""A simulated clock: the cluster model's seconds, as the clocks the live components take.

``sits-observe experiment`` steps the simulated cluster far faster than real time and runs the
production components (kubelets, workload controllers, the live scheduler, the inventory loop,
the extender's view, the controller) one pass at a time in between. Each of them reads time
only through a clock it is given: a monotonic clock in seconds (backoffs, cooldowns, token
buckets, view ages) or a UTC ``datetime`` (timestamps written to the API and the store).
:class:`SimClock` answers both from one source of simulated seconds (the cluster's
``now_s``), so every component sees the same simulated instant and a run is reproducible.

``epoch`` is the UTC time of simulated second 0. It is fixed, not the wall clock, so two runs
of one seed write identical timestamps.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

#: Simulated second 0 of every experiment run (any fixed instant; timestamps derive from it).
DEFAULT_EPOCH = datetime(2025, 1, 6, tzinfo=UTC)


class SimClock:
    """Simulated time read from ``seconds`` (e.g. ``lambda: cluster.now_s``)."""

    def __init__(self, seconds: Callable[[], float], *, epoch: datetime = DEFAULT_EPOCH) -> None:
        if epoch.tzinfo is None:
            raise ValueError("the simulated clock's epoch must be timezone-aware (UTC)")
        self._seconds = seconds
        self.epoch = epoch.astimezone(UTC)

    def monotonic(self) -> float:
        """Simulated seconds since the epoch (a monotonic clock)."""
        return self._seconds()

    def utc(self) -> datetime:
        """The simulated instant as a UTC ``datetime``."""
        return self.epoch + timedelta(seconds=self._seconds())

    def at(self, t_s: float) -> datetime:
        """The UTC ``datetime`` of simulated second ``t_s``."""
        return self.epoch + timedelta(seconds=t_s)
