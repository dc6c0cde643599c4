"""What the fleet and decision-log pages show, read from a store as Arrow tables.

These are plain reads of the sample tables (latest inventory snapshot, the newest sample of
each GPU, per-node means, the newest sample per node and source, drop counts, the decision
log); every derived measure the app shows (latency quantiles, heatmap, knee, SMF, FGD, trend
clusters, simulator curves, the controller's plan) comes from the analytics and control
functions, composed in :mod:`.analyses` and :mod:`.whatif`. Times are naive UTC, ratios 0-1.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from sits_observe.control.record import recent_decisions
from sits_observe.control.settings import ControllerSettings
from sits_observe.control.store_signals import latest_data_at
from sits_observe.store import Store, utc_naive
from sits_observe.store.freshness import newest_at, newest_by_node
from sits_observe.surfaces.cli.controller import recommendations

_LATEST_NODES = """
SELECT node, gpu_allocatable AS gpus, gpu_product, ready, cpu_allocatable_milli,
       memory_allocatable_bytes, ts AS snapshot_at
FROM nodes WHERE ts = (SELECT max(ts) FROM nodes) ORDER BY node
"""

_LATEST_GPUS = """
SELECT node, gpu_uuid,
       arg_max(gpu_index, ts) AS gpu_index,
       arg_max(model_name, ts) AS model_name,
       arg_max(mig_profile, ts) AS mig_profile,
       arg_max(namespace, ts) AS namespace,
       arg_max(pod, ts) AS pod,
       arg_max(gpu_util_ratio, ts) AS gpu_util_ratio,
       arg_max(fb_used_bytes::DOUBLE / nullif(fb_total_bytes, 0), ts) AS fb_used_ratio,
       arg_max(power_w, ts) AS power_w,
       arg_max(gpu_temp_c, ts) AS gpu_temp_c,
       max(ts) AS sampled_at
FROM gpu_samples WHERE ts >= ? GROUP BY node, gpu_uuid ORDER BY node, gpu_index, gpu_uuid
"""

_NODE_UTILISATION = """
SELECT node, count(DISTINCT gpu_uuid) AS gpus_sampled,
       avg(gpu_util_ratio) AS mean_gpu_util_ratio,
       max(gpu_util_ratio) AS max_gpu_util_ratio,
       avg(fb_used_bytes::DOUBLE / nullif(fb_total_bytes, 0)) AS mean_fb_used_ratio,
       sum(power_w) / nullif(count(DISTINCT ts), 0) AS mean_power_w
FROM gpu_samples WHERE ts >= ? GROUP BY node ORDER BY node
"""

_DROPS = """
SELECT collector, reason, sum(count)::BIGINT AS dropped, count(DISTINCT node) AS nodes,
       max(ts) AS last_at
FROM collector_drops WHERE ts >= ? GROUP BY collector, reason ORDER BY dropped DESC, collector
"""


@dataclass(frozen=True)
class FleetView:
    """Everything the fleet page shows."""

    nodes: pa.Table
    gpus: pa.Table
    utilisation: pa.Table
    freshness: pa.Table
    drops: pa.Table
    since: datetime
    now: datetime

    @property
    def gpu_count(self) -> int:
        """GPUs the inventory advertises (allocatable), else the GPUs sampled."""
        inventory = sum(g or 0 for g in self.nodes.column("gpus").to_pylist())
        return int(inventory) if inventory else self.gpus.num_rows

    @property
    def mean_gpu_util_ratio(self) -> float | None:
        """Mean of the GPUs' latest utilisation (None without samples)."""
        values = [v for v in self.gpus.column("gpu_util_ratio").to_pylist() if v is not None]
        return sum(values) / len(values) if values else None


def freshness(store: Store, now: datetime) -> pa.Table:
    """Per node and source table: the newest row and its age in seconds at ``now``."""
    newest = newest_by_node(store)
    newest = newest.filter(pc.is_valid(newest.column("node")))
    ages = [(utc_naive(now) - at).total_seconds() for at in newest.column("newest_at").to_pylist()]
    return newest.select(["node", "source", "newest_at"]).append_column(
        "age_s", pa.array(ages, pa.float64())
    )


def fleet_view(store: Store, *, now: datetime, window_s: float) -> FleetView:
    """The fleet page's tables over the ``window_s`` before the newest sample."""
    end = newest_at(store) or utc_naive(now)
    since = end - timedelta(seconds=window_s)
    return FleetView(
        nodes=store.query(_LATEST_NODES),
        gpus=store.query(_LATEST_GPUS, [since]),
        utilisation=store.query(_NODE_UTILISATION, [since]),
        freshness=freshness(store, now),
        drops=store.query(_DROPS, [since]),
        since=since,
        now=utc_naive(now),
    )


# -- decisions ---------------------------------------------------------------------------


def decision_log(
    store: Store,
    *,
    since: datetime,
    actions: list[str] | None = None,
    outcomes: list[str] | None = None,
    limit: int = 1000,
) -> pa.Table:
    """The controller's decisions since ``since``, newest first, optionally filtered."""
    frame = recent_decisions(store, since, limit=100_000)
    table = frame.to_arrow()
    rows = [
        r
        for r in table.to_pylist()
        if (not actions or r["action"] in actions)
        and (not outcomes or _outcome_kind(r["outcome"]) in outcomes)
    ]
    return pa.Table.from_pylist(rows[:limit], schema=table.schema)


def _outcome_kind(outcome: str | None) -> str:
    """``skipped:rate-limited`` -> ``skipped``: the outcome without its reason."""
    return (outcome or "").split(":", 1)[0]


def decision_counts(store: Store, *, since: datetime) -> pa.Table:
    """Decisions per action and outcome kind (recommended, applied, skipped, failed)."""
    return store.query(
        "SELECT action, split_part(outcome, ':', 1) AS outcome, count(*) AS decisions, "
        "max(ts) AS last_at FROM decisions WHERE ts >= ? GROUP BY ALL ORDER BY action, outcome",
        [utc_naive(since)],
    )


def planned_actions(store: Store, *, now: datetime) -> list[dict[str, Any]]:
    """What the controller would recommend now, from the store alone: ``sits-observe
    recommend --db`` (at the newest data when that is older than ``now``)."""
    at = now if now.tzinfo is not None else now.replace(tzinfo=UTC)
    latest = latest_data_at(store)
    if latest is not None:
        at = min(at, latest.replace(tzinfo=UTC))
    return recommendations(store, ControllerSettings(), at)
