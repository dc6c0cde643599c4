"""Where decisions go: the ``decisions`` table of the store, and Prometheus metrics.

- :class:`ControllerMetrics` registers on an explicit registry (never the global one):
  ``sits_controller_decisions_total{action,outcome}``, ``sits_controller_errors_total{where}``,
  ``sits_controller_leader`` (1 while this replica holds the Lease),
  ``sits_controller_suppressed_total{reason}`` (proposals that needed no write),
  ``sits_controller_passes_total`` and ``sits_controller_plan_seconds`` (last plan's time).
- :class:`StoreRecorder` appends every outcome to ``decisions`` (one Arrow batch per pass)
  and counts it. A skip identical to the one recorded last for the same object and action
  (same proposal, same outcome, e.g. a pass after pass of ``skipped:rate-limited``) is
  counted but not stored again, so a backlog does not grow the table every pass.
- :func:`load_history` reads back the latest decision per object and action for
  :func:`~sits_observe.control.controller.planning.plan.plan`; :func:`recent_decisions` feeds
  ``recommend``.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import datetime

import polars as pl
import pyarrow as pa
from prometheus_client import CollectorRegistry, Counter, Gauge

from sits_observe.control.controller.planning.inputs import History
from sits_observe.control.controller.planning.model import Outcome
from sits_observe.domain.tables import DECISIONS
from sits_observe.domain.times import utc_naive
from sits_observe.store.duck import Store

_Key = tuple[str, str | None, str, str]


class ControllerMetrics:
    """The controller's metrics on ``registry``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.decisions = Counter(
            "sits_controller_decisions",
            "Controller decisions by action and outcome",
            ["action", "outcome"],
            registry=registry,
        )
        self.errors = Counter(
            "sits_controller_errors",
            "Errors in the controller loop (a pass, a write, an Event), by where",
            ["where"],
            registry=registry,
        )
        self.leader = Gauge(
            "sits_controller_leader",
            "1 while this replica holds the controller Lease, else 0",
            registry=registry,
        )
        self.suppressed = Counter(
            "sits_controller_suppressed",
            "Proposals that needed no write (unchanged, below threshold ...), by reason",
            ["reason"],
            registry=registry,
        )
        self.passes = Counter("sits_controller_passes", "Control-loop passes", registry=registry)
        self.plan_seconds = Gauge(
            "sits_controller_plan_seconds",
            "Duration of the last plan(), seconds",
            registry=registry,
        )


def outcomes_table(outcomes: Sequence[Outcome], replica: str) -> pa.Table:
    """``outcomes`` as rows of the ``decisions`` table."""
    import json

    rows = []
    for o in outcomes:
        rec = o.decision.recommendation
        rows.append(
            {
                "ts": utc_naive(o.at),
                "replica": replica,
                "mode": o.mode,
                "dry_run": o.mode == "dry-run",
                "kind": rec.ref.kind,
                "namespace": rec.ref.namespace,
                "name": rec.ref.name,
                "action": str(rec.action),
                "current": rec.current,
                "proposed": rec.proposed,
                "reason": rec.reason,
                "evidence": json.dumps(dict(rec.evidence), sort_keys=True),
                "outcome": o.outcome,
                "detail": o.detail,
                "attempts": o.attempts,
            }
        )
    return pa.Table.from_pylist(rows, schema=DECISIONS.schema)


class StoreRecorder:
    """Stores outcomes in ``decisions`` and counts them in :class:`ControllerMetrics`."""

    def __init__(
        self,
        store: Store | None,
        metrics: ControllerMetrics,
        replica: str,
        *,
        history: History | None = None,
    ) -> None:
        self.store = store
        self.metrics = metrics
        self.replica = replica
        self._lock = threading.Lock()
        self._last: dict[_Key, tuple[str, str]] = {}
        if history is not None:
            for r in history.latest.iter_rows(named=True):
                key = (r["kind"], r["namespace"], r["name"], r["action"])
                self._last[key] = (r["proposed"], r["outcome"])

    def record(self, outcomes: Sequence[Outcome]) -> None:
        """Count every outcome; store those that are not a repeated skip."""
        kept = []
        with self._lock:
            for o in outcomes:
                rec = o.decision.recommendation
                self.metrics.decisions.labels(str(rec.action), o.outcome).inc()
                key = (rec.ref.kind, rec.ref.namespace, rec.ref.name, str(rec.action))
                last = self._last.get(key)
                self._last[key] = (rec.proposed, o.outcome)
                if o.outcome.startswith("skipped:") and last == (rec.proposed, o.outcome):
                    continue
                kept.append(o)
        if kept and self.store is not None:
            self.store.append(DECISIONS.name, outcomes_table(kept, self.replica))

    def count_error(self, where: str) -> None:
        """Count one error."""
        self.metrics.errors.labels(where).inc()


_HISTORY_SQL = """
SELECT kind, namespace, name, action,
       arg_max(proposed, ts) AS proposed,
       arg_max(outcome, ts) AS outcome,
       arg_max(mode, ts) AS mode,
       max(ts) AS decided_at,
       max(ts) FILTER (WHERE outcome = 'applied' OR (outcome = 'recommended' AND NOT dry_run))
           AS changed_at
FROM decisions
WHERE ts >= ?
GROUP BY kind, namespace, name, action
"""


def load_history(store: Store, since: datetime) -> History:
    """The latest decision per (kind, namespace, name, action) recorded since ``since``."""
    table = store.query(_HISTORY_SQL, [utc_naive(since)])
    return History.of(pl.DataFrame(table))


def recent_decisions(store: Store, since: datetime, *, limit: int = 10_000) -> pl.DataFrame:
    """Decisions recorded since ``since``, newest first (at most ``limit``)."""
    table = store.query(
        "SELECT * FROM decisions WHERE ts >= ? ORDER BY ts DESC LIMIT ?",
        [utc_naive(since), limit],
    )
    return pl.DataFrame(table)
