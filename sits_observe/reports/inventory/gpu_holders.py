"""Who holds each GPU: the pod using each GPU instance's framebuffer, and how many pods share
each physical GPU, over one window (``since <= ts < until``).

GPU attribution has no analysis of its own: it is the newest ``gpu_samples`` row with a
framebuffer value of each GPU instance (a MIG instance, or the whole GPU when
``mig_instance_id`` is NULL), which carries the namespace and pod dcgm-exporter attributed it
to. Ties at the same time (time-slicing: dcgm-exporter repeats the device's values once per
pod) keep one row, attributed ones first, so the bytes of an instance are never counted twice.
A GPU is shared when more than one distinct (namespace, pod) was attributed to it in the
window (MIG instances or time-slicing).
"""

from __future__ import annotations

import pyarrow as pa

from sits_observe.reports.window import Window
from sits_observe.store import Store
from sits_observe.store.gpu_identity import identity_sql
from sits_observe.store.rows import IN_WINDOW

#: The newest time of each instance first (a partition maximum: no sort), then only the rows
#: at that time are ordered to break ties. The same rows as numbering every sample of the
#: window by ``ts DESC, pod IS NULL, namespace, pod`` (checked in
#: tests/unit/reports/test_gpu_holders.py), in about a quarter of the time at 1,000 nodes x 8
#: GPUs (12 ms instead of 45 ms). Node, index and model are the GPU's latest identity.
_INSTANCES = f"""
WITH identity AS ({identity_sql(IN_WINDOW)})
SELECT coalesce(i.node, s.node) AS node, s.gpu_uuid,
       coalesce(i.gpu_index, s.gpu_index) AS gpu_index,
       coalesce(i.model_name, s.model_name) AS model_name,
       mig_profile, namespace, pod, fb_used_bytes
FROM (
    SELECT * FROM (
        SELECT * FROM gpu_samples
        WHERE {IN_WINDOW} AND fb_used_bytes IS NOT NULL
        QUALIFY ts = max(ts) OVER (PARTITION BY gpu_uuid, mig_instance_id)
    )
    QUALIFY row_number() OVER (
        PARTITION BY gpu_uuid, mig_instance_id ORDER BY pod IS NULL, namespace, pod
    ) = 1
) s
LEFT JOIN identity i USING (gpu_uuid)
"""

_SHARING = f"""
WITH identity AS ({identity_sql(IN_WINDOW)}),
pods AS (
    SELECT gpu_uuid, count(DISTINCT (namespace, pod)) FILTER (WHERE pod IS NOT NULL) AS pods
    FROM gpu_samples WHERE {IN_WINDOW} AND gpu_uuid IS NOT NULL
    GROUP BY gpu_uuid
)
SELECT i.gpu_uuid, i.node, i.gpu_index, i.model_name, p.pods
FROM identity i JOIN pods p USING (gpu_uuid)
"""


def _bounds(window: Window) -> list[object]:
    return 2 * window.params


def gpu_instances(store: Store, window: Window) -> pa.Table:
    """The newest framebuffer use of each GPU instance in ``window`` and who held it: columns
    ``node``, ``gpu_uuid``, ``gpu_index``, ``model_name``, ``mig_profile`` (NULL: a whole
    GPU), ``namespace``, ``pod`` (NULL: unattributed), ``fb_used_bytes``; in no set order."""
    return store.query(_INSTANCES, _bounds(window))


def gpu_sharing(store: Store, window: Window) -> pa.Table:
    """Per physical GPU sampled in ``window`` (``gpu_uuid``; its newest ``node``, known
    ``gpu_index`` and ``model_name``): ``pods``, the distinct attributed pods seen on it; in no
    set order."""
    return store.query(_SHARING, _bounds(window))
