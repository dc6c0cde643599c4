"""The cluster's allocatable capacity: what no namespace quota should ask for more than.

The sum over the nodes of the latest ``nodes`` snapshot in ``[since, until)`` of each node's
allocatable (``status.allocatable`` as the inventory stores it): GPUs (``nvidia.com/gpu``),
milli-CPU and memory bytes. A ResourceQuota above it can never be used up, so a proposal
above it is no tighter than the cluster itself (Kubernetes "Resource Quotas": a quota is a
ceiling on requests, and the scheduler never places more than the nodes hold).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sits_observe.domain.times import utc_naive
from sits_observe.store.duck import Store

_SQL = """
SELECT max(ts) AS at, count(*) AS nodes, sum(gpu_allocatable) AS gpus,
       sum(cpu_allocatable_milli) AS cpu_milli, sum(memory_allocatable_bytes) AS memory_bytes
FROM nodes
WHERE node IS NOT NULL
  AND ts = (SELECT max(ts) FROM node_snapshots WHERE ts >= ? AND ts < ?)
"""


@dataclass(frozen=True)
class ClusterAllocatable:
    """Allocatable totals of one inventory snapshot (None: no node reported that resource)."""

    at: datetime
    nodes: int
    gpus: int | None
    cpu_milli: int | None
    memory_bytes: int | None


def cluster_allocatable(
    store: Store, since: datetime, until: datetime
) -> ClusterAllocatable | None:
    """The totals of the latest ``nodes`` snapshot in ``[since, until)`` (None without one)."""
    row = store.query(_SQL, [utc_naive(since), utc_naive(until)]).to_pylist()[0]
    if row["at"] is None:
        return None
    return ClusterAllocatable(
        at=row["at"],
        nodes=int(row["nodes"]),
        gpus=None if row["gpus"] is None else int(row["gpus"]),
        cpu_milli=None if row["cpu_milli"] is None else int(row["cpu_milli"]),
        memory_bytes=None if row["memory_bytes"] is None else int(row["memory_bytes"]),
    )
