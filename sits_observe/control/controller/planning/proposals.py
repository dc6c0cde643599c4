"""The proposals of one pass: each object's state for each action joined to the signals, the
rules' proposals with hysteresis around that state, and pod-level proposals combined onto
their owner workloads (:func:`propose`; step 1 of :func:`~.plan.plan`). Pure, like the plan.
"""

from __future__ import annotations

import polars as pl

from sits_observe.control.controller.actions import Action
from sits_observe.control.controller.planning.combine import (
    POD_ACTIONS,
    to_workloads,
    with_owner_recommendations,
)
from sits_observe.control.controller.planning.inputs import (
    VALUES_SCHEMA,
    CurrentState,
    History,
    Signals,
)
from sits_observe.control.controller.planning.model import (
    ACTIONS,
    ENGINE,
    QUEUE_KINDS,
    QUOTA_ACTIONS,
)
from sits_observe.control.controller.rules import (
    levels as rules,
)
from sits_observe.control.controller.rules import (
    queues as rules_queues,
)
from sits_observe.control.controller.rules import (
    quotas as rules_quotas,
)
from sits_observe.control.controller.rules import (
    tenants as rules_tenants,
)
from sits_observe.control.controller.settings import (
    ControllerSettings,
    Mode,
)

KEYS = ["kind", "namespace", "name", "action"]
_EMPTY_VALUES = pl.LazyFrame(schema=VALUES_SCHEMA)


def actuable(action: Action, kind: str, settings: ControllerSettings) -> bool:
    """Whether ``settings.mode`` writes the change itself (not only a recommendation)."""
    if settings.mode is not Mode.ACT:
        return False
    spec = ACTIONS[action]
    if spec.actuator == "none":
        return False
    if spec.actuator == "quota":
        return kind == "ResourceQuota"
    if spec.actuator == "queue":
        return kind in QUEUE_KINDS
    if spec.actuator == "configmap":
        return settings.time_slicing_configmap is not None
    # A label or annotation the runtime reads on the object the rule is about (never the
    # owner workload, which gets the recommendation only).
    return kind == spec.kind


def per_pod_actions(settings: ControllerSettings) -> list[str]:
    """Pod-level actions whose change this mode writes on each pod (a label or annotation)."""
    return [
        a
        for a in POD_ACTIONS
        if ACTIONS[Action(a)].actuator in ("label", "annotation")
        and actuable(Action(a), "Pod", settings)
    ]


def _values(current: CurrentState, history: History, settings: ControllerSettings) -> pl.DataFrame:
    """Per key: ``current``, ``recommended`` (dry-run: also what history recommended; owned
    pods: their workload's, see :func:`~.combine.with_owner_recommendations`)."""
    values = current.values.select([*KEYS, "current", "recommended"])
    if settings.mode is Mode.DRY_RUN and history.latest.height > 0:
        recommended = history.latest.filter(pl.col("outcome") == "recommended").select(
            [*KEYS, pl.col("proposed").alias("_hist")]
        )
        joined = values.join(recommended, on=KEYS, how="full", coalesce=True, nulls_equal=True)
        values = joined.select(
            [*KEYS, "current", pl.coalesce("recommended", "_hist").alias("recommended")]
        )
    per_pod = set(per_pod_actions(settings))
    return with_owner_recommendations(values, current, [a for a in POD_ACTIONS if a not in per_pod])


def _with_state(
    frame: pl.DataFrame,
    parts: dict[tuple[str, str], pl.LazyFrame],
    *,
    kind: str,
    action: Action,
    name: str,
    namespace: str | None,
    current_override: pl.Expr | None = None,
) -> pl.DataFrame:
    """``frame`` with ``current``, ``recommended`` and ``state`` for (kind, action)."""
    part = parts.get((kind, str(action)), _EMPTY_VALUES)
    keys = [name] if namespace is None else [namespace, name]
    renamed = part.select(
        *([] if namespace is None else [pl.col("namespace").alias(namespace)]),
        pl.col("name").alias(name),
        "current",
        "recommended",
    )
    joined = frame.lazy().join(renamed, on=keys, how="left", nulls_equal=True)
    if current_override is not None:
        joined = joined.with_columns(current_override.alias("current"))
    return joined.with_columns(pl.coalesce("recommended", "current").alias("state")).collect(
        engine=ENGINE
    )


def _by_key(values: pl.DataFrame) -> dict[tuple[str, str], pl.LazyFrame]:
    """``values`` split by (kind, action), each part lazy."""
    if values.height == 0:
        return {}
    return {
        (str(k[0]), str(k[1])): part.lazy()
        for k, part in values.partition_by(["kind", "action"], as_dict=True).items()
    }


def _values_of(
    parts: dict[tuple[str, str], pl.LazyFrame], action: Action, prefix: str
) -> pl.LazyFrame:
    """(namespace, pod, ``{prefix}_current``, ``{prefix}_recommended``) of a pod action."""
    part = parts.get(("Pod", str(action)), _EMPTY_VALUES)
    return part.select(
        "namespace",
        pl.col("name").alias("pod"),
        pl.col("current").alias(f"{prefix}_current"),
        pl.col("recommended").alias(f"{prefix}_recommended"),
    )


def _quota_targets(
    signals: Signals, current: CurrentState, values: pl.DataFrame, settings: ControllerSettings
) -> pl.DataFrame:
    """Namespace signals with where the advice goes (the managed ResourceQuota if it exists,
    else the Namespace) and the current / recommended value there."""
    name = settings.quota.quota_name
    frame = signals.namespaces.lazy()
    if current.complete:
        quotas = (
            current.objects.lazy()
            .filter((pl.col("kind") == "ResourceQuota") & (pl.col("name") == name))
            .select(pl.col("namespace"), pl.lit(True).alias("_has_quota"))
        )
        frame = frame.join(quotas.unique("namespace"), on="namespace", how="left")
    else:
        frame = frame.with_columns(pl.lit(None, pl.Boolean()).alias("_has_quota"))
    has = pl.col("_has_quota").fill_null(False)
    frame = frame.with_columns(
        pl.when(has)
        .then(pl.lit("ResourceQuota"))
        .otherwise(pl.lit("Namespace"))
        .alias("quota_kind"),
        pl.when(has).then(pl.lit(name)).otherwise(pl.col("namespace")).alias("quota_name"),
        pl.when(has).then(pl.col("namespace")).otherwise(pl.lit(None, pl.String())).alias("_ns"),
        pl.col("resource")
        .replace_strict({k: str(v) for k, v in QUOTA_ACTIONS.items()}, default=None)
        .alias("_action"),
    ).drop("_has_quota")
    known = values.lazy().select(
        pl.col("kind").alias("quota_kind"),
        pl.col("namespace").alias("_ns"),
        pl.col("name").alias("quota_name"),
        pl.col("action").alias("_action"),
        "current",
        "recommended",
    )
    on = ["quota_kind", "_ns", "quota_name", "_action"]
    return (
        frame.join(known, on=on, how="left", nulls_equal=True)
        .drop("_ns", "_action")
        .collect(engine=ENGINE)
    )


def _queue_targets(signals: Signals, current: CurrentState, values: pl.DataFrame) -> pl.DataFrame:
    """Queue signals with the queue's facts (queues the cluster does not hold, or holds in a
    form not advised, drop out) and each queue action's current / recommended value."""
    frame = signals.queues.lazy().join(
        current.queues.facts.lazy().unique(["kind", "name"], keep="last"),
        on=["kind", "name"],
        how="inner",
    )
    known = values.lazy().filter(pl.col("kind").is_in(QUEUE_KINDS))
    for action, prefix in rules_queues.PREFIXES.items():
        part = known.filter(pl.col("action") == str(action)).select(
            "kind",
            "name",
            pl.col("current").alias(f"{prefix}_current"),
            pl.col("recommended").alias(f"{prefix}_recommended"),
        )
        frame = frame.join(part.unique(["kind", "name"]), on=["kind", "name"], how="left")
    return frame.collect(engine=ENGINE)


def _tenant_targets(
    signals: Signals, current: CurrentState, values: pl.DataFrame, settings: ControllerSettings
) -> pl.DataFrame:
    """Per offending namespace: its strongest finding, every tenant it pushes out
    (``victims``), where the throttle goes (its ``tenant_throttle_quota_name`` ResourceQuota
    if it exists, else the Namespace) and the current / recommended value there."""
    found = signals.tenants
    if found.height == 0:
        return found
    name = settings.tenant_throttle_quota_name
    strongest = found.sort(["correlation", "victim"], descending=[True, False], nulls_last=True)
    frame = strongest.group_by("namespace", maintain_order=True).agg(
        pl.all().first(), pl.col("victim").sort().str.join(",").alias("victims")
    )
    if current.complete:
        quotas = current.objects.filter(
            (pl.col("kind") == "ResourceQuota") & (pl.col("name") == name)
        ).select("namespace", pl.lit(True).alias("_has"))
        frame = frame.join(quotas.unique("namespace"), on="namespace", how="left")
    else:
        frame = frame.with_columns(pl.lit(None, pl.Boolean()).alias("_has"))
    has = pl.col("_has").fill_null(False)
    frame = frame.with_columns(
        pl.when(has)
        .then(pl.lit("ResourceQuota"))
        .otherwise(pl.lit("Namespace"))
        .alias("target_kind"),
        pl.when(has).then(pl.lit(name)).otherwise(pl.col("namespace")).alias("target_name"),
        pl.when(has).then(pl.col("namespace")).otherwise(pl.lit(None, pl.String())).alias("_ns"),
    ).drop("_has")
    known = values.filter(pl.col("action") == str(Action.TENANT_THROTTLE)).select(
        pl.col("kind").alias("target_kind"),
        pl.col("namespace").alias("_ns"),
        pl.col("name").alias("target_name"),
        "current",
        "recommended",
    )
    on = ["target_kind", "_ns", "target_name"]
    return frame.join(known.unique(on), on=on, how="left", nulls_equal=True).drop("_ns")


def propose(
    signals: Signals, current: CurrentState, settings: ControllerSettings, history: History
) -> pl.DataFrame:
    """Every rule's proposals (before safety), with ``current`` and ``recommended`` joined."""
    values = _values(current, history, settings)
    by_key = _by_key(values)
    nodes = signals.nodes
    pods = signals.pods.with_columns(
        pl.format("{}/{}", pl.col("namespace"), pl.coalesce("workload", "pod")).alias(
            "workload_key"
        )
    )
    slices = None
    if settings.time_slicing_configmap is not None:
        slices = pl.col("workload_key").replace_strict(
            current.time_slices, default=None, return_dtype=pl.String
        )
    node_frag = nodes.select("node", "fragmentation_ratio").unique("node", keep="last")

    def pod_state(
        frame: pl.DataFrame, action: Action, override: pl.Expr | None = None
    ) -> pl.DataFrame:
        return _with_state(
            frame,
            by_key,
            kind="Pod",
            action=action,
            name="pod",
            namespace="namespace",
            current_override=override,
        )

    def node_state(action: Action) -> pl.DataFrame:
        return _with_state(nodes, by_key, kind="Node", action=action, name="node", namespace=None)

    parts = [
        rules.fragmentation_level(node_state(Action.FRAGMENTATION), settings),
        rules.topology_policy(node_state(Action.TOPOLOGY_POLICY), settings),
        rules.memory_class(pod_state(pods, Action.MEMORY_CLASS), settings),
        rules.time_slice(pod_state(pods, Action.TIME_SLICE, slices), settings),
        rules_quotas.qos_quotas(
            pod_state(pods, Action.QOS_MEMORY_QUOTA)
            .lazy()
            .join(
                _values_of(by_key, Action.QOS_BANDWIDTH_QUOTA, "bandwidth"),
                on=["namespace", "pod"],
                how="left",
            )
            .collect(engine=ENGINE),
            settings,
        ),
        rules.priority_class(
            pod_state(pods.join(node_frag, on="node", how="left"), Action.PRIORITY_CLASS),
            settings,
        ),
        rules_quotas.namespace_quotas(_quota_targets(signals, current, values, settings), settings),
        rules_queues.queue_quotas(_queue_targets(signals, current, values), settings),
        rules_tenants.tenant_throttle(
            _tenant_targets(signals, current, values, settings), settings
        ),
    ]
    joined = pl.concat(parts)
    if slices is not None:
        ts = pl.col("action") == str(Action.TIME_SLICE)
        joined = joined.with_columns(
            pl.when(ts)
            .then(
                pl.col("workload").replace_strict(
                    current.time_slices, default=None, return_dtype=pl.String
                )
            )
            .otherwise(pl.col("current"))
            .alias("current")
        )
    proposals = joined.with_columns(
        pl.coalesce("current", "default_current").alias("current")
    ).collect(engine=ENGINE)
    return to_workloads(proposals, current, values, settings, per_pod_actions(settings))
