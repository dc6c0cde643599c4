"""The latest SMF of every GPU and container, without aligning the whole window.

What ``/metrics`` exports of SMF is each GPU's and each container's *latest* value:
``summarize_smf(align_smf(...), by).latest_smf``, the mean SMF of the group's aligned rows
at its latest aligned timestamp. :func:`latest_smf` gives the same values while aligning
only the samples that can be latest, so an exporter pass at fleet scale does not as-of join
and summarise every cgroup sample of the window (docs/metrics.md, "passes").

Same rules as :mod:`sits_observe.analytics.fragmentation.smf` (its links, source preference and
as-of rule are the same SQL, ``GPU_SQL`` and ``LINKS_SQL``): the links are found over the whole
window, since a labelled GPU sample links a container only within that container's sampled
life. Then, per link (container, GPU or MIG instance), the latest aligned timestamp is the
latest cgroup sample that found a GPU sample within the skew:

1. the container's latest cgroup sample (its candidates) is as-of joined; a link whose
   candidate matched is resolved (the fleet's steady state: every link);
2. the links left (their latest sample found no GPU sample in time) fall back to aligning
   all their samples, as :func:`~sits_observe.analytics.fragmentation.smf.align_smf` does, and keep
   the latest match.

A GPU's latest time is the newest of its links' latest times, and its ``latest_smf`` the
mean SMF of its rows at that time (a row at a group's newest time is always its link's
latest, so nothing older is needed); a container's likewise over its GPUs. Groups with no
aligned row (only unmatched samples) are left out: their ``latest_smf`` is None in the
summaries. ``namespace`` is the container's at its latest aligned sample (the summary's too,
whenever the container's names are attributed). When no GPU sample is an NVML one the source
preference has nothing to drop, and the GPU samples are read through a view instead of
copied. A mean over several rows may differ from the summary's in the last bit (the rows
are summed in another order).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import duckdb
import pyarrow as pa

from sits_observe.analytics.fragmentation.settings import SmfSettings
from sits_observe.analytics.fragmentation.smf import (
    GPU_SQL,
    LINKS_SQL,
    SmfInputs,
    prepare,
    read_smf_inputs,
    register_inputs,
)
from sits_observe.store.duck import Store

#: ``latest_smf`` per GPU (``node``, ``gpu_uuid``) and per container (``node``,
#: ``container_id``, with its ``namespace``); both carry ``latest_at`` (naive UTC).
GPU_LATEST_SCHEMA = pa.schema(
    [
        ("node", pa.string()),
        ("gpu_uuid", pa.string()),
        ("latest_at", pa.timestamp("us")),
        ("latest_smf", pa.float64()),
    ]
)
CONTAINER_LATEST_SCHEMA = pa.schema(
    [
        ("node", pa.string()),
        ("container_id", pa.string()),
        ("namespace", pa.string()),
        ("latest_at", pa.timestamp("us")),
        ("latest_smf", pa.float64()),
    ]
)


@dataclass(frozen=True)
class SmfLatest:
    """The latest SMF of every GPU and container with an aligned sample, sorted by key."""

    gpus: pa.Table
    containers: pa.Table


# The GPU samples when none is an NVML one: the source preference has nothing to drop, so a
# view over the input (the same rows as GPU_SQL's table) saves copying every sample.
_GPU_WITHOUT_NVML = """
CREATE TEMP VIEW gpu AS
SELECT ts, node, gpu_uuid, coalesce(mig_instance_id, -1) AS mig_key,
       namespace, pod, container, fb_free_bytes, fb_total_bytes
FROM g
WHERE ts IS NOT NULL AND node IS NOT NULL AND gpu_uuid IS NOT NULL
  AND fb_free_bytes IS NOT NULL AND fb_total_bytes > 0
"""

_HAS_NVML = "SELECT count(*) FROM g WHERE source = 'nvml'"

# LINKS_SQL with the cgroup samples as a view over the input rather than a copy: the same
# rows, and the few scans of them here cost less than copying every sample of the window
# (about 35 ms at 1,000 nodes x 8 GPUs).
_CG_TABLE, _CG_VIEW = "CREATE TEMP TABLE cg AS", "CREATE TEMP VIEW cg AS"
_LINKS_ON_VIEW = LINKS_SQL.replace(_CG_TABLE, _CG_VIEW, 1)

# Runs after GPU_SQL (or _GPU_WITHOUT_NVML) and LINKS_SQL, on the same private connection.
_LATEST = """
-- Step 1: each linked container's latest cgroup sample, as-of joined for each of its links.
CREATE TEMP TABLE candidates AS
SELECT cg.ts, cg.node, cg.container_id, cg.namespace, cg.memory_current_bytes,
       l.gpu_uuid, l.mig_key
FROM cg
JOIN (SELECT node, container_id, max(ts) AS ts FROM cg
      SEMI JOIN links USING (node, container_id) GROUP BY ALL) AS newest
  USING (node, container_id, ts)
JOIN links AS l USING (node, container_id);

CREATE TEMP TABLE aligned AS
SELECT s.*, gpu.fb_free_bytes, gpu.fb_total_bytes
FROM candidates AS s
ASOF JOIN (SELECT * FROM gpu
           WHERE ts >= (SELECT min(ts) FROM candidates) - to_microseconds($skew_us)) AS gpu
  ON s.node = gpu.node AND s.gpu_uuid = gpu.gpu_uuid AND s.mig_key = gpu.mig_key
 AND gpu.ts <= s.ts
WHERE date_diff('microsecond', gpu.ts, s.ts) <= $skew_us;
"""

_PENDING = """
SELECT count(*) AS n FROM links ANTI JOIN aligned USING (node, container_id, gpu_uuid, mig_key)
"""

_FALLBACK = """
-- Step 2 (run only when a link is left): the links whose latest sample found no GPU sample
-- in time: all their samples.
INSERT INTO aligned
SELECT s.*, gpu.fb_free_bytes, gpu.fb_total_bytes
FROM (SELECT cg.ts, cg.node, cg.container_id, cg.namespace, cg.memory_current_bytes,
             l.gpu_uuid, l.mig_key
      FROM cg JOIN (SELECT * FROM links
                    ANTI JOIN aligned USING (node, container_id, gpu_uuid, mig_key)) AS l
        USING (node, container_id)) AS s
ASOF JOIN gpu
  ON s.node = gpu.node AND s.gpu_uuid = gpu.gpu_uuid AND s.mig_key = gpu.mig_key
 AND gpu.ts <= s.ts
WHERE date_diff('microsecond', gpu.ts, s.ts) <= $skew_us
QUALIFY s.ts = max(s.ts) OVER (PARTITION BY s.node, s.container_id, s.gpu_uuid, s.mig_key);
"""

_ROWS = """
CREATE TEMP TABLE latest_rows AS
SELECT a.ts, a.node, a.container_id, a.gpu_uuid,
       coalesce(a.namespace, n.namespace) AS namespace,
       CASE WHEN a.fb_free_bytes > a.memory_current_bytes
            THEN (a.fb_free_bytes - a.memory_current_bytes)::DOUBLE / a.fb_total_bytes::DOUBLE
            ELSE 0.0 END AS smf
FROM aligned AS a LEFT JOIN names AS n USING (node, container_id);
"""

# A group's rows at its newest time; their mean SMF is its latest_smf.
_BY_GPU = """
SELECT node, gpu_uuid, any_value(ts) AS latest_at, avg(smf) AS latest_smf
FROM (SELECT * FROM latest_rows QUALIFY ts = max(ts) OVER (PARTITION BY node, gpu_uuid))
GROUP BY node, gpu_uuid ORDER BY node, gpu_uuid
"""

_BY_CONTAINER = """
SELECT node, container_id, any_value(namespace) AS namespace, any_value(ts) AS latest_at,
       avg(smf) AS latest_smf
FROM (SELECT * FROM latest_rows
      QUALIFY ts = max(ts) OVER (PARTITION BY node, container_id))
GROUP BY node, container_id ORDER BY node, container_id
"""


def latest_smf(
    inputs: SmfInputs,
    *,
    settings: SmfSettings | None = None,
    con: duckdb.DuckDBPyConnection | None = None,
) -> SmfLatest:
    """The latest SMF of every GPU and container of ``inputs`` (see the module docstring);
    equal to ``summarize_smf(align_smf(...), by).latest_smf`` of the groups that have one.

    ``con``: a fresh connection to run the SQL on, closed by the caller (its temporary tables
    and registered inputs stay on it until then); by default a private in-memory database.
    A cursor of an open store costs well under a millisecond, a new database about 20 ms of
    CPU (measured), which a pass every few seconds notices.
    """
    settings = settings or SmfSettings()
    skew_us = round(settings.max_skew_s * 1e6)
    own = con is None
    work = duckdb.connect(":memory:") if con is None else con
    try:
        register_inputs(work, inputs.gpu_samples, inputs.container_samples, inputs.gpu_processes)
        nvml = work.sql(_HAS_NVML).fetchall()[0][0]
        gpu_sql = GPU_SQL if nvml else _GPU_WITHOUT_NVML
        prepare(work, gpu_sql + ";" + _LINKS_ON_VIEW + ";" + _LATEST, skew_us)
        if work.sql(_PENDING).fetchall()[0][0]:
            prepare(work, _FALLBACK, skew_us)
        prepare(work, _ROWS, skew_us)
        gpus = work.sql(_BY_GPU).to_arrow_table()
        containers = work.sql(_BY_CONTAINER).to_arrow_table()
    finally:
        if own:
            work.close()
    return SmfLatest(
        gpus=gpus.select(GPU_LATEST_SCHEMA.names).cast(GPU_LATEST_SCHEMA),
        containers=containers.select(CONTAINER_LATEST_SCHEMA.names).cast(CONTAINER_LATEST_SCHEMA),
    )


def read_latest_smf(
    store: Store,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    settings: SmfSettings | None = None,
) -> SmfLatest:
    """:func:`latest_smf` of :func:`~sits_observe.analytics.fragmentation.smf.read_smf_inputs`'
    window, run on a cursor of ``store`` (temporary tables are the cursor's own: no store table is
    written or seen)."""
    inputs = read_smf_inputs(store, since=since, until=until, settings=settings)
    con = store.cursor()
    try:
        return latest_smf(inputs, settings=settings, con=con)
    finally:
        con.close()
