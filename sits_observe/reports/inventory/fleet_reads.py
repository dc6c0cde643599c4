"""The plain reads of the ``fleet`` report: inventory, per-node and per-GPU sample means,
collector freshness and dropped samples, all over one window (``since <= ts < until``).

Every read takes the window's two ends; none counts back from a newest row of its own.
The inventory is a series of snapshots (the inventory collector stamps each with one
time), so "the nodes" are the latest snapshot inside the window (found from the node
versions, :mod:`sits_observe.store.inventory_reads`, not by expanding every snapshot).
Power is a mean per GPU (one sample is one GPU at one time), never a per-node sum.
"""

from __future__ import annotations

from datetime import datetime

import pyarrow as pa

from sits_observe.reports.window import Window
from sits_observe.store import Store
from sits_observe.store.freshness import newest_by_node
from sits_observe.store.gpu_identity import identity_sql
from sits_observe.store.inventory_reads import last_seen_params, last_seen_sql
from sits_observe.store.rows import IN_WINDOW

_NODES = f"""
WITH snapshot AS (
    SELECT * FROM nodes WHERE node IS NOT NULL AND ts = (
        SELECT max(ts) FROM ({last_seen_sql("nodes", ("node",))}) WHERE node IS NOT NULL
    )
),
identity AS ({identity_sql(IN_WINDOW)}),
gpu AS (
    SELECT g.node, g.gpu_uuid, g.util, g.fb_used, i.model_name
    FROM (
        SELECT node, gpu_uuid, avg(gpu_util_ratio) AS util, arg_max(fb_used_bytes, ts) AS fb_used
        FROM gpu_samples WHERE {IN_WINDOW} AND node IS NOT NULL AND gpu_uuid IS NOT NULL
        GROUP BY node, gpu_uuid
    ) g JOIN identity i USING (gpu_uuid)
),
per_gpu AS (
    SELECT node, count(*) AS gpus_sampled,
           count(*) FILTER (WHERE util < ?) AS idle_gpus,
           sum(fb_used) AS fb_used_bytes,
           min(model_name) AS model_name
    FROM gpu GROUP BY node
),
per_sample AS (
    SELECT node,
           avg(gpu_util_ratio) AS gpu_util_ratio,
           max(gpu_util_ratio) AS max_gpu_util_ratio,
           avg(fb_used_bytes::DOUBLE / nullif(fb_total_bytes, 0)) AS fb_used_ratio,
           avg(power_w) AS power_w
    FROM gpu_samples WHERE {IN_WINDOW} AND node IS NOT NULL GROUP BY node
)
SELECT coalesce(s.node, g.node) AS node,
       coalesce(s.gpu_allocatable, g.gpus_sampled) AS gpus,
       coalesce(s.gpu_product, g.model_name) AS model,
       g.gpus_sampled, g.idle_gpus, p.gpu_util_ratio, p.max_gpu_util_ratio,
       g.fb_used_bytes, p.fb_used_ratio, p.power_w,
       s.cpu_allocatable_milli, s.memory_allocatable_bytes, s.ready, s.ts AS snapshot_at
FROM snapshot s
FULL OUTER JOIN per_gpu g ON g.node = s.node
LEFT JOIN per_sample p ON p.node = coalesce(s.node, g.node)
ORDER BY node
"""

_GPUS = f"""
WITH identity AS ({identity_sql(IN_WINDOW)}),
per_gpu AS (
SELECT node, gpu_uuid,
       arg_max(mig_profile, ts) AS mig_profile,
       arg_max(namespace, ts) AS namespace,
       arg_max(pod, ts) AS pod,
       avg(gpu_util_ratio) AS gpu_util_ratio,
       arg_max(fb_used_bytes, ts) AS fb_used_bytes,
       arg_max(fb_used_bytes::DOUBLE / nullif(fb_total_bytes, 0), ts) AS fb_used_ratio,
       avg(power_w) AS power_w,
       arg_max(gpu_temp_c, ts) AS gpu_temp_c,
       count(*) AS samples,
       max(ts) AS sampled_at
FROM gpu_samples WHERE {IN_WINDOW} AND gpu_uuid IS NOT NULL
GROUP BY node, gpu_uuid
)
SELECT g.node, g.gpu_uuid, i.gpu_index, i.model_name, g.* EXCLUDE (node, gpu_uuid)
FROM per_gpu g JOIN identity i USING (gpu_uuid)
ORDER BY g.node, i.gpu_index, g.gpu_uuid
"""

_DROPS = f"""
SELECT collector, reason, sum(count)::BIGINT AS dropped, count(DISTINCT node) AS nodes,
       max(ts) AS last_at
FROM collector_drops WHERE {IN_WINDOW}
GROUP BY collector, reason ORDER BY dropped DESC, collector, reason
"""

_SPAN = f"SELECT min(ts), max(ts) FROM gpu_samples WHERE {IN_WINDOW}"


def node_rows(store: Store, window: Window, idle_below_ratio: float) -> pa.Table:
    """One row per node of the latest inventory snapshot or with GPU samples in ``window``."""
    params = [*last_seen_params(window.since, window.until), *2 * window.params]
    return store.query(_NODES, [*params, idle_below_ratio, *window.params])


def gpu_rows(store: Store, window: Window) -> pa.Table:
    """One row per GPU sampled in ``window``: means over it, and its newest sample's values."""
    return store.query(_GPUS, 2 * window.params)


def drop_rows(store: Store, window: Window) -> pa.Table:
    """Samples the collectors dropped in ``window``, per collector and reason."""
    return store.query(_DROPS, window.params)


def freshness_rows(store: Store, window: Window) -> pa.Table:
    """Per node and sample table: the newest row in ``window`` and its age at its end, s."""
    newest = newest_by_node(store, since=window.since, until=window.until)
    ages = [(window.until - at).total_seconds() for at in newest.column("newest_at").to_pylist()]
    return newest.append_column("age_s", pa.array(ages, pa.float64()))


def sample_span(store: Store, window: Window) -> tuple[datetime, datetime] | None:
    """The first and last GPU sample time in ``window`` (None without samples)."""
    row = store.query(_SPAN, window.params).to_pylist()[0]
    first, last = row["min(ts)"], row["max(ts)"]
    return None if first is None or last is None else (first, last)
