"""Every report, the lab's included: what the CLI, the Streamlit app and ``serve`` offer.

The product's reports are :data:`sits_observe.reports.registry.REPORTS`; the lab adds
``whatif`` (a replay of the store's trace under placement policies, :mod:`.replay.whatif`),
listed after ``fleet`` as ``--help`` always showed it.
"""

from __future__ import annotations

from typing import Any

from sits_observe.lab.replay import whatif
from sits_observe.reports.registry import REPORTS
from sits_observe.reports.spec import ReportSpec

#: The lab's reports, each after the product report it follows in ``--help``.
LAB_REPORTS: tuple[tuple[str, ReportSpec[Any]], ...] = (("fleet", whatif.SPEC),)


def all_reports() -> dict[str, ReportSpec[Any]]:
    """The product's reports and the lab's, in the order ``--help`` lists them."""
    after = dict(LAB_REPORTS)
    catalog: dict[str, ReportSpec[Any]] = {}
    for name, spec in REPORTS.items():
        catalog[name] = spec
        if name in after:
            catalog[after[name].name] = after[name]
    return catalog
