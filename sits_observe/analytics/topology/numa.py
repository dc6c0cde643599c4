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

from sits_observe.store.duck import Store
from sits_observe.store.rows import Rows, StoreRows, query_rows, window


def numa_sample_rows(
    store: Store,
    since: datetime | None = None,
    until: datetime | None = None,
    *,
    node: str | None = None,
) -> StoreRows:
    """``numa_samples`` counters in ``[since, until)``, optionally one node."""
    columns = ("ts", "node", "numa_node", "numa_hit_pages_total", "numa_miss_pages_total")
    return window(store, "numa_samples", columns, since, until, node=node)


def sync_delay_rows(
    store: Store,
    since: datetime | None = None,
    until: datetime | None = None,
    *,
    node: str | None = None,
) -> StoreRows:
    """``sync_delays`` rows (ts, node, delay_s) in ``[since, until)``, optionally one node."""
    return window(store, "sync_delays", ("ts", "node", "delay_s"), since, until, node=node)


#: Per node, the summed increases of the hit and miss counters over consecutive reads of each
#: of its NUMA nodes; a pair in which either counter went down is left out.
_MISS_SQL = """
WITH steps AS (
    SELECT node,
        numa_hit_pages_total - lag(numa_hit_pages_total) OVER w AS d_hit,
        numa_miss_pages_total - lag(numa_miss_pages_total) OVER w AS d_miss
    FROM samples WHERE node IS NOT NULL
    WINDOW w AS (PARTITION BY node, numa_node ORDER BY ts)
)
SELECT node, sum(d_hit)::BIGINT AS d_hit, sum(d_miss)::BIGINT AS d_miss
FROM steps WHERE d_hit >= 0 AND d_miss >= 0
GROUP BY node HAVING sum(d_hit) + sum(d_miss) > 0
"""


def numa_miss_ratios(samples: Rows) -> dict[str, float]:
    """``{node: NUMA miss ratio 0-1}`` from ``numa_samples`` counters (module docstring): a
    frame, or :func:`numa_sample_rows` of a store (computed there)."""
    rows = query_rows(_MISS_SQL, {"samples": samples}).to_pylist()
    return {r["node"]: r["d_miss"] / (r["d_hit"] + r["d_miss"]) for r in rows}


def sync_delays_by_node(delays: Rows) -> dict[str, list[float]]:
    """``{node: delays in seconds, time order}`` from ``sync_delays`` rows."""
    out: dict[str, list[float]] = {}
    ordered = query_rows(
        "SELECT node, delay_s FROM delays WHERE node IS NOT NULL ORDER BY ts", {"delays": delays}
    )
    for node, delay in zip(*(c.to_pylist() for c in ordered.columns), strict=True):
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


#: Each container's latest read: one row per NUMA node, anon + file bytes.
_LATEST_PLACEMENT_SQL = """
SELECT node, pod_uid, container_id, numa_node,
    coalesce(anon_bytes, 0) + coalesce(file_bytes, 0) AS total
FROM samples
QUALIFY ts = max(ts) OVER (PARTITION BY node, pod_uid, container_id)
ORDER BY node, pod_uid, container_id, numa_node
"""


def container_placement(samples: Rows) -> list[ContainerPlacement]:
    """Per container, its latest ``container_numa_samples`` read (anon + file bytes)."""
    per_container: dict[tuple[str, str, str], dict[int, int]] = {}
    for r in query_rows(_LATEST_PLACEMENT_SQL, {"samples": samples}).to_pylist():
        key = (str(r["node"]), str(r["pod_uid"]), str(r["container_id"]))
        per_container.setdefault(key, {})[r["numa_node"]] = int(r["total"])
    out = []
    for (node, pod_uid, container_id), per_node in per_container.items():
        total = sum(per_node.values())
        out.append(
            ContainerPlacement(
                node,
                pod_uid,
                container_id,
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
    placements = container_placement(container_numa_rows(store, since, until, node=node))
    return MeasuredInputs(
        numa_miss_ratios(numa_sample_rows(store, since, until, node=node)),
        sync_delays_by_node(sync_delay_rows(store, since, until, node=node)),
        mean_local_share(placements),
    )


def container_numa_rows(
    store: Store,
    since: datetime | None = None,
    until: datetime | None = None,
    *,
    node: str | None = None,
) -> StoreRows:
    """``container_numa_samples`` rows in ``[since, until)``, optionally one node."""
    columns = ("ts", "node", "pod_uid", "container_id", "numa_node", "anon_bytes", "file_bytes")
    return window(store, "container_numa_samples", columns, since, until, node=node)


def mean_local_share(placements: list[ContainerPlacement]) -> dict[str, float]:
    """``{node: mean of its containers' local_share_ratio}`` (containers with memory only)."""
    shares: dict[str, list[float]] = {}
    for p in placements:
        if p.local_share_ratio is not None:
            shares.setdefault(p.node, []).append(p.local_share_ratio)
    return {node: sum(v) / len(v) for node, v in shares.items()}
