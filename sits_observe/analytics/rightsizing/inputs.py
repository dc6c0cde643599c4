"""The framebuffer series of each workload, read from the store, for GPU memory right-sizing.

One row per ``gpu_samples`` row attributed to a pod: ``namespace``, ``workload`` (the pod's
owner from its latest ``pods`` row: Deployment, StatefulSet, Job ..., ReplicaSet hash
stripped by the inventory; the pod itself when the inventory does not know it), ``series``
(one pod on one GPU instance), ``ts_s`` (Unix seconds), ``fb_used_bytes`` and
``max_allowed_bytes`` (the instance's framebuffer: the cap of a proposal).

On a time-sliced GPU dcgm-exporter reports the device's framebuffer once per pod, so each of
its pods is sized at the whole device's use: an overstatement, never an understatement.
"""

from __future__ import annotations

from datetime import datetime

import polars as pl

from sits_observe.analytics.rightsizing.memory import MemoryRecommendation, RightsizingSettings
from sits_observe.analytics.rightsizing.memory import recommendations as _recommendations
from sits_observe.domain.times import utc_naive
from sits_observe.store.duck import Store

WORKLOAD_KEY = ("namespace", "workload")

_SERIES_SQL = """
WITH pods AS (
    SELECT namespace, pod, workload FROM pods WHERE pod IS NOT NULL
    QUALIFY row_number() OVER (PARTITION BY namespace, pod ORDER BY ts DESC) = 1
)
SELECT s.namespace, coalesce(p.workload, s.pod) AS workload,
       concat_ws('/', s.namespace, s.pod, s.gpu_uuid, s.mig_instance_id) AS series,
       epoch_us(s.ts) / 1e6 AS ts_s, s.fb_used_bytes::DOUBLE AS fb_used_bytes,
       s.fb_total_bytes::DOUBLE AS max_allowed_bytes
FROM gpu_samples s
LEFT JOIN pods p ON p.namespace IS NOT DISTINCT FROM s.namespace AND p.pod = s.pod
WHERE s.ts >= ? AND s.ts < ? AND s.pod IS NOT NULL AND s.fb_used_bytes IS NOT NULL
"""


def load_workload_memory(store: Store, since: datetime, until: datetime) -> pl.DataFrame:
    """The framebuffer samples of pods in ``[since, until)`` (see the module docstring)."""
    return pl.DataFrame(store.query(_SERIES_SQL, [utc_naive(since), utc_naive(until)]))


def workload_memory(
    store: Store, since: datetime, until: datetime, settings: RightsizingSettings
) -> tuple[MemoryRecommendation, ...]:
    """One GPU memory recommendation per (namespace, workload) with samples in the window."""
    frame = load_workload_memory(store, since, until)
    if frame.height == 0:
        return ()
    return _recommendations(frame, settings, by=WORKLOAD_KEY)
