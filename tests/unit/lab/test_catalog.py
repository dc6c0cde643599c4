"""The report catalog: the product's registry holds no lab report, and the entry points' catalog
adds ``whatif`` where ``--help`` has always listed it."""

from __future__ import annotations

import pytest

from sits_observe.errors import UnknownNameError
from sits_observe.lab.catalog import all_reports
from sits_observe.lab.replay import whatif
from sits_observe.reports.registry import REPORTS, find_report


def test_the_product_registry_holds_no_lab_report() -> None:
    assert "whatif" not in REPORTS
    with pytest.raises(UnknownNameError, match="no report 'whatif'"):
        find_report("whatif")


def test_the_catalog_adds_whatif_after_fleet_and_keeps_the_product_order() -> None:
    catalog = all_reports()
    names = list(catalog)
    assert names.index("whatif") == names.index("fleet") + 1
    assert [n for n in names if n != "whatif"] == list(REPORTS)
    assert find_report("whatif", catalog) is whatif.SPEC
