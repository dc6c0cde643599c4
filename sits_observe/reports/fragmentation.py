"""Report ``fragmentation``: GPU capacity lost to fragmentation for the workload (FGD, ATC'23).

The measure, its causes and its inputs are described in docs/analytics/fragmentation-fgd.md.
Two inputs, one report:

- the live cluster in a store (``--db`` / ``--service``): the inventory **at the end of the
  window**, i.e. the newest ``nodes`` snapshot and the newest ``pods`` snapshot before
  ``window.until`` (and not before ``window.since``), and the workload M of every pod seen in
  the window (with no ``--since``: every pod stored before ``--until``);
- the same live cluster from kube-state-metrics series in a PromQL store (``--promql-url``,
  :mod:`sits_observe.store.promql.kube`): the snapshot is each KSM target's newest scrape
  within ``--ksm-lookback-s`` before ``window.until``, the workload M every pod with a
  ``kube_pod_info`` series in the window; what KSM does not export (node-affinity GPU
  products, assigned GPUs, ``sits.io/precision``) is named in the notes;
- a trace (``--nodes`` / ``--workload``, optionally ``--placements``): files on the reader's
  machine in the Alibaba ``cluster-trace-gpu-v2023`` schema; no store is read and the window
  does not apply.

Tables: the cluster's answer (one row, the main table), the causes, the typical-pod set M and
the nodes, most fragmented first; from a store where pods declare ``sits.io/precision``, also
``precision``: per precision class, F(M) for the typical pods of that class alone on the same
cluster, and what the class holds in the newest pods snapshot, with the nodes it shares with
another class (mixed-precision co-location; docs/analytics/affinity.md); from a store with
DRA GPUs, also ``dra`` and ``dra_nodes`` (:mod:`.fragmentation_dra`). Amounts are milli-GPU
and milli-CPU in JSON and CSV (1000 = one GPU, one core); tables show GPUs (``3.73``) and
cores.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from pydantic import Field

from sits_observe.analytics.fragmentation.fgd.cluster import ClusterState, apply_placements
from sits_observe.analytics.fragmentation.fgd.measure import FragmentationReport, fragmentation
from sits_observe.analytics.fragmentation.fgd.model import CAUSES, MILLI_PER_GPU, PodShape
from sits_observe.analytics.fragmentation.fgd.workload import (
    TargetWorkload,
    TypicalPodSettings,
    typical_pods,
)
from sits_observe.analytics.fragmentation.fgd_live import (
    UNKNOWN_CPU_MILLI,
    InventoryTables,
    LiveCluster,
    live_cluster,
    live_cluster_of,
)
from sits_observe.analytics.topology.affinity_placement import (
    Holding,
    precision_holdings,
    precision_shapes,
)
from sits_observe.analytics.traces.cluster_trace import (
    load_node_list,
    load_placements,
    load_pod_list,
)
from sits_observe.domain.units import Unit
from sits_observe.errors import ConfigError, NoDataError, StoreError
from sits_observe.reports.fragmentation_dra import dra_tables
from sits_observe.reports.result import Report, ReportTable, col, table_of
from sits_observe.reports.spec import PromQLReader, ReportSpec, require_rows
from sits_observe.reports.window import Window, utc_text
from sits_observe.store import Store
from sits_observe.store.promql.kube import PromQLKubeSource
from sits_observe.store.reads import has_inventory

FILLED_BY = "`sits-observe ingest k8s` (or `serve` / `demo`, which snapshot the inventory)"


class FragmentationQuery(TypicalPodSettings):
    """Settings of the ``fragmentation`` report."""

    nodes: Path | None = Field(
        None,
        description="node list CSV of a trace (sn, cpu_milli, memory_mib, gpu, model), "
        "read instead of a store",
    )
    workload: Path | None = Field(
        None,
        description="pod list CSV of a trace (name, cpu_milli, memory_mib, num_gpu, "
        "gpu_milli, gpu_spec, ...), with --nodes",
    )
    placements: Path | None = Field(
        None,
        description="placements CSV of a trace (pod, node[, gpu_index]); none = an empty cluster",
    )
    top: int = Field(20, ge=0, description="nodes listed, most fragmented first; 0 = every node")
    ksm_lookback_s: float = Field(
        300.0,
        gt=0,
        description="with --promql-url: seconds before --until searched for the newest "
        "kube-state-metrics scrape (the inventory at the end of the window)",
    )


def is_trace(query: FragmentationQuery) -> bool:
    """Whether ``query`` names trace files (then no store is read)."""
    return any(p is not None for p in (query.nodes, query.workload, query.placements))


_CLUSTER = (
    col("frag_ratio", "frag/idle", Unit.ratio),
    col("frag_amount_ratio", "frag/all", Unit.ratio),
    col("frag_milli", "frag GPUs", Unit.milli_gpu),
    col("idle_milli", "idle GPUs", Unit.milli_gpu),
    col("total_milli", "GPUs", Unit.milli_gpu),
    col("alloc_ratio", "alloc", Unit.ratio),
    col("node_count", "nodes", Unit.integer),
    col("placed_pods", "placed", Unit.integer),
    col("workload_pods", "workload pods", Unit.integer, wide=True),
    col("typical_shapes", "shapes", Unit.integer, wide=True),
    col("typical_coverage_ratio", "coverage", Unit.ratio, wide=True),
)
_CAUSES = (
    col("cause", "cause"),
    col("frag_milli", "frag GPUs", Unit.milli_gpu),
    col("share", "share", Unit.ratio),
)
_TYPICAL = (
    col("cpu_milli", "CPU", Unit.quantity_cpu),
    col("num_gpu", "GPUs", Unit.integer),
    col("gpu_milli", "GPU share", Unit.milli_gpu),
    col("models", "models"),
    col("count", "pods", Unit.integer),
    col("weight", "weight", Unit.ratio),
)
_PRECISION = (
    col("precision", "precision"),
    col("pods", "pods", Unit.integer),
    col("frag_milli", "frag GPUs", Unit.milli_gpu),
    col("frag_ratio", "frag/idle", Unit.ratio),
    col("held_milli", "held GPUs", Unit.milli_gpu),
    col("nodes", "nodes", Unit.integer),
    col("shared_nodes", "shared nodes", Unit.integer),
)
_NODES = (
    col("node", "node"),
    col("gpu_model", "model"),
    col("gpu_count", "GPUs", Unit.integer),
    col("cpu_free_milli", "free cores", Unit.milli_cpu),
    col("idle_milli", "idle GPUs", Unit.milli_gpu),
    col("frag_milli", "frag GPUs", Unit.milli_gpu),
    col("frag_ratio", "frag", Unit.ratio),
)


@dataclass(frozen=True)
class FgdInputs:
    """The cluster and workload to measure, with where they came from (``facts``: the
    source's files or snapshot times; ``notes``: what the reader should know of them)."""

    state: ClusterState
    workload: TargetWorkload
    placed_pods: int
    facts: dict[str, Any]
    notes: tuple[str, ...]
    by_precision: dict[str, tuple[PodShape, ...]] | None = None
    precision_held: dict[str, Holding] | None = None
    result: FragmentationReport | None = None
    dra: tuple[ReportTable, ...] = ()


@dataclass(frozen=True)
class LiveFragmentation:
    """The FGD measure of a store's live cluster: the cluster, the typical-pod set M built
    from its recent pods, and the measure of M on it."""

    live: LiveCluster
    workload: TargetWorkload
    result: FragmentationReport

    def node_fragmentation_gpus(self) -> list[tuple[str, float]]:
        """Each node's F_n(M) in GPUs (the ``nodes`` table's ``frag_milli`` / 1000), in the
        inventory's node order."""
        milli = self.result.node_frag_milli.tolist()
        return [
            (n, m / MILLI_PER_GPU) for n, m in zip(self.live.state.node_names, milli, strict=True)
        ]


def live_fragmentation(
    store: Store,
    window: Window | None,
    query: TypicalPodSettings,
    *,
    workload_s: float | None = None,
) -> LiveFragmentation:
    """The FGD measure of the inventory at the end of ``window`` (its newest node and pods
    snapshots, no row outside it read; None: the newest stored, whatever their time), for the
    workload M of the pods seen in the window (``workload_s``: only those of the
    ``workload_s`` seconds before the pods snapshot).

    The ``fragmentation`` report's cluster, nodes and causes are this measure; the exporter's
    ``sits_fgd_*`` families read it with ``workload_s`` = ``fgd_since_s``. Raises
    :class:`~sits_observe.errors.StoreError` with no node snapshot or no pod in M's window.
    """
    since = None if window is None else window.since
    until = None if window is None else window.until
    live = live_cluster(store, since_s=workload_s, since=since, until=until)
    workload = _typical_pods(live.shapes, query)
    return LiveFragmentation(live, workload, fragmentation(live.state, workload))


def live_inventory(
    store: Store, window: Window | None, *, workload_s: float | None = None
) -> LiveCluster | None:
    """The live cluster :func:`live_fragmentation` measures (same arguments), or None while
    the store holds no inventory or no pod in M's window (then nothing can be stranded)."""
    if not has_inventory(store):
        return None
    since = None if window is None else window.since
    until = None if window is None else window.until
    try:
        return live_cluster(store, since_s=workload_s, since=since, until=until)
    except StoreError:
        return None


def build(store: Store, window: Window, query: FragmentationQuery) -> Report:
    """The ``fragmentation`` report: from the trace files ``query`` names, else from the
    inventory in ``store`` at the end of ``window``."""
    inputs = _from_trace(query) if is_trace(query) else _from_store(store, window, query)
    return report_of(window, inputs, query)


def build_promql(reader: PromQLReader, window: Window, query: FragmentationQuery) -> Report:
    """The ``fragmentation`` report from kube-state-metrics series in a PromQL store (or
    from the trace files ``query`` names)."""
    if reader.step_s is not None:
        raise ConfigError(
            "fragmentation reads each kube-state-metrics series' newest sample: "
            "--promql-step-s does not apply (leave it out)"
        )
    inputs = _from_trace(query) if is_trace(query) else _from_ksm(reader, window, query)
    return report_of(window, inputs, query)


def report_of(window: Window, inputs: FgdInputs, query: FragmentationQuery) -> Report:
    """The report of the FGD measure of ``inputs`` (any cluster state and workload)."""
    result = inputs.result
    if result is None:
        result = fragmentation(inputs.state, inputs.workload)
    facts = {
        **inputs.facts,
        "coverage_ratio": query.coverage_ratio,
        "include_cpu_only": query.include_cpu_only,
        "top": query.top,
    }
    others: tuple[ReportTable, ...] = (
        _causes(result),
        _typical(inputs.workload),
        _nodes(result, inputs.state, query.top),
    )
    if inputs.by_precision:
        others = (*others, _precision(inputs, query))
    others = (*others, *inputs.dra)
    main = _cluster(result, inputs)
    return Report("fragmentation", window, main, others, inputs.notes, facts)


def _from_trace(query: FragmentationQuery) -> FgdInputs:
    if query.nodes is None or query.workload is None:
        raise ConfigError(
            "a trace needs --nodes NODE_CSV and --workload POD_CSV (--placements is optional); "
            "without them the live cluster is read from --db or --service"
        )
    node_list = load_node_list(query.nodes)
    pod_list = load_pod_list(query.workload)
    state = ClusterState.from_node_list(node_list)
    placed = 0
    if query.placements is not None:
        placed = apply_placements(state, pod_list, load_placements(query.placements))
    facts: dict[str, Any] = {
        "source": "trace",
        "nodes": str(query.nodes),
        "workload": str(query.workload),
        "placements": None if query.placements is None else str(query.placements),
        "nodes_at": None,
        "pods_at": None,
        "warnings": [],
    }
    note = "trace files: the window does not apply (no store is read)"
    return FgdInputs(state, _typical_pods(pod_list.shapes(), query), placed, facts, (note,))


def _from_store(store: Store, window: Window, query: FragmentationQuery) -> FgdInputs:
    require_rows(store, window, "nodes", FILLED_BY)
    require_rows(store, window, "pods", FILLED_BY)
    measured = live_fragmentation(store, window, query)
    live = measured.live
    facts = {
        "source": "store",
        "nodes": None,
        "workload": None,
        "placements": None,
        "nodes_at": live.nodes_at,
        "pods_at": live.pods_at,
        "warnings": list(live.warnings),
    }
    notes = (
        f"live cluster: the nodes snapshot at {utc_text(live.nodes_at)} and the pods snapshot "
        f"at {utc_text(live.pods_at)}, the newest in the window; the workload M is every pod "
        "seen in the window",
        *live.warnings,
    )
    return FgdInputs(
        live.state,
        measured.workload,
        live.pods_placed,
        facts,
        notes,
        by_precision=precision_shapes(store, window.since, window.until),
        precision_held=precision_holdings(store, live.pods_at),
        result=measured.result,
        dra=dra_tables(store, window),
    )


#: What the KSM path cannot see, said in every report read from it.
KSM_LIMITS = (
    "from kube-state-metrics: GPU products allowed by required node affinity, assigned GPUs "
    "(HAMi's allocation annotation) and sits.io/precision are not read: affinity-pinned pods "
    "count as any product, shares are placed by the default rules, no precision table"
)


def _from_ksm(reader: PromQLReader, window: Window, query: FragmentationQuery) -> FgdInputs:
    source = PromQLKubeSource(reader.client, matchers=reader.matchers)
    ksm = source.inventory(window.since, window.until, lookback_s=query.ksm_lookback_s)
    if ksm.nodes_at is None:
        raise NoDataError(
            f"no kube-state-metrics node series (kube_node_status_allocatable) within "
            f"{query.ksm_lookback_s:g} s before {utc_text(window.until)} at the PromQL store; "
            "check --promql-url, --promql-matchers and --until, or widen --ksm-lookback-s"
        )
    tables = InventoryTables(
        ksm.nodes, ksm.nodes_at, ksm.pods if ksm.pods_at else None, ksm.pods_at, ksm.workload
    )
    live = live_cluster_of(tables)
    if not live.shapes:
        raise NoDataError(
            f"no kube_pod_info series in {window.describe()} at the PromQL store: "
            "the workload M is built from the pods seen in the window (widen --since)"
        )
    facts = {
        "source": "promql",
        "nodes": None,
        "workload": None,
        "placements": None,
        "nodes_at": live.nodes_at,
        "pods_at": live.pods_at,
        "warnings": list(live.warnings),
        "ksm_lookback_s": query.ksm_lookback_s,
        "ksm_absent": list(ksm.absent),
    }
    absent = (
        [f"kube-state-metrics families with no series: {', '.join(ksm.absent)}"]
        if ksm.absent
        else []
    )
    notes = (
        f"live cluster from kube-state-metrics: the newest scrape at {utc_text(live.nodes_at)} "
        f"(nodes) and {utc_text(live.pods_at)} (pods); the workload M is every pod with a "
        "kube_pod_info series in the window",
        KSM_LIMITS,
        *absent,
        *live.warnings,
    )
    workload = _typical_pods(live.shapes, query)
    return FgdInputs(live.state, workload, live.pods_placed, facts, notes)


def _typical_pods(shapes: Iterable[PodShape], query: TypicalPodSettings) -> TargetWorkload:
    settings = TypicalPodSettings(
        coverage_ratio=query.coverage_ratio, include_cpu_only=query.include_cpu_only
    )
    try:
        return typical_pods(shapes, settings)
    except ValueError as exc:
        raise ConfigError(f"cannot build the typical-pod set: {exc}") from exc


def _cluster(result: FragmentationReport, inputs: FgdInputs) -> ReportTable:
    total = result.total_milli
    row = {
        "frag_ratio": result.frag_ratio,
        "frag_amount_ratio": result.frag_amount_ratio,
        "frag_milli": result.frag_milli,
        "idle_milli": result.idle_milli,
        "total_milli": total,
        "alloc_ratio": (total - result.idle_milli) / total if total else 0.0,
        "node_count": len(inputs.state),
        "placed_pods": inputs.placed_pods,
        "workload_pods": inputs.workload.total_pods,
        "typical_shapes": len(inputs.workload.pods),
        "typical_coverage_ratio": inputs.workload.coverage_ratio,
    }
    return table_of("cluster", "Cluster GPU fragmentation (FGD, ATC'23)", [row], _CLUSTER)


def _precision(inputs: FgdInputs, query: FragmentationQuery) -> ReportTable:
    """F(M_p) of each precision class p: the same cluster measured for that class's typical
    pods alone (how much idle capacity is stranded for it), and what it holds."""
    held = inputs.precision_held or {}
    rows = []
    for precision, shapes in (inputs.by_precision or {}).items():
        result = fragmentation(inputs.state, _typical_pods(shapes, query))
        holding = held.get(precision, Holding(0, 0, 0, 0))
        rows.append(
            {
                "precision": precision,
                "pods": len(shapes),
                "frag_milli": result.frag_milli,
                "frag_ratio": result.frag_ratio,
                "held_milli": holding.gpu_milli,
                "nodes": holding.nodes,
                "shared_nodes": holding.shared_nodes,
            }
        )
    return table_of("precision", "By precision class (sits.io/precision)", rows, _PRECISION)


def _causes(result: FragmentationReport) -> ReportTable:
    rows = [
        {"cause": str(c), "frag_milli": result.by_cause[c], "share": result.cause_share(c)}
        for c in CAUSES
    ]
    return table_of("causes", "By cause", rows, _CAUSES)


def _typical(workload: TargetWorkload) -> ReportTable:
    rows = [
        {
            "cpu_milli": p.shape.cpu_milli,
            "num_gpu": p.shape.num_gpu,
            "gpu_milli": p.shape.gpu_milli,
            "gpu_types": list(p.shape.gpu_types),
            "models": "|".join(p.shape.gpu_types) or "any",
            "count": p.count,
            "weight": p.weight,
        }
        for p in workload.pods
    ]
    title = (
        f"Typical pods: {len(rows)} shapes cover {workload.coverage_ratio:.2%} of "
        f"{workload.total_pods} pods"
    )
    return table_of("typical_pods", title, rows, _TYPICAL)


def _nodes(result: FragmentationReport, state: ClusterState, top: int) -> ReportTable:
    # Most fragmented first; equal values keep node order (stable sort on -F).
    order = np.argsort(-result.node_frag_milli, kind="stable")
    if top:
        order = order[:top]
    idle = result.node_idle_milli[order]
    frag = result.node_frag_milli[order]
    model_ids = state.gpu_model_id[order]
    cpu_free = state.cpu_free_milli[order]
    rows = pa.table(
        {
            "node": pa.array([state.node_names[i] for i in order], pa.string()),
            "gpu_model": pa.array(
                [state.gpu_models[m] if m >= 0 else None for m in model_ids], pa.string()
            ),
            "gpu_count": pa.array(state.gpu_count[order], pa.int64()),
            # A node of unknown CPU is given UNKNOWN_CPU_MILLI: shown as unknown, not 10^9 cores.
            "cpu_free_milli": pa.array(
                cpu_free, pa.int64(), mask=cpu_free >= UNKNOWN_CPU_MILLI // 2
            ),
            "idle_milli": pa.array(idle, pa.int64()),
            "frag_milli": pa.array(frag, pa.float64()),
            "frag_ratio": pa.array(np.divide(frag, idle, out=np.zeros(frag.size), where=idle > 0)),
        }
    )
    limited = f", top {top} of {len(state)}" if top and top < len(state) else ""
    return table_of("nodes", f"Most fragmented nodes{limited}", rows, _NODES)


SPEC = ReportSpec(
    name="fragmentation",
    summary="GPU capacity lost to fragmentation for the workload (FGD measure, ATC'23), "
    "from the inventory at the end of the window or from a trace.",
    settings=FragmentationQuery,
    reads=("nodes", "pods"),
    build=build,
    promql=build_promql,
    local_files=("nodes", "workload", "placements"),
    offline=is_trace,
)
