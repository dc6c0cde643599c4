"""``tenants`` on its defaults: the tenants are the namespaces in the data, their SLAs come
from configuration (``--sla``), and with none set the report says so instead of listing the
SPEC's example namespaces with 0 requests; a configured map (``--tenant NAMESPACE=TENANT``)
rolls several namespaces into one tenant."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from sits_observe.analytics.classes.settings import ClassSettings
from sits_observe.control.controller.settings import ControllerSettings
from sits_observe.reports.serving import tenants
from sits_observe.reports.window import Window
from sits_observe.store import Store
from sits_observe.surfaces.cli.main import app
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
    rows = {r["tenant"]: r for r in report.table("tenants").records()}
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
    rows = {r["tenant"]: r for r in report.table("tenants").records()}
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


def _latencies(store: Store, *namespaces: str) -> list[float]:
    table = store.query(
        "SELECT latency_s FROM requests WHERE list_contains(?, namespace)", [list(namespaces)]
    )
    return [float(v) for v in table.column("latency_s").to_pylist()]


def test_a_tenant_map_rolls_several_namespaces_into_one_tenant(store: Store) -> None:
    query = tenants.TenantsQuery(tenant=("finance=bank", "medical=bank"))
    report = tenants.build(store, WINDOW, query)
    (row,) = report.table("tenants").records()
    both = _latencies(store, "finance", "medical")
    assert (row["tenant"], row["namespaces"], row["requests"]) == (
        "bank",
        "finance, medical",
        len(both),
    )
    # The exact P99 of the two namespaces' requests together (linear, as quantile_cont).
    assert row["p99_s"] == pytest.approx(float(np.percentile(both, 99)), abs=1e-12)
    assert report.facts["tenant_of"] == {"finance": "bank", "medical": "bank"}


def test_findings_and_slas_are_per_tenant_of_the_map(store: Store) -> None:
    """batch's load on finance's node pushes finance out of its SLA: mapped, the finding is
    ops pushing bank, with the figures of the namespaces it holds."""
    query = tenants.TenantsQuery(tenant=("batch=ops", "finance=bank"), sla=("bank=0.015",))
    report = tenants.build(store, WINDOW, query)
    (finding,) = report.main.records()
    assert (finding["aggressor"], finding["victim"], finding["sla_p99_s"]) == ("ops", "bank", 0.015)
    assert finding["victim_p99_high_s"] == pytest.approx(0.039, abs=1e-12)
    assert finding["victim_p99_low_s"] == pytest.approx(0.0069, abs=1e-12)
    rows = {r["tenant"]: r for r in report.table("tenants").records()}
    assert set(rows) == {"bank", "medical"}  # batch has GPUs but no requests
    assert (rows["bank"]["namespaces"], rows["bank"]["bins_out_of_sla"]) == ("finance", 5)


def test_an_sla_names_the_tenant_not_a_namespace_rolled_into_it() -> None:
    with pytest.raises(ValueError, match=r"belongs to tenant 'bank'.*--sla bank=SECONDS"):
        tenants.TenantsQuery(tenant=("finance=bank",), sla=("finance=0.015",))
    with pytest.raises(ValueError, match=r"use NAMESPACE=TENANT \(ml-train=acme\)"):
        tenants.TenantsQuery(tenant=("finance",))
    # A tenant named like one of its namespaces takes the SLA.
    query = tenants.TenantsQuery(tenant=("finance-eu=finance",), sla=("finance=0.015",))
    assert query.slas() == {"finance": 0.015}


def test_the_cli_takes_the_map_as_repeated_tenant_flags(tmp_path: Path) -> None:
    db = tmp_path / "sits.duckdb"
    with Store.open(db) as s:
        fill(s)
    args = ["tenants", "--db", str(db), "--since", "1000d", "-o", "json"]
    args += ["--tenant", "finance=bank", "--tenant", "medical=bank", "--sla", "bank=0.2"]
    outcome = CliRunner().invoke(app, args, env={"SITS_DB": "", "SITS_SERVICE": ""})
    assert outcome.exit_code == 0, outcome.output
    (row,) = json.loads(outcome.stdout)["tables"]["tenants"]["rows"]
    assert (row["tenant"], row["namespaces"], row["sla_p99_s"]) == ("bank", "finance, medical", 0.2)
    bad = CliRunner().invoke(app, [*args[:3], "--tenant", "finance=bank", "--sla", "finance=1"])
    assert bad.exit_code == 2 and "set the SLA on the tenant" in bad.stderr
