"""The controller's standing plan as ``recommend`` rows: values, change, confidence, capacity.

The plan (:func:`sits_observe.control.controller.planning.plan.plan`) is computed offline as of the
window's end (:func:`standing_plan`); each decision that is not skipped becomes one row of the
``recommend`` table (:mod:`.recommend` lists the row keys). On top of what the controller
writes, the report adds:

- ``change_ratio``: (proposed - current) / current, when both are numbers and current is not 0;
- ``confidence``: ``rule`` for the label, annotation and time-slice actions (a threshold rule
  over the latest measurement: the proposal follows from the measured value and the
  thresholds in the evidence, there is no statistical spread to report); for the namespace
  quotas and the Kueue / KAI queue quotas, the days of daily peaks behind them, on the scale
  every day-based row uses (:func:`days_confidence`); for a tenant throttle, the bins and the
  correlation behind the finding (:func:`tenant_confidence`);
- **held under a cap**: the controller's quota rule never proposes more than the largest
  daily peak x ``quota.peak_factor_max`` nor the cluster's allocatable
  (:func:`sits_observe.control.controller.rules.quotas.namespace_quotas`, the same value ``act``
  mode writes); a row held there gets a short reason and a note saying so, its evidence keeps the
  rule's value (``uncapped``).
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

import polars as pl

from sits_observe.analytics.cluster_allocatable import ClusterAllocatable, cluster_allocatable
from sits_observe.control.controller.actions import Action
from sits_observe.control.controller.planning.inputs import History, QueueState
from sits_observe.control.controller.planning.model import ACTIONS, Plan
from sits_observe.control.controller.planning.plan import plan as make_plan
from sits_observe.control.controller.settings import ControllerSettings
from sits_observe.control.signals.store import signals_from_store
from sits_observe.control.signals.store_queues import queue_signals
from sits_observe.control.signals.store_state import state_from_store
from sits_observe.domain.quantity import parse_quantity
from sits_observe.domain.units import Unit, human, span_text
from sits_observe.errors import ParseError
from sits_observe.reports.window import Window
from sits_observe.store import Store

#: The start of an open window (``--since`` not given), for readers that need one.
DAWN = datetime(1970, 1, 1)

#: How the value of a ResourceQuota action reads (the rest are shown as the controller
#: writes them: labels, annotations in base units, ``25ms``).
QUANTITY = {
    Action.QUOTA_MEMORY: Unit.quantity_bytes,
    Action.QUOTA_CPU: Unit.quantity_cpu,
    Action.QUOTA_GPU: Unit.integer,
    Action.QUEUE_GPU_QUOTA: Unit.integer,
    Action.QUEUE_GPU_BORROWING_LIMIT: Unit.integer,
    Action.QUEUE_GPU_LIMIT: Unit.integer,
    Action.TENANT_THROTTLE: Unit.integer,
}

#: Queue rows whose value is the ceiling (the peak cap), not the sized quota.
_CEILINGS = (Action.QUEUE_GPU_BORROWING_LIMIT, Action.QUEUE_GPU_LIMIT)

#: A reason longer than this is cut at its first ``": "`` or ``" ("`` for the table.
_SHORT_REASON = 36
MAX_REASON = 40

#: Days of history behind a ``high`` / ``medium`` confidence: with 7 days VPA's upper bound
#: is within 1 + 1/7 = +14 % of its target, with 2 days within +50 %; under 2 days it is 1.5x
#: the target or more (``logic/estimator.go``, confidence multiplier 1, exponent 1).
HIGH_DAYS = 7.0
MEDIUM_DAYS = 2.0
RULE = "rule"


def backing(confidence: str, history_s: float | None) -> str:
    """The confidence with the history behind it, as the table shows it: ``low 5m``,
    ``high 9d``, ``none 67s``; a rule over the latest state is just ``rule``."""
    if history_s is None or confidence == RULE:
        return confidence
    return f"{confidence} {span_text(history_s)}"


def days_confidence(days: float | None) -> str:
    """``high`` (>= 7 days of history), ``medium`` (>= 2), ``low`` (less, down to a single
    snapshot), ``none`` (history unknown)."""
    if days is None:
        return "none"
    if days >= HIGH_DAYS:
        return "high"
    return "medium" if days >= MEDIUM_DAYS else "low"


#: Bins on the thinner side (high or low load) behind a ``high`` / ``medium`` tenant row.
TENANT_HIGH_BINS = 10
TENANT_MEDIUM_BINS = 5
TENANT_HIGH_CORRELATION = 0.8


def tenant_confidence(evidence: dict[str, Any]) -> str:
    """A tenant throttle row's confidence: ``high`` with >= 10 bins on each side (high and low
    load) and a correlation >= 0.8, ``medium`` with >= 5 bins on each side, else ``low``."""
    high, low = _float(evidence.get("bins_high")), _float(evidence.get("bins_low"))
    corr = _float(evidence.get("correlation"))
    if high is None or low is None or corr is None:
        return "none"
    thinner = min(high, low)
    if thinner >= TENANT_HIGH_BINS and corr >= TENANT_HIGH_CORRELATION:
        return "high"
    return "medium" if thinner >= TENANT_MEDIUM_BINS else "low"


def change_ratio(current: float | None, proposed: float | None) -> float | None:
    """(proposed - current) / current; None unless both are numbers and current is not 0."""
    if current is None or proposed is None or current == 0:
        return None
    return (proposed - current) / abs(current)


def standing_plan(
    store: Store,
    settings: ControllerSettings,
    at: datetime,
    *,
    since: datetime | None = None,
    queues: QueueState | None = None,
) -> Plan:
    """The controller's plan as of ``at`` from ``store`` (no row before ``since``), current
    values from the store's inventory (and the ``queues`` the cluster holds, when given),
    every standing recommendation kept."""
    signals = signals_from_store(store, at, settings, since=since)
    current = state_from_store(store, at, since)
    if queues is not None:
        current = current.with_queues(queues)
        members = queue_signals(store, at, settings, queues.members, since=since)
        signals = signals.with_queues(members)
    return make_plan(signals, current, settings, History.of(), at=at, keep_recommended=True)


def plan_rows(
    store: Store,
    window: Window,
    at: datetime,
    settings: ControllerSettings,
    *,
    queues: QueueState | None = None,
) -> tuple[list[dict[str, Any]], list[str], Plan, ClusterAllocatable | None]:
    """The rows of the plan as of ``at`` (every row read in ``window``), the notes of quotas
    held under a cap, the plan, and the cluster's allocatable in the window."""
    plan = standing_plan(store, settings, at.replace(tzinfo=UTC), since=window.since, queues=queues)
    capacity = cluster_allocatable(store, window.since or DAWN, window.until)
    rows, notes = [], []
    for r in plan.frame.filter(pl.col("skip").is_null()).iter_rows(named=True):
        row = _row(r, settings)
        note = _cap_note(row)
        if note is not None:
            notes.append(note)
        rows.append(row)
    return rows, notes, plan, capacity


def _row(r: dict[str, Any], settings: ControllerSettings) -> dict[str, Any]:
    action = Action(r["action"])
    spec = ACTIONS[action]
    evidence = json.loads(r["evidence"]) if r["evidence"] else {}
    namespace, name = r["namespace"], r["name"]
    current = _number(r["current"]) if spec.numeric else None
    proposed = _number(r["proposed"]) if spec.numeric else None
    quota = action in QUANTITY
    days = evidence.get("history_days")
    confidence = _confidence(action, evidence, quota, days)
    day_count = _float(days) if quota else None
    history_s = _float(evidence.get("history_s"))
    if history_s is None and day_count is not None:  # a queue row: one day per daily peak
        history_s = day_count * 86_400
    return {
        "kind": r["kind"],
        # A Namespace (cluster-scoped) carries its own quota advice: its row is in its group.
        "namespace": name if r["kind"] == "Namespace" else namespace,
        "name": name,
        "target": name if namespace is None else f"{namespace}/{name}",
        "action": str(action),
        "current": _shown(action, r["current"]),
        "proposed": _shown(action, r["proposed"]),
        "current_value": current,
        "proposed_value": proposed,
        "unit": spec.unit,
        "change_ratio": change_ratio(current, proposed),
        "confidence": confidence,
        "history_s": history_s,
        "backing": backing(confidence, history_s),
        "reason_short": short_reason(action, r["reason"] or "", evidence, settings),
        "reason": r["reason"],
        "evidence": _json(evidence),
        "workload": r["workload"],
    }


def _confidence(action: Action, evidence: dict[str, Any], quota: bool, days: object) -> str:
    if action is Action.TENANT_THROTTLE:
        return tenant_confidence(evidence)
    return days_confidence(_float(days)) if quota else RULE


#: What a quota action's value counts, in a note.
_COUNTS = {
    Action.QUOTA_GPU: " GPUs",
    Action.QUOTA_CPU: " CPU",
    Action.QUOTA_MEMORY: "",
    Action.QUEUE_GPU_QUOTA: " GPUs",
}


def _cap_note(row: dict[str, Any]) -> str | None:
    """The note of a quota row the rule held under a cap (the controller's own rule,
    :func:`sits_observe.control.controller.rules.quotas.namespace_quotas`); the short reason says
    so."""
    action = Action(row["action"])
    evidence = json.loads(row["evidence"])
    capped_by, raw = evidence.get("capped_by"), evidence.get("uncapped")
    if action not in _COUNTS or capped_by is None or not isinstance(raw, int | float):
        return None
    unit, counts = QUANTITY[action], _COUNTS[action]
    row["reason_short"] = f"held at {capped_by}"
    factor, days = _float(evidence.get("confidence_factor")), _float(evidence.get("history_days"))
    # Under two days VPA's confidence widens the estimate more than the caps let through.
    widened = (
        f" (x{factor:,.0f} by VPA's confidence for {span_text(days * 86_400)} of history)"
        if factor is not None and days is not None and factor > 1.5
        else ""
    )
    # Prose, not a manifest: cores read better than a quantity (53,000, not 53028800m).
    said = human(raw, Unit.milli_cpu if unit is Unit.quantity_cpu else unit)
    return (
        f"{row['target']} {action}: the rule gives {said}{counts}{widened}, held "
        f"at {capped_by} ({row['proposed']}{counts})"
    )


def short_reason(
    action: Action, reason: str, evidence: dict[str, Any], settings: ControllerSettings
) -> str:
    """A reason that fits one table line: for namespace quotas, the daily peak the proposal
    grows from and the factor applied; otherwise the reason up to its first detail."""
    if action is Action.TENANT_THROTTLE and isinstance(evidence.get("sla_p99_s"), int | float):
        return f"pushes {evidence.get('victim')} out of its {evidence['sla_p99_s'] * 1000:g} ms SLA"
    unit = QUANTITY.get(action)
    peak, days = evidence.get("peak_quantile"), evidence.get("history_days")
    ceiling = evidence.get("ceiling")
    if action in _CEILINGS and isinstance(ceiling, int | float):
        minus = " minus the quota" if action is Action.QUEUE_GPU_BORROWING_LIMIT else ""
        return f"peak cap {ceiling:g} GPUs{minus}"
    if unit is not None and isinstance(peak, int | float) and isinstance(days, int | float):
        q = settings.quota
        factor = (1.0 + q.margin_ratio) * float(evidence.get("confidence_factor") or 1.0)
        span = span_text(float(days) * 86_400)
        return f"{span} p{q.percentile_ratio * 100:g} peak {human(peak, unit)} x {factor:.2f}"
    pods = _COMBINED.match(reason)  # a workload's row: "k of n pods: <the pod's reason>"
    if pods is None:
        return clip(reason)
    agreeing, total, own = pods.groups()
    return clip(own) if total == "1" else f"{clip(own)} ({agreeing} of {total} pods)"


#: The prefix :mod:`sits_observe.control.controller.planning.combine` gives a workload's reason.
_COMBINED = re.compile(r"^(\d+) of (\d+) pods: (.*)$", re.DOTALL)


def clip(reason: str) -> str:
    """``reason`` cut to fit the table's ``why`` column (at most :data:`MAX_REASON` cells)."""
    if len(reason) <= _SHORT_REASON:
        return reason
    cuts = [i for i in (reason.find(": "), reason.find(" (")) if i >= 8]
    short = reason[: min(cuts)] if cuts else reason
    return short if len(short) <= MAX_REASON else short[: MAX_REASON - 1] + "…"


def _json(evidence: dict[str, Any]) -> str:
    return json.dumps(evidence, sort_keys=True, separators=(",", ":"), default=str)


def _float(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) else None


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
    unit = QUANTITY.get(action)
    number = _number(text) if unit is not None else None
    return text if number is None or unit is None else human(number, unit)
