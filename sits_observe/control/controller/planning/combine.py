"""Pod proposals -> one proposal per (workload, action): recommendations go on the owner.

A pod vanishes when it is recreated; its Deployment, StatefulSet, DaemonSet, Job or CronJob
does not. So the decision of a pod-level action (memory class, time slice, QoS quotas,
priority class) about a pod with a known owner (``CurrentState.owners``, resolved from
``ownerReferences`` by :mod:`.state_owners`) is made once on the workload: its
``sits.io/recommendation.<action>`` annotation, its Event, its row in ``decisions``. A pod
without a known owner (a bare pod) keeps its own decision. Offline (``recommend`` on the store)
the owners come from the inventory's owner columns (``signals.store_state.state_from_store``).

**Combine rule**, per (workload, action), over the workload's pods that got a proposal:

- numeric actions (QoS memory and bandwidth quotas): the largest proposal, the safe side (no
  pod is given less than its own rule said); the current value likewise the largest;
- categorical actions: the value most pods got; a tie goes to the more conservative value:
  the higher memory class (L3 > L2 > L1), the longer time slice, the higher-priority class
  (its ``value`` in the settings' priority classes). The current value (the pods' labels, or
  priority classes) is combined the same way.

The reason and evidence are those of one pod that got the chosen value (the first by name),
the reason prefixed ``k of n pods:`` and the evidence extended with ``pods`` (n, the pods
with a proposal), ``pods_agreeing`` (k, those proposing the chosen value) and ``pod`` (whose
reason and evidence these are).

What stays on the pods: in act mode, the actuators the runtime reads per pod (the
``sits.io/memory-class`` label, the ``sits.io/qos-*`` annotations) are still written on each
pod, with the pod's own value, as pod decisions whose ``owner`` names the workload (they write
no recommendation annotation). The time-slicing ConfigMap entry is per workload already: the
workload's decision writes it, keyed ``namespace/<owner name>``.

A workload's decision is opted out when the workload, its namespace or any of its pods carries
the opt-out annotation (a pod template's annotation is on every pod); a pod's actuator
decision also when its workload does.
"""

from __future__ import annotations

from collections.abc import Collection

import polars as pl

from sits_observe.analytics.classes import rules as class_rules
from sits_observe.control.controller.actions import Action
from sits_observe.control.controller.kube import WORKLOAD_RESOURCES
from sits_observe.control.controller.planning.inputs import CurrentState
from sits_observe.control.controller.planning.model import ACTIONS, ENGINE
from sits_observe.control.controller.settings import ControllerSettings

#: Actions whose rule is per pod (their decisions move to the owner workload).
POD_ACTIONS = [str(a) for a, spec in ACTIONS.items() if spec.kind == "Pod"]
_NUMERIC = [a for a in POD_ACTIONS if ACTIONS[Action(a)].numeric]
_GROUP = ["owner_kind", "namespace", "owner_name", "action"]
_KEYS = ["kind", "namespace", "name", "action"]


def _rank(value: pl.Expr, settings: ControllerSettings) -> pl.Expr:
    """How conservative ``value`` is for the row's action (higher: safer); null: unknown."""
    action = pl.col("action")
    levels = {name: float(i) for i, name in enumerate(class_rules.MEMORY_CLASSES)}
    priorities = {p.name: float(p.value) for p in settings.classes.priority_classes}
    return (
        pl.when(action.is_in(_NUMERIC))
        .then(value.cast(pl.Float64, strict=False))
        .when(action == str(Action.MEMORY_CLASS))
        .then(value.replace_strict(levels, default=None, return_dtype=pl.Float64))
        .when(action == str(Action.TIME_SLICE))
        .then(value.str.strip_suffix("ms").cast(pl.Float64, strict=False))
        .when(action == str(Action.PRIORITY_CLASS))
        .then(value.replace_strict(priorities, default=None, return_dtype=pl.Float64))
        .otherwise(pl.lit(None, pl.Float64()))
    )


def _pick(frame: pl.LazyFrame, column: str, settings: ControllerSettings) -> pl.LazyFrame:
    """Per group, the row whose ``column`` wins the combine rule (see the module docstring):
    the most votes (categorical only), then the highest rank, then the first pod by name.
    ``frame`` carries ``_order``, the pods' order by name. Filters on per-group extremes of
    numbers rather than sorting the whole frame by string keys (the slower way at 10,000
    pods)."""
    votes = pl.len().over([*_GROUP, column])
    frame = frame.with_columns(
        pl.when(pl.col("action").is_in(_NUMERIC))
        .then(pl.lit(0, pl.UInt32()))
        .otherwise(votes.cast(pl.UInt32()))
        .alias("_votes"),
        _rank(pl.col(column), settings).fill_null(float("-inf")).alias("_rank"),
        votes.alias("_agreeing"),
    )
    for key, best in (("_votes", pl.max), ("_rank", pl.max), ("_order", pl.min)):
        frame = frame.filter(pl.col(key) == best(key).over(_GROUP))
    return frame.unique(_GROUP, keep="any")


def _pods_opt_out(current: CurrentState) -> pl.LazyFrame:
    """Per workload: whether any of its pods carries the opt-out annotation."""
    pods = (
        current.objects.lazy()
        .filter(pl.col("kind") == "Pod")
        .select("namespace", pl.col("name").alias("pod"), "opt_out")
    )
    return (
        current.owners.lazy()
        .join(pods, on=["namespace", "pod"], how="left")
        .group_by(["owner_kind", "namespace", "owner_name"])
        .agg(pl.col("opt_out").fill_null(False).any().alias("_member_opt_out"))
    )


def _workload_rows(
    owned: pl.LazyFrame, current: CurrentState, values: pl.DataFrame, settings: ControllerSettings
) -> pl.LazyFrame:
    """One proposal per (workload, action) from its pods' proposals."""
    counted = owned.with_columns(pl.len().over(_GROUP).alias("_pods"))
    # A workload with one pod has nothing to combine (most Jobs, many Deployments).
    single = counted.filter(pl.col("_pods") == 1).with_columns(
        pl.col("_pods").alias("_agreeing"), pl.col("current").alias("_current")
    )
    several = counted.filter(pl.col("_pods") > 1).with_columns(
        pl.col("name").rank("dense").alias("_order")
    )
    currents = _pick(several.filter(pl.col("current").is_not_null()), "current", settings).select(
        *_GROUP, pl.col("current").alias("_current")
    )
    picked = _pick(several, "proposed", settings).join(
        currents, on=_GROUP, how="left", nulls_equal=True
    )
    columns = [*owned.collect_schema().names(), "_pods", "_agreeing", "_current"]
    chosen = pl.concat([single.select(columns), picked.select(columns)])
    recommended = values.lazy().select(
        pl.col("kind").alias("owner_kind"),
        "namespace",
        pl.col("name").alias("owner_name"),
        "action",
        pl.col("recommended").alias("_recommended"),
    )
    key = pl.format("{}/{}", pl.col("namespace"), pl.col("owner_name"))
    current_value = pl.col("_current")
    if settings.time_slicing_configmap is not None:  # the entry under the workload's key
        entry = key.replace_strict(current.time_slices, default=None, return_dtype=pl.String)
        current_value = (
            pl.when(pl.col("action") == str(Action.TIME_SLICE)).then(entry).otherwise(current_value)
        )
    agreed = pl.format("{} of {} pods", pl.col("_agreeing"), pl.col("_pods"))
    reason = (
        pl.when(pl.col("reason").is_not_null())
        .then(pl.format("{}: {}", agreed, pl.col("reason")))
        .otherwise(pl.format("{} already at {}", agreed, pl.col("proposed")))
    )
    head = pl.struct(
        pl.col("_pods").alias("pods"),
        pl.col("_agreeing").alias("pods_agreeing"),
        pl.col("name").alias("pod"),
    ).struct.json_encode()
    evidence = pl.col("evidence")
    merged = (
        pl.when(evidence.is_null() | (evidence == "{}"))
        .then(head)
        .otherwise(
            pl.concat_str([head.str.strip_suffix("}"), pl.lit(","), evidence.str.strip_prefix("{")])
        )
    )
    return (
        chosen.join(recommended, on=_GROUP, how="left", nulls_equal=True)
        .join(_pods_opt_out(current), on=_GROUP[:3], how="left", nulls_equal=True)
        .select(
            pl.col("owner_kind").alias("kind"),
            "namespace",
            pl.col("owner_name").alias("name"),
            "action",
            "proposed",
            "proposed_value",
            current_value.alias("current"),
            pl.col("_recommended").alias("recommended"),
            pl.lit(None, pl.String()).alias("default_current"),
            reason.alias("reason"),
            merged.alias("evidence"),
            key.alias("workload"),
            pl.lit(None, pl.String()).alias("owner"),
            pl.col("_member_opt_out").fill_null(False),
        )
    )


def _actuator_rows(
    owned: pl.LazyFrame, current: CurrentState, per_pod: Collection[str]
) -> pl.LazyFrame:
    """Owned pods' rows of the actions whose change is written on each pod (act mode)."""
    workloads = current.objects.lazy().select(
        pl.col("kind").alias("owner_kind"),
        "namespace",
        pl.col("name").alias("owner_name"),
        pl.col("opt_out").alias("_member_opt_out"),
    )
    return (
        owned.filter(pl.col("action").is_in(list(per_pod)))
        .join(workloads.unique(_GROUP[:3]), on=_GROUP[:3], how="left", nulls_equal=True)
        .with_columns(
            pl.format("{}/{}", pl.col("owner_kind"), pl.col("owner_name")).alias("owner"),
            pl.col("_member_opt_out").fill_null(False),
        )
        .drop("owner_kind", "owner_name")
    )


def to_workloads(
    proposals: pl.DataFrame,
    current: CurrentState,
    values: pl.DataFrame,
    settings: ControllerSettings,
    per_pod: Collection[str] = (),
) -> pl.DataFrame:
    """``proposals`` with owned pods' rows replaced by their workloads' (module docstring).

    ``values`` holds each object's ``recommended`` (the workloads' included); ``per_pod`` the
    actions whose change this mode writes on each pod. Adds ``owner`` (``Kind/name`` on a
    pod's actuator row) and ``_member_opt_out``.
    """
    base = proposals.lazy().with_columns(
        pl.lit(None, pl.String()).alias("owner"), pl.lit(False).alias("_member_opt_out")
    )
    if current.owners.height == 0:
        return base.collect(engine=ENGINE)
    owners = current.owners.lazy().select(
        pl.lit("Pod").alias("kind"),
        "namespace",
        pl.col("pod").alias("name"),
        "owner_kind",
        "owner_name",
    )
    tagged = base.join(
        owners.unique(["namespace", "name"]), on=["kind", "namespace", "name"], how="left"
    )
    is_owned = pl.col("action").is_in(POD_ACTIONS) & pl.col("owner_kind").is_not_null()
    owned = tagged.filter(is_owned).drop("_member_opt_out").collect(engine=ENGINE).lazy()
    rest = tagged.filter(~is_owned).drop("owner_kind", "owner_name")
    columns = [*proposals.columns, "owner", "_member_opt_out"]
    parts = [
        rest.select(columns),
        _workload_rows(owned, current, values, settings).select(columns),
        _actuator_rows(owned, current, per_pod).select(columns),
    ]
    return pl.concat(parts, how="vertical_relaxed").collect(engine=ENGINE)


def with_owner_recommendations(
    values: pl.DataFrame, current: CurrentState, actions: Collection[str]
) -> pl.DataFrame:
    """``values`` where an owned pod without its own recommendation for one of ``actions``
    gets its workload's: the level the rule's hysteresis starts from (the pod's state)."""
    if current.owners.height == 0 or values.height == 0:
        return values
    workload_recs = values.lazy().filter(
        pl.col("kind").is_in(list(WORKLOAD_RESOURCES))
        & pl.col("action").is_in(list(actions))
        & pl.col("recommended").is_not_null()
    )
    per_pod = (
        current.owners.lazy()
        .join(
            workload_recs.select(
                pl.col("kind").alias("owner_kind"),
                "namespace",
                pl.col("name").alias("owner_name"),
                "action",
                pl.col("recommended").alias("_owner"),
            ),
            on=["owner_kind", "namespace", "owner_name"],
        )
        .select(
            pl.lit("Pod").alias("kind"),
            "namespace",
            pl.col("pod").alias("name"),
            "action",
            "_owner",
        )
        .unique(_KEYS)
    )
    joined = values.lazy().join(per_pod, on=_KEYS, how="full", coalesce=True, nulls_equal=True)
    return joined.select(
        *_KEYS, "current", pl.coalesce("recommended", "_owner").alias("recommended")
    ).collect(engine=ENGINE)
