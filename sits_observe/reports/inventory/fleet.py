"""Report ``fleet``: the nodes and GPUs of the cluster over one window, and how they went.

Main table, one row per node (the latest inventory snapshot in the window, plus any node
with GPU samples): its GPUs and model, the GPUs allocated (the FGD inventory model of
:mod:`sits_observe.analytics.fragmentation.fgd_live`: pods bound in the latest ``pods`` snapshot),
the idle GPUs (mean utilisation over the window under ``idle_below_ratio``, the idle floor of
``sits-observe idle``), the mean GPU utilisation, the framebuffer in use (each GPU's newest
sample, summed), the mean power **per GPU** and the memory the node can allocate.

Other tables: each GPU (as ``node/index (model)``), collector freshness (newest row per node
and sample table, its age at the window's end), dropped samples, and two series over the
window for charts (:mod:`.fleet_series`): allocation, fragmentation and idle GPUs per
bucket, and P95 latency per model per bucket. Ratios are 0-1, power watts, memory bytes.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field

from sits_observe.analytics.fragmentation.fgd.measure import fragmentation
from sits_observe.analytics.fragmentation.fgd.workload import (
    TargetWorkload,
    TypicalPodSettings,
    typical_pods,
)
from sits_observe.analytics.fragmentation.fgd_live import LiveCluster, live_cluster
from sits_observe.analytics.fragmentation.settings import IdleSettings
from sits_observe.domain.units import Unit
from sits_observe.errors import NoDataError, StoreError
from sits_observe.reports.inventory import fleet_reads as reads
from sits_observe.reports.inventory import fleet_series as series
from sits_observe.reports.inventory.names import gpu_label, short_model
from sits_observe.reports.result import Report, ReportTable, col, table_of
from sits_observe.reports.spec import ReportSpec, require_rows
from sits_observe.reports.window import Window
from sits_observe.store import Store

FILLED_BY = "the node agent (or `sits-observe ingest dcgm`) and `ingest k8s` for the inventory"


class FleetQuery(TypicalPodSettings):
    """Settings of the ``fleet`` report (the typical-pod set is the fragmentation measure's)."""

    bin_s: float | None = Field(
        None,
        gt=0,
        le=7 * 86400,
        description="width of one time bucket of the series, seconds; none = the round width "
        f"giving at most {series.TARGET_BUCKETS} buckets over the samples in the window",
    )
    idle_below_ratio: float = Field(
        IdleSettings().util_floor_ratio,
        ge=0,
        le=1,
        description="mean GPU utilisation (0-1) under which a GPU counts as idle",
    )


_NODES = (
    col("node", "node"),
    col("gpus", "GPUs", Unit.integer),
    col("model", "model"),
    col("allocated_gpus", "alloc", Unit.number),
    col("idle_gpus", "idle", Unit.integer),
    col("gpu_util_ratio", "util", Unit.ratio),
    col("fb_used_bytes", "FB used", Unit.bytes),
    col("power_w", "power/GPU", Unit.watts),
    col("memory_allocatable_bytes", "memory", Unit.bytes),
    col("cpu_allocatable_milli", "CPU cores", Unit.milli_cpu, wide=True),
    col("gpus_sampled", "sampled", Unit.integer, wide=True),
    col("max_gpu_util_ratio", "util max", Unit.ratio, wide=True),
    col("fb_used_ratio", "FB mean", Unit.ratio, wide=True),
    col("ready", "ready", Unit.flag, wide=True),
    col("snapshot_at", "inventory at", Unit.time, wide=True),
)
_GPUS = (
    col("gpu", "GPU"),
    col("pod", "pod"),
    col("gpu_util_ratio", "util", Unit.ratio),
    col("fb_used_bytes", "FB used", Unit.bytes),
    col("fb_used_ratio", "FB", Unit.ratio),
    col("power_w", "power", Unit.watts),
    col("gpu_temp_c", "temp °C", Unit.number, wide=True),
    col("mig_profile", "MIG", wide=True),
    col("samples", "samples", Unit.integer, wide=True),
    col("sampled_at", "newest", Unit.time, wide=True),
    col("gpu_uuid", "GPU UUID", wide=True),
)
_FRESHNESS = (
    col("node", "node"),
    col("source", "table"),
    col("newest_at", "newest", Unit.time),
    col("age_s", "age", Unit.seconds),
)
_DROPS = (
    col("collector", "collector"),
    col("reason", "reason"),
    col("dropped", "dropped", Unit.integer),
    col("nodes", "nodes", Unit.integer),
    col("last_at", "last", Unit.time),
)
_OVER_TIME = (
    col("start_at", "time", Unit.time),
    col("gpus_sampled", "GPUs", Unit.integer),
    col("allocated_gpus", "alloc", Unit.number),
    col("alloc_ratio", "alloc %", Unit.ratio),
    col("idle_gpus", "idle", Unit.integer),
    col("gpu_util_ratio", "util", Unit.ratio),
    col("frag_ratio", "frag", Unit.ratio),
    col("total_gpus", "GPUs inv.", Unit.number, wide=True),
)
_LATENCY = (
    col("start_at", "time", Unit.time),
    col("model", "model"),
    col("requests", "requests", Unit.integer),
    col("p95_s", "P95", Unit.seconds),
)


def build(store: Store, window: Window, query: FleetQuery) -> Report:
    """The ``fleet`` report over ``window``."""
    _require_some(store, window)
    notes: list[str] = []
    live = _live(store, window, notes)
    workload = _workload(live, query, notes)
    nodes = _with_allocation(reads.node_rows(store, window, query.idle_below_ratio), live)
    gpus = _gpus(reads.gpu_rows(store, window))
    span = reads.sample_span(store, window)
    span_s = series.span_s(*span) if span else 3600.0
    bin_s = query.bin_s or series.bucket_width_s(span_s)
    series.check_width(bin_s, span_s)
    others = (
        table_of("gpus", "GPUs (means over the window, newest framebuffer)", gpus, _GPUS),
        _freshness(store, window),
        table_of("drops", "Dropped samples", reads.drop_rows(store, window), _DROPS),
        table_of(
            "over_time",
            f"Over time, {bin_s:g} s buckets",
            series.over_time(store, window, bin_s, query.idle_below_ratio, workload),
            _OVER_TIME,
        ),
        table_of(
            "latency_over_time",
            f"P95 latency per model, {bin_s:g} s buckets",
            series.latency_series(store, window, bin_s),
            _LATENCY,
        ),
    )
    facts = _facts(nodes=nodes, gpus=gpus, live=live, workload=workload, query=query, bin_s=bin_s)
    main = table_of("nodes", "Nodes", nodes, _NODES)
    return Report("fleet", window, main, others, tuple(notes), facts)


def _require_some(store: Store, window: Window) -> None:
    """GPU samples or an inventory snapshot in the window; else the GPU samples' reason."""
    try:
        require_rows(store, window, "gpu_samples", FILLED_BY)
    except NoDataError:
        require_rows(store, window, "nodes", FILLED_BY)


def _live(store: Store, window: Window, notes: list[str]) -> LiveCluster | None:
    try:
        return live_cluster(store, since_s=None, since=window.since, until=window.until)
    except StoreError as exc:
        notes.append(f"no allocation or fragmentation: {exc}")
        return None


def _workload(
    live: LiveCluster | None, query: FleetQuery, notes: list[str]
) -> TargetWorkload | None:
    if live is None:
        return None
    settings = TypicalPodSettings(
        coverage_ratio=query.coverage_ratio, include_cpu_only=query.include_cpu_only
    )
    try:
        return typical_pods(live.shapes, settings)
    except ValueError as exc:
        notes.append(f"no fragmentation: cannot build the typical-pod set: {exc}")
        return None


def _with_allocation(nodes: pa.Table, live: LiveCluster | None) -> pa.Table:
    """``nodes`` with ``allocated_gpus`` from the inventory at the window's end and the
    model's short name."""
    allocated: dict[str, float] = {}
    if live is not None:
        state = live.state
        held = state.gpu_count * 1000 - state.gpu_free_milli.sum(axis=1)
        allocated = {n: int(h) / 1000 for n, h in zip(state.node_names, held, strict=True)}
    names = nodes.column("node").to_pylist()
    models = [short_model(m) or None for m in nodes.column("model").to_pylist()]
    column = pa.array([allocated.get(n) for n in names], pa.float64())
    nodes = nodes.set_column(nodes.schema.get_field_index("model"), "model", pa.array(models))
    return nodes.append_column("allocated_gpus", column)


def _gpus(gpus: pa.Table) -> pa.Table:
    labels = [
        gpu_label(r["node"], r["gpu_index"], r["model_name"])
        for r in gpus.select(["node", "gpu_index", "model_name"]).to_pylist()
    ]
    pods = pc.binary_join_element_wise(gpus.column("namespace"), gpus.column("pod"), "/")
    return gpus.append_column("gpu", pa.array(labels, pa.string())).set_column(
        gpus.schema.get_field_index("pod"), "pod", pods
    )


def _freshness(store: Store, window: Window) -> ReportTable:
    rows = reads.freshness_rows(store, window)
    rows = rows.filter(pc.is_valid(rows.column("node")))
    title = "Freshness: newest row per node and table, age at the end"
    return table_of("freshness", title, rows, _FRESHNESS)


def _sum(table: pa.Table, name: str) -> float | None:
    value = pc.sum(table.column(name)).as_py()
    return None if value is None else float(value)


def _facts(
    *,
    nodes: pa.Table,
    gpus: pa.Table,
    live: LiveCluster | None,
    workload: TargetWorkload | None,
    query: FleetQuery,
    bin_s: float,
) -> dict[str, Any]:
    util = pc.mean(gpus.column("gpu_util_ratio")).as_py() if gpus.num_rows else None
    frag = None
    alloc = None
    if live is not None:
        total = live.state.total_gpu_milli
        alloc = (total - live.state.idle_gpu_milli) / total if total else None
        if workload is not None:
            frag = fragmentation(live.state, workload).frag_ratio
    return {
        "nodes": nodes.num_rows,
        "gpus": int(_sum(nodes, "gpus") or 0),
        "gpus_sampled": gpus.num_rows,
        "allocated_gpus": _sum(nodes, "allocated_gpus"),
        "idle_gpus": int(_sum(nodes, "idle_gpus") or 0),
        "gpu_util_ratio": util,
        "alloc_ratio": alloc,
        "frag_ratio": frag,
        "nodes_at": None if live is None else live.nodes_at,
        "pods_at": None if live is None else live.pods_at,
        "bin_s": bin_s,
        "idle_below_ratio": query.idle_below_ratio,
        "coverage_ratio": query.coverage_ratio,
        "include_cpu_only": query.include_cpu_only,
    }


SPEC = ReportSpec(
    name="fleet",
    summary="Nodes and GPUs over the window: allocation, idle GPUs, utilisation, power per "
    "GPU, freshness, and allocation, fragmentation and P95 latency over time.",
    settings=FleetQuery,
    reads=("gpu_samples", "nodes", "pods", "requests"),
    build=build,
)
