"""The extender view's slow signals: node interference and measured GPU memory needs.

Both look at minutes of ``gpu_samples`` (``slow_window_s``), so they are recomputed every
``slow_refresh_s`` rather than with every view (:mod:`sits_observe.control.extender_view`):

- interference per node, :mod:`sits_observe.analytics.interference` (SPEC: 0.4 bandwidth +
  0.35 NVLink conflict + 0.25 NUMA miss), computed a few nodes at a time so the rebuild
  thread yields the GIL to request handlers between chunks;
- each workload's measured GPU memory need: the largest per-GPU ``fb_used_bytes`` of its
  pods in the window (the latest ``pods`` snapshot names the pods' workloads);
- the measured inputs behind them: each node's NUMA miss ratio (``numa_samples``,
  :mod:`sits_observe.analytics.numa`) enters its interference score, and its latest GPU
  topology read in the window (:mod:`sits_observe.analytics.topology`) the distance term.

:func:`slow_signals` reads a DuckDB store; a view read from PromQL computes the same
interference with :func:`node_interference` over dcgm-exporter series, without NUMA miss
ratios or topology (:mod:`sits_observe.control.extender_source_promql`).

The analytics behind them run on polars frames and are imported by the two functions, not at
the top: ``serve`` imports this module (through the view) before its port is up, and polars
(about 0.15 s) would hold up everything else that answers after a restart; the first view
build imports them (docs/extender.md, cold start).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import numpy as np

from sits_observe.analytics.settings import InterferenceSettings
from sits_observe.domain.times import utc_naive
from sits_observe.store import Store

if TYPE_CHECKING:
    import polars as pl

    from sits_observe.analytics.topology import NodeTopology


@dataclass(frozen=True)
class SlowSignals:
    """Signals over a window, recomputed less often than the view."""

    at: datetime
    interference_ratio: Mapping[str, float]
    workload_need_bytes: Mapping[tuple[str, str], int]
    topology: Mapping[str, NodeTopology] = field(default_factory=dict)


def slow_signals(
    store: Store,
    now: datetime,
    *,
    window_s: float,
    chunk_nodes: int,
    interference: InterferenceSettings,
) -> SlowSignals:
    """Interference per node and measured memory need per workload over ``window_s``."""
    from sits_observe.analytics.interference import load_gpu_samples
    from sits_observe.analytics.numa import load_numa_samples, numa_miss_ratios
    from sits_observe.analytics.topology import load_node_topology

    since = utc_naive(now) - timedelta(seconds=window_s)
    numa = numa_miss_ratios(load_numa_samples(store, since))
    scores = node_interference(load_gpu_samples(store, since), chunk_nodes, interference, numa)
    pods_at = store.scalar("SELECT max(ts) FROM pod_snapshots")
    needs: dict[tuple[str, str], int] = {}
    if pods_at is not None:
        rows = store.query(
            "SELECT p.namespace, p.workload, max(g.fb_used_bytes) AS need FROM gpu_samples g "
            "JOIN pods p ON p.ts = ? AND p.namespace = g.namespace AND p.pod = g.pod "
            "WHERE g.ts >= ? AND g.fb_used_bytes IS NOT NULL AND g.mig_instance_id IS NULL "
            "AND p.workload IS NOT NULL GROUP BY p.namespace, p.workload",
            [pods_at, since],
        ).to_pylist()
        needs = {(str(r["namespace"]), str(r["workload"])): int(r["need"]) for r in rows}
    return SlowSignals(now, scores, needs, load_node_topology(store, since))


def node_interference(
    samples: pl.DataFrame,
    chunk_nodes: int,
    interference: InterferenceSettings,
    numa_miss_ratio: Mapping[str, float] | None = None,
) -> dict[str, float]:
    """Node interference scores, computed a few nodes at a time.

    A node's score depends only on its own GPUs' samples, so chunks by node give the same
    result as one call; :func:`~sits_observe.analytics.interference.node_scores` gives the
    interference report's node scores without its per-GPU rows (about 4x less time: the
    first view build at 1,024 nodes spent two thirds of its time on those rows). One call
    over 40,000 GPUs holds the GIL for up to half a second in places, which would stall
    extender calls on the event loop; between chunks the thread yields.
    """
    import polars as pl

    from sits_observe.analytics.interference import node_scores

    if samples.height == 0:
        return {}
    ordered = samples.filter(pl.col("node").is_not_null()).sort("node")
    nodes = ordered.get_column("node")
    starts = np.flatnonzero(np.r_[True, (nodes[1:] != nodes[:-1]).to_numpy()])
    bounds = [*starts[::chunk_nodes].tolist(), ordered.height]
    scores: dict[str, float] = {}
    for lo, hi in itertools.pairwise(bounds):
        chunk = node_scores(
            ordered.slice(lo, hi - lo), interference, numa_miss_ratio=numa_miss_ratio
        )
        scores.update({node: s.score for node, s in chunk.items() if node is not None})
        time.sleep(0)  # let a waiting request handler take the GIL
    return scores
