"""Report ``tenants``: which tenant's load pushes which other tenant out of its P99 SLA.

Tenants are the namespaces with requests in the window, or what a configured map makes of
them (``--tenant NAMESPACE=TENANT``, repeated: several namespaces roll up into one tenant, and
a namespace not named is its own); their SLAs are configuration (``--sla TENANT=SECONDS``;
none by default: the SPEC's finance 15 ms, medical 120 ms, government 300 ms P99 is an example
in docs/analytics/tenants.md), and a tenant with an SLA but no request is listed too. The
method is :mod:`sits_observe.analytics.serving.tenants` (docs/analytics/tenants.md): each
tenant's exact P99 per bin against each other tenant's load on the same nodes, split into
high-load and low-load bins.

Main table: one row per finding, "``aggressor`` pushes ``victim`` out of its SLA", with the
victim's P99 over its requests in the high-load bins and in the low-load bins, its SLA, the
aggressor's mean load on each side, the correlation and the bin counts, strongest first.
``tenants``: every tenant, its namespaces, its SLA, its P99 over the window and, with an SLA,
its bins out of it. The controller's ``tenant-throttle`` action (docs/controller.md "Tenant
isolation") acts on the same findings, one namespace a tenant (it changes a namespace's
ResourceQuota); ``recommend`` lists its rows.
"""

from __future__ import annotations

from dataclasses import asdict

from pydantic import Field, field_validator, model_validator

from sits_observe.analytics.serving.settings import TenantSettings
from sits_observe.analytics.serving.tenants import tenant_report
from sits_observe.domain.units import Unit
from sits_observe.domain.validation import named_seconds, named_values
from sits_observe.reports.result import Report, col, table_of
from sits_observe.reports.spec import ReportSpec, require_rows
from sits_observe.reports.window import Window
from sits_observe.store import Store

FILLED_BY = "`sits-observe ingest requests`, the inference collectors or `sits-observe demo`"


class TenantsQuery(TenantSettings):
    """Settings of the ``tenants`` report: the detection's, the tenants and their SLAs."""

    tenant: tuple[str, ...] = Field(
        (),
        description="NAMESPACE=TENANT: the tenant a namespace belongs to (repeat for each; "
        "ml-train=acme); a namespace not named is a tenant of its own",
    )
    sla: tuple[str, ...] = Field(
        (),
        description="TENANT=SECONDS: a tenant's P99 SLA (repeat for each; finance=0.015; a "
        "tenant is a namespace unless --tenant names it); none: tenants are listed without "
        "one and none can be pushed out of it",
    )

    @field_validator("tenant")
    @classmethod
    def _check_tenant(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        named_values(value, "NAMESPACE", "TENANT", "ml-train=acme")
        return value

    @field_validator("sla")
    @classmethod
    def _check_sla(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        named_seconds(value, "TENANT", "finance=0.015")
        return value

    @model_validator(mode="after")
    def _sla_of_a_tenant(self) -> TenantsQuery:
        """An SLA names a tenant: a namespace the map rolls into another tenant has none."""
        tenants = self.tenants()
        for name in self.slas():
            owner = tenants.get(name)
            if owner is not None and owner != name and name not in tenants.values():
                raise ValueError(
                    f"--sla {name}=...: namespace {name!r} belongs to tenant {owner!r} "
                    f"(--tenant {name}={owner}); set the SLA on the tenant: --sla {owner}=SECONDS"
                )
        return self

    def tenants(self) -> dict[str, str]:
        """namespace -> tenant, for the namespaces the map names."""
        return named_values(self.tenant, "NAMESPACE", "TENANT", "ml-train=acme")

    def slas(self) -> dict[str, float]:
        """tenant -> P99 SLA, seconds."""
        return named_seconds(self.sla, "TENANT", "finance=0.015")


_FINDINGS = (
    col("aggressor", "tenant"),
    col("victim", "pushes out"),
    col("sla_p99_s", "SLA P99", Unit.seconds),
    col("victim_p99_high_s", "P99 high", Unit.seconds),
    col("victim_p99_low_s", "P99 low", Unit.seconds),
    col("load_high", "load high", Unit.number),
    col("load_low", "load low", Unit.number),
    col("correlation", "corr", Unit.score),
    col("bins_high", "high bins", Unit.integer, wide=True),
    col("bins_low", "low bins", Unit.integer, wide=True),
    col("load", "load", wide=True),
    col("breach_high_ratio", "out of SLA high", Unit.ratio, wide=True),
    col("breach_low_ratio", "out of SLA low", Unit.ratio, wide=True),
    col("first_high_at", "first high", Unit.time, wide=True),
    col("last_high_at", "last high", Unit.time, wide=True),
)
_TENANTS = (
    col("tenant", "tenant"),
    col("namespaces", "namespaces"),
    col("sla_p99_s", "SLA P99", Unit.seconds),
    col("p99_s", "P99", Unit.seconds),
    col("requests", "requests", Unit.integer),
    col("bins", "bins", Unit.integer),
    col("bins_out_of_sla", "out of SLA", Unit.integer),
)


def build(store: Store, window: Window, query: TenantsQuery) -> Report:
    """The ``tenants`` report over ``window``."""
    require_rows(store, window, "requests", FILLED_BY)
    slas = query.slas()
    mapped = query.tenants()
    result = tenant_report(store, window.since, window.until, slas, query, tenants=mapped)
    main = table_of(
        "findings",
        "Tenants pushing others out of their P99 SLA",
        [asdict(f) for f in result.findings],
        _FINDINGS,
    )
    tenants = table_of(
        "tenants",
        "Tenants with requests, and those with an SLA",
        [{**asdict(t), "namespaces": ", ".join(t.namespaces)} for t in result.tenants],
        _TENANTS,
    )
    notes = []
    if not slas:
        notes.append(
            "no tenant SLA is set, so no tenant can be pushed out of one: set them with --sla "
            "TENANT=SECONDS (docs/analytics/tenants.md has an example)"
        )
    elif not result.findings:
        notes.append(
            "no tenant's load moves with another's P99 out of its SLA (bins of "
            f"{query.bin_s:g} s, >= {query.min_requests_per_bin} requests, >= "
            f"{query.min_bins_per_side} a side, correlation >= {query.min_correlation:g})"
        )
    quiet = [t.tenant for t in result.tenants if t.requests == 0]
    if quiet:
        notes.append(f"no request in the window from {', '.join(quiet)} (an SLA is set for it)")
    facts = {
        "slas_s": slas,
        "tenant_of": mapped,
        "bin_s": query.bin_s,
        "load": query.load,
        "findings": len(result.findings),
    }
    return Report("tenants", window, main, (tenants,), tuple(notes), facts)


SPEC = ReportSpec(
    name="tenants",
    summary="Tenant isolation: which tenant's load pushes which other tenant out of its P99 "
    "SLA, with the P99 in high-load and low-load bins (a tenant is a namespace, or several "
    "mapped with --tenant).",
    settings=TenantsQuery,
    reads=("requests", "gpu_samples"),
    build=build,
)
