"""Report ``recommend``: every change the controller would recommend, as of the window's end.

The controller's plan (:func:`sits_observe.control.plan.plan`) computed offline: signals
measured from the store as of the window's end (each signal's own look-back, cut at the
window's start; docs/controller.md), the current values from the store's latest inventory
(node labels, pod priority classes: what ``serve`` / ``ingest k8s`` snapshot), no decision
history, every standing recommendation kept. It writes nothing.

One row per recommendation: the object (``target`` = ``namespace/name``; its ``kind`` is a
wide column, the action implies it), the action, the value in effect and the one proposed,
and a short reason that fits a terminal line (the controller's full reason and its evidence
are ``-o wide`` / JSON columns). Values of
ResourceQuota actions read as Kubernetes quantities (``294Gi``, ``73600m``: rounded up, so
pasting them never gives less than proposed); ``proposed_value`` / ``current_value`` keep
the exact amount in the action's base unit (``unit``), as the controller writes it.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import polars as pl
from pydantic import BaseModel, ConfigDict, Field

from sits_observe.control.inputs import History
from sits_observe.control.model import ACTIONS, Action, Plan
from sits_observe.control.plan import plan as make_plan
from sits_observe.control.settings import ControllerSettings
from sits_observe.control.store_signals import signals_from_store, state_from_store
from sits_observe.domain.quantity import parse_quantity
from sits_observe.domain.units import Unit, human
from sits_observe.errors import NoDataError, ParseError
from sits_observe.reports.result import Report, col, table_of
from sits_observe.reports.spec import ReportSpec, newest
from sits_observe.reports.window import Window, empty_window_message
from sits_observe.store import Store

#: The tables the controller's signals come from (``--until newest`` = the newest of them).
READS = ("gpu_samples", "requests", "server_windows", "pods", "nodes")

FILLED_BY = (
    "`sits-observe ingest k8s` (the inventory), `ingest dcgm` / `ingest requests`, the node "
    "agent, or `sits-observe demo`"
)

#: How the value of a ResourceQuota action reads (the rest are shown as the controller
#: writes them: labels, annotations in base units, ``25ms``).
_QUANTITY = {
    Action.QUOTA_MEMORY: Unit.quantity_bytes,
    Action.QUOTA_CPU: Unit.quantity_cpu,
    Action.QUOTA_GPU: Unit.integer,
}

#: A reason longer than this is cut at its first ``": "`` or ``" ("`` for the table.
_SHORT_REASON = 36
_MAX_REASON = 40


class RecommendQuery(BaseModel):
    """Settings of the ``recommend`` report."""

    model_config = ConfigDict(frozen=True)

    namespace: str | None = Field(
        None, description="only objects in this namespace (and the namespace's own quota advice)"
    )
    action: Action | None = Field(None, description="only this action")


_COLUMNS = (
    col("target", "target"),
    col("action", "action"),
    col("current", "current"),
    col("proposed", "proposed"),
    col("reason_short", "why"),
    col("kind", "kind", wide=True),
    col("namespace", "namespace", wide=True),
    col("name", "name", wide=True),
    col("proposed_value", "exact", Unit.number, wide=True),
    col("unit", "unit", wide=True),
    col("reason", "reason", wide=True),
    col("evidence", "evidence", wide=True),
)


def standing_plan(
    store: Store, settings: ControllerSettings, at: datetime, *, since: datetime | None = None
) -> Plan:
    """The controller's plan as of ``at`` from ``store`` (no row before ``since``), current
    values from the store's inventory, every standing recommendation kept."""
    signals = signals_from_store(store, at, settings, since=since)
    current = state_from_store(store, at, since)
    return make_plan(signals, current, settings, History.of(), at=at, keep_recommended=True)


def build(store: Store, window: Window, query: RecommendQuery) -> Report:
    """The ``recommend`` report: the plan as of the last instant of ``window``."""
    _require_any(store, window)
    # The store's look-backs end at ``at`` inclusive; one microsecond (the TIMESTAMP
    # resolution) before ``until`` keeps to ``ts < until``.
    at = (window.until - timedelta(microseconds=1)).replace(tzinfo=UTC)
    settings = ControllerSettings()
    plan = standing_plan(store, settings, at, since=window.since)
    frame = plan.frame.filter(pl.col("skip").is_null())
    if query.namespace is not None:
        ns = query.namespace
        frame = frame.filter(
            (pl.col("namespace") == ns) | ((pl.col("kind") == "Namespace") & (pl.col("name") == ns))
        )
    if query.action is not None:
        frame = frame.filter(pl.col("action") == str(query.action))
    rows = [_row(r, settings) for r in frame.iter_rows(named=True)]
    main = table_of("recommendations", "Recommendations", rows, _COLUMNS)
    notes = []
    if not rows and (query.namespace is not None or query.action is not None):
        notes.append("no recommendation matches --namespace / --action")
    elif not rows:
        notes.append("no recommendations: every measured value is within its rule's bounds")
    facts = {
        "at": at.replace(tzinfo=None),
        "current_from": "the store's latest inventory (node labels, pod priority classes)",
        "suppressed": dict(plan.suppressed),
        "namespace": query.namespace,
        "action": None if query.action is None else str(query.action),
    }
    return Report("recommend", window, main, (), tuple(notes), facts)


def _require_any(store: Store, window: Window) -> None:
    """A :class:`NoDataError` when none of :data:`READS` has a row in ``window``."""
    params: list[object] = [window.until, window.since, window.since]
    for table in READS:
        sql = f"SELECT count(*) FROM {table} WHERE ts < ? AND (?::TIMESTAMP IS NULL OR ts >= ?)"
        if store.scalar(sql, params):
            return
    if all(store.count(t) == 0 for t in READS):
        raise NoDataError(f"tables {', '.join(READS)} are empty; fill them with {FILLED_BY}")
    what = f"{', '.join(READS)} rows"
    raise NoDataError(empty_window_message(window, what, newest(store, READS)))


def _row(r: dict[str, Any], settings: ControllerSettings) -> dict[str, Any]:
    action = Action(r["action"])
    spec = ACTIONS[action]
    evidence = json.loads(r["evidence"]) if r["evidence"] else {}
    namespace, name = r["namespace"], r["name"]
    return {
        "kind": r["kind"],
        "namespace": namespace,
        "name": name,
        "target": name if namespace is None else f"{namespace}/{name}",
        "action": str(action),
        "current": _shown(action, r["current"]),
        "proposed": _shown(action, r["proposed"]),
        "current_value": _number(r["current"]) if spec.numeric else None,
        "proposed_value": _number(r["proposed"]) if spec.numeric else None,
        "unit": spec.unit,
        "reason_short": short_reason(action, r["reason"] or "", evidence, settings),
        "reason": r["reason"],
        "evidence": json.dumps(evidence, sort_keys=True, separators=(",", ":")),
        "workload": r["workload"],
    }


def _number(text: str | None) -> float | None:
    """A value in the action's base unit as a number (None when absent or not a number)."""
    if text is None:
        return None
    try:
        return float(parse_quantity(text))
    except ParseError:
        return None


def _shown(action: Action, text: str | None) -> str | None:
    """The value as it reads: a Kubernetes quantity for ResourceQuota actions."""
    unit = _QUANTITY.get(action)
    number = _number(text) if unit is not None else None
    return text if number is None or unit is None else human(number, unit)


def short_reason(
    action: Action, reason: str, evidence: dict[str, Any], settings: ControllerSettings
) -> str:
    """A reason that fits one table line: for namespace quotas, the daily peak the proposal
    grows from and the factor applied; otherwise the reason up to its first detail."""
    unit = _QUANTITY.get(action)
    peak, days = evidence.get("peak_quantile"), evidence.get("history_days")
    if unit is not None and isinstance(peak, int | float) and isinstance(days, int | float):
        q = settings.quota
        factor = (1.0 + q.margin_ratio) * float(evidence.get("confidence_factor") or 1.0)
        return f"{days:g}-day p{q.percentile_ratio * 100:g} peak {human(peak, unit)} x {factor:.2f}"
    if len(reason) <= _SHORT_REASON:
        return reason
    cuts = [i for i in (reason.find(": "), reason.find(" (")) if i >= 8]
    short = reason[: min(cuts)] if cuts else reason
    return short if len(short) <= _MAX_REASON else short[: _MAX_REASON - 1] + "…"


SPEC = ReportSpec(
    name="recommend",
    summary="The controller's standing recommendations, computed from the store (writes nothing).",
    settings=RecommendQuery,
    reads=READS,
    build=build,
)
