"""Interference score per GPU and node, and the TopologyManager recommendation.

SPEC "Topology and interference": score = 0.4 x GPU-bandwidth utilisation + 0.35 x NVLink
conflict + 0.25 x NUMA miss ratio, each 0-1; above 0.65 recommend TopologyManager
``single-numa-node``; three consecutive sync delays above 80 ms fall back to ``best-effort``.

How each input is measured (docs/analytics/workloads.md has the full story):

- GPU-bandwidth utilisation: mean ``dram_active_ratio`` (DCGM_FI_PROF_DRAM_ACTIVE, the share of
  cycles the device-memory interface is busy) over the window; when a GPU has no DRAM activity
  samples, mean ``mem_copy_util_ratio`` (DCGM_FI_DEV_MEM_COPY_UTIL) instead. Which one was
  used is reported as ``bandwidth_source``.
- NVLink conflict: per sample, NVLink utilisation u = min(1, (tx + rx bytes/s) / the product's
  bidirectional NVLink capacity), counted only when the link is *contended* at that sample
  (scope ``gpu``: the GPU serves two or more pods; scope ``node``: two or more pods on the node
  move NVLink traffic), else 0; the input is the mean over the window. A product without
  NVLink (L4, L40S ...) has conflict 0; an unknown product or absent NVLink counters make the
  input missing.
- NUMA miss ratio: per node, passed in by the caller; measured from ``numastat`` counters by
  :mod:`sits_observe.analytics.topology.numa` (delta ``numa_miss`` / delta (``numa_hit`` +
  ``numa_miss``)), otherwise it is reported missing.

A missing input contributes 0 to the score and is named in ``missing_inputs``; a
recommendation made on partial data says so. Sync delays are an input series per node (time
order), passed in by the caller (measured: the ``sync_delays`` table,
:func:`sits_observe.analytics.topology.numa.sync_delays_by_node`); without them the fallback cannot
fire.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

import pyarrow as pa

from sits_observe.analytics.topology.numa import numa_miss_ratios, numa_sample_rows
from sits_observe.analytics.topology.settings import InterferenceSettings, find_link_capacity
from sits_observe.store.duck import Store
from sits_observe.store.rows import Rows, StoreRows, query_rows, window

if TYPE_CHECKING:
    import polars as pl

SINGLE_NUMA_NODE = "single-numa-node"
BEST_EFFORT = "best-effort"

BANDWIDTH = "bandwidth_util_ratio"
NVLINK = "nvlink_conflict_ratio"
NUMA = "numa_miss_ratio"


@dataclass(frozen=True)
class InterferenceScore:
    """The score (0-1) and the inputs it was computed from (None = missing)."""

    score: float
    bandwidth_util_ratio: float | None
    nvlink_conflict_ratio: float | None
    numa_miss_ratio: float | None
    missing_inputs: tuple[str, ...]

    @property
    def partial(self) -> bool:
        """True when at least one input was missing (and counted as 0)."""
        return bool(self.missing_inputs)


@dataclass(frozen=True)
class TopologyRecommendation:
    """What TopologyManager policy to use on a node; ``policy`` None = no change advised."""

    policy: str | None
    reason: str
    partial_data: bool


@dataclass(frozen=True)
class GpuInterference:
    """Interference inputs and score of one GPU over the window."""

    node: str | None
    gpu_uuid: str
    model_name: str | None
    samples: int
    pods: tuple[str, ...]
    bandwidth_source: str | None
    nvlink_capacity_bytes_per_s: float | None
    score: InterferenceScore
    first_ts: datetime
    last_ts: datetime


@dataclass(frozen=True)
class NodeInterference:
    """Interference of one node: inputs are means over its GPUs that have them."""

    node: str | None
    gpus: int
    score: InterferenceScore
    max_gpu_score: float
    hottest_gpu_uuid: str
    sync_delays_seen: int
    recommendation: TopologyRecommendation


@dataclass(frozen=True)
class InterferenceReport:
    """Per-node and per-GPU interference over one window."""

    nodes: tuple[NodeInterference, ...]
    gpus: tuple[GpuInterference, ...]


def _clip01(value: float) -> float:
    return min(1.0, max(0.0, value))


def interference_score(
    bandwidth_util_ratio: float | None,
    nvlink_conflict_ratio: float | None,
    numa_miss_ratio: float | None,
    settings: InterferenceSettings,
) -> InterferenceScore:
    """The weighted score; each input is clipped to 0-1, a None input counts 0 and is named."""
    inputs = {BANDWIDTH: bandwidth_util_ratio, NVLINK: nvlink_conflict_ratio, NUMA: numa_miss_ratio}
    weights = {
        BANDWIDTH: settings.bandwidth_weight,
        NVLINK: settings.nvlink_weight,
        NUMA: settings.numa_weight,
    }
    clipped = {k: None if v is None else _clip01(v) for k, v in inputs.items()}
    score = sum(weights[k] * (v or 0.0) for k, v in clipped.items())
    missing = tuple(k for k, v in clipped.items() if v is None)
    return InterferenceScore(
        score=_clip01(score),
        bandwidth_util_ratio=clipped[BANDWIDTH],
        nvlink_conflict_ratio=clipped[NVLINK],
        numa_miss_ratio=clipped[NUMA],
        missing_inputs=missing,
    )


def sync_delay_breached(sync_delays_s: Sequence[float], settings: InterferenceSettings) -> bool:
    """True when ``sync_delay_consecutive`` delays in a row exceed the threshold (time order)."""
    run = 0
    for delay in sync_delays_s:
        run = run + 1 if delay > settings.sync_delay_threshold_s else 0
        if run >= settings.sync_delay_consecutive:
            return True
    return False


def recommend_topology(
    score: InterferenceScore,
    sync_delays_s: Sequence[float] | None,
    settings: InterferenceSettings,
) -> TopologyRecommendation:
    """The spec's rule: best-effort after N consecutive slow syncs, else single-numa-node when
    the score is above the threshold, else no change.

    The sync-delay fallback wins: it is the evidence that single-NUMA alignment hurts.
    """
    partial = score.partial
    note = f" (partial data: {', '.join(score.missing_inputs)} missing, counted as 0)"
    suffix = note if partial else ""
    if sync_delays_s is not None and sync_delay_breached(sync_delays_s, settings):
        return TopologyRecommendation(
            BEST_EFFORT,
            f"{settings.sync_delay_consecutive} consecutive sync delays above "
            f"{settings.sync_delay_threshold_s * 1000:g} ms",
            partial,
        )
    if score.score > settings.threshold_ratio:
        return TopologyRecommendation(
            SINGLE_NUMA_NODE,
            f"interference score {score.score:.3f} > {settings.threshold_ratio:g}{suffix}",
            partial,
        )
    return TopologyRecommendation(
        None,
        f"interference score {score.score:.3f} <= {settings.threshold_ratio:g}{suffix}",
        partial,
    )


# -- measurement over gpu_samples --------------------------------------------------------------

#: Columns of ``gpu_samples`` the report reads.
SAMPLE_COLUMNS = (
    "ts",
    "node",
    "gpu_uuid",
    "model_name",
    "pod",
    "dram_active_ratio",
    "mem_copy_util_ratio",
    "nvlink_tx_bytes_per_s",
    "nvlink_rx_bytes_per_s",
)


def _capacities(samples: Rows, settings: InterferenceSettings) -> tuple[str, list[object]]:
    """A VALUES list of (model_name, bidirectional NVLink bytes/s) for every known product
    name in ``samples`` (the link table matches names by pattern, in Python), and its
    parameters."""
    names = query_rows(
        "SELECT DISTINCT model_name FROM samples WHERE model_name IS NOT NULL",
        {"samples": samples},
    ).column(0)
    pairs: list[object] = []
    for name in names.to_pylist():
        link = find_link_capacity(settings.links, name)
        if link is not None:
            pairs += [name, link.nvlink_bytes_per_s]
    if not pairs:
        return "SELECT NULL::VARCHAR AS model_name, NULL::DOUBLE AS capacity WHERE false", []
    values = ", ".join("(?::VARCHAR, ?::DOUBLE)" for _ in range(len(pairs) // 2))
    return f"SELECT * FROM (VALUES {values}) AS v(model_name, capacity)", pairs


#: The window's aggregates over the relations ``samples`` (:data:`SAMPLE_COLUMNS`) and
#: ``capacities`` (model_name, NVLink bytes/s), as common table expressions:
#:
#: - ``raw``: every sample with its NVLink utilisation u = min(1, (tx + rx) / capacity) (0 on
#:   a product without NVLink, NULL when the counters or the product's capacity are unknown);
#: - ``device``: one row per (GPU, ts); a GPU shared by several pods appears once per pod with
#:   the same device values, so the aggregate takes the maximum (the one value, NULLs
#:   ignored), and counts the pods; ``movers``: per (node, ts), the pods moving NVLink
#:   traffic;
#: - ``conflicts``: a sample's NVLink conflict is u when the link is contended (scope ``gpu``,
#:   the first parameter after the relations': two or more pods on the GPU; ``node``: two or
#:   more movers on the node), else 0; NULL when u is;
#: - ``per_gpu``: one row per GPU, its window means of the device counters and conflict, and
#:   its bandwidth input (DRAM activity, else copy utilisation, :func:`_bandwidth`).
_AGGREGATES = """
WITH capacities AS ({capacities}),
raw AS (
    SELECT s.*, c.capacity AS nvlink_capacity,
        CASE
            WHEN c.capacity = 0 THEN 0.0
            WHEN (s.nvlink_tx_bytes_per_s IS NOT NULL OR s.nvlink_rx_bytes_per_s IS NOT NULL)
                AND c.capacity IS NOT NULL
            THEN least(1.0, greatest(0.0, (coalesce(s.nvlink_tx_bytes_per_s, 0.0)
                + coalesce(s.nvlink_rx_bytes_per_s, 0.0)) / c.capacity))
        END AS nvlink_util
    FROM samples AS s LEFT JOIN capacities AS c ON c.model_name = s.model_name
    WHERE s.gpu_uuid IS NOT NULL
),
device AS (
    SELECT gpu_uuid, ts, max(node) AS node, max(model_name) AS model_name,
        max(dram_active_ratio) AS dram, max(mem_copy_util_ratio) AS copy,
        max(nvlink_capacity) AS nvlink_capacity, max(nvlink_util) AS nvlink_util,
        count(DISTINCT pod) AS n_pods
    FROM raw GROUP BY gpu_uuid, ts
),
movers AS (
    SELECT node, ts, count(DISTINCT pod) AS node_movers
    FROM raw WHERE nvlink_util > 0 GROUP BY node, ts
),
conflicts AS (
    SELECT d.*,
        CASE
            WHEN d.nvlink_util IS NULL THEN NULL
            WHEN (CASE WHEN ? = 'gpu' THEN d.n_pods ELSE coalesce(m.node_movers, 0) END) >= 2
            THEN d.nvlink_util
            ELSE 0.0
        END AS conflict
    FROM device AS d
    LEFT JOIN movers AS m ON m.node IS NOT DISTINCT FROM d.node AND m.ts = d.ts
),
per_gpu AS (
    SELECT gpu_uuid, any_value(node) AS node, any_value(model_name) AS model_name,
        count(*) AS samples, avg(dram) AS dram, avg(copy) AS copy,
        coalesce(avg(dram), avg(copy)) AS bandwidth,
        any_value(nvlink_capacity) AS nvlink_capacity, avg(conflict) AS conflict,
        min(ts) AS first_ts, max(ts) AS last_ts
    FROM conflicts GROUP BY gpu_uuid
)
"""

#: Every GPU with the pods it served, by node (no name last) then GPU.
_GPUS_SQL = """
SELECT g.*, p.pods FROM per_gpu AS g JOIN (
    SELECT gpu_uuid, list_sort(list_distinct(list(pod))) AS pods FROM raw GROUP BY gpu_uuid
) AS p USING (gpu_uuid)
ORDER BY g.node NULLS LAST, g.gpu_uuid
"""

#: Every node's inputs: the means over its GPUs that have them, each GPU's input clipped to
#: 0-1 first (as :func:`interference_score` clips it), by node (no name last).
_NODES_SQL = """
SELECT node,
    avg(CASE WHEN bandwidth IS NOT NULL THEN least(1.0, greatest(0.0, bandwidth)) END)
        AS bandwidth,
    avg(CASE WHEN conflict IS NOT NULL THEN least(1.0, greatest(0.0, conflict)) END)
        AS conflict
FROM per_gpu GROUP BY node
ORDER BY node NULLS LAST
"""


def _aggregate(samples: Rows, settings: InterferenceSettings, select: str) -> pa.Table:
    """``select`` over the window's aggregates (:data:`_AGGREGATES`) of ``samples``."""
    capacities, params = _capacities(samples, settings)
    return query_rows(
        _AGGREGATES.format(capacities=capacities) + select,
        {"samples": samples},
        [*params, str(settings.nvlink_conflict_scope)],
    )


def _bandwidth(dram: float | None, copy: float | None) -> tuple[float | None, str | None]:
    """A GPU's bandwidth input and its source: DRAM activity, else copy utilisation."""
    if dram is not None:
        return dram, "dram_active_ratio"
    if copy is not None:
        return copy, "mem_copy_util_ratio"
    return None, None


def interference_report(
    samples: Rows,
    settings: InterferenceSettings,
    *,
    numa_miss_ratio: Mapping[str, float] | None = None,
    sync_delays_s: Mapping[str, Sequence[float]] | None = None,
) -> InterferenceReport:
    """Score every GPU and node in ``samples`` (``gpu_samples`` rows, :data:`SAMPLE_COLUMNS`:
    a frame, or :func:`gpu_sample_rows` of a store, aggregated there).

    ``numa_miss_ratio`` and ``sync_delays_s`` are per node name; absent nodes have no value.
    No rows give an empty report.
    """
    numa = dict(numa_miss_ratio or {})
    delays = dict(sync_delays_s or {})
    by_node: dict[str | None, list[GpuInterference]] = {}
    for r in _aggregate(samples, settings, _GPUS_SQL).to_pylist():
        bandwidth, source = _bandwidth(r["dram"], r["copy"])
        by_node.setdefault(r["node"], []).append(
            GpuInterference(
                node=r["node"],
                gpu_uuid=r["gpu_uuid"],
                model_name=r["model_name"],
                samples=int(r["samples"]),
                pods=tuple(r["pods"] or ()),
                bandwidth_source=source,
                nvlink_capacity_bytes_per_s=r["nvlink_capacity"],
                score=interference_score(bandwidth, r["conflict"], numa.get(r["node"]), settings),
                first_ts=r["first_ts"],
                last_ts=r["last_ts"],
            )
        )
    nodes = []
    for node, score in node_scores(samples, settings, numa_miss_ratio=numa).items():
        members = by_node.get(node)
        if not members:
            # A store read twice while agents write: a node whose first rows were committed
            # between the two reads is scored by the next pass, not half of it by this one.
            continue
        # Two reads of the same samples may differ in a score's last bits (DuckDB sums in
        # parallel): scores within 1e-12 are a tie, won by the first GPU in order.
        hottest = max(members, key=lambda g: round(g.score.score, 12))
        node_delays = delays.get(node) if node is not None else None
        nodes.append(
            NodeInterference(
                node=node,
                gpus=len(members),
                score=score,
                max_gpu_score=hottest.score.score,
                hottest_gpu_uuid=hottest.gpu_uuid,
                sync_delays_seen=len(node_delays) if node_delays is not None else 0,
                recommendation=recommend_topology(score, node_delays, settings),
            )
        )
    gpus = tuple(g for members in by_node.values() for g in members)
    return InterferenceReport(tuple(nodes), gpus)


def node_scores(
    samples: Rows,
    settings: InterferenceSettings,
    *,
    numa_miss_ratio: Mapping[str, float] | None = None,
) -> dict[str | None, InterferenceScore]:
    """The score of every node in ``samples`` (ordered by name, no name last), the
    ``nodes`` of :func:`interference_report` without its per-GPU rows (their pods, spans and
    Python objects: at 5,000 nodes x 8 GPUs most of the report's time)."""
    numa = dict(numa_miss_ratio or {})
    nodes = _aggregate(samples, settings, _NODES_SQL)
    return {
        node: interference_score(
            bandwidth, conflict, numa.get(node) if node is not None else None, settings
        )
        for node, bandwidth, conflict in zip(*(c.to_pylist() for c in nodes.columns), strict=True)
    }


def measured_node_scores(
    store: Store,
    since: datetime | None,
    until: datetime | None,
    settings: InterferenceSettings,
) -> dict[str | None, InterferenceScore]:
    """:func:`node_scores` of the store's ``gpu_samples`` in ``[since, until)`` with each
    node's NUMA miss ratio measured over the same window (:mod:`.numa`), aggregated in the
    store: what the extender's slow signals and the exporter's interference gauge serve."""
    numa = numa_miss_ratios(numa_sample_rows(store, since, until))
    return node_scores(gpu_sample_rows(store, since, until), settings, numa_miss_ratio=numa)


def gpu_sample_rows(
    store: Store,
    since: datetime | None = None,
    until: datetime | None = None,
    *,
    node: str | None = None,
) -> StoreRows:
    """The :data:`SAMPLE_COLUMNS` of ``gpu_samples`` in ``[since, until)``, optionally one
    node, read where they lie: the analyses above aggregate them inside the store."""
    return window(store, "gpu_samples", SAMPLE_COLUMNS, since, until, node=node)


def load_gpu_samples(
    store: Store,
    since: datetime | None = None,
    until: datetime | None = None,
    *,
    node: str | None = None,
) -> pl.DataFrame:
    """:func:`gpu_sample_rows` as a polars frame (for callers that filter or count them)."""
    import polars as pl

    rows = gpu_sample_rows(store, since, until, node=node)
    return pl.DataFrame(store.query(rows.select, rows.params))
