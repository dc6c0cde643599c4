"""Every report of the product, by name: what the CLI makes commands of and the service answers
at ``GET /api/v1/reports/{name}``.

The lab adds its own (``whatif``, a replay of the store's trace) at the entry points that
offer it (:func:`sits_observe.lab.catalog.all_reports`); the product never imports the lab, so
:func:`find_report` takes the catalog to look in."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sits_observe.errors import UnknownNameError
from sits_observe.reports import (
    affinity,
    baseline,
    classes,
    fragmentation,
    interference,
    smf,
    timeline,
    trends,
)
from sits_observe.reports.actions import decisions, recommend
from sits_observe.reports.inventory import fleet
from sits_observe.reports.serving import batching, capacity, heatmap, latency, tenants
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
        decisions.SPEC,
        latency.SPEC,
        heatmap.SPEC,
        batching.SPEC,
        tenants.SPEC,
    )
}


def find_report(name: str, reports: Mapping[str, ReportSpec[Any]] = REPORTS) -> ReportSpec[Any]:
    """The spec of report ``name`` in ``reports`` (the product's by default); an
    :class:`UnknownNameError` lists the ones there are."""
    try:
        return reports[name]
    except KeyError:
        raise UnknownNameError(
            f"no report {name!r}; the reports are {', '.join(reports)}"
        ) from None
