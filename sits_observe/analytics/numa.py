"""Measured NUMA and sync-delay inputs of the interference score, and container placement.

- Node NUMA miss ratio (SPEC "Topology and interference", the score's 0.25 term): over a
  window, sum of the increases of ``numa_miss`` / sum of the increases of ``numa_hit`` +
  ``numa_miss``, over every NUMA node of the machine and every pair of consecutive reads of
  ``numa_samples``. Counters only grow, so a pair in which either went down (a reboot) is left
  out. ``numa_miss`` counts pages allocated on a node although the process wanted another
  (kernel numastat.rst); their share of all intended allocations is the miss ratio. A node
  with fewer than two reads, or no allocation between them, has no value (missing, not 0).
- Sync delays per node, in time order, from ``sync_delays`` (what the SPEC's "three
  consecutive sync delays above 80 ms" counts).
- Container placement from ``container_numa_samples``: per container at its latest read, the
  bytes on each NUMA node and the share on the fullest one (1.0 = all local to one node); per
  node the mean of that share over its containers (evidence for ``single-numa-node``: a low
  mean says the containers' memory is spread over NUMA nodes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import polars as pl

from sits_observe.domain.times import utc_naive
from sits_observe.store.duck import Store

_WINDOW_SQL = (
    "(?::TIMESTAMP IS NULL OR ts >= ?) AND (?::TIMESTAMP IS NULL OR ts < ?) "
    "AND (?::VARCHAR IS NULL OR node = ?)"
)


def _bounds(since: datetime | None, until: datetime | None, node: str | None) -> list[object]:
    lo = utc_naive(since) if since is not None else None
    hi = utc_naive(until) if until is not None else None
    return [lo, lo, hi, hi, node, node]


def _load(
    store: Store,
    table: str,
    schema: dict[str, pl.DataType],
    window: tuple[datetime | None, datetime | None],
    node: str | None,
) -> pl.DataFrame:
    """The ``schema`` columns of ``table`` in ``[since, until)``, optionally one node."""
    sql = f"SELECT {', '.join(schema)} FROM {table} WHERE {_WINDOW_SQL}"
    return pl.DataFrame(store.query(sql, _bounds(*window, node)), schema=schema)


def load_numa_samples(
    store: Store,
    since: datetime | None = None,
    until: datetime | None = None,
    *,
    node: str | None = None,
) -> pl.DataFrame:
    """``numa_samples`` counters in ``[since, until)``, optionally one node."""
    schema = {
        "ts": pl.Datetime("us"),
        "node": pl.String(),
        "numa_node": pl.Int16(),
        "numa_hit_pages_total": pl.Int64(),
        "numa_miss_pages_total": pl.Int64(),
    }
    return _load(store, "numa_samples", schema, (since, until), node)


def load_sync_delays(
    store: Store,
    since: datetime | None = None,
    until: datetime | None = None,
    *,
    node: str | None = None,
) -> pl.DataFrame:
    """``sync_delays`` rows (ts, node, delay_s) in ``[since, until)``, optionally one node."""
    schema = {"ts": pl.Datetime("us"), "node": pl.String(), "delay_s": pl.Float64()}
    return _load(store, "sync_delays", schema, (since, until), node)


def numa_miss_ratios(samples: pl.DataFrame) -> dict[str, float]:
    """``{node: NUMA miss ratio 0-1}`` from ``numa_samples`` counters (module docstring)."""
    if samples.height == 0:
        return {}
    steps = (
        samples.filter(pl.col("node").is_not_null())
        .sort("node", "numa_node", "ts")
        .with_columns(
            d_hit=pl.col("numa_hit_pages_total").diff().over("node", "numa_node"),
            d_miss=pl.col("numa_miss_pages_total").diff().over("node", "numa_node"),
        )
        .filter((pl.col("d_hit") >= 0) & (pl.col("d_miss") >= 0))
        .group_by("node")
        .agg(pl.col("d_hit").sum(), pl.col("d_miss").sum())
        .filter(pl.col("d_hit") + pl.col("d_miss") > 0)
    )
    return {
        r["node"]: r["d_miss"] / (r["d_hit"] + r["d_miss"]) for r in steps.iter_rows(named=True)
    }


def sync_delays_by_node(delays: pl.DataFrame) -> dict[str, list[float]]:
    """``{node: delays in seconds, time order}`` from ``sync_delays`` rows."""
    out: dict[str, list[float]] = {}
    for node, delay in (
        delays.filter(pl.col("node").is_not_null()).sort("ts").select("node", "delay_s").iter_rows()
    ):
        out.setdefault(node, []).append(delay)
    return out


@dataclass(frozen=True)
class ContainerPlacement:
    """Where one container's memory lies at its latest read."""

    node: str
    pod_uid: str
    container_id: str
    bytes_by_numa_node: dict[int, int]
    local_share_ratio: float | None  # share on the fullest NUMA node; None = no memory

    @property
    def numa_nodes_used(self) -> int:
        """NUMA nodes holding any of its memory."""
        return sum(1 for b in self.bytes_by_numa_node.values() if b > 0)


def container_placement(samples: pl.DataFrame) -> list[ContainerPlacement]:
    """Per container, its latest ``container_numa_samples`` read (anon + file bytes)."""
    if samples.height == 0:
        return []
    latest = samples.filter(
        pl.col("ts") == pl.col("ts").max().over("node", "pod_uid", "container_id")
    ).with_columns(total=pl.col("anon_bytes").fill_null(0) + pl.col("file_bytes").fill_null(0))
    out = []
    for (node, pod_uid, container_id), group in latest.sort("numa_node").group_by(
        "node", "pod_uid", "container_id", maintain_order=True
    ):
        per_node = dict(zip(group["numa_node"].to_list(), group["total"].to_list(), strict=True))
        total = sum(per_node.values())
        out.append(
            ContainerPlacement(
                str(node),
                str(pod_uid),
                str(container_id),
                per_node,
                max(per_node.values()) / total if total > 0 else None,
            )
        )
    return sorted(out, key=lambda p: (p.node, p.pod_uid, p.container_id))


@dataclass(frozen=True)
class MeasuredInputs:
    """The interference inputs the store holds for a window, per node, and the evidence beside
    them: the mean share of its containers' memory on their fullest NUMA node."""

    numa_miss_ratio: dict[str, float]
    sync_delays_s: dict[str, list[float]]
    local_share_ratio: dict[str, float] = field(default_factory=dict)


def measured_inputs(
    store: Store,
    since: datetime | None = None,
    until: datetime | None = None,
    *,
    node: str | None = None,
) -> MeasuredInputs:
    """NUMA miss ratios and sync delays of ``[since, until)`` (nodes without them absent)."""
    placements = container_placement(load_container_numa(store, since, until, node=node))
    return MeasuredInputs(
        numa_miss_ratios(load_numa_samples(store, since, until, node=node)),
        sync_delays_by_node(load_sync_delays(store, since, until, node=node)),
        mean_local_share(placements),
    )


def load_container_numa(
    store: Store,
    since: datetime | None = None,
    until: datetime | None = None,
    *,
    node: str | None = None,
) -> pl.DataFrame:
    """``container_numa_samples`` rows in ``[since, until)``, optionally one node."""
    schema = {
        "ts": pl.Datetime("us"),
        "node": pl.String(),
        "pod_uid": pl.String(),
        "container_id": pl.String(),
        "numa_node": pl.Int16(),
        "anon_bytes": pl.Int64(),
        "file_bytes": pl.Int64(),
    }
    return _load(store, "container_numa_samples", schema, (since, until), node)


def mean_local_share(placements: list[ContainerPlacement]) -> dict[str, float]:
    """``{node: mean of its containers' local_share_ratio}`` (containers with memory only)."""
    shares: dict[str, list[float]] = {}
    for p in placements:
        if p.local_share_ratio is not None:
            shares.setdefault(p.node, []).append(p.local_share_ratio)
    return {node: sum(v) / len(v) for node, v in shares.items()}
