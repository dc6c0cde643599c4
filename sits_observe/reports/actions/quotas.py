"""Namespace quotas as the controller last saw and proposed them, in base units.

The controller records, in each quota decision (``decisions``), the value in effect when it
read the ResourceQuota (``current``) and its proposal (``proposed``), as text in the action's
unit (:func:`~sits_observe.reports.actions.decision_totals.latest_quotas`). :func:`quota_values`
turns the newest decision of each (namespace, quota resource) into numbers in base units:
GPUs, CPU cores (the controller records milli-CPU, docs/controller.md) and bytes. A value
that is not a finite number is left out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sits_observe.control.controller.planning.model import QUOTA_ACTIONS
from sits_observe.control.controller.quota_settings import QUOTA_CPU
from sits_observe.reports.actions.decision_totals import latest_quotas
from sits_observe.store import Store

#: Factor from a quota action's stored unit to base units: CPU is milli-CPU; GPUs and bytes
#: are base units already.
_TO_BASE_UNIT: dict[str, float] = {QUOTA_CPU: 1e-3}
#: The two values of one quota.
KINDS: tuple[str, str] = ("current", "recommended")


@dataclass(frozen=True)
class QuotaValue:
    """One namespace quota: its ``resource`` key (``requests.nvidia.com/gpu`` ...) and the
    value in effect (``current``) or proposed (``recommended``), in base units."""

    namespace: str
    resource: str
    kind: str
    value: float


def quota_values(store: Store) -> list[QuotaValue]:
    """Per namespace and quota resource, the newest decision's current and recommended
    values in base units, by namespace, quota action and kind (non-numbers left out)."""
    resource_of = {str(action): key for key, action in QUOTA_ACTIONS.items()}
    rows = latest_quotas(store, list(resource_of)).to_pylist()
    values: list[QuotaValue] = []
    for row in sorted(rows, key=lambda r: (r["namespace"], r["action"])):
        resource = resource_of[row["action"]]
        for kind, stored in zip(KINDS, (row["current"], row["proposed"]), strict=True):
            number = _number(stored)
            if number is not None:
                scaled = number * _TO_BASE_UNIT.get(resource, 1.0)
                values.append(QuotaValue(row["namespace"], resource, kind, scaled))
    return values


def _number(text: object) -> float | None:
    if text is None:
        return None
    try:
        number = float(str(text))
    except ValueError:
        return None
    return number if math.isfinite(number) else None
