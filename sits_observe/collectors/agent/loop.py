"""The node agent's loop: collect on an interval, ship one batch per tick, spool on failure.

With ``ship_every`` n > 1 the agent still collects every interval but ships every n-th
tick, one batch holding the n ticks' rows (fewer, larger requests: the service's cost is
mostly per request, see docs/scaling.md). Held ticks live in memory only until that batch
is built; from then on the batch follows the rules below exactly (spooled until
acknowledged), and stopping the loop ships or spools what is held.

Each tick:

1. Every active collector is called once with the same ``now``. Each call is isolated: a
   :class:`CollectorError` or any other exception is logged (once per change of state, not
   every second), counted in ``sits_agent_collector_errors_total`` and does not touch the
   other collectors. :class:`DriverUnavailable` switches that collector off for the life of
   the process after one log line (no driver will appear without a restart).
2. Each collector's tables are conformed to the domain schema (so outputs of several
   collectors concatenate, and one collector with a bad column cannot spoil the batch),
   merged, and the collectors' drop counts are added as ``collector_drops`` rows.
3. Batches left in the spool are replayed oldest first (at most ``replay_max_per_tick``
   sends); the new batch is sent directly only when none is left waiting, so the service
   receives batches in the order they were collected. A 5xx answer to a spooled batch does
   not stop the replay: the next ones are tried (after three such answers with nothing
   delivered, only the new batch is, as the probe). No answer does stop it.
4. The new batch is shipped; if the service cannot take it, it is spooled. A batch the
   service rejects (4xx) goes to the dead-letter spool and is never retried.
5. Spooled batches answered 5xx in a tick in which another batch was stored get a strike;
   after ``quarantine_after_failures`` they move to the quarantine directory
   (:mod:`.quarantine` has the rule and why it cannot fire during an outage).

Between 2 and 3 the tick's tables are handed to ``metrics.latest`` (one reference swap) so
``/metrics`` serves the newest GPU samples under dcgm-exporter's names (:mod:`.latest`).

The loop never raises out of :meth:`AgentLoop.run`; it waits on a :class:`threading.Event`
between ticks so :meth:`AgentLoop.stop` (SIGTERM in the CLI) ends it within one tick. Missed
ticks (a slow tick, a suspended process) are skipped, not replayed in a burst.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

import pyarrow as pa

from sits_observe.collectors.agent.metrics import AgentMetrics
from sits_observe.collectors.agent.quarantine import Quarantine, Round
from sits_observe.collectors.agent.shipper import ShipOutcome, ShipResult
from sits_observe.collectors.agent.spool import Spool
from sits_observe.collectors.agent.wire import batch_rows, encode_batch
from sits_observe.domain.collect import Collector, CollectResult, drops_table
from sits_observe.domain.tables import conform, find_table
from sits_observe.domain.times import utc_naive
from sits_observe.errors import CollectorError, DriverUnavailable
from sits_observe.tracing import span

log = logging.getLogger(__name__)

#: Span attribute naming the collector a ``sits.scrape`` span ran.
COLLECTOR_ATTR = "sits.collector.name"


class BatchShipper(Protocol):
    """What the loop needs from a shipper (:class:`~.shipper.Shipper` is the real one)."""

    def ship(self, batch_id: str, body: bytes, *, retries: int | None = None) -> ShipResult:
        """Deliver one batch; never raises for a failed delivery."""
        ...


@dataclass(frozen=True)
class TickReport:
    """What one tick did."""

    rows_collected: int
    collector_errors: int
    batch_id: str | None
    #: shipped | duplicate | spooled | rejected | dropped | empty | held (ship_every > 1)
    result: str
    replayed: int


def utc_now() -> datetime:
    """The current time, UTC (the default clock)."""
    return datetime.now(UTC)


def new_batch_id() -> str:
    """A fresh batch id (uuid4, hex)."""
    return uuid.uuid4().hex


class AgentLoop:
    """Collect, batch, ship, spool, replay. See the module docstring."""

    def __init__(
        self,
        collectors: Sequence[Collector],
        shipper: BatchShipper,
        spool: Spool,
        *,
        interval_s: float,
        node: str,
        dead_letter: Spool | None = None,
        quarantine: Spool | None = None,
        quarantine_after_failures: int = 5,
        metrics: AgentMetrics | None = None,
        clock: Callable[[], datetime] = utc_now,
        monotonic: Callable[[], float] = time.monotonic,
        stop_event: threading.Event | None = None,
        batch_ids: Callable[[], str] = new_batch_id,
        replay_max_per_tick: int = 50,
        compression: str | None = None,
        ship_every: int = 1,
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be positive, got {interval_s}")
        if ship_every < 1:
            raise ValueError(f"ship_every must be at least 1, got {ship_every}")
        self._collectors = list(collectors)
        # Keyed by position: several collectors may share a name (two vLLM endpoints).
        self._disabled: set[int] = set()
        self._failing: dict[int, str] = {}
        self._shipper = shipper
        self._spool = spool
        self._dead_letter = dead_letter
        self.interval_s = interval_s
        self.node = node
        self.metrics = metrics or AgentMetrics()
        self._quarantine = Quarantine(
            quarantine, after_failures=quarantine_after_failures, metrics=self.metrics
        )
        self._clock = clock
        self._monotonic = monotonic
        self._stop = stop_event or threading.Event()
        self._batch_ids = batch_ids
        self._replay_max = replay_max_per_tick
        self._compression = compression
        self._ship_every = ship_every
        self._held = _Held()
        self._offline = False
        self._update_gauges()

    # -- public -------------------------------------------------------------------------

    @property
    def stop_event(self) -> threading.Event:
        """Set it (or call :meth:`stop`) to end :meth:`run`."""
        return self._stop

    @property
    def active_collectors(self) -> list[str]:
        """Names of the collectors still called each tick."""
        return [c.name for i, c in enumerate(self._collectors) if i not in self._disabled]

    def stop(self) -> None:
        """Ask :meth:`run` to return after the current tick."""
        self._stop.set()

    def run(self) -> None:
        """Tick every ``interval_s`` until stopped. Never raises."""
        log.info(
            "agent %s: collecting every %.3g s from %s",
            self.node,
            self.interval_s,
            ", ".join(self.active_collectors) or "no collectors",
        )
        next_at = self._monotonic()
        while not self._stop.is_set():
            self._safe_tick()
            next_at += self.interval_s
            now = self._monotonic()
            if next_at < now:
                missed = int((now - next_at) // self.interval_s) + 1
                log.debug("tick overran; skipping %d tick(s)", missed)
                next_at += missed * self.interval_s
            self._stop.wait(next_at - now)
        if self._held.ticks:
            self._safe_flush()
        log.info("agent %s: stopped; %d batches wait in the spool", self.node, len(self._spool))

    def tick(self) -> TickReport:
        """One collect-and-ship round (with ``ship_every`` > 1, a collect-and-hold round on
        all but every n-th tick, which ships what the held ticks collected as one batch)."""
        started = self._monotonic()
        now = self._clock()
        collected, errors = self._collect(now)
        tables = dict(collected.tables)
        self._publish(tables)
        drops = self._drop_rows(collected.dropped_by_collector, now)
        if drops is not None:
            tables["collector_drops"] = drops
        self._held.add(tables)
        if self._held.ticks < self._ship_every:
            self.metrics.tick_seconds.observe(self._monotonic() - started)
            return TickReport(batch_rows(tables), errors, None, "held", 0)
        report = self._deliver(self._held.take())
        self.metrics.tick_seconds.observe(self._monotonic() - started)
        return TickReport(
            batch_rows(tables), errors, report.batch_id, report.result, report.replayed
        )

    def flush(self) -> TickReport:
        """Ship (or spool) what held ticks collected, now; :meth:`run` calls it on stop so
        no collected sample is left behind."""
        return self._deliver(self._held.take())

    def _deliver(self, tables: dict[str, pa.Table]) -> TickReport:
        """Replay the spool, then ship ``tables`` as one new batch (spooled on failure)."""
        rows = batch_rows(tables)
        deliveries = Round()
        replayed, waiting = self._replay(deliveries)
        batch_id: str | None = None
        result = "empty"
        if rows:
            batch_id = self._batch_ids()
            body = encode_batch(tables, compression=self._compression)
            if waiting:
                result = self._spool_batch(batch_id, body, rows)
            else:
                result = self._ship_new(batch_id, body, rows, deliveries)
        self._settle(deliveries)
        self._update_gauges()
        return TickReport(rows, 0, batch_id, result, replayed)

    # -- collection ---------------------------------------------------------------------

    def _collect(self, now: datetime) -> tuple[_Collected, int]:
        collected = _Collected()
        errors = 0
        for index, collector in enumerate(self._collectors):
            name = collector.name
            if index in self._disabled:
                continue
            try:
                with span(
                    "sits.scrape",
                    task_type="scrape",
                    queue_depth=len(self._spool),  # batches waiting: the agent's queue
                    attributes={COLLECTOR_ATTR: name},
                ):
                    result = collector.collect(now)
                    tables = {t: _conformed(t, data) for t, data in result.tables.items()}
            except DriverUnavailable as exc:
                errors += 1
                self.metrics.collector_errors.labels(name).inc()
                self._disabled.add(index)
                self.metrics.collectors_disabled.set(len(self._disabled))
                log.warning("collector %s disabled: %s", name, exc)
                continue
            except CollectorError as exc:
                errors += 1
                self._note_failure(index, name, str(exc))
                continue
            except Exception as exc:
                errors += 1
                self._note_failure(index, name, f"{type(exc).__name__}: {exc}", exc)
                continue
            if index in self._failing:
                del self._failing[index]
                log.info("collector %s recovered", name)
            collected.add(name, CollectResult(tables, result.dropped))
            self.metrics.samples_collected.labels(name).inc(result.rows)
            for reason, count in result.dropped.items():
                self.metrics.collector_drops.labels(name, reason).inc(count)
        return collected, errors

    def _note_failure(
        self, index: int, name: str, message: str, exc: BaseException | None = None
    ) -> None:
        self.metrics.collector_errors.labels(name).inc()
        if self._failing.get(index) != message:
            # Log a failure once per distinct message so a dead endpoint does not flood the log
            # every second; the error counter still counts every call.
            log.warning("collector %s failed: %s", name, message, exc_info=exc)
            self._failing[index] = message

    def _publish(self, tables: dict[str, pa.Table]) -> None:
        # Serving samples on /metrics is a side show: it must never cost a batch.
        try:
            self.metrics.latest.publish(tables)
        except Exception:
            log.exception("publishing samples to /metrics failed")
            self.metrics.metrics_errors.labels("publish").inc()

    def _drop_rows(self, dropped: dict[str, Counter[str]], now: datetime) -> pa.Table | None:
        ts = utc_naive(now)
        tables = [
            drops_table(counter, at=ts, node=self.node, collector=collector)
            for collector, counter in dropped.items()
        ]
        rows = pa.concat_tables(tables) if tables else None
        return rows if rows is not None and rows.num_rows else None

    # -- delivery -----------------------------------------------------------------------

    def _replay(self, deliveries: Round) -> tuple[int, bool]:
        """Send spooled batches oldest first; returns how many were delivered and whether
        batches still wait their turn (then the new batch queues behind them)."""
        replayed = sent = 0
        retries = self._retries()
        for entry in self._spool.entries():
            if sent >= self._replay_max or self._stop.is_set():
                return replayed, True
            if deliveries.service_down or deliveries.too_many_suspects:
                # Down: keep the order. Too many 5xx: let the new batch probe past them.
                return replayed, deliveries.service_down
            try:
                body = entry.read()
            except OSError as exc:
                log.error("spooled batch %s unreadable, dropping it: %s", entry.batch_id, exc)
                self._spool.remove(entry)
                self.metrics.samples_dropped.labels("unreadable").inc(entry.rows)
                continue
            sent += 1
            # A batch with strikes has shown what it gets; one try per tick is enough.
            tries = 0 if self._quarantine.strikes(entry.batch_id) else retries
            result = self._shipper.ship(entry.batch_id, body, retries=tries)
            if result.outcome.delivered:
                self._spool.remove(entry)
                deliveries.delivered = True
                retries = None
                replayed += 1
                self.metrics.batches.labels("replayed").inc()
                self.metrics.samples_shipped.inc(entry.rows)
            elif result.outcome is ShipOutcome.REJECTED:
                self._spool.remove(entry)
                self._reject(entry.batch_id, body, entry.rows, result)
            else:
                deliveries.failed(result)
                retries = 0
                if not deliveries.service_down:
                    deliveries.suspects.append((entry, result))
        if replayed and not len(self._spool):
            log.info("spool drained: every batch kept during the outage was delivered")
        return replayed, deliveries.service_down or self._unsuspected_left(deliveries)

    def _unsuspected_left(self, deliveries: Round) -> bool:
        suspects = {entry for entry, _ in deliveries.suspects}
        return any(entry not in suspects for entry in self._spool.entries())

    def _ship_new(self, batch_id: str, body: bytes, rows: int, deliveries: Round) -> str:
        retries = 0 if deliveries.failure is not None else self._retries()
        result = self._shipper.ship(batch_id, body, retries=retries)
        if result.outcome.delivered:
            deliveries.delivered = True
            label = "duplicate" if result.outcome is ShipOutcome.DUPLICATE else "shipped"
            self.metrics.batches.labels(label).inc()
            self.metrics.samples_shipped.inc(rows)
            return label
        if result.outcome is ShipOutcome.REJECTED:
            self._reject(batch_id, body, rows, result)
            return "rejected"
        deliveries.failed(result)
        return self._spool_batch(batch_id, body, rows)

    def _settle(self, deliveries: Round) -> None:
        """The end of a tick's deliveries: online or offline, strikes and quarantine."""
        if deliveries.delivered:
            self._went_online()
        elif deliveries.failure is not None:
            self._went_offline(deliveries.failure)
        self._quarantine.settle(self._spool, deliveries)

    def _spool_batch(self, batch_id: str, body: bytes, rows: int) -> str:
        try:
            evicted = self._spool.put(batch_id, body, rows=rows)
        except OSError as exc:
            log.error("cannot spool batch %s (%d rows), dropping it: %s", batch_id, rows, exc)
            self.metrics.samples_dropped.labels("spool_error").inc(rows)
            return "dropped"
        result = "spooled"
        for entry in evicted:
            too_large = entry.batch_id == batch_id
            reason = "too_large" if too_large else "spool_full"
            self.metrics.samples_dropped.labels(reason).inc(entry.rows)
            self.metrics.batches.labels("evicted").inc()
            if too_large:
                result = "dropped"
        if result == "spooled":
            self.metrics.batches.labels("spooled").inc()
            self.metrics.samples_spooled.inc(rows)
        return result

    def _reject(self, batch_id: str, body: bytes, rows: int, result: ShipResult) -> None:
        self.metrics.batches.labels("rejected").inc()
        self.metrics.samples_dropped.labels("rejected").inc(rows)
        where = "discarded"
        if self._dead_letter is not None:
            try:
                self._dead_letter.put(batch_id, body, rows=rows)
                where = f"kept in {self._dead_letter.directory}"
            except OSError as exc:
                where = f"discarded (dead-letter write failed: {exc})"
        log.error(
            "service rejected batch %s (%d rows): %s; %s", batch_id, rows, result.detail, where
        )

    def _retries(self) -> int | None:
        # While the service is known to be down, one attempt per tick is the probe; retrying
        # with back-off would only delay the next collection.
        return 0 if self._offline else None

    def _went_offline(self, result: ShipResult) -> None:
        if not self._offline:
            log.warning(
                "service unavailable (%s); spooling batches to %s",
                result.detail,
                self._spool.directory,
            )
        self._offline = True

    def _went_online(self) -> None:
        if self._offline:
            log.info("service answers again; %d batches left in the spool", len(self._spool))
        self._offline = False

    def _safe_tick(self) -> None:
        try:
            self.tick()
        except Exception:
            # The loop must outlive any bug in one tick; the traceback says where.
            log.exception("agent tick failed")
            self.metrics.collector_errors.labels("agent").inc()

    def _safe_flush(self) -> None:
        try:
            self.flush()
        except Exception:
            log.exception("shipping the held ticks at stop failed")
            self.metrics.collector_errors.labels("agent").inc()

    def _update_gauges(self) -> None:
        self.metrics.spool_batches.set(len(self._spool))
        self.metrics.spool_bytes.set(self._spool.bytes_used)


def _conformed(name: str, data: pa.Table) -> pa.Table:
    """``data`` in the domain schema of ``name``; tables already in it pass untouched.

    Collectors normally build exactly the domain schema; skipping the cast then saves most of
    a millisecond per table per tick and keeps Arrow's cast kernels out of the agent's memory.
    """
    if data.schema.equals(find_table(name).schema):
        return data
    return conform(name, data)


class _Held:
    """Ticks collected but not shipped yet (``ship_every`` > 1): each table's pieces, in
    collection order, concatenated into one batch when shipped."""

    def __init__(self) -> None:
        self.ticks = 0
        self._parts: dict[str, list[pa.Table]] = {}

    def add(self, tables: dict[str, pa.Table]) -> None:
        self.ticks += 1
        for name, data in tables.items():
            self._parts.setdefault(name, []).append(data)

    def take(self) -> dict[str, pa.Table]:
        # One record batch per table in the body, not one per tick (smaller, one scan).
        tables = {n: pa.concat_tables(p).combine_chunks() for n, p in self._parts.items()}
        self.ticks = 0
        self._parts = {}
        return tables


class _Collected:
    """Tables merged across collectors, and drop counts kept per collector."""

    def __init__(self) -> None:
        self.tables: dict[str, pa.Table] = {}
        self.dropped_by_collector: dict[str, Counter[str]] = {}

    def add(self, name: str, result: CollectResult) -> None:
        for table, data in result.tables.items():
            if data.num_rows == 0:
                continue
            if table in self.tables:
                self.tables[table] = pa.concat_tables([self.tables[table], data])
            else:
                self.tables[table] = data
        if result.dropped:
            self.dropped_by_collector.setdefault(name, Counter()).update(result.dropped)
