"""``tenants`` on its defaults: the tenants are the namespaces in the data, their SLAs come
from configuration (``--sla``), and with none set the report says so instead of listing the
SPEC's example namespaces with 0 requests."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from sits_observe.analytics.classes.settings import ClassSettings
from sits_observe.control.controller.settings import ControllerSettings
from sits_observe.reports.serving import tenants
from sits_observe.reports.window import Window
from sits_observe.store import Store
from tests.unit.analytics.test_tenants import T0, fill

WINDOW = Window(T0, T0 + timedelta(minutes=11), "given")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path / "sits.duckdb") as s:
        fill(s)
        yield s


def test_the_tenants_are_the_namespaces_in_the_data_and_no_sla_is_a_default(
    store: Store,
) -> None:
    report = tenants.build(store, WINDOW, tenants.TenantsQuery())
    rows = {r["namespace"]: r for r in report.table("tenants").records()}
    assert set(rows) == {"finance", "medical"}  # the namespaces with requests
    assert rows["finance"]["requests"] == 219 and rows["finance"]["sla_p99_s"] is None
    assert rows["finance"]["bins_out_of_sla"] is None
    assert report.main.rows.num_rows == 0  # no SLA, no one pushed out of one
    assert any(n.startswith("no tenant SLA is set") for n in report.notes)
    assert "government" not in rows  # the SPEC's example is no default


def test_configured_slas_are_shown_and_a_configured_tenant_without_requests_is_named(
    store: Store,
) -> None:
    query = tenants.TenantsQuery(sla=("finance=0.015", "government=0.3"))
    report = tenants.build(store, WINDOW, query)
    rows = {r["namespace"]: r for r in report.table("tenants").records()}
    assert set(rows) == {"finance", "medical", "government"}
    assert (rows["finance"]["sla_p99_s"], rows["finance"]["bins_out_of_sla"]) == (0.015, 5)
    assert rows["medical"]["sla_p99_s"] is None and rows["government"]["requests"] == 0
    assert [(r["aggressor"], r["victim"]) for r in report.main.records()] == [("batch", "finance")]
    assert "no request in the window from government (an SLA is set for it)" in report.notes


def test_the_controller_has_no_sla_unless_one_is_configured() -> None:
    assert ClassSettings().namespace_sla_p99_s == {}
    assert ControllerSettings().classes.namespace_sla_p99_s == {}
    configured = ControllerSettings(sla=("finance=0.015",))
    assert configured.classes.namespace_sla_p99_s == {"finance": 0.015}
    with pytest.raises(ValueError, match="use NAMESPACE=SECONDS"):
        ControllerSettings(sla=("finance",))
