"""Report ``decisions``: the controller's decision log over the window, and its counts.

Every decision the controller took (``decisions`` table, written by
:mod:`sits_observe.control.controller.record`): what it concerned (``kind/[namespace/]name``, as
``kubectl`` names objects, ``node/gpu-3``), the action, the outcome
(``recommended``, ``applied``, ``skipped:<why>``, ``failed:<why>``), the mode and the reason
in words. Filters: ``actions`` and ``outcomes`` (the outcome's kind, the part before ``:``).
Main table: the log, newest first, at most ``limit`` rows; ``counts``: decisions per action
and outcome kind over the window (unfiltered, so a filter never hides what happened).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from sits_observe.domain.units import Unit
from sits_observe.reports.result import Report, col, table_of
from sits_observe.reports.spec import ReportSpec, require_rows
from sits_observe.reports.window import Window
from sits_observe.store import Store
from sits_observe.store.rows import IN_WINDOW

FILLED_BY = "`sits-observe controller` (every decision it takes, dry-run included)"
#: The kinds of outcome (the part of ``outcome`` before ``:``).
OUTCOMES = ("recommended", "applied", "skipped", "failed")

_LOG = f"""
SELECT ts, lower(kind) || '/' || coalesce(namespace || '/', '') || name AS target,
       kind, namespace, name, action, outcome, split_part(outcome, ':', 1) AS outcome_kind,
       mode, current, proposed, reason, detail, replica
FROM decisions
WHERE {IN_WINDOW}
  AND (len(?::VARCHAR[]) = 0 OR list_contains(?::VARCHAR[], action))
  AND (len(?::VARCHAR[]) = 0 OR list_contains(?::VARCHAR[], split_part(outcome, ':', 1)))
ORDER BY ts DESC, kind, namespace, name, action
LIMIT ?
"""
_COUNTS = f"""
SELECT action, split_part(outcome, ':', 1) AS outcome, count(*) AS decisions, max(ts) AS last_at
FROM decisions WHERE {IN_WINDOW}
GROUP BY ALL ORDER BY action, outcome
"""


class DecisionsQuery(BaseModel):
    """Settings of the ``decisions`` report."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    actions: tuple[str, ...] = Field(
        (), description="keep these actions only (memory-class, fragmentation, ...); none = all"
    )
    outcomes: tuple[str, ...] = Field(
        (), description=f"keep these outcome kinds only ({', '.join(OUTCOMES)}); none = all"
    )
    limit: int = Field(1000, ge=1, le=100_000, description="decisions listed, newest first")


_LOG_COLUMNS = (
    col("ts", "time", Unit.time),
    col("target", "object"),
    col("action", "action"),
    col("outcome", "outcome"),
    col("kind", "kind", wide=True),
    col("namespace", "namespace", wide=True),
    col("name", "name", wide=True),
    col("mode", "mode", wide=True),
    col("current", "current", wide=True),
    col("proposed", "proposed", wide=True),
    col("reason", "reason", wide=True),
    col("detail", "detail", wide=True),
)
_COUNT_COLUMNS = (
    col("action", "action"),
    col("outcome", "outcome"),
    col("decisions", "decisions", Unit.integer),
    col("last_at", "last", Unit.time),
)


def build(store: Store, window: Window, query: DecisionsQuery) -> Report:
    """The ``decisions`` report over ``window``."""
    require_rows(store, window, "decisions", FILLED_BY)
    bounds = window.params
    actions, outcomes = list(query.actions), list(query.outcomes)
    log = store.query(_LOG, [*bounds, actions, actions, outcomes, outcomes, query.limit])
    counts = store.query(_COUNTS, bounds)
    shown = "" if log.num_rows < query.limit else f", the newest {query.limit}"
    main = table_of("log", f"Decisions, newest first{shown}", log, _LOG_COLUMNS)
    others = (table_of("counts", "Decisions per action and outcome", counts, _COUNT_COLUMNS),)
    facts = {
        "decisions": sum(counts.column("decisions").to_pylist()),
        "listed": log.num_rows,
        "actions": actions,
        "outcomes": outcomes,
        "limit": query.limit,
    }
    return Report("decisions", window, main, others, (), facts)


SPEC = ReportSpec(
    name="decisions",
    summary="The controller's decision log over the window (filter by action and outcome), "
    "with the decisions per action and outcome.",
    settings=DecisionsQuery,
    reads=("decisions",),
    build=build,
)
