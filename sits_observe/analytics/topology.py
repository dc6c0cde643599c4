"""A node's measured GPU topology, in the terms of the extender's distance term.

SPEC "Topology and interference": x 1 / (1 + distance) with NVLink 0.1, same PCIe switch 0.4,
cross-NUMA 1.0. The extender needs two facts per node (docs/extender.md): whether its GPUs
talk over NVLink, and how many GPUs one NUMA node holds (k GPUs within that count sit on one
side of the inter-socket link). Both come from the latest topology read of each node
(``gpu_topology`` / ``gpu_links``, the ``topology`` collector):

- ``nvlink``: every ordered pair of the node's GPUs has path ``nvlink`` (a partially linked
  box, e.g. NVLink bridges on pairs only, counts as PCIe: the extender cannot tell which GPUs
  the device plugin will hand out, so it assumes the worse);
- ``gpus_per_numa``: the largest number of the node's GPUs on one NUMA node; None when no GPU
  reported a NUMA node.

A node with one GPU and no pairs has ``nvlink`` None (nothing to link).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import polars as pl

from sits_observe.domain.times import utc_naive
from sits_observe.store.duck import Store


@dataclass(frozen=True)
class NodeTopology:
    """What the latest topology read says about one node's GPUs."""

    gpus: int
    nvlink: bool | None
    gpus_per_numa: int | None


_LATEST = "ts = (SELECT max(ts) FROM {table} AS l WHERE l.node = t.node AND l.ts >= ?)"


def load_node_topology(store: Store, since: datetime | None = None) -> dict[str, NodeTopology]:
    """Per node, its latest ``gpu_topology`` / ``gpu_links`` read at or after ``since``."""
    lo = utc_naive(since) if since is not None else datetime.min
    gpus = pl.DataFrame(
        store.query(
            "SELECT node, gpu_uuid, numa_node FROM gpu_topology AS t WHERE "
            + _LATEST.format(table="gpu_topology"),
            [lo],
        ),
        schema={"node": pl.String(), "gpu_uuid": pl.String(), "numa_node": pl.Int16()},
    )
    links = pl.DataFrame(
        store.query(
            "SELECT node, path FROM gpu_links AS t WHERE " + _LATEST.format(table="gpu_links"),
            [lo],
        ),
        schema={"node": pl.String(), "path": pl.String()},
    )
    return node_topology(gpus, links)


def node_topology(gpus: pl.DataFrame, links: pl.DataFrame) -> dict[str, NodeTopology]:
    """:class:`NodeTopology` per node from one read's GPU rows and pair rows."""
    nvlinked = {
        r["node"]: r["all_nvlink"]
        for r in links.filter(pl.col("node").is_not_null())
        .group_by("node")
        .agg(all_nvlink=(pl.col("path") == "nvlink").fill_null(False).all())
        .iter_rows(named=True)
    }
    per_numa = (
        gpus.filter(pl.col("numa_node").is_not_null())
        .group_by("node", "numa_node")
        .len()
        .group_by("node")
        .agg(pl.col("len").max().alias("per_numa"))
    )
    most = {r["node"]: int(r["per_numa"]) for r in per_numa.iter_rows(named=True)}
    counts = gpus.filter(pl.col("node").is_not_null()).group_by("node").agg(pl.len())
    return {
        r["node"]: NodeTopology(int(r["len"]), nvlinked.get(r["node"]), most.get(r["node"]))
        for r in counts.iter_rows(named=True)
    }
