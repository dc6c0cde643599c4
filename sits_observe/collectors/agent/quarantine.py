"""Setting aside a batch the service keeps failing on, so it cannot block a node's delivery.

A spooled batch that makes the service answer 5xx (a crash on its content, say) would
otherwise be replayed first on every tick, forever, with every newer batch queued behind it.
The rule that tells such a batch from a service outage:

- A **strike** is one tick in which the batch was answered 5xx *and* the service stored
  another batch (a newer one, or another spooled one). The second half is the evidence that
  the failure is the batch's, not the service's. No answer, a timeout, 401 / 403 / 408 / 429,
  or 5xx for every batch sent in the tick charge nothing: that is the service (or the way to
  it) being down, and the batches are fine.
- After ``quarantine_after_failures`` strikes (5 by default) the batch leaves the spool for
  the quarantine directory (``<spool-dir>/quarantine``, bounded like the dead letters: oldest
  dropped), is counted in ``sits_agent_batches_quarantined_total`` and its rows in
  ``sits_agent_samples_dropped_total{reason="quarantined"}``, and is logged once, at error
  level. It is never sent again by the agent; an operator can inspect or re-send the file.
- Strikes live in memory: a restarted agent counts again from zero (at most N more tries).

:class:`Round` records what one tick's deliveries showed; the loop
(:class:`~.loop.AgentLoop`) fills it and hands the suspects to :class:`Quarantine` at the end
of the tick.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from sits_observe.collectors.agent.metrics import AgentMetrics
from sits_observe.collectors.agent.shipper import ShipResult
from sits_observe.collectors.agent.spool import Spool, SpooledBatch

log = logging.getLogger(__name__)

#: Spooled batches one tick may try after 5xx answers while none was delivered yet. A
#: service failing every batch then costs this many requests per tick (plus the new batch),
#: not the whole spool; and up to this many poison batches in a row at the head of the spool
#: still let the tick's new batch through as the probe that tells them from an outage.
SUSPECTS_WITHOUT_DELIVERY = 3


def is_batch_failure(result: ShipResult) -> bool:
    """Whether ``result`` may be the batch's fault: the service answered, with a 5xx."""
    return result.status is not None and 500 <= result.status < 600


@dataclass
class Round:
    """What the deliveries of one tick showed."""

    #: Some batch (replayed or new) was stored in this tick.
    delivered: bool = False
    #: The service did not answer usefully (no answer, 401/403/408/429): stop sending.
    service_down: bool = False
    #: The last failed delivery of the tick, for the "service unavailable" log line.
    failure: ShipResult | None = None
    #: Spooled batches answered 5xx in this tick, with that answer.
    suspects: list[tuple[SpooledBatch, ShipResult]] = field(default_factory=list)

    def failed(self, result: ShipResult) -> None:
        """Note one failed delivery (UNAVAILABLE) of any batch."""
        self.failure = result
        if not is_batch_failure(result):
            self.service_down = True

    @property
    def too_many_suspects(self) -> bool:
        """Enough 5xx answers without a delivery: stop replaying, probe with the new batch."""
        return not self.delivered and len(self.suspects) >= SUSPECTS_WITHOUT_DELIVERY


class Quarantine:
    """Strikes per spooled batch and the directory the struck-out ones go to."""

    def __init__(
        self, directory: Spool | None, *, after_failures: int, metrics: AgentMetrics
    ) -> None:
        if after_failures < 1:
            raise ValueError(f"after_failures must be at least 1, got {after_failures}")
        self.directory = directory
        self.after_failures = after_failures
        self._metrics = metrics
        self._strikes: dict[str, int] = {}

    def strikes(self, batch_id: str) -> int:
        """Strikes held against ``batch_id`` so far."""
        return self._strikes.get(batch_id, 0)

    def settle(self, spool: Spool, tick: Round) -> None:
        """At the end of a tick: strike its suspects if another batch was stored, quarantine
        the ones struck out, and forget strikes of batches no longer in the spool."""
        if not tick.suspects and not self._strikes:
            return  # the usual tick: nothing to look up in a spool that may be large
        held = {e.batch_id for e in spool.entries()}
        if tick.delivered:
            for entry, result in tick.suspects:
                if entry.batch_id not in held:  # evicted from a full spool in this tick
                    continue
                count = self._strikes.get(entry.batch_id, 0) + 1
                if count >= self.after_failures:
                    self._move(spool, entry, result, count)
                else:
                    self._strikes[entry.batch_id] = count
                    log.debug("batch %s: strike %d (%s)", entry.batch_id, count, result.detail)
        self._strikes = {k: v for k, v in self._strikes.items() if k in held}

    def _move(self, spool: Spool, entry: SpooledBatch, result: ShipResult, count: int) -> None:
        self._strikes.pop(entry.batch_id, None)
        where = "discarded (no quarantine directory)"
        if self.directory is not None:
            try:
                self.directory.put(entry.batch_id, entry.read(), rows=entry.rows)
                where = f"moved to {self.directory.directory}"
            except OSError as exc:
                where = f"discarded (quarantine write failed: {exc})"
        spool.remove(entry)
        self._metrics.batches_quarantined.inc()
        self._metrics.samples_dropped.labels("quarantined").inc(entry.rows)
        log.error(
            "batch %s (%d rows) quarantined: the service answered %s in %d ticks in which it "
            "stored other batches; %s and not sent again",
            entry.batch_id,
            entry.rows,
            result.detail,
            count,
            where,
        )
