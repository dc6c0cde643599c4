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
  :mod:`sits_observe.analytics.numa` (delta ``numa_miss`` / delta (``numa_hit`` +
  ``numa_miss``)), otherwise it is reported missing.

A missing input contributes 0 to the score and is named in ``missing_inputs``; a
recommendation made on partial data says so. Sync delays are an input series per node (time
order), passed in by the caller (measured: the ``sync_delays`` table,
:func:`sits_observe.analytics.numa.sync_delays_by_node`); without them the fallback cannot fire.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

import polars as pl

from sits_observe.analytics.settings import InterferenceSettings, find_link_capacity
from sits_observe.domain.times import utc_naive
from sits_observe.store.duck import Store

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


def _nvlink_capacity(samples: pl.DataFrame, settings: InterferenceSettings) -> dict[str, float]:
    """Bidirectional NVLink bytes/s of every known product name in ``samples``."""
    capacity = {}
    for name in samples.get_column("model_name").drop_nulls().unique().to_list():
        link = find_link_capacity(settings.links, name)
        if link is not None:
            capacity[name] = link.nvlink_bytes_per_s
    return capacity


def _device_rows(samples: pl.DataFrame, settings: InterferenceSettings) -> pl.DataFrame:
    """One row per (GPU, ts): device counters, how many pods share it, NVLink utilisation and
    the NVLink conflict of that sample.

    A GPU shared by several pods appears once per pod with the same device values, so the
    per-(GPU, ts) aggregate takes the maximum (the one value, NULLs ignored).
    """
    tx, rx = pl.col("nvlink_tx_bytes_per_s"), pl.col("nvlink_rx_bytes_per_s")
    cap = pl.col("model_name").replace_strict(
        _nvlink_capacity(samples, settings), default=None, return_dtype=pl.Float64
    )
    raw = (
        samples.filter(pl.col("gpu_uuid").is_not_null())
        .with_columns(nvlink_capacity=cap)
        .with_columns(
            nvlink_util=pl.when(pl.col("nvlink_capacity") == 0)
            .then(0.0)
            .when((tx.is_not_null() | rx.is_not_null()) & pl.col("nvlink_capacity").is_not_null())
            .then(
                ((tx.fill_null(0.0) + rx.fill_null(0.0)) / pl.col("nvlink_capacity")).clip(0.0, 1.0)
            )
            .otherwise(None)
        )
    )
    rows = raw.group_by("gpu_uuid", "ts").agg(
        pl.col("node").max(),
        pl.col("model_name").max(),
        pl.col("dram_active_ratio").max(),
        pl.col("mem_copy_util_ratio").max(),
        pl.col("nvlink_capacity").max(),
        pl.col("nvlink_util").max(),
        pl.col("pod").drop_nulls().n_unique().alias("n_pods"),
    )
    if settings.nvlink_conflict_scope == "gpu":
        contended = pl.col("n_pods") >= 2
    else:
        movers = (
            raw.filter(pl.col("nvlink_util") > 0)
            .group_by("node", "ts")
            .agg(pl.col("pod").drop_nulls().n_unique().alias("node_movers"))
        )
        rows = rows.join(movers, on=["node", "ts"], how="left", nulls_equal=True)
        contended = pl.col("node_movers").fill_null(0) >= 2
    return rows.with_columns(
        nvlink_conflict=pl.when(pl.col("nvlink_util").is_null())
        .then(None)
        .when(contended)
        .then(pl.col("nvlink_util"))
        .otherwise(0.0)
    )


def _per_gpu(samples: pl.DataFrame, settings: InterferenceSettings) -> pl.DataFrame:
    """One row per GPU: its window means of the device counters and NVLink conflict."""
    return (
        _device_rows(samples, settings)
        .group_by("gpu_uuid")
        .agg(
            pl.col("node").drop_nulls().first(),
            pl.col("model_name").drop_nulls().first(),
            pl.len().alias("samples"),
            pl.col("dram_active_ratio").mean().alias("dram"),
            pl.col("mem_copy_util_ratio").mean().alias("copy"),
            pl.col("nvlink_capacity").first(),
            pl.col("nvlink_conflict").mean().alias("conflict"),
            pl.col("ts").min().alias("first_ts"),
            pl.col("ts").max().alias("last_ts"),
        )
    )


def _bandwidth(dram: float | None, copy: float | None) -> tuple[float | None, str | None]:
    """A GPU's bandwidth input and its source: DRAM activity, else copy utilisation."""
    if dram is not None:
        return dram, "dram_active_ratio"
    if copy is not None:
        return copy, "mem_copy_util_ratio"
    return None, None


def interference_report(
    samples: pl.DataFrame,
    settings: InterferenceSettings,
    *,
    numa_miss_ratio: Mapping[str, float] | None = None,
    sync_delays_s: Mapping[str, Sequence[float]] | None = None,
) -> InterferenceReport:
    """Score every GPU and node in ``samples`` (``gpu_samples`` rows, :data:`SAMPLE_COLUMNS`).

    ``numa_miss_ratio`` and ``sync_delays_s`` are per node name; absent nodes have no value.
    An empty frame gives an empty report.
    """
    numa = dict(numa_miss_ratio or {})
    delays = dict(sync_delays_s or {})
    if samples.height == 0:
        return InterferenceReport((), ())
    pods = samples.group_by("gpu_uuid").agg(pl.col("pod").drop_nulls().unique().sort())
    per_gpu = (
        _per_gpu(samples, settings)
        .join(pods, on="gpu_uuid", how="left")
        .sort("node", "gpu_uuid", nulls_last=True)
    )
    gpus: list[GpuInterference] = []
    for r in per_gpu.iter_rows(named=True):
        bandwidth, source = _bandwidth(r["dram"], r["copy"])
        score = interference_score(bandwidth, r["conflict"], numa.get(r["node"]), settings)
        gpus.append(
            GpuInterference(
                node=r["node"],
                gpu_uuid=r["gpu_uuid"],
                model_name=r["model_name"],
                samples=int(r["samples"]),
                pods=tuple(r["pod"] or ()),
                bandwidth_source=source,
                nvlink_capacity_bytes_per_s=r["nvlink_capacity"],
                score=score,
                first_ts=r["first_ts"],
                last_ts=r["last_ts"],
            )
        )
    return InterferenceReport(tuple(_node_rows(gpus, numa, delays, settings)), tuple(gpus))


def node_scores(
    samples: pl.DataFrame,
    settings: InterferenceSettings,
    *,
    numa_miss_ratio: Mapping[str, float] | None = None,
) -> dict[str | None, InterferenceScore]:
    """The score of every node in ``samples``: ``interference_report(...).nodes``' scores,
    without the per-GPU results (pods, spans, recommendations) a caller that wants only the
    nodes' scores would throw away."""
    numa = dict(numa_miss_ratio or {})
    if samples.height == 0:
        return {}
    per_node = (
        _per_gpu(samples, settings)
        .sort("node", "gpu_uuid", nulls_last=True)
        .group_by("node", maintain_order=True)
        .agg("dram", "copy", "conflict")
    )
    out: dict[str | None, InterferenceScore] = {}
    for node, drams, copies, conflicts in per_node.iter_rows():
        # The same arithmetic, in the same GPU order, as interference_score then _node_rows.
        bandwidths = (_bandwidth(d, c)[0] for d, c in zip(drams, copies, strict=True))
        out[node] = interference_score(
            _mean_present([None if b is None else _clip01(b) for b in bandwidths]),
            _mean_present([None if c is None else _clip01(c) for c in conflicts]),
            numa.get(node) if node is not None else None,
            settings,
        )
    return out


def _mean_present(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


def _node_rows(
    gpus: list[GpuInterference],
    numa: Mapping[str, float],
    delays: Mapping[str, Sequence[float]],
    settings: InterferenceSettings,
) -> list[NodeInterference]:
    by_node: dict[str | None, list[GpuInterference]] = {}
    for gpu in gpus:
        by_node.setdefault(gpu.node, []).append(gpu)
    nodes = []
    for node, members in by_node.items():
        score = interference_score(
            _mean_present([g.score.bandwidth_util_ratio for g in members]),
            _mean_present([g.score.nvlink_conflict_ratio for g in members]),
            numa.get(node) if node is not None else None,
            settings,
        )
        hottest = max(members, key=lambda g: g.score.score)
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
    return nodes


def load_gpu_samples(
    store: Store,
    since: datetime | None = None,
    until: datetime | None = None,
    *,
    node: str | None = None,
) -> pl.DataFrame:
    """The :data:`SAMPLE_COLUMNS` of ``gpu_samples`` in ``[since, until)``, optionally one node."""
    cols = ", ".join(SAMPLE_COLUMNS)
    sql = (
        f"SELECT {cols} FROM gpu_samples WHERE (?::TIMESTAMP IS NULL OR ts >= ?) "
        "AND (?::TIMESTAMP IS NULL OR ts < ?) AND (?::VARCHAR IS NULL OR node = ?)"
    )
    lo = utc_naive(since) if since is not None else None
    hi = utc_naive(until) if until is not None else None
    return pl.DataFrame(store.query(sql, [lo, lo, hi, hi, node, node]))
