"""Report ``capacity``: the cost-latency Pareto frontier across node pools, and GPUs needed.

Two answers, asked for by two settings (docs/analytics/capacity.md):

- ``prices`` (a price table file on the reader's machine): per (model, pool), the pool's price
  per node-hour and the exact P95 latency of the model's successful requests in the window,
  each marked on or off the model's frontier (:mod:`sits_observe.analytics.serving.capacity`);
- ``target_rps`` (with ``model``): replicas and GPUs per GPU product for that rate, from the
  per-replica safe maximum given (``safe_max_rps``) or measured by the heatmap's rule at the
  ``slo_ms`` P95 SLO over bins ``bin_s`` seconds wide.

With ``prices`` the frontier is the main table (and the sizing, if asked for, is
``tables.sizing``); without it the sizing is. Requests are those completed in the window;
the node and pod inventory is each object's latest snapshot before the window's end.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from sits_observe.analytics.heatmap.grid import heatmap_settings
from sits_observe.analytics.heatmap.settings import US_PER_S, exact
from sits_observe.analytics.serving.capacity import (
    load_pool_inputs,
    measured_safe_max,
    pareto_frontier,
    pool_latency,
    replica_shapes,
    size_model,
)
from sits_observe.analytics.serving.settings import load_price_table
from sits_observe.domain.units import Unit
from sits_observe.errors import ConfigError, NoDataError
from sits_observe.reports.result import Report, ReportTable, col, table_of
from sits_observe.reports.spec import ReportSpec, require_rows
from sits_observe.reports.window import Window
from sits_observe.store import Store

FILLED_BY = {
    "requests": "`sits-observe ingest requests` or `sits-observe demo`",
    "nodes": "`sits-observe ingest k8s` (or `serve` / `demo`, which snapshot the inventory)",
}


class CapacityQuery(BaseModel):
    """Settings of the ``capacity`` report."""

    model_config = ConfigDict(frozen=True)

    prices: Path | None = Field(
        None, description="price table (YAML/JSON): pools with price_usd_per_hour"
    )
    model: str | None = Field(None, description="one model only (sizing needs it)")
    target_rps: float | None = Field(
        None, ge=0, description="request rate to size for, requests/s (needs --model)"
    )
    slo_ms: float | None = Field(
        None, gt=0, le=3_600_000, description="P95 SLO to measure the safe maximum per replica"
    )
    safe_max_rps: list[str] | None = Field(
        None, description="[GPU_PRODUCT=]RPS: safe maximum per replica instead of measuring it"
    )
    gpus_per_replica: int | None = Field(
        None, ge=1, description="GPUs per replica (default: the pods' gpu_request)"
    )
    throughput_bin_rps: float = Field(
        10.0, gt=0, le=1e9, description="heatmap throughput bin for the measured safe maximum"
    )
    bin_s: float = Field(
        1.0, gt=0, le=86_400, description="heatmap time bin for the measured safe maximum"
    )

    @field_validator("bin_s")
    @classmethod
    def _whole_microseconds(cls, value: float) -> float:
        if (exact(value) * US_PER_S).denominator != 1:
            raise ValueError(f"{value!r} s is not a whole number of microseconds")
        return value


_FRONTIER = (
    col("model", "model"),
    col("pool", "pool"),
    col("price_usd_per_hour", "USD/h", Unit.number),
    col("latency_p95_s", "P95", Unit.seconds),
    col("requests", "requests", Unit.integer),
    col("nodes", "nodes", Unit.integer),
    col("on_frontier", "frontier", Unit.flag),
    col("dominated_by", "dominated by"),
)
_SIZING = (
    col("model", "model", wide=True),
    col("gpu_product", "GPU"),
    col("target_rps", "target", Unit.rate),
    col("safe_max_rps_per_replica", "safe max", Unit.rate),
    col("gpus_per_replica", "GPUs/replica", Unit.integer),
    col("replicas", "replicas", Unit.integer),
    col("gpus", "GPUs", Unit.integer),
    col("source", "source", wide=True),
)


def build(store: Store, window: Window, query: CapacityQuery) -> Report:
    """The ``capacity`` report over ``window``."""
    if query.prices is None and query.target_rps is None:
        raise ConfigError("give --prices (Pareto frontier) and/or --target-rps (sizing)")
    if query.target_rps is not None and query.model is None:
        raise ConfigError("--target-rps needs --model: sizing is per model")
    require_rows(store, window, "requests", FILLED_BY["requests"])
    tables: list[ReportTable] = []
    notes: list[str] = []
    facts: dict[str, Any] = {"model": query.model}
    if query.prices is not None:
        frontier, unpriced = _frontier(store, window, query.prices, query.model)
        tables.append(frontier)
        facts["unpriced_nodes"] = list(unpriced)
        if unpriced:
            notes.append(f"nodes in no priced pool: {', '.join(unpriced)}")
    if query.target_rps is not None:
        sizing, sizing_notes = _sizing(store, window, query)
        tables.append(sizing)
        notes.extend(sizing_notes)
    return Report("capacity", window, tables[0], tuple(tables[1:]), tuple(notes), facts)


def _frontier(
    store: Store, window: Window, prices: Path, model: str | None
) -> tuple[ReportTable, Sequence[str]]:
    table = load_price_table(prices)
    # The inventory is a state: its latest snapshot before the window's end counts.
    require_rows(store, Window(None, window.until, window.rule), "nodes", FILLED_BY["nodes"])
    requests, nodes = load_pool_inputs(store, since=window.since, until=window.until, model=model)
    if requests.height == 0:
        which = f"of model {model!r} " if model is not None else ""
        raise NoDataError(f"no successful requests {which}in the window {window.describe()}")
    points, unpriced = pool_latency(requests, nodes, table)
    if not points:
        raise NoDataError(
            "no successful request ran on a priced node pool; check the pools' gpu_product / "
            f"node_labels against the nodes table (unpriced nodes: {', '.join(unpriced) or 'none'})"
        )
    rows = [
        {
            "model": p.point.model,
            "pool": p.point.pool,
            "price_usd_per_hour": p.point.price_usd_per_hour,
            "latency_p95_s": p.point.latency_p95_s,
            "requests": p.point.requests,
            "nodes": p.point.nodes,
            "on_frontier": p.on_frontier,
            "dominated_by": p.dominated_by,
        }
        for p in pareto_frontier(points)
    ]
    return table_of("frontier", "Cost-latency Pareto frontier", rows, _FRONTIER), unpriced


def _safe_max_flags(
    items: Sequence[str], products: Sequence[str | None]
) -> dict[str | None, float]:
    """``--safe-max-rps [GPU_PRODUCT=]RPS`` values; one without a product applies to every
    product the model runs on (or to an unnamed one)."""
    safe: dict[str | None, float] = {}
    for item in items:
        product, sep, value = item.rpartition("=")
        try:
            rps = float(value)
        except ValueError:
            raise ConfigError(f"--safe-max-rps {item!r}: {value!r} is not a number") from None
        if not rps > 0:
            raise ConfigError(f"--safe-max-rps {item!r}: the rate must be > 0")
        if sep:
            safe[product] = rps
        else:
            safe.update({p: rps for p in products} or {None: rps})
    return safe


def _sizing(store: Store, window: Window, query: CapacityQuery) -> tuple[ReportTable, list[str]]:
    model, target = query.model, query.target_rps
    assert model is not None and target is not None
    shapes = replica_shapes(store, model, since=window.since, until=window.until)
    per_replica = {
        p: (query.gpus_per_replica or s.gpus_per_replica or 1) for p, s in shapes.items()
    }
    notes: list[str] = []
    if query.safe_max_rps:
        source = "--safe-max-rps"
        safe = _safe_max_flags(query.safe_max_rps, list(shapes))
    else:
        if query.slo_ms is None:
            raise ConfigError(
                "sizing needs --slo-ms (to measure the safe maximum) or --safe-max-rps"
            )
        if not shapes:
            raise NoDataError(
                f"no requests of model {model!r} in the window name their pod; "
                "pass --safe-max-rps instead"
            )
        heatmap = heatmap_settings(
            throughput_bin_rps=query.throughput_bin_rps, window_s=query.bin_s, slo_ms=query.slo_ms
        )
        measured = measured_safe_max(
            store,
            model,
            query.slo_ms / 1000,
            shapes,
            since=window.since,
            until=window.until,
            heatmap=heatmap,
        )
        source = f"measured (heatmap safe maximum at P95 <= {query.slo_ms:g} ms, lowest pod)"
        safe = {}
        for gpu, m in measured.items():
            if m.safe_max_rps is not None:
                safe[gpu] = m.safe_max_rps
            notes.append(f"{gpu or 'unknown GPU'}: {m.note}")
    rows = [
        {
            "model": s.model,
            "gpu_product": s.gpu_product,
            "target_rps": s.target_rps,
            "safe_max_rps_per_replica": s.safe_max_rps_per_replica,
            "gpus_per_replica": s.gpus_per_replica,
            "replicas": s.replicas,
            "gpus": s.gpus,
            "source": s.source,
        }
        for s in size_model(model, target, safe, per_replica, source=source)
    ]
    title = f"GPUs {model} needs for {target:g} requests/s (safe max: per replica)"
    return table_of("sizing", title, rows, _SIZING), notes


SPEC = ReportSpec(
    name="capacity",
    summary="Cost-latency Pareto frontier across node pools; GPUs needed for a target rate.",
    settings=CapacityQuery,
    reads=("requests", "nodes", "pods"),
    build=build,
    local_files=("prices",),
)
