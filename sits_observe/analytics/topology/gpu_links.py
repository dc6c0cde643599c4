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

from sits_observe.domain.times import utc_naive
from sits_observe.store.duck import Store
from sits_observe.store.rows import Rows, StoreRows, query_rows


@dataclass(frozen=True)
class NodeTopology:
    """What the latest topology read says about one node's GPUs."""

    gpus: int
    nvlink: bool | None
    gpus_per_numa: int | None


_LATEST = "ts = (SELECT max(ts) FROM {table} AS l WHERE l.node = t.node AND l.ts >= ?)"

#: Per node of the relations ``gpus`` (node, gpu_uuid, numa_node) and ``links`` (node, path):
#: its GPUs, whether every pair is NVLink (NULL: no pairs) and the most GPUs on one NUMA node.
_TOPOLOGY_SQL = """
WITH counts AS (
    SELECT node, count(*) AS gpus FROM gpus WHERE node IS NOT NULL GROUP BY node
),
linked AS (
    SELECT node, bool_and(coalesce(path = 'nvlink', false)) AS nvlink
    FROM links WHERE node IS NOT NULL GROUP BY node
),
per_numa AS (
    SELECT node, max(n) AS per_numa FROM (
        SELECT node, numa_node, count(*) AS n FROM gpus
        WHERE numa_node IS NOT NULL GROUP BY node, numa_node
    ) GROUP BY node
)
SELECT c.node, c.gpus, l.nvlink, p.per_numa
FROM counts AS c LEFT JOIN linked AS l USING (node) LEFT JOIN per_numa AS p USING (node)
"""


def load_node_topology(store: Store, since: datetime | None = None) -> dict[str, NodeTopology]:
    """Per node, its latest ``gpu_topology`` / ``gpu_links`` read at or after ``since``."""
    lo = utc_naive(since) if since is not None else datetime.min
    gpus = StoreRows(
        store,
        "SELECT node, gpu_uuid, numa_node FROM gpu_topology AS t WHERE "
        + _LATEST.format(table="gpu_topology"),
        [lo],
    )
    links = StoreRows(
        store,
        "SELECT node, path FROM gpu_links AS t WHERE " + _LATEST.format(table="gpu_links"),
        [lo],
    )
    return node_topology(gpus, links)


def node_topology(gpus: Rows, links: Rows) -> dict[str, NodeTopology]:
    """:class:`NodeTopology` per node from one read's GPU rows and pair rows."""
    rows = query_rows(_TOPOLOGY_SQL, {"gpus": gpus, "links": links}).to_pylist()
    return {
        r["node"]: NodeTopology(
            int(r["gpus"]), r["nvlink"], None if r["per_numa"] is None else int(r["per_numa"])
        )
        for r in rows
    }
