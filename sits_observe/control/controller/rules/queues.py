"""Queue quotas as proposals: Kueue ClusterQueues and KAI queues sized from measured use.

Queue-based schedulers hold GPU quota per queue, not per namespace, and set it by allocation;
this rule sizes it from what the queue's pods requested, with exactly the namespace quotas'
rule (:func:`~.rules_quotas.peak_sizing`: the ``percentile_ratio`` quantile of the daily
peaks x (1 + margin) x VPA's confidence factor, held under the largest daily peak x
``peak_factor_max`` and the cluster's allocatable GPUs rounded down), in whole GPUs. Three
values per queue (GPUs; :mod:`.kube_queues` says where each is written):

- ``queue-gpu-quota``: the sized value, as Kueue's ``nominalQuota`` of the queue's GPU flavor
  or KAI's ``quota`` (the share the queue is guaranteed);
- ``queue-gpu-borrowing-limit`` (Kueue, ClusterQueues in a cohort only: the API refuses a
  borrowingLimit without one): the ceiling minus the quota, where the ceiling is the same
  caps, ceil(min(largest daily peak x ``peak_factor_max``, allocatable)): the queue may
  borrow up to the peak cap and no further;
- ``queue-gpu-limit`` (KAI): the ceiling itself (KAI's ``limit`` is absolute).

Each value then goes through the plan's safety like every numeric action: ``max_step_ratio``
from its current value, the GPU quota bounds (``quota.bounds["requests.nvidia.com/gpu"]``),
rounding up, the change threshold and the cooldown. The step limit applies to each field on
its own, so while the quota climbs in steps the borrowing limit already reflects the rule's
quota (the sum reaches the ceiling once the quota arrives). Lending limits and KAI's
``overQuotaWeight`` are read and shown as evidence, never changed.
"""

from __future__ import annotations

import polars as pl

from sits_observe.control.controller.actions import Action
from sits_observe.control.controller.rules.levels import empty, finish, fmt
from sits_observe.control.controller.rules.quotas import peak_sizing, sizing_evidence, sizing_reason
from sits_observe.control.controller.settings import ControllerSettings

#: Column prefix of each action's ``<prefix>_current`` / ``<prefix>_recommended`` in the
#: frame :func:`queue_quotas` takes.
PREFIXES: dict[Action, str] = {
    Action.QUEUE_GPU_QUOTA: "quota",
    Action.QUEUE_GPU_BORROWING_LIMIT: "borrowing",
    Action.QUEUE_GPU_LIMIT: "limit",
}


def queue_quotas(queues: pl.DataFrame, settings: ControllerSettings) -> pl.LazyFrame:
    """Proposals per queue (see the module docstring).

    ``queues`` carries :data:`~.inputs.QUEUE_SIGNALS` and :data:`~.inputs.QUEUE_FACTS_SCHEMA`
    columns and, per action, ``<prefix>_current`` / ``<prefix>_recommended``
    (:data:`PREFIXES`) in GPUs.
    """
    if queues.height == 0:
        return empty()
    frame = (
        peak_sizing(queues.lazy(), settings, pl.col("allocatable").floor())
        .with_columns(
            pl.min_horizontal("_peak_cap", "_held").ceil().alias("_ceiling"),
            pl.col("_value").ceil().alias("_quota"),
        )
        .with_columns((pl.col("_ceiling") - pl.col("_quota")).alias("_borrowing"))
    )
    facts = [
        pl.col("kind").alias("scheduler_kind"),
        pl.col("cohort"),
        pl.col("flavor"),
        pl.col("lending_limit"),
        pl.col("over_quota_weight"),
        pl.col("member_namespaces"),
        pl.col("_ceiling").alias("ceiling"),
    ]
    ceiling_reason = pl.format(
        "ceiling {} GPUs: min(largest daily peak {} x {}, allocatable {})",
        pl.col("_ceiling").cast(pl.Int64),
        fmt(pl.col("daily_peaks").list.max(), 1),
        pl.lit(f"{settings.quota.peak_factor_max:g}"),
        fmt(pl.col("_held"), 0).fill_null("unknown"),
    )
    is_kueue = pl.col("kind") == "ClusterQueue"
    quota = Action.QUEUE_GPU_QUOTA
    # action -> (which queues get it, its exact value, its reason); written rounded up.
    targets = {
        quota: (pl.lit(True), pl.col("_value"), sizing_reason(quota, settings)),
        Action.QUEUE_GPU_BORROWING_LIMIT: (
            is_kueue & pl.col("cohort").is_not_null(),
            pl.col("_borrowing"),
            pl.format(
                "{} minus the quota {} GPUs", ceiling_reason, pl.col("_quota").cast(pl.Int64)
            ),
        ),
        Action.QUEUE_GPU_LIMIT: (~is_kueue, pl.col("_ceiling"), ceiling_reason),
    }
    parts = [
        finish(
            frame.filter(eligible),
            kind=pl.col("kind"),
            action=action,
            name="name",
            namespace=None,
            proposed=value.ceil().cast(pl.Int64).cast(pl.String),
            value=value,
            reason=reason,
            evidence=[*sizing_evidence(), *facts],
            current=pl.col(f"{PREFIXES[action]}_current"),
            recommended=pl.col(f"{PREFIXES[action]}_recommended"),
        )
        for action, (eligible, value, reason) in targets.items()
    ]
    return pl.concat(parts)
