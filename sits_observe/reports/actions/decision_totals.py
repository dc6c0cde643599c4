"""The controller's decision log summed since the store began, and the latest quota values.

The ``decisions`` report (:mod:`.decisions`) answers "what did the controller decide in this
window"; these reads answer what a counter or a run's summary needs: every decision the store
holds, whatever its time (a Prometheus counter only grows; a demo or experiment run's database
holds that run alone). Outcomes are the full text here (``skipped:cooldown``,
``failed:unreachable``), not the report's outcome kind.

Quotas come from the controller's own records: per namespace quota action, the newest decision
holds the value in effect when the controller read the ResourceQuota (``current``) and its
proposal (``proposed``), as the controller stored them (text, in the action's unit).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import pyarrow as pa
import pyarrow.compute as pc

from sits_observe.store import Store

#: The outcome of a decision the controller carried out.
APPLIED = "applied"

_TOTALS = """
SELECT action, outcome, count(*) AS n FROM decisions
GROUP BY action, outcome ORDER BY action, outcome
"""
_FAILURES = """
SELECT substr(outcome, length('failed:') + 1) AS failure, count(*) AS n FROM decisions
WHERE starts_with(outcome, 'failed:') GROUP BY failure ORDER BY failure
"""
_QUOTAS = """
SELECT coalesce(namespace, name) AS namespace, action,
       arg_max(current, ts) AS current, arg_max(proposed, ts) AS proposed
FROM decisions
WHERE action IN (SELECT unnest(?::VARCHAR[])) AND coalesce(namespace, name) IS NOT NULL
GROUP BY ALL ORDER BY namespace, action
"""


def decision_totals(store: Store) -> pa.Table:
    """Decisions per ``action`` and ``outcome`` (column ``n``), by action and outcome."""
    return store.query(_TOTALS)


def failure_totals(store: Store) -> pa.Table:
    """Failed decisions per reason (``failure``: the outcome after ``failed:``; ``n``)."""
    return store.query(_FAILURES)


def newest_decision_at(store: Store) -> datetime | None:
    """When the controller recorded its latest decision (naive UTC; None before the first)."""
    value = store.scalar("SELECT max(ts) FROM decisions")
    return value if isinstance(value, datetime) else None


def applied_decisions(store: Store) -> dict[str, int]:
    """Decisions the controller applied, by action (sorted by action)."""
    totals = decision_totals(store)
    applied = totals.filter(pc.equal(totals.column("outcome"), APPLIED))
    actions = applied.column("action").to_pylist()
    return dict(zip(map(str, actions), applied.column("n").to_pylist(), strict=True))


def latest_quotas(store: Store, actions: Sequence[str]) -> pa.Table:
    """Per namespace and quota action among ``actions``: the ``current`` and ``proposed``
    values of the newest decision (text, as stored), by namespace and action."""
    return store.query(_QUOTAS, [list(actions)])
