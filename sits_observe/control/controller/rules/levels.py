"""The decision rules as proposals: signals (+ each object's current level) -> proposals.

Each function takes one signals frame joined with a ``state`` column (the level the object
is at as far as the controller knows: its latest recommendation, else the value in effect;
null when none) and returns rows of :data:`PROPOSAL_SCHEMA`. The spec's class rules are not
implemented here (the list below only summarises them): each function evaluates the rule of
:mod:`sits_observe.analytics.classes.rules` and adds only what the controller adds around it:

- hysteresis (:mod:`.safety`): a level rule's boundaries go through
  :func:`~.safety.hysteresis_levels`; a threshold rule gets :func:`hysteresis_band` for the
  objects already holding its outcome, so they keep it until the signal falls that far below
  the boundary. With a null state every rule answers exactly as analytics does (tests check
  this against the scalar oracle on random inputs);
- which objects get a proposal, and the reason and evidence written with it.

The topology policy and fragmentation levels compare the controller's own settings
(:mod:`sits_observe.analytics.topology.interference` holds the interference score itself).

Rules (SPEC "Workload classes and QoS tiers", "Topology and interference"; thresholds in
:class:`~sits_observe.control.controller.settings.ControllerSettings`):

- memory class per pod from peak GPU memory: L1 < 2 GiB <= L2 <= 8 GiB < L3;
- fragmentation level per node: low <= 0.3 < medium <= 0.7 < high;
- TopologyManager policy per node: best-effort after 3 slow syncs, else single-numa-node when
  the interference score is above 0.65, else (only where something was recommended before)
  ``none``, kubelet's default;
- time slice per pod: P95 > 10 ms -> 25 ms, else sequence > 4096 tokens -> 10 ms, else 15 ms
  (no proposal for a pod with neither measured);
- priority class per pod: SLA-violation rate > 5% -> the next lower class (evidence says
  whether the node's fragmentation > 70% allows preemption).

The quota rules (QoS tiers with the elastic rule, namespace ResourceQuotas) are in
:mod:`.rules_quotas`.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import polars as pl

from sits_observe.analytics.classes import rules as class_rules
from sits_observe.analytics.settings import GIB
from sits_observe.control.controller.actions import Action
from sits_observe.control.controller.planning.safety import above_with_hysteresis, hysteresis_levels
from sits_observe.control.controller.settings import ControllerSettings

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

PROPOSAL_SCHEMA: dict[str, pl.DataType] = {
    "kind": pl.String(),
    "namespace": pl.String(),
    "name": pl.String(),
    "action": pl.String(),
    "proposed": pl.String(),
    # Numeric actions: the raw proposal in the action's unit, before step / bounds.
    "proposed_value": pl.Float64(),
    # The value in effect and the latest recommendation, as the plan joined them.
    "current": pl.String(),
    "recommended": pl.String(),
    # The value in effect when the object shows none (QoS quotas: the tier's).
    "default_current": pl.String(),
    "reason": pl.String(),
    "evidence": pl.String(),
    "workload": pl.String(),
}

MEMORY_LEVELS = class_rules.MEMORY_CLASSES
FRAGMENTATION_LEVELS = ("low", "medium", "high")
SINGLE_NUMA_NODE = "single-numa-node"
BEST_EFFORT = "best-effort"
NO_POLICY = "none"


def empty() -> pl.LazyFrame:
    """A proposal frame with no rows."""
    return pl.LazyFrame(schema=PROPOSAL_SCHEMA)


def floats(frame: pl.DataFrame, column: str) -> FloatArray:
    """``column`` as float64 with NaN for null (not measured)."""
    return frame.get_column(column).cast(pl.Float64).fill_null(float("nan")).to_numpy()


def _state_codes(frame: pl.DataFrame, names: tuple[str, ...]) -> IntArray:
    mapping = {name: i for i, name in enumerate(names)}
    codes = frame.get_column("state").replace_strict(mapping, default=-1, return_dtype=pl.Int64)
    return codes.fill_null(-1).to_numpy()


def finish(
    frame: pl.DataFrame | pl.LazyFrame,
    *,
    kind: str | pl.Expr,
    action: Action,
    name: str,
    namespace: str | pl.Expr | None,
    proposed: pl.Expr,
    reason: pl.Expr,
    evidence: list[pl.Expr],
    value: pl.Expr | None = None,
    default_current: pl.Expr | None = None,
    workload: pl.Expr | None = None,
    in_effect: pl.Expr | None = None,
    current: pl.Expr | None = None,
    recommended: pl.Expr | None = None,
) -> pl.LazyFrame:
    """Shape rows of ``frame`` (already filtered to those with a proposal) as proposals.

    ``in_effect`` is the value in effect; rows proposing exactly it are kept (so the plan can
    count them as unchanged) without the reason and evidence, which cost the most to build.
    ``current`` / ``recommended`` default to the frame's columns of those names.
    """
    lazy = frame.lazy()
    keys = [
        (pl.lit(kind) if isinstance(kind, str) else kind).alias("kind"),
        _namespace_expr(namespace).alias("namespace"),
        pl.col(name).alias("name"),
        pl.lit(str(action)).alias("action"),
        proposed.alias("proposed"),
        (value if value is not None else pl.lit(None, pl.Float64())).alias("proposed_value"),
        (default_current if default_current is not None else pl.lit(None, pl.String())).alias(
            "default_current"
        ),
        (workload if workload is not None else pl.lit(None, pl.String())).alias("workload"),
        (current if current is not None else pl.col("current")).alias("current"),
        (recommended if recommended is not None else pl.col("recommended")).alias("recommended"),
    ]
    details = [reason.alias("reason"), pl.struct(evidence).struct.json_encode().alias("evidence")]
    if in_effect is None:
        return _shaped(lazy.select(*keys, *details))
    lazy = lazy.with_columns(proposed.eq_missing(in_effect).fill_null(False).alias("_same"))
    blank = [pl.lit(None, pl.String()).alias("reason"), pl.lit(None, pl.String()).alias("evidence")]
    # Filtering before the select builds reasons and evidence for changed rows only.
    return pl.concat(
        [
            _shaped(lazy.filter(pl.col("_same")).select(*keys, *blank)),
            _shaped(lazy.filter(~pl.col("_same")).select(*keys, *details)),
        ]
    )


def hysteresis_band(engaged: pl.Expr, settings: ControllerSettings) -> pl.Expr:
    """Per row, the fraction a threshold rule's boundary is lowered by: the hysteresis band
    where ``engaged`` (the object already holds the rule's outcome), else 0 (the spec's
    boundary exactly). The same test as :func:`~.safety.above_with_hysteresis`."""
    return pl.when(engaged.fill_null(False)).then(settings.hysteresis_ratio).otherwise(0.0)


def _namespace_expr(namespace: str | pl.Expr | None) -> pl.Expr:
    if namespace is None:
        return pl.lit(None, pl.String())
    return pl.col(namespace) if isinstance(namespace, str) else namespace


def _shaped(lazy: pl.LazyFrame) -> pl.LazyFrame:
    return lazy.select(list(PROPOSAL_SCHEMA)).cast(PROPOSAL_SCHEMA)  # type: ignore[arg-type]


def fmt(expr: pl.Expr, digits: int = 3) -> pl.Expr:
    """A number rounded for a reason text."""
    return expr.round(digits).cast(pl.String)


# -- labels --------------------------------------------------------------------------------


def memory_class(pods: pl.DataFrame, settings: ControllerSettings) -> pl.LazyFrame:
    """Memory-sensitivity class label per pod from ``peak_gpu_memory_bytes``."""
    c = settings.classes
    bounds = class_rules.memory_class_bounds(c)
    level = hysteresis_levels(
        floats(pods, "peak_gpu_memory_bytes"),
        _state_codes(pods, bounds.names),
        list(bounds.boundaries),
        list(bounds.inclusive),
        settings.hysteresis_ratio,
    )
    frame = pods.lazy().with_columns(pl.Series("_level", level)).filter(pl.col("_level") >= 0)
    proposed = pl.col("_level").replace_strict(dict(enumerate(bounds.names)))
    gib = pl.col("peak_gpu_memory_bytes") / GIB
    return finish(
        frame,
        kind="Pod",
        action=Action.MEMORY_CLASS,
        name="pod",
        namespace="namespace",
        proposed=proposed,
        reason=pl.format(
            "peak GPU memory {} GiB: L1 < {} GiB <= L2 <= {} GiB < L3",
            fmt(gib, 2),
            pl.lit(f"{c.l1_below_bytes / GIB:g}"),
            pl.lit(f"{c.l3_above_bytes / GIB:g}"),
        ),
        evidence=[pl.col("peak_gpu_memory_bytes"), pl.col("node")],
        in_effect=pl.col("current"),
    )


def fragmentation_level(nodes: pl.DataFrame, settings: ControllerSettings) -> pl.LazyFrame:
    """Fragmentation level label per node from ``fragmentation_ratio``."""
    low, high = settings.fragmentation_medium_above_ratio, settings.fragmentation_high_above_ratio
    level = hysteresis_levels(
        floats(nodes, "fragmentation_ratio"),
        _state_codes(nodes, FRAGMENTATION_LEVELS),
        [low, high],
        [False, False],
        settings.hysteresis_ratio,
    )
    frame = nodes.lazy().with_columns(pl.Series("_level", level)).filter(pl.col("_level") >= 0)
    return finish(
        frame,
        kind="Node",
        action=Action.FRAGMENTATION,
        name="node",
        namespace=None,
        proposed=pl.col("_level").replace_strict(dict(enumerate(FRAGMENTATION_LEVELS))),
        reason=pl.format(
            "fragmentation {}: low <= {} < medium <= {} < high",
            fmt(pl.col("fragmentation_ratio")),
            pl.lit(f"{low:g}"),
            pl.lit(f"{high:g}"),
        ),
        evidence=[pl.col("fragmentation_ratio")],
        in_effect=pl.col("current"),
    )


# -- node policy ---------------------------------------------------------------------------


def topology_policy(nodes: pl.DataFrame, settings: ControllerSettings) -> pl.LazyFrame:
    """TopologyManager policy per node from the interference score and sync delays."""
    s = settings.interference
    engaged = nodes.get_column("state").eq(SINGLE_NUMA_NODE).fill_null(False).to_numpy()
    single = above_with_hysteresis(
        floats(nodes, "interference_score"), s.threshold_ratio, engaged, settings.hysteresis_ratio
    )
    breached = nodes.get_column("sync_delay_breached").fill_null(False)
    frame = (
        nodes.lazy()
        .with_columns(
            pl.when(pl.lit(breached))
            .then(pl.lit(BEST_EFFORT))
            .when(pl.lit(pl.Series(single)))
            .then(pl.lit(SINGLE_NUMA_NODE))
            .when(pl.col("state").is_not_null())
            .then(pl.lit(NO_POLICY))
            .otherwise(pl.lit(None, pl.String()))
            .alias("_policy")
        )
        .filter(pl.col("_policy").is_not_null())
    )
    score = fmt(pl.col("interference_score"))
    partial = (
        pl.when(pl.col("interference_partial").fill_null(False))
        .then(pl.lit(" (partial data: missing inputs counted as 0)"))
        .otherwise(pl.lit(""))
    )
    reason = (
        pl.when(pl.col("_policy") == BEST_EFFORT)
        .then(
            pl.lit(
                f"{s.sync_delay_consecutive} consecutive sync delays above "
                f"{s.sync_delay_threshold_s * 1000:g} ms"
            )
        )
        .when(pl.col("_policy") == SINGLE_NUMA_NODE)
        .then(
            pl.format(
                "interference score {} > {}{}", score, pl.lit(f"{s.threshold_ratio:g}"), partial
            )
        )
        .otherwise(
            pl.format(
                "interference score {} back below {}{}",
                score,
                pl.lit(f"{s.threshold_ratio:g}"),
                partial,
            )
        )
    )
    return finish(
        frame,
        kind="Node",
        action=Action.TOPOLOGY_POLICY,
        name="node",
        namespace=None,
        proposed=pl.col("_policy"),
        reason=reason,
        evidence=[
            pl.col("interference_score"),
            pl.col("interference_partial"),
            pl.col("sync_delay_breached"),
        ],
        in_effect=pl.col("current"),
    )


# -- per-pod quotas and classes ------------------------------------------------------------


def slice_label(slice_s: float) -> str:
    """A time slice as written: ``25ms``."""
    return f"{slice_s * 1000:g}ms"


def time_slice(pods: pl.DataFrame, settings: ControllerSettings) -> pl.LazyFrame:
    """GPU time-slice quota per pod (the same for every pod of a workload)."""
    c = settings.classes
    labels = {
        class_rules.SLICE_P95: slice_label(c.slice_long_s),
        class_rules.SLICE_SEQUENCE: slice_label(c.slice_short_s),
        class_rules.SLICE_DEFAULT: slice_label(c.slice_default_s),
    }
    state = pl.col("state")
    rule = class_rules.time_slice_rule(
        pl.col("p95_latency_s"),
        pl.col("sequence_tokens"),
        c,
        p95_band=hysteresis_band(state == labels[class_rules.SLICE_P95], settings),
        sequence_band=hysteresis_band(state == labels[class_rules.SLICE_SEQUENCE], settings),
    )
    # Without either input there is no evidence for a slice: no proposal.
    frame = (
        pods.lazy()
        .with_columns(rule.alias("_rule"))
        .with_columns(
            pl.col("_rule").replace_strict(labels, return_dtype=pl.String).alias("_slice")
        )
        .filter(pl.col("p95_latency_s").is_not_null() | pl.col("sequence_tokens").is_not_null())
    )
    p95_ms = fmt(pl.col("p95_latency_s") * 1000, 2)
    reason = (
        pl.when(pl.col("_rule") == class_rules.SLICE_P95)
        .then(pl.format("p95 {} ms > {} ms", p95_ms, pl.lit(f"{c.slice_p95_above_s * 1000:g}")))
        .when(pl.col("_rule") == class_rules.SLICE_SEQUENCE)
        .then(
            pl.format(
                "sequence {} tokens > {}",
                fmt(pl.col("sequence_tokens"), 0),
                pl.lit(str(c.slice_sequence_above_tokens)),
            )
        )
        .otherwise(
            pl.format(
                "default: p95 {} ms, sequence {} tokens",
                p95_ms.fill_null("n/a"),
                fmt(pl.col("sequence_tokens"), 0).fill_null("n/a"),
            )
        )
    )
    return finish(
        frame,
        kind="Pod",
        action=Action.TIME_SLICE,
        name="pod",
        namespace="namespace",
        proposed=pl.col("_slice"),
        reason=reason,
        evidence=[pl.col("p95_latency_s"), pl.col("sequence_tokens"), pl.col("workload")],
        workload=pl.col("workload_key"),
        in_effect=pl.col("current"),
    )


def priority_class(pods: pl.DataFrame, settings: ControllerSettings) -> pl.LazyFrame:
    """Priority-class recommendation per pod from its SLA-violation rate.

    ``pods`` carries ``recommended`` (the class recommended before, if any) and
    ``fragmentation_ratio`` of its node. A recommendation is withdrawn (the pod's own class
    proposed) once the rate falls back below the threshold with hysteresis. Any other pod
    whose rate was measured proposes its own class: no change (counted ``unchanged``), which
    is its vote when the pods of one workload are combined (:mod:`.combine`), so one pod
    missing its SLA does not speak for all its replicas.
    """
    c = settings.classes
    engaged = (
        pl.col("recommended").is_not_null() & (pl.col("recommended") != pl.col("priority_class"))
    ).fill_null(False)
    violating = class_rules.sla_violated(
        pl.col("sla_violation_ratio"), c, band=hysteresis_band(engaged, settings)
    )
    frame = (
        pods.lazy()
        .with_columns(violating.alias("_violating"), engaged.alias("_engaged"))
        .with_columns(
            pl.when(pl.col("_violating"))
            .then(class_rules.lower_priority_class(pl.col("priority_class"), c))
            .when(pl.col("_engaged") | pl.col("sla_violation_ratio").is_not_null())
            .then(pl.col("priority_class"))
            .otherwise(pl.lit(None, pl.String()))
            .alias("_proposed")
        )
        .filter(pl.col("_proposed").is_not_null() & pl.col("priority_class").is_not_null())
    )
    rate = fmt(pl.col("sla_violation_ratio") * 100, 2)
    limit = pl.lit(f"{c.sla_violation_above_ratio * 100:g}")
    reason = (
        pl.when(pl.col("_violating"))
        .then(pl.format("SLA violation {}% > {}%: next lower priority class", rate, limit))
        .otherwise(
            pl.format(
                "SLA violation {}% back below {}%: keep the current class",
                rate.fill_null("n/a"),
                limit,
            )
        )
    )
    preempt = class_rules.preemption_policy(pl.col("fragmentation_ratio"), c)
    return finish(
        frame,
        kind="Pod",
        action=Action.PRIORITY_CLASS,
        name="pod",
        namespace="namespace",
        proposed=pl.col("_proposed"),
        default_current=pl.col("priority_class"),
        reason=reason,
        evidence=[
            pl.col("sla_violation_ratio"),
            pl.col("p99_latency_s"),
            pl.col("sla_p99_s"),
            pl.col("fragmentation_ratio").alias("node_fragmentation_ratio"),
            preempt.alias("preemption_policy"),
        ],
        in_effect=pl.coalesce("current", "priority_class"),
    )
