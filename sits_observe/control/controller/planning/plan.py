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
from sits_observe.control.controller.kube import WORKLOAD_RESOURCES
from sits_observe.control.controller.planning.inputs import CurrentState, History, Signals
from sits_observe.control.controller.planning.model import (
    ACTIONS,
    ENGINE,
    PLAN_SCHEMA,
    QUEUE_KINDS,
    Plan,
)
from sits_observe.control.controller.planning.proposals import KEYS, actuable, propose
from sits_observe.control.controller.planning.safety import below_threshold, clamp, limit_step
from sits_observe.control.controller.quota_settings import QUOTA_GPU
from sits_observe.control.controller.rules import (
    quotas as rules_quotas,
)
from sits_observe.control.controller.settings import ControllerSettings, NamespaceSelection
from sits_observe.domain.times import utc_naive
from sits_observe.tracing import note_queue_depth, traced

#: Hard bounds of the QoS quotas (the elastic rule bounds them further).
_QOS_BOUNDS = {
    Action.QOS_MEMORY_QUOTA: (0.0, float(2**50)),
    Action.QOS_BANDWIDTH_QUOTA: (1.0, 1e13),
}


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
