"""Tenant isolation: which tenant's load pushes which other tenant out of its P99 SLA.

SPEC "Namespace SLA example: finance 15 ms P99, medical 120 ms, government 300 ms; under load
on one tenant, the others must stay inside their SLA, else non-critical work is throttled".
A tenant is a namespace, or several namespaces that a configured map (namespace -> tenant)
rolls up into one: their requests and their load count as that tenant's. Its SLA is
configuration (``ClassSettings.namespace_sla_p99_s``; none by default, the SPEC's table is an
example in docs/analytics/tenants.md), and only a tenant with one can be pushed out of it.

Method (:class:`~.settings.TenantSettings` holds every threshold):

1. Per tenant with an SLA (the *victim*), the EXACT P99 of its requests per ``bin_s`` bin
   (``quantile_cont`` over the ``requests`` rows of the bin, the rule of :mod:`.latency`:
   failed requests and non-finite values left out); a bin with fewer than
   ``min_requests_per_bin`` requests has no P99 and does not count.
2. Per other tenant on the victim's nodes (the nodes the victim's requests ran on in the
   window), its load per bin: ``gpu_util`` = the sum over its GPUs on those nodes of the
   bin's mean ``gpu_util_ratio`` (busy GPUs), ``requests`` = its requests per second there,
   ``pods`` = its distinct pods there (from ``gpu_samples``). A bin where it has no row has
   load 0.
3. Per (victim, other) pair over the victim's bins: the midpoint of the load's range splits
   them into high-load bins (load above it) and low-load bins; with at least
   ``min_bins_per_side`` on each side, the Pearson correlation of load and P99 at least
   ``min_correlation``, and the victim's P99 above its SLA in at least ``min_breach_ratio``
   of the high-load bins (and in a larger share of them than of the low-load bins), the
   other tenant *pushes the victim out of its SLA*.

The evidence of a finding: the victim's exact P99 over all its requests in the high-load bins
and over those in the low-load bins (pooled, not a mean of bin P99s), its SLA, the other
tenant's mean load on each side, the correlation and the bins. Correlation is not causation:
a finding says the two move together on shared nodes, which is what the SPEC's rule acts on.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

import polars as pl
import pyarrow as pa

from sits_observe.analytics.serving.latency import RequestSelection
from sits_observe.analytics.serving.settings import TenantSettings
from sits_observe.store.duck import Store, utc_naive

_P99: Final = 0.99
_US: Final = 1_000_000
_EPOCH: Final = datetime(1970, 1, 1)

_P99_SCHEMA: dict[str, pl.DataType] = {
    "namespace": pl.String(),
    "bin": pl.Int64(),
    "requests": pl.Int64(),
    "p99_s": pl.Float64(),
}
_LOAD_SCHEMA: dict[str, pl.DataType] = {
    "victim": pl.String(),
    "aggressor": pl.String(),
    "bin": pl.Int64(),
    "load": pl.Float64(),
}

#: The tenant of a row's ``namespace``: the map's (``$mapped`` namespaces, ``$tenant_names``
#: their tenants, in the same order), else the namespace itself.
_TENANT = (
    "coalesce(list_extract($tenant_names::VARCHAR[], list_position($mapped::VARCHAR[], "
    "namespace)), namespace)"
)
#: The victim's nodes in the window, then the other tenants' load on them per bin.
_PLACED = f"""
placed AS (
    SELECT DISTINCT {_TENANT} AS victim, node FROM requests
    WHERE ts >= $since AND ts < $until AND node IS NOT NULL
      AND list_contains($victims::VARCHAR[], {_TENANT})
)"""
_LOAD_SQL = {
    "gpu_util": f"""
used AS (
    SELECT {_TENANT} AS aggressor, node, gpu_uuid, floor(epoch_us(ts) / $bin_us)::BIGINT AS bin,
           avg(gpu_util_ratio) AS load
    FROM gpu_samples
    WHERE ts >= $since AND ts < $until AND namespace IS NOT NULL AND isfinite(gpu_util_ratio)
    GROUP BY ALL
)""",
    "requests": f"""
used AS (
    SELECT {_TENANT} AS aggressor, node, floor(epoch_us(ts) / $bin_us)::BIGINT AS bin,
           count(*) / $bin_s AS load
    FROM requests
    WHERE ts >= $since AND ts < $until AND namespace IS NOT NULL
    GROUP BY ALL
)""",
    "pods": f"""
used AS (
    SELECT {_TENANT} AS aggressor, node, floor(epoch_us(ts) / $bin_us)::BIGINT AS bin,
           count(DISTINCT pod)::DOUBLE AS load
    FROM gpu_samples
    WHERE ts >= $since AND ts < $until AND namespace IS NOT NULL AND pod IS NOT NULL
    GROUP BY ALL
)""",
}


@dataclass(frozen=True)
class TenantSla:
    """One tenant over the window: a tenant with requests, or one with an SLA."""

    tenant: str
    #: The namespaces whose requests it holds in the window (sorted; empty without requests).
    namespaces: tuple[str, ...]
    #: Its P99 SLA, seconds (None: none configured).
    sla_p99_s: float | None
    requests: int
    #: Exact P99 over every request of the window (None: no request).
    p99_s: float | None
    #: Bins with a P99 (enough requests), and those whose P99 is above the SLA (None
    #: without an SLA).
    bins: int | None
    bins_out_of_sla: int | None


@dataclass(frozen=True)
class TenantInterference:
    """``aggressor``'s load pushes ``victim`` out of its P99 SLA (see the module docstring)."""

    victim: str
    aggressor: str
    sla_p99_s: float
    #: The victim's exact P99 over its requests in the high-load / low-load bins.
    victim_p99_high_s: float | None
    victim_p99_low_s: float | None
    #: Which load (``TenantSettings.load``) and the aggressor's mean of it on each side.
    load: str
    load_high: float
    load_low: float
    correlation: float
    bins_high: int
    bins_low: int
    #: Shares (0-1) of the high-load / low-load bins whose P99 is above the SLA.
    breach_high_ratio: float
    breach_low_ratio: float
    #: Start of the first and the last high-load bin (UTC, naive).
    first_high_at: datetime
    last_high_at: datetime


@dataclass(frozen=True)
class TenantReport:
    """The tenants (those with requests, and those with an SLA) and the interference
    findings, strongest correlation first."""

    tenants: tuple[TenantSla, ...]
    findings: tuple[TenantInterference, ...]


_NAMED = re.compile(r"\$([a-z_]+)")


def _query(store: Store, sql: str, params: Mapping[str, object]) -> pa.Table:
    """``sql`` with ``$name`` parameters run as positional ``?`` ones (values in order)."""
    return store.query(_NAMED.sub("?", sql), [params[m] for m in _NAMED.findall(sql)])


def _mapped(tenants: Mapping[str, str] | None) -> dict[str, object]:
    """The ``$mapped`` / ``$tenant_names`` parameters of :data:`_TENANT`."""
    pairs = sorted((tenants or {}).items())
    return {"mapped": [n for n, _ in pairs], "tenant_names": [t for _, t in pairs]}


def _params(
    since: datetime | None,
    until: datetime,
    settings: TenantSettings,
    tenants: Mapping[str, str] | None,
) -> dict[str, object]:
    return {
        "since": datetime.min if since is None else utc_naive(since),
        "until": utc_naive(until),
        "bin_us": float(settings.bin_s * _US),
        "bin_s": float(settings.bin_s),
        **_mapped(tenants),
    }


def p99_bins(
    store: Store,
    since: datetime | None,
    until: datetime,
    slas: Mapping[str, float],
    settings: TenantSettings,
    *,
    tenants: Mapping[str, str] | None = None,
) -> pl.DataFrame:
    """Per tenant with an SLA and bin: ``requests`` and the exact ``p99_s`` (every bin with a
    request; :func:`detect` drops those below ``min_requests_per_bin``). ``tenants`` maps a
    namespace to its tenant (a namespace not in it is its own); the column keeps the name
    ``namespace``."""
    where, named = RequestSelection(since=since, until=until).where_named()
    sql = f"""
        SELECT {_TENANT} AS namespace, floor(epoch_us(ts) / $bin_us)::BIGINT AS bin,
               count(*) AS requests, quantile_cont(latency_s, {_P99}) AS p99_s
        FROM requests
        WHERE {where} AND list_contains($victims::VARCHAR[], {_TENANT})
        GROUP BY ALL ORDER BY namespace, bin
    """
    params = {
        **named,
        **_mapped(tenants),
        "victims": sorted(slas),
        "bin_us": float(settings.bin_s * _US),
    }
    return _frame(_query(store, sql, params), _P99_SCHEMA)


def load_bins(
    store: Store,
    since: datetime | None,
    until: datetime,
    victims: Mapping[str, float],
    settings: TenantSettings,
    *,
    tenants: Mapping[str, str] | None = None,
) -> pl.DataFrame:
    """Per (victim, other tenant, bin): the other tenant's ``load`` on the victim's nodes
    (``tenants``: as :func:`p99_bins`)."""
    sql = f"""
        WITH {_PLACED}, {_LOAD_SQL[settings.load]}
        SELECT victim, aggressor, bin, sum(load)::DOUBLE AS load
        FROM used JOIN placed USING (node)
        WHERE aggressor <> victim
        GROUP BY ALL ORDER BY victim, aggressor, bin
    """
    params = {**_params(since, until, settings, tenants), "victims": sorted(victims)}
    return _frame(_query(store, sql, params), _LOAD_SCHEMA)


def _frame(table: pa.Table, schema: dict[str, pl.DataType]) -> pl.DataFrame:
    frame = pl.DataFrame(table)
    if frame.height == 0:
        return pl.DataFrame(schema=schema)
    return frame.select([pl.col(c).cast(t) for c, t in schema.items()])


def detect(
    p99: pl.DataFrame, load: pl.DataFrame, slas: Mapping[str, float], settings: TenantSettings
) -> pl.DataFrame:
    """The pairs that pass step 3 of the module docstring (pure; one row per finding).

    Columns: ``victim``, ``aggressor``, ``sla_p99_s``, ``bins_high``, ``bins_low``,
    ``load_high``, ``load_low``, ``correlation``, ``breach_high_ratio``,
    ``breach_low_ratio``, ``high_bins`` / ``low_bins`` (bin numbers), sorted by correlation
    (highest first), then victim and aggressor.
    """
    sla = pl.DataFrame(
        {"victim": list(slas), "sla_p99_s": [float(v) for v in slas.values()]},
        schema={"victim": pl.String(), "sla_p99_s": pl.Float64()},
    )
    bins = (
        p99.filter(pl.col("requests") >= settings.min_requests_per_bin)
        .select(pl.col("namespace").alias("victim"), "bin", "p99_s")
        .join(sla, on="victim")
    )
    pairs = load.select("victim", "aggressor").unique()
    grid = (
        pairs.join(bins, on="victim")
        .join(load, on=["victim", "aggressor", "bin"], how="left")
        .with_columns(pl.col("load").fill_null(0.0))
    )
    pair = ["victim", "aggressor"]
    mid = (pl.col("load").min() + pl.col("load").max()).over(pair) / 2
    grid = grid.with_columns(
        (pl.col("load") > mid).alias("_high"), (pl.col("p99_s") > pl.col("sla_p99_s")).alias("_out")
    )
    high, low = pl.col("_high"), ~pl.col("_high")
    stats = grid.group_by(pair).agg(
        pl.col("sla_p99_s").first(),
        high.sum().cast(pl.Int64).alias("bins_high"),
        low.sum().cast(pl.Int64).alias("bins_low"),
        pl.col("load").filter(high).mean().alias("load_high"),
        pl.col("load").filter(low).mean().alias("load_low"),
        pl.corr("load", "p99_s").fill_nan(None).alias("correlation"),
        pl.col("_out").filter(high).mean().alias("breach_high_ratio"),
        pl.col("_out").filter(low).mean().alias("breach_low_ratio"),
        pl.col("bin").filter(high).sort().alias("high_bins"),
        pl.col("bin").filter(low).sort().alias("low_bins"),
    )
    side = settings.min_bins_per_side
    return stats.filter(
        (pl.col("bins_high") >= side)
        & (pl.col("bins_low") >= side)
        & (pl.col("correlation") >= settings.min_correlation).fill_null(False)
        & (pl.col("breach_high_ratio") >= settings.min_breach_ratio)
        & (pl.col("breach_high_ratio") > pl.col("breach_low_ratio"))
    ).sort(["correlation", "victim", "aggressor"], descending=[True, False, False])


def pooled_p99(
    store: Store,
    since: datetime | None,
    until: datetime,
    tenant: str,
    *,
    bins: list[int],
    settings: TenantSettings,
    tenants: Mapping[str, str] | None = None,
) -> float | None:
    """The exact P99 of ``tenant``'s requests in ``bins`` (None: none there)."""
    where, named = RequestSelection(since=since, until=until).where_named()
    sql = f"""
        SELECT quantile_cont(latency_s, {_P99}) FROM requests
        WHERE {where} AND {_TENANT} = $ns
          AND list_contains($bins::BIGINT[], floor(epoch_us(ts) / $bin_us)::BIGINT)
    """
    params = {
        **named,
        **_mapped(tenants),
        "ns": tenant,
        "bins": bins,
        "bin_us": float(settings.bin_s * _US),
    }
    value = _query(store, sql, params).column(0)[0].as_py()
    return None if value is None else float(value)


def _tenants(
    store: Store,
    since: datetime | None,
    until: datetime,
    slas: Mapping[str, float],
    *,
    p99: pl.DataFrame,
    settings: TenantSettings,
    tenants: Mapping[str, str] | None,
) -> tuple[TenantSla, ...]:
    where, named = RequestSelection(since=since, until=until).where_named()
    overall = pl.DataFrame(
        _query(
            store,
            f"SELECT {_TENANT} AS tenant, count(*) AS requests, "
            f"quantile_cont(latency_s, {_P99}) AS p99_s, "
            "list_sort(list(DISTINCT namespace)) AS namespaces "
            f"FROM requests WHERE {where} AND namespace IS NOT NULL GROUP BY ALL",
            {**named, **_mapped(tenants)},
        )
    )
    totals = {r["tenant"]: r for r in overall.iter_rows(named=True)} if overall.height else {}
    counted = p99.filter(pl.col("requests") >= settings.min_requests_per_bin)
    out = []
    for tenant in sorted(set(totals) | set(slas)):
        sla = slas.get(tenant)
        mine = counted.filter(pl.col("namespace") == tenant)
        total = totals.get(tenant)
        out.append(
            TenantSla(
                tenant=tenant,
                namespaces=() if total is None else tuple(total["namespaces"]),
                sla_p99_s=None if sla is None else float(sla),
                requests=0 if total is None else int(total["requests"]),
                p99_s=None if total is None else float(total["p99_s"]),
                bins=None if sla is None else mine.height,
                bins_out_of_sla=None
                if sla is None
                else int((mine.get_column("p99_s") > sla).sum()),
            )
        )
    return tuple(out)


def tenant_report(
    store: Store,
    since: datetime | None,
    until: datetime,
    slas: Mapping[str, float],
    settings: TenantSettings,
    *,
    tenants: Mapping[str, str] | None = None,
) -> TenantReport:
    """Every tenant in ``[since, until)`` (one with requests, or with an SLA) and the
    interference findings (victims: the tenants with an SLA). ``tenants`` maps a namespace
    to its tenant; a namespace not in it is a tenant of its own, and ``slas`` is keyed by
    tenant."""
    p99 = p99_bins(store, since, until, slas, settings, tenants=tenants)
    load = load_bins(store, since, until, slas, settings, tenants=tenants)
    found = detect(p99, load, slas, settings)
    findings = []
    bin_us = int(settings.bin_s * _US)

    def start(b: int) -> datetime:
        return _EPOCH + timedelta(microseconds=b * bin_us)

    for r in found.iter_rows(named=True):
        high, low = list(r["high_bins"]), list(r["low_bins"])
        findings.append(
            TenantInterference(
                victim=r["victim"],
                aggressor=r["aggressor"],
                sla_p99_s=float(r["sla_p99_s"]),
                victim_p99_high_s=pooled_p99(
                    store, since, until, r["victim"], bins=high, settings=settings, tenants=tenants
                ),
                victim_p99_low_s=pooled_p99(
                    store, since, until, r["victim"], bins=low, settings=settings, tenants=tenants
                ),
                load=settings.load,
                load_high=float(r["load_high"]),
                load_low=float(r["load_low"]),
                correlation=float(r["correlation"]),
                bins_high=int(r["bins_high"]),
                bins_low=int(r["bins_low"]),
                breach_high_ratio=float(r["breach_high_ratio"]),
                breach_low_ratio=float(r["breach_low_ratio"]),
                first_high_at=start(min(high)),
                last_high_at=start(max(high)),
            )
        )
    return TenantReport(
        _tenants(store, since, until, slas, p99=p99, settings=settings, tenants=tenants),
        tuple(findings),
    )
