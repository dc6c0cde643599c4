"""The extender view's slow signals: node interference and measured GPU memory needs.

Both look at minutes of ``gpu_samples`` (``slow_window_s``), so they are recomputed every
``slow_refresh_s`` rather than with every view
(:mod:`sits_observe.control.extender.clusterview.view`):

- interference per node, :mod:`sits_observe.analytics.topology.interference` (SPEC: 0.4 bandwidth +
  0.35 NVLink conflict + 0.25 NUMA miss), aggregated by DuckDB where the samples lie;
- each workload's measured GPU memory need: the largest per-GPU ``fb_used_bytes`` of its
  pods in the window (the latest ``pods`` snapshot names the pods' workloads);
- the measured inputs behind them: each node's NUMA miss ratio (``numa_samples``,
  :mod:`sits_observe.analytics.topology.numa`) enters its interference score, and its latest GPU
  topology read in the window (:mod:`sits_observe.analytics.topology.gpu_links`) the distance term.

:func:`slow_signals` reads a DuckDB store; a view read from PromQL computes the same
interference with :func:`node_interference` over dcgm-exporter series, without NUMA miss
ratios or topology (:mod:`sits_observe.control.extender.clusterview.source_promql`).

The analytics behind them are SQL (:mod:`sits_observe.store.rows`): over the store they run
inside it, so the slow signals load no polars (about 0.1 s of a cold start, docs/extender.md)
and hold the GIL only to turn a row per node into Python values. They are imported by the
functions that use them: ``serve`` imports this module (through the view) before its port is
up, and the first view build imports them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from sits_observe.analytics.topology.settings import InterferenceSettings
from sits_observe.domain.times import utc_naive
from sits_observe.store import Store
from sits_observe.store.rows import Rows

if TYPE_CHECKING:
    from sits_observe.analytics.topology.gpu_links import NodeTopology
    from sits_observe.analytics.topology.interference import InterferenceScore


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
    interference: InterferenceSettings,
) -> SlowSignals:
    """Interference per node and measured memory need per workload over ``window_s``."""
    from sits_observe.analytics.topology.gpu_links import load_node_topology
    from sits_observe.analytics.topology.interference import measured_node_scores

    since = utc_naive(now) - timedelta(seconds=window_s)
    scores = _named(measured_node_scores(store, since, None, interference))
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
    samples: Rows,
    interference: InterferenceSettings,
    numa_miss_ratio: Mapping[str, float] | None = None,
) -> dict[str, float]:
    """The interference score of every named node in ``samples``
    (:func:`~sits_observe.analytics.topology.interference.node_scores`).

    The aggregation runs in DuckDB (in the store, or in memory over a frame), which releases
    the GIL while it works: at 5,000 nodes x 8 GPUs about 90 ms, during which a thread
    waiting for the GIL got it within 10 ms (the previous polars path, computed in one call,
    held it for up to half a second and had to run a few nodes at a time).
    """
    from sits_observe.analytics.topology.interference import node_scores

    return _named(node_scores(samples, interference, numa_miss_ratio=numa_miss_ratio))


def _named(scores: Mapping[str | None, InterferenceScore]) -> dict[str, float]:
    """Each named node's score (the view looks nodes up by name)."""
    return {node: s.score for node, s in scores.items() if node is not None}
