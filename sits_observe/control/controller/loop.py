"""The level-triggered control loop: read signals, plan, apply when leader, record.

Each pass works from the *current* level of every signal and object, never from events, so a
pass that failed, a replica that restarted or a leader that changed simply converge on the
next pass. One pass:

1. renew (or try to take) the Lease; a replica that is not the leader does nothing else;
2. read the latest signals (from the store) and the cluster's current state, then the use of
   the Kueue / KAI queues it holds (``read_queue_signals``: their members' measured peaks);
   a queue source the API could not list is counted
   (``sits_controller_errors_total{where="queues"}``) and left out of the pass;
3. ``plan()`` (timed into ``sits_controller_plan_seconds``);
4. ``apply()`` while still the leader (each write re-checks it), record every outcome.

An error in a pass is logged and counted (``sits_controller_errors_total{where="pass"}``) and
the loop carries on; an error on one object is isolated inside ``apply()``. The loop waits on
a ``threading.Event`` between passes, so ``stop`` ends it promptly, and then releases the
Lease so a peer takes over without waiting for it to expire.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import polars as pl
from polars.exceptions import PanicException

from sits_observe.control.controller.apply import Applier
from sits_observe.control.controller.leader import LeaderElector
from sits_observe.control.controller.planning.inputs import CurrentState, History, Signals
from sits_observe.control.controller.planning.model import Plan
from sits_observe.control.controller.planning.plan import plan as make_plan
from sits_observe.control.controller.record import ControllerMetrics, StoreRecorder, load_history
from sits_observe.control.controller.settings import ControllerSettings
from sits_observe.store.duck import Store

log = logging.getLogger(__name__)

#: How far back the history the plan sees reaches (cooldowns and dry-run memory).
HISTORY_WINDOW = timedelta(days=7)


def _utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class PassReport:
    """What one pass did."""

    at: datetime
    leader: bool
    decisions: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    suppressed: dict[str, int] = field(default_factory=dict)
    plan_s: float = 0.0
    error: str | None = None


class ControllerLoop:
    """Runs passes until stopped. All collaborators are injected (see ``surfaces/cli``)."""

    def __init__(
        self,
        *,
        settings: ControllerSettings,
        read_signals: Callable[[datetime], Signals],
        read_state: Callable[[], CurrentState],
        applier: Applier,
        recorder: StoreRecorder,
        metrics: ControllerMetrics,
        store: Store | None = None,
        elector: LeaderElector | None = None,
        clock: Callable[[], datetime] = _utc_now,
        read_queue_signals: Callable[[datetime, pl.DataFrame], pl.DataFrame] | None = None,
    ) -> None:
        self.settings = settings
        self.read_signals = read_signals
        self.read_state = read_state
        self.applier = applier
        self.recorder = recorder
        self.metrics = metrics
        self.store = store
        self.elector = elector
        self.clock = clock
        self.read_queue_signals = read_queue_signals
        self.last_plan: Plan | None = None

    def _is_leader(self) -> bool:
        return self.elector is None or self.elector.is_leader

    def run_once(self) -> PassReport:
        """One pass (never raises; an error is in the report and the metrics)."""
        at = self.clock()
        self.metrics.passes.inc()
        leader = self.elector.tick() if self.elector is not None else True
        self.metrics.leader.set(1 if leader else 0)
        if not leader:
            return PassReport(at, leader=False)
        try:
            signals = self.read_signals(at)
            state = self.read_state()
            for _ in state.queues.errors:
                self.recorder.count_error("queues")
            if self.read_queue_signals is not None and state.queues.members.height:
                members = state.queues.members
                signals = signals.with_queues(self.read_queue_signals(at, members))
            history = (
                load_history(self.store, at - HISTORY_WINDOW)
                if self.store is not None
                else History.of()
            )
            started = time.perf_counter()
            plan = make_plan(signals, state, self.settings, history, at=at)
            plan_s = time.perf_counter() - started
            self.metrics.plan_seconds.set(plan_s)
            for reason, count in plan.suppressed.items():
                self.metrics.suppressed.labels(reason).inc(count)
            self.last_plan = plan
            self.applier.may_write = self._is_leader
            outcomes = self.applier.apply(plan)
        except (Exception, PanicException) as exc:  # a pass must never kill the loop
            # (polars reports its internal bugs as PanicException, a BaseException.)
            log.exception("controller pass failed")
            self.recorder.count_error("pass")
            return PassReport(at, leader=True, error=f"{type(exc).__name__}: {exc}")
        counts = Counter(o.outcome for o in outcomes)
        return PassReport(at, True, len(outcomes), dict(counts), dict(plan.suppressed), plan_s)

    def run(self, stop: threading.Event, *, passes: int | None = None) -> None:
        """Pass every ``interval_s`` until ``stop`` is set (or ``passes`` ran).

        Between passes the Lease is renewed every ``retry_period_s``, so a long pass interval
        never lets it lapse (and a follower notices an expired Lease promptly).
        """
        done = 0
        monotonic = time.monotonic
        try:
            while not stop.is_set():
                report = self.run_once()
                done += 1
                if report.error:
                    log.warning("pass at %s: %s", report.at.isoformat(), report.error)
                if passes is not None and done >= passes:
                    break
                next_pass = monotonic() + self.settings.interval_s
                while not stop.is_set():
                    left = next_pass - monotonic()
                    if left <= 0:
                        break
                    if stop.wait(min(left, self.settings.retry_period_s)):
                        break
                    if self.elector is not None and monotonic() < next_pass:
                        self.metrics.leader.set(1 if self.elector.tick() else 0)
        finally:
            if self.elector is not None:
                self.elector.release()
                self.metrics.leader.set(0)
