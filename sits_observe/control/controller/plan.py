"""``plan()``: signals + what the cluster holds + past decisions -> the decisions of one pass.

Pure and deterministic: no I/O, no clock (the pass time is ``signals.at`` unless given), so a
plan can be computed offline (``sits-observe recommend``), tested exhaustively and timed.

Pipeline (every step vectorised over all objects at once):

1. Each object's *state* for each action (its latest recommendation, else the value in
   effect) is joined to the signals; the rules (:mod:`.rules`) propose values with
   hysteresis around that state. Pod-level proposals of pods with a known owner then become
   one proposal per (workload, action) (:mod:`.combine`): recommendations go on the owner
   workload.
2. Numeric proposals are limited to ``max_step_ratio`` from the current value, clamped to the
   hard bounds (queue quotas: the GPU quota's) and rounded to the unit they are written in.
3. Proposals that would change nothing are dropped and counted in :attr:`Plan.suppressed`:
   ``unchanged`` (equal to the value in effect), ``below-threshold`` (numeric change smaller
   than ``change_threshold_ratio``), ``already-recommended`` (a recommendation that cannot be
   applied in this mode and was already made), ``repeat`` (a skip already recorded).
4. The rest become decisions; a decision is *skipped* (recorded, never written) when its
   object is gone, opted out (``opt-out``: the object, its namespace, or for a workload one
   of its pods carries the opt-out annotation, or the namespace is labelled
   ``namespace_label=false``), outside the selected namespaces (``not-opted-in``: with
   ``namespace_selection=opt-in``, a namespace not labelled ``true``), or was changed less
   than ``min_change_interval_s`` ago (``cooldown``).
"""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np
import polars as pl

from sits_observe.control.controller.actions import Action
from sits_observe.control.controller.combine import (
    POD_ACTIONS,
    to_workloads,
    with_owner_recommendations,
)
from sits_observe.control.controller.inputs import CurrentState, History, Signals
from sits_observe.control.controller.kube import WORKLOAD_RESOURCES
from sits_observe.control.controller.model import (
    ACTIONS,
    ENGINE,
    PLAN_SCHEMA,
    QUEUE_KINDS,
    QUOTA_ACTIONS,
    Plan,
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
from sits_observe.control.controller.safety import below_threshold, clamp, limit_step
from sits_observe.control.controller.settings import (
    QUOTA_GPU,
    ControllerSettings,
    Mode,
    NamespaceSelection,
)
from sits_observe.domain.times import utc_naive
from sits_observe.tracing import note_queue_depth, traced

KEYS = ["kind", "namespace", "name", "action"]
_EMPTY_VALUES = pl.LazyFrame(
    schema={
        "kind": pl.String(),
        "namespace": pl.String(),
        "name": pl.String(),
        "action": pl.String(),
        "current": pl.String(),
        "recommended": pl.String(),
    }
)

#: Hard bounds of the QoS quotas (the elastic rule bounds them further).
_QOS_BOUNDS = {
    Action.QOS_MEMORY_QUOTA: (0.0, float(2**50)),
    Action.QOS_BANDWIDTH_QUOTA: (1.0, 1e13),
}


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


def _numeric(frame: pl.DataFrame, settings: ControllerSettings) -> pl.DataFrame:
    """Numeric rows: step-limited, clamped, rounded; flags ``_small`` below the threshold."""
    is_numeric = pl.col("proposed_value").is_not_null()
    other = frame.filter(~is_numeric).with_columns(pl.lit(False).alias("_small"))
    numeric = frame.filter(is_numeric)
    if numeric.height == 0:
        return other
    raw = numeric.get_column("proposed_value").to_numpy().astype(np.float64)
    cur = (
        numeric.get_column("current").cast(pl.Float64, strict=False).fill_null(float("nan"))
    ).to_numpy()
    action_col = numeric.get_column("action")
    low = np.zeros_like(raw)
    high = np.full_like(raw, np.inf)
    final = limit_step(raw, cur, settings.max_step_ratio)
    rounded_raw = raw.copy()
    for act in {Action(a) for a in action_col.unique().to_list()}:
        rows = action_col.eq(str(act)).to_numpy()
        if ACTIONS[act].actuator == "quota":
            bound = settings.quota.bounds[str(ACTIONS[act].key)]
            low[rows], high[rows] = bound.min_value, bound.max_value
        elif ACTIONS[act].actuator == "queue":
            # The GPU quota bounds; a borrowing limit of 0 (no borrowing) is a valid value.
            bound = settings.quota.bounds[QUOTA_GPU]
            floor = 0.0 if act is Action.QUEUE_GPU_BORROWING_LIMIT else bound.min_value
            low[rows], high[rows] = floor, bound.max_value
        else:
            low[rows], high[rows] = _QOS_BOUNDS.get(act, (0.0, np.inf))
        final[rows] = rules_quotas.round_values(act, final[rows])
        rounded_raw[rows] = rules_quotas.round_values(act, raw[rows])
    final = clamp(final, low, high)
    in_bounds = np.isnan(cur) | ((cur >= low) & (cur <= high))
    small = below_threshold(final, cur, settings.change_threshold_ratio) & in_bounds
    numeric = numeric.with_columns(
        pl.Series("proposed", final).cast(pl.Int64).cast(pl.String),
        pl.Series("_small", small),
        pl.Series("_limited", final != rounded_raw),
        pl.Series("_raw", rounded_raw).cast(pl.Int64).cast(pl.String),
    )
    note = pl.format(
        "; limited to {} by the max step / bounds (rule said {})", pl.col("proposed"), "_raw"
    )
    numeric = numeric.with_columns(
        pl.when(pl.col("_limited") & pl.col("reason").is_not_null())
        .then(pl.concat_str([pl.col("reason"), note]))
        .otherwise(pl.col("reason"))
        .alias("reason")
    ).drop("_limited", "_raw")
    return pl.concat([other, numeric], how="vertical_relaxed")


@traced("sits.plan", task_type="plan")
def plan(
    signals: Signals,
    current: CurrentState,
    settings: ControllerSettings,
    history: History | None = None,
    *,
    at: datetime | None = None,
    keep_recommended: bool = False,
) -> Plan:
    """The decisions of one pass (see the module docstring).

    ``keep_recommended`` keeps recommendations already made (``recommend`` lists every
    standing recommendation, not only new ones).
    """
    at = at or signals.at
    history = history or History.of()
    frame = _numeric(propose(signals, current, settings, history), settings)
    if settings.rules_off:  # switched off (ablation): no recommendation, no write
        frame = frame.filter(~pl.col("action").is_in(list(settings.rules_off)))
    is_actuable = pl.lit(False)
    for action in Action:
        for kind in (
            "Pod",
            "Node",
            "ResourceQuota",
            "Namespace",
            *WORKLOAD_RESOURCES,
            *QUEUE_KINDS,
        ):
            if actuable(action, kind, settings):
                is_actuable = is_actuable | (
                    (pl.col("action") == str(action)) & (pl.col("kind") == kind)
                )
    recommended = (pl.col("proposed") == pl.col("recommended")).fill_null(False)
    if keep_recommended:
        recommended = pl.lit(False)
    lazy = frame.lazy().with_columns(
        pl.when((pl.col("proposed") == pl.col("current")).fill_null(False))
        .then(pl.lit("unchanged"))
        .when(pl.col("_small"))
        .then(pl.lit("below-threshold"))
        .when(recommended & ~is_actuable)
        .then(pl.lit("already-recommended"))
        .otherwise(pl.lit(None, pl.String()))
        .alias("_drop"),
        # A rule's value equal to the current one can still move when the current value lies
        # outside the hard bounds; the rule built no reason for it.
        pl.col("reason").fill_null("current value outside the hard bounds: clamped"),
        pl.col("evidence").fill_null("{}"),
    )
    flagged = lazy.collect(engine=ENGINE)
    drops = flagged.get_column("_drop")
    suppressed = {str(k): int(v) for k, v in drops.drop_nulls().value_counts().iter_rows() if v}
    # Only the few rows that would change something meet the joins below.
    rest = _skips(flagged.lazy().filter(pl.col("_drop").is_null()), current, history, settings, at)
    repeat = history.latest.lazy().select(
        [*KEYS, pl.col("proposed").alias("_h_proposed"), pl.col("outcome").alias("_h_outcome")]
    )
    is_repeat = (
        pl.col("skip").is_not_null()
        & (pl.col("_h_proposed") == pl.col("proposed"))
        & (pl.col("_h_outcome") == pl.format("skipped:{}", pl.col("skip")))
    ).fill_null(False)
    done = (
        rest.join(repeat, on=KEYS, how="left", nulls_equal=True)
        .with_columns(is_repeat.alias("_repeat"))
        .collect(engine=ENGINE)
    )
    repeats = int(done.get_column("_repeat").sum())
    if repeats:
        suppressed["repeat"] = repeats
    out = (
        done.lazy()
        .filter(~pl.col("_repeat"))
        .select(list(PLAN_SCHEMA))
        .cast(PLAN_SCHEMA)  # type: ignore[arg-type]
        .sort(["action", "kind", "namespace", "name"], nulls_last=False)
        .collect(engine=ENGINE)
    )
    note_queue_depth(out.height)  # decisions pending application
    return Plan(at, out, suppressed)


def _skips(
    frame: pl.LazyFrame,
    current: CurrentState,
    history: History,
    settings: ControllerSettings,
    at: datetime,
) -> pl.LazyFrame:
    """Add ``skip``: ``gone``, ``opt-out``, ``not-opted-in`` or ``cooldown`` (null: to be
    written)."""
    objects = (
        current.objects.lazy()
        .select("kind", "namespace", "name", "opt_out")
        .unique(["kind", "namespace", "name"], keep="last")
    )
    frame = frame.join(
        objects.with_columns(pl.lit(True).alias("_exists")),
        on=["kind", "namespace", "name"],
        how="left",
        nulls_equal=True,
    )
    # The namespace a row is in: its own, or for a Namespace's own quota advice, itself.
    namespaces = current.objects.lazy().filter(pl.col("kind") == "Namespace")
    frame = frame.with_columns(
        pl.when(pl.col("kind") == "Namespace")
        .then(pl.col("name"))
        .otherwise(pl.col("namespace"))
        .alias("_ns")
    ).join(
        namespaces.select(
            pl.col("name").alias("_ns"),
            pl.col("opt_out").alias("_ns_opt_out"),
            pl.col("enabled").alias("_ns_enabled"),
        ).unique("_ns", keep="last"),
        on="_ns",
        how="left",
    )
    changed = history.latest.lazy().select([*KEYS, "changed_at"])
    frame = frame.join(changed, on=KEYS, how="left", nulls_equal=True)
    cooldown_start = utc_naive(at) - timedelta(seconds=settings.min_change_interval_s)
    known = pl.lit(current.complete)
    gone = known & pl.col("_exists").is_null()
    opted = (
        pl.col("opt_out").fill_null(False)
        | pl.col("_ns_opt_out").fill_null(False)
        | pl.col("_member_opt_out").fill_null(False)
        | (known & pl.col("_ns_enabled").eq(False).fill_null(False))
    )
    not_selected = (
        known
        & pl.lit(settings.namespace_selection is NamespaceSelection.OPT_IN)
        & pl.col("_ns").is_not_null()
        & ~pl.col("_ns_enabled").fill_null(False)
    )
    cooling = pl.col("changed_at").is_not_null() & (pl.col("changed_at") > cooldown_start)
    return frame.with_columns(
        pl.when(gone)
        .then(pl.lit("gone"))
        .when(opted)
        .then(pl.lit("opt-out"))
        .when(not_selected)
        .then(pl.lit("not-opted-in"))
        .when(cooling)
        .then(pl.lit("cooldown"))
        .otherwise(pl.lit(None, pl.String()))
        .alias("skip")
    )
