"""Adapter: what the store knows of the cluster's current state ->
:class:`~sits_observe.control.controller.planning.inputs.CurrentState`, for offline
``recommend``.

The latest node and pod snapshots at a time give each node's ``sits.io/fragmentation`` label
(so an applied label counts as current), each pod's priority class and each pod's top-level
workload, from what the inventory kept of its ``ownerReferences``. The store sees no more of
the cluster than its inventory: the object lists are incomplete, so nothing is skipped as gone
or opted out. The signals of the same pass come from :mod:`.store`.
"""

from __future__ import annotations

from datetime import datetime

import polars as pl

from sits_observe.control.controller.actions import Action
from sits_observe.control.controller.planning.inputs import CurrentState
from sits_observe.control.controller.planning.model import ACTIONS
from sits_observe.store.duck import Store, utc_naive


def _frame(store: Store, sql: str, params: list[object]) -> pl.DataFrame:
    return pl.DataFrame(store.query(sql, params))


def state_from_store(store: Store, at: datetime, since: datetime | None = None) -> CurrentState:
    """What the store knows of the cluster, for offline ``recommend``: the latest node
    labels (so an applied ``sits.io/fragmentation`` label counts as current) and each pod's
    priority class. Object lists are incomplete (``complete=False``): nothing is skipped as
    gone or opted out. ``since`` ignores snapshots before it (a report's window)."""
    naive = utc_naive(at)
    # A snapshot at or after ``since``; none: every one.
    floor = datetime.min if since is None else utc_naive(since)
    label = ACTIONS[Action.FRAGMENTATION].key
    nodes = _frame(
        store,
        "SELECT node AS name, json_extract_string(labels_json, ?) AS current FROM nodes "
        "WHERE ts = (SELECT max(ts) FROM node_snapshots WHERE ts <= ? AND ts >= ?) "
        "AND node IS NOT NULL",
        [f'$."{label}"', naive, floor],
    )
    pods = _frame(
        store,
        "SELECT namespace, pod AS name, priority_class AS current FROM pods "
        "WHERE ts = (SELECT max(ts) FROM pod_snapshots WHERE ts <= ? AND ts >= ?) "
        "AND pod IS NOT NULL",
        [naive, floor],
    )
    parts = []
    if nodes.height:
        parts.append(
            nodes.select(
                pl.lit("Node").alias("kind"),
                pl.lit(None, pl.String()).alias("namespace"),
                "name",
                pl.lit(str(Action.FRAGMENTATION)).alias("action"),
                "current",
            )
        )
    if pods.height:
        parts.append(
            pods.select(
                pl.lit("Pod").alias("kind"),
                "namespace",
                "name",
                pl.lit(str(Action.PRIORITY_CLASS)).alias("action"),
                "current",
            )
        )
    values = (
        pl.concat(parts, how="vertical_relaxed").filter(pl.col("current").is_not_null())
        if parts
        else None
    )
    return CurrentState.of(values=values, owners=_owners(store, naive, floor), complete=False)


def _owners(store: Store, at: datetime, floor: datetime) -> pl.DataFrame:
    """Each pod's top-level workload in the latest snapshot at ``at``, from what the inventory
    kept of its ``ownerReferences`` (``owner_kind`` / ``owner_name``, ``workload``): a
    ReplicaSet whose name is its Deployment's plus the template hash is that Deployment's; a
    StatefulSet, DaemonSet or Job owns its pods itself. Bare pods (and ReplicaSets without a
    Deployment) have none, as in the cluster
    (:mod:`sits_observe.control.controller.state_owners`)."""
    return _frame(
        store,
        "SELECT namespace, pod, CASE WHEN owner_kind = 'ReplicaSet' AND workload <> owner_name "
        "THEN 'Deployment' ELSE owner_kind END AS owner_kind, workload AS owner_name FROM pods "
        "WHERE ts = (SELECT max(ts) FROM pod_snapshots WHERE ts <= ? AND ts >= ?) "
        "AND pod IS NOT NULL AND workload IS NOT NULL AND ((owner_kind = 'ReplicaSet' "
        "AND workload <> owner_name) OR owner_kind IN ('StatefulSet', 'DaemonSet', 'Job'))",
        [at, floor],
    )
