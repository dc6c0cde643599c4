"""Adapter: the store's pod inventory + queue membership -> the queues' daily GPU peaks.

The measured use of a Kueue ClusterQueue or KAI queue is what its member pods requested
(``pods.gpu_request``), the way the namespace quotas measure a namespace's
(:mod:`.store`): per inventory snapshot the sum over the queue's member pods (a
whole namespace, or one pod: :data:`~.inputs.QUEUE_MEMBERS_SCHEMA`, read from the cluster by
:mod:`.kube_queues`), per day the largest such sum, for ``quota.history_days``, oldest first.
Pods that finished (``Succeeded`` / ``Failed``) hold nothing. The membership is passed to
DuckDB as parameters (parallel lists unnested together), never formatted into the SQL.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import polars as pl

from sits_observe.analytics.cluster_allocatable import cluster_allocatable
from sits_observe.control.controller.planning.inputs import QUEUE_SIGNALS
from sits_observe.control.controller.settings import ControllerSettings
from sits_observe.store.duck import Store, utc_naive

_DONE = ("Succeeded", "Failed")
_TICK = timedelta(microseconds=1)

_QUEUE_PEAKS_SQL = """
WITH m AS (
    SELECT unnest(?::VARCHAR[]) AS kind, unnest(?::VARCHAR[]) AS queue,
           unnest(?::VARCHAR[]) AS namespace, unnest(?::VARCHAR[]) AS pod
), snap AS (
    SELECT m.kind, m.queue, p.ts, sum(coalesce(p.gpu_request, 0))::DOUBLE AS gpu
    FROM pods p JOIN m ON p.namespace = m.namespace AND (m.pod IS NULL OR p.pod = m.pod)
    WHERE p.ts > ? AND p.ts <= ? AND coalesce(p.phase, '') NOT IN (?, ?)
    GROUP BY m.kind, m.queue, p.ts
), daily AS (
    SELECT kind, queue, date_trunc('day', ts) AS day, max(gpu) AS gpu FROM snap GROUP BY ALL
)
SELECT kind, queue AS name, list(gpu ORDER BY day) AS daily_peaks
FROM daily GROUP BY kind, queue ORDER BY kind, queue
"""


def queue_signals(
    store: Store,
    at: datetime,
    settings: ControllerSettings,
    members: pl.DataFrame,
    *,
    since: datetime | None = None,
) -> pl.DataFrame:
    """:data:`~.inputs.QUEUE_SIGNALS` of each queue with member pods in the look-back ending
    at ``at`` (never before ``since``); empty without members."""
    if members.height == 0:
        return pl.DataFrame(schema=QUEUE_SIGNALS)
    end = utc_naive(at)
    start = end - timedelta(days=settings.quota.history_days)
    if since is not None:
        start = max(start, utc_naive(since) - _TICK)
    params: list[object] = [
        *(members.get_column(c).to_list() for c in ("kind", "queue", "namespace", "pod")),
        start,
        end,
        *_DONE,
    ]
    rows = pl.DataFrame(store.query(_QUEUE_PEAKS_SQL, params))
    if rows.height == 0:
        return pl.DataFrame(schema=QUEUE_SIGNALS)
    held = cluster_allocatable(store, start, end + _TICK)
    gpus = None if held is None or held.gpus is None else float(held.gpus)
    return rows.with_columns(pl.lit(gpus, pl.Float64).alias("allocatable")).select(
        list(QUEUE_SIGNALS)
    )
