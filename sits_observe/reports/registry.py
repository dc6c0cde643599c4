"""Every report, by name: what the CLI makes commands of and the service answers at
``GET /api/v1/reports/{name}``."""

from __future__ import annotations

from typing import Any

from sits_observe.errors import UnknownNameError
from sits_observe.reports import (
    affinity,
    baseline,
    batching,
    capacity,
    classes,
    decisions,
    fleet,
    fragmentation,
    heatmap,
    interference,
    latency,
    recommend,
    smf,
    tenants,
    timeline,
    trends,
    whatif,
)
from sits_observe.reports.spec import ReportSpec

#: The reports, in the order ``--help`` lists them.
REPORTS: dict[str, ReportSpec[Any]] = {
    spec.name: spec
    for spec in (
        smf.SPEC,
        interference.SPEC,
        baseline.SPEC,
        classes.SPEC,
        timeline.SPEC,
        capacity.SPEC,
        recommend.SPEC,
        fragmentation.SPEC,
        affinity.SPEC,
        trends.SPEC,
        fleet.SPEC,
        whatif.SPEC,
        decisions.SPEC,
        latency.SPEC,
        heatmap.SPEC,
        batching.SPEC,
        tenants.SPEC,
    )
}


def find_report(name: str) -> ReportSpec[Any]:
    """The spec of report ``name``; an :class:`UnknownNameError` lists the ones there are."""
    try:
        return REPORTS[name]
    except KeyError:
        raise UnknownNameError(
            f"no report {name!r}; the reports are {', '.join(REPORTS)}"
        ) from None
