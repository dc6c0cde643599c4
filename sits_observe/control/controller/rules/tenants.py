"""Tenant isolation as proposals: step down the non-critical GPU quota of a tenant whose load
pushes another tenant out of its P99 SLA (SPEC "Namespace SLA example ... else non-critical
work is throttled").

The finding comes from :func:`sits_observe.analytics.serving.tenants.tenant_report` (the victim's
P99 in the bins where the offender's load is high against those where it is low, and their
correlation); this rule only says what to do about it, once per offending namespace (a tenant
that pushes several others out gets one proposal, its strongest finding as the reason, every
victim in the evidence):

- the value stepped from is the offender's non-critical GPUs: the smaller of the GPU key of
  its ResourceQuota ``tenant_throttle_quota_name`` (the quota the operator scopes to the
  non-critical priority classes, ``scopeSelector`` ``PriorityClass In [...]``, and creates to
  opt the namespace in) and the GPUs its non-critical pods request now (priority below
  ``tenant_noncritical_below_priority``; pods without a class count as 0);
- proposed = floor(that x (1 - ``tenant_throttle_step_ratio``)) GPUs; then the plan's safety,
  as for every quota: at most ``max_step_ratio`` from the value in effect, inside the GPU
  quota bounds (``quota.bounds["requests.nvidia.com/gpu"]``, at least 1 GPU by default),
  the change threshold, ``min_change_interval_s`` between two changes, the write rate limit,
  and every decision recorded. Dry-run by default; ``--annotate`` annotates; ``--act``
  writes the quota's ``spec.hard`` (without the quota, the advice is annotated on the
  Namespace and never written).

Level-triggered like every rule: while the finding stands (over ``tenant_window_s``), each
pass after the cooldown may take one more step, down to the bound; the controller never
raises the quota back (the operator does, or the namespace quota rule's own quota holds).
A ResourceQuota never evicts a running pod: the throttle holds back new non-critical pods.
"""

from __future__ import annotations

import polars as pl

from sits_observe.control.controller.actions import Action
from sits_observe.control.controller.rules.levels import empty, finish, fmt
from sits_observe.control.controller.settings import ControllerSettings


def tenant_throttle(offenders: pl.DataFrame, settings: ControllerSettings) -> pl.LazyFrame:
    """One proposal per offending namespace (see the module docstring).

    ``offenders`` carries :data:`~.inputs.TENANT_SIGNALS` of the strongest finding per
    namespace, ``victims`` (every tenant it pushes out, comma-separated), ``target_kind`` /
    ``target_name`` (where the throttle goes) and that object's ``current`` /
    ``recommended`` GPU value.
    """
    if offenders.height == 0:
        return empty()
    step = settings.tenant_throttle_step_ratio
    held = pl.col("current").cast(pl.Float64, strict=False)
    frame = (
        offenders.lazy()
        .with_columns(pl.min_horizontal(held, pl.col("noncritical_gpus")).alias("_base"))
        .filter(pl.col("_base").is_not_null())
        .with_columns((pl.col("_base") * (1.0 - step)).floor().alias("_value"))
    )
    ms = 1000.0
    reason = pl.format(
        "{}'s load ({} {} in {} high-load bins, {} in {} low-load ones) pushes {} out of its "
        "{} ms P99 SLA (P99 {} ms there, {} ms otherwise; correlation {}): non-critical GPU "
        "quota {} x (1 - {})",
        pl.col("namespace"),
        pl.col("load"),
        fmt(pl.col("load_high"), 2),
        pl.col("bins_high"),
        fmt(pl.col("load_low"), 2),
        pl.col("bins_low"),
        pl.col("victim"),
        fmt(pl.col("sla_p99_s") * ms, 1),
        fmt(pl.col("victim_p99_high_s") * ms, 1).fill_null("n/a"),
        fmt(pl.col("victim_p99_low_s") * ms, 1).fill_null("n/a"),
        fmt(pl.col("correlation"), 2),
        fmt(pl.col("_base"), 0),
        pl.lit(f"{step:g}"),
    )
    namespace = (
        pl.when(pl.col("target_kind") == "Namespace")
        .then(pl.lit(None, pl.String()))
        .otherwise(pl.col("namespace"))
    )
    return finish(
        frame,
        kind=pl.col("target_kind"),
        action=Action.TENANT_THROTTLE,
        name="target_name",
        namespace=namespace,
        proposed=pl.col("_value").cast(pl.Int64).cast(pl.String),
        value=pl.col("_value"),
        default_current=pl.col("noncritical_gpus").ceil().cast(pl.Int64).cast(pl.String),
        reason=reason,
        evidence=[
            pl.col("victim"),
            pl.col("victims"),
            pl.col("sla_p99_s"),
            pl.col("victim_p99_high_s"),
            pl.col("victim_p99_low_s"),
            pl.col("load"),
            pl.col("load_high"),
            pl.col("load_low"),
            pl.col("correlation"),
            pl.col("bins_high"),
            pl.col("bins_low"),
            pl.col("breach_high_ratio"),
            pl.col("noncritical_gpus"),
            pl.lit(step).alias("step_ratio"),
        ],
    )
