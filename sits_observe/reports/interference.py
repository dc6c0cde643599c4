"""Report ``interference``: the interference score per node and GPU, and the TopologyManager
policy each node should get.

score = 0.4 x GPU-bandwidth utilisation + 0.35 x NVLink conflict + 0.25 x NUMA miss ratio,
each 0-1, over the ``gpu_samples`` of the window; above 0.65 -> ``single-numa-node``, three
consecutive sync delays above 80 ms -> ``best-effort`` (docs/analytics/workloads.md). The NUMA
miss ratio and the sync delays are measured from the store's ``numa_samples`` and
``sync_delays`` (the ``numa`` and ``sync_delay`` collectors, docs/collectors/topology.md);
``numa_miss`` and ``sync_delays`` give a node's value by hand, and win over the measured one.

The GPU samples come from the store or, with ``--promql-url``, from a Prometheus-compatible
store (docs/scaling.md); both give the same rows, so both give the same answer. A PromQL store
holds no NUMA counters or sync delays, so there only the hand-given values count.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import polars as pl
from pydantic import Field, field_validator

from sits_observe.analytics.topology.interference import (
    BANDWIDTH,
    NUMA,
    NVLINK,
    SAMPLE_COLUMNS,
    GpuInterference,
    InterferenceReport,
    InterferenceScore,
    NodeInterference,
    gpu_sample_rows,
    interference_report,
    measured_node_scores,
)
from sits_observe.analytics.topology.numa import (
    MeasuredInputs,
    measured_inputs,
)
from sits_observe.analytics.topology.settings import InterferenceSettings
from sits_observe.domain.units import Unit
from sits_observe.errors import NoDataError
from sits_observe.reports.inventory.names import gpu_labels, gpu_labels_of
from sits_observe.reports.result import Report, col, table_of
from sits_observe.reports.spec import PromQLReader, ReportSpec, require_rows
from sits_observe.reports.window import Window
from sits_observe.store import Store
from sits_observe.store.promql.source import PromQLGpuSource
from sits_observe.store.rows import Rows

FILLED_BY = "`sits-observe ingest dcgm`, the node agent or `sits-observe demo`"


class InterferenceLevel(StrEnum):
    """Which table is the main one (the one ``-o csv`` prints)."""

    node = "node"
    gpu = "gpu"


def _key_values(items: Sequence[str], what: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"{item!r}: use {what}")
        out[key] = value
    return out


def _number(text: str, item: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"{item!r}: {text!r} is not a number") from None


class InterferenceQuery(InterferenceSettings):
    """Settings of the ``interference`` report."""

    node: str | None = Field(None, description="one node only")
    numa_miss: tuple[str, ...] = Field(
        (),
        description="NODE=RATIO: a node's NUMA miss ratio (0-1), instead of the measured one",
    )
    sync_delays: tuple[str, ...] = Field(
        (),
        description="NODE=MS,MS,...: a node's sync delays in time order, milliseconds, "
        "instead of the measured ones",
    )
    level: InterferenceLevel = Field(
        InterferenceLevel.node,
        description="main table (the one csv prints): one row per node or per GPU",
    )

    @field_validator("numa_miss")
    @classmethod
    def _check_numa(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for node, ratio in _key_values(value, "NODE=RATIO").items():
            if not 0 <= _number(ratio, f"{node}={ratio}") <= 1:
                raise ValueError(f"{node}={ratio}: a NUMA miss ratio is 0-1")
        return value

    @field_validator("sync_delays")
    @classmethod
    def _check_delays(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for node, delays in _key_values(value, "NODE=MS,MS,...").items():
            for ms in delays.split(","):
                if ms.strip():
                    _number(ms, f"{node}={delays}")
        return value

    def numa_miss_ratio(self) -> dict[str, float]:
        """``{node: NUMA miss ratio}`` from ``numa_miss``."""
        return {k: float(v) for k, v in _key_values(self.numa_miss, "NODE=RATIO").items()}

    def sync_delays_s(self) -> dict[str, list[float]]:
        """``{node: sync delays in seconds, time order}`` from ``sync_delays``."""
        return {
            node: [float(ms) / 1000 for ms in text.split(",") if ms.strip()]
            for node, text in _key_values(self.sync_delays, "NODE=MS,MS,...").items()
        }


_INPUTS = (
    col("score", "score", Unit.score),
    col("bandwidth_util_ratio", "bandwidth", Unit.ratio),
    col("nvlink_conflict_ratio", "NVLink", Unit.ratio),
    col("numa_miss_ratio", "NUMA miss", Unit.ratio),
)
_NODE = (
    col("node", "node"),
    col("gpus", "GPUs", Unit.integer),
    *_INPUTS,
    col("advice", "policy"),
    col("partial_data", "partial", Unit.flag),
    col("max_gpu_score", "max GPU", Unit.score, wide=True),
    col("hottest_gpu", "hottest GPU", wide=True),
    col("hottest_gpu_uuid", "hottest UUID", wide=True),
    col("sync_delays_seen", "syncs", Unit.integer, wide=True),
    col("numa_miss_from", "NUMA miss from", wide=True),
    col("numa_local_share_ratio", "NUMA-local memory", Unit.ratio, wide=True),
    col("sync_delays_from", "syncs from", wide=True),
    col("missing_inputs", "missing", wide=True),
    col("reason", "reason", wide=True),
)
_GPU = (
    col("gpu", "GPU"),
    col("pods", "pods"),
    *_INPUTS,
    col("gpu_uuid", "GPU UUID", wide=True),
    col("samples", "samples", Unit.integer, wide=True),
    col("node", "node", wide=True),
    col("model_name", "model", wide=True),
    col("bandwidth_source", "bandwidth from", wide=True),
    col("nvlink_capacity_bytes_per_s", "NVLink max", Unit.bytes_per_s, wide=True),
    col("missing_inputs", "missing", wide=True),
    col("first_ts", "first", Unit.time, wide=True),
    col("last_ts", "last", Unit.time, wide=True),
)


def build(store: Store, window: Window, query: InterferenceQuery) -> Report:
    """The ``interference`` report over ``window`` of the store's ``gpu_samples``."""
    require_rows(store, window, "gpu_samples", FILLED_BY)
    samples = gpu_sample_rows(store, window.since, window.until, node=query.node)
    measured = measured_inputs(store, window.since, window.until, node=query.node)
    return _report(window, samples, gpu_labels(store, window), query, measured)


def node_interference(
    store: Store, window: Window, settings: InterferenceSettings
) -> dict[str | None, InterferenceScore]:
    """The score of every node with GPU samples in ``window``, with its measured NUMA miss
    ratio: the ``nodes`` table's scores of the report for the same settings (no NUMA ratio
    or sync delay given), without the per-GPU rows; the exporter's
    ``sits_interference_score_ratio``."""
    return measured_node_scores(store, window.since, window.until, settings)


def build_promql(reader: PromQLReader, window: Window, query: InterferenceQuery) -> Report:
    """The ``interference`` report over ``window`` of a PromQL store's dcgm-exporter series."""
    assert window.since is not None  # run_promql_report requires --since
    table = PromQLGpuSource(reader.client, matchers=reader.matchers).gpu_samples(
        window.since, window.until, step_s=reader.step_s, columns=list(SAMPLE_COLUMNS[1:])
    )
    if table.num_rows == 0:
        raise NoDataError(
            f"no dcgm-exporter series in {window.describe()} at the PromQL store; check "
            "--promql-url, --promql-matchers and --since"
        )
    frame = pl.DataFrame(table.select(list(SAMPLE_COLUMNS)))
    if query.node is not None:
        frame = frame.filter(pl.col("node") == query.node)
    return _report(window, frame, gpu_labels_of(table), query, MeasuredInputs({}, {}))


def _report(
    window: Window,
    samples: Rows,
    labels: Mapping[str, str],
    query: InterferenceQuery,
    measured: MeasuredInputs,
) -> Report:
    given_numa, given_delays = query.numa_miss_ratio(), query.sync_delays_s()
    sources = _Sources(
        numa={n: "given" for n in given_numa}
        | {n: "measured" for n in measured.numa_miss_ratio.keys() - given_numa.keys()},
        delays={n: "given" for n in given_delays}
        | {n: "measured" for n in measured.sync_delays_s.keys() - given_delays.keys()},
        local_share=measured.local_share_ratio,
    )
    result = interference_report(
        samples,
        query,
        numa_miss_ratio={**measured.numa_miss_ratio, **given_numa},
        sync_delays_s={**measured.sync_delays_s, **given_delays},
    )
    if not result.gpus:
        raise NoDataError(
            f"no gpu_samples rows of node {query.node} in the window {window.describe()}"
        )
    nodes = table_of(
        "nodes",
        "interference per node",
        [_node_row(n, labels, sources) for n in result.nodes],
        _NODE,
    )
    gpus = table_of(
        "gpus", "interference per GPU", [_gpu_row(g, labels) for g in result.gpus], _GPU
    )
    main, other = (nodes, gpus) if query.level is InterferenceLevel.node else (gpus, nodes)
    facts = {
        "threshold_ratio": query.threshold_ratio,
        "weights": {
            "bandwidth": query.bandwidth_weight,
            "nvlink": query.nvlink_weight,
            "numa": query.numa_weight,
        },
        "nvlink_conflict_scope": query.nvlink_conflict_scope.value,
        "node": query.node,
    }
    notes = tuple(_notes(result, sources))
    return Report("interference", window, main, (other,), notes, facts)


@dataclass(frozen=True)
class _Sources:
    """Per node, where its NUMA miss ratio and sync delays came from (measured or given), and
    the measured mean share of its containers' memory on their fullest NUMA node."""

    numa: dict[str, str]
    delays: dict[str, str]
    local_share: dict[str, float]


def _score_fields(score: InterferenceScore) -> dict[str, Any]:
    return {
        "score": score.score,
        "bandwidth_util_ratio": score.bandwidth_util_ratio,
        "nvlink_conflict_ratio": score.nvlink_conflict_ratio,
        "numa_miss_ratio": score.numa_miss_ratio,
        "missing_inputs": list(score.missing_inputs),
    }


def _node_row(n: NodeInterference, labels: Mapping[str, str], sources: _Sources) -> dict[str, Any]:
    key = n.node or ""
    return {
        "node": n.node,
        "gpus": n.gpus,
        **_score_fields(n.score),
        "max_gpu_score": n.max_gpu_score,
        "hottest_gpu": labels.get(n.hottest_gpu_uuid, n.hottest_gpu_uuid),
        "hottest_gpu_uuid": n.hottest_gpu_uuid,
        "sync_delays_seen": n.sync_delays_seen,
        "numa_miss_from": sources.numa.get(key),
        "numa_local_share_ratio": sources.local_share.get(key),
        "sync_delays_from": sources.delays.get(key),
        "recommendation": n.recommendation.policy,
        "advice": n.recommendation.policy or "no change",
        "partial_data": n.recommendation.partial_data,
        "reason": n.recommendation.reason,
    }


def _gpu_row(g: GpuInterference, labels: Mapping[str, str]) -> dict[str, Any]:
    return {
        "gpu": labels.get(g.gpu_uuid, g.gpu_uuid),
        "gpu_uuid": g.gpu_uuid,
        "node": g.node,
        "model_name": g.model_name,
        "samples": g.samples,
        "pods": list(g.pods),
        "bandwidth_source": g.bandwidth_source,
        "nvlink_capacity_bytes_per_s": g.nvlink_capacity_bytes_per_s,
        **_score_fields(g.score),
        "first_ts": g.first_ts,
        "last_ts": g.last_ts,
    }


def _notes(result: InterferenceReport, sources: _Sources) -> list[str]:
    notes: list[str] = []
    for name in (BANDWIDTH, NVLINK, NUMA):
        nodes = sum(name in n.score.missing_inputs for n in result.nodes)
        if nodes:
            notes.append(
                f"{name} not measured on {nodes} of {len(result.nodes)} node(s): counted as 0, "
                "so their scores are lower bounds (the reason column, -o wide)"
            )
    if not sources.delays:
        notes.append(
            "no sync delays measured (sync_delays, the sync_delay collector) or given "
            "(--sync-delays): the best-effort fallback cannot fire"
        )
    return notes


SPEC = ReportSpec(
    name="interference",
    summary="Interference score per node and GPU, and the TopologyManager policy to use.",
    settings=InterferenceQuery,
    reads=("gpu_samples",),
    build=build,
    promql=build_promql,
)
