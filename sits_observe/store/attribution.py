"""Container attribution: name the namespace, pod and container of cgroup samples.

The cgroup reader sees only a pod UID and a container id; the Kubernetes inventory (``pods``
table) knows which namespace, pod and container they belong to. :func:`attribute_containers`
joins the two inside DuckDB with one set-based ``UPDATE`` (no row loops) and only fills
columns that are still NULL, so running it again changes nothing and a value a collector set
itself is never overwritten.

Which snapshot: each pod UID is matched against its most recent ``pods`` row, not only the
latest snapshot as a whole, so samples of a pod that has since been deleted still get named.
A UID names one pod for its whole life; container ids come from that row's ``containers_json``
(``[{"name", "container_id"}]``, runtime prefix already stripped by the collector).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

from sits_observe.domain.times import utc_naive
from sits_observe.store.duck import Store

#: The latest inventory row of every pod, with containers_json parsed (NULL when unreadable).
_LATEST_PODS = """
SELECT pod_uid, namespace, pod,
       CASE WHEN json_valid(containers_json) AND json_type(containers_json) = 'ARRAY'
            THEN from_json(containers_json, '[{"name": "VARCHAR", "container_id": "VARCHAR"}]')
       END AS containers
FROM pods
WHERE pod_uid IS NOT NULL
QUALIFY row_number() OVER (PARTITION BY pod_uid ORDER BY ts DESC) = 1
"""

# The container name whose id equals the sample's container id (NULL when none does).
_CONTAINER = "list_filter(m.containers, lambda k: k.container_id = c.container_id)[1].name"

_ATTRIBUTE = f"""
UPDATE container_samples AS c
SET namespace = coalesce(c.namespace, m.namespace),
    pod = coalesce(c.pod, m.pod),
    container = coalesce(c.container, {_CONTAINER})
FROM ({_LATEST_PODS}) AS m
WHERE c.pod_uid = m.pod_uid
  AND (? IS NULL OR c.ts >= ?)
  AND ((c.namespace IS NULL AND m.namespace IS NOT NULL)
       OR (c.pod IS NULL AND m.pod IS NOT NULL)
       OR (c.container IS NULL AND {_CONTAINER} IS NOT NULL))
"""


def attribute_containers(store: Store, *, since: datetime | None = None) -> int:
    """Fill NULL ``namespace`` / ``pod`` / ``container`` of ``container_samples`` from ``pods``.

    Namespace and pod are filled wherever the pod UID is known; the container name only where
    the sample's container id is listed in that pod's ``containers_json``. ``since`` (UTC)
    limits the work to samples at or after it. Returns the number of rows changed.
    """
    bound = None if since is None else utc_naive(since)
    with store.transaction() as con:
        row = con.execute(_ATTRIBUTE, [bound, bound]).fetchone()
    return int(row[0]) if row else 0


@dataclass(frozen=True)
class PodRef:
    """What the latest inventory row says about one pod."""

    pod_uid: str
    namespace: str
    pod: str
    node: str | None
    workload: str | None
    containers: dict[str, str | None]  # container name -> container id


def pod_for_uid(store: Store, uid: str) -> PodRef | None:
    """The latest inventory row of pod ``uid``, or None when it was never seen."""
    table = store.query(
        "SELECT pod_uid, namespace, pod, node, workload, containers_json FROM pods "
        "WHERE pod_uid = ? ORDER BY ts DESC LIMIT 1",
        [uid],
    )
    if table.num_rows == 0:
        return None
    row = table.to_pylist()[0]
    try:
        entries = json.loads(row["containers_json"] or "[]")
    except ValueError:
        entries = []
    containers = {
        str(e["name"]): e.get("container_id")
        for e in entries
        if isinstance(e, dict) and isinstance(e.get("name"), str)
    }
    return PodRef(
        pod_uid=row["pod_uid"],
        namespace=row["namespace"],
        pod=row["pod"],
        node=row["node"],
        workload=row["workload"],
        containers=containers,
    )
