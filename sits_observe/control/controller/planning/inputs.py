"""The three inputs of the controller's :func:`~.plan.plan`, as typed Polars frames.

- :class:`Signals`: what was measured (from the store, by :mod:`.store_signals`, or
  synthetic in tests and the benchmark), one frame per subject: nodes, pods, namespaces,
  scheduler queues (:mod:`.store_queues`, from the queue membership the cluster holds), and
  tenants pushing others out of their SLA (:mod:`sits_observe.analytics.serving.tenants`).
- :class:`CurrentState`: what the cluster holds now (read by :mod:`.state`): which objects
  exist and are opted out (and, for namespaces, their selection label), the current value of
  each action, the latest recommendation annotation, and the workload that owns each pod;
  the Kueue / KAI queues' facts and which namespaces and pods each queue's use comes from
  (:class:`QueueState`, read by :mod:`.kube_queues`).
- :class:`History`: the controller's own past decisions (from the ``decisions`` table), for
  cooldowns and, in dry-run mode, to know what was already recommended.

Each frame has a fixed schema (``*_SCHEMA`` below, units in the names); :func:`conform`
casts a frame to it and adds missing nullable columns, so callers may leave out what they
did not measure. A null signal means "not measured": the rule that needs it does not fire.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime

import polars as pl

NODE_SIGNALS: dict[str, pl.DataType] = {
    "node": pl.String(),
    # FGD fragmentation of the node's idle GPU capacity: F_n(M) / R_n (0-1).
    "fragmentation_ratio": pl.Float64(),
    # SPEC interference score (0-1) and whether an input was missing (counted 0).
    "interference_score": pl.Float64(),
    "interference_partial": pl.Boolean(),
    # True when the spec's "3 consecutive sync delays above 80 ms" fired.
    "sync_delay_breached": pl.Boolean(),
}

POD_SIGNALS: dict[str, pl.DataType] = {
    "namespace": pl.String(),
    "pod": pl.String(),
    "workload": pl.String(),
    "node": pl.String(),
    "priority_class": pl.String(),
    "peak_gpu_memory_bytes": pl.Int64(),
    "p95_latency_s": pl.Float64(),
    "p99_latency_s": pl.Float64(),
    "sequence_tokens": pl.Float64(),
    "sla_p99_s": pl.Float64(),
    "sla_violation_ratio": pl.Float64(),
    # Elastic-rule inputs of the pod's GPU over the spec's 5 s window.
    "gpu_util_ratio": pl.Float64(),
    "link_saturation_ratio": pl.Float64(),
    "link_capacity_bytes_per_s": pl.Float64(),
}

NAMESPACE_SIGNALS: dict[str, pl.DataType] = {
    "namespace": pl.String(),
    # A ResourceQuota spec.hard key (settings.QUOTA_RESOURCES).
    "resource": pl.String(),
    # Peak of the namespace's summed requests per day, oldest first, in the resource's base
    # unit: GPUs, milli-CPU or bytes.
    "daily_peaks": pl.List(pl.Float64()),
    # The cluster's allocatable of the resource (latest node snapshot), in the same unit;
    # null = unknown (no proposal is then held under it).
    "allocatable": pl.Float64(),
    # What the namespace's pods (Pending ones too, as a ResourceQuota counts them) request in
    # the latest inventory snapshot, in the same unit: no proposal goes below it; null =
    # unknown.
    "running": pl.Float64(),
    # Seconds of history behind the peaks: from the namespace's first snapshot in the
    # look-back to the latest; null = one day per daily peak.
    "history_s": pl.Float64(),
}

#: One row per scheduler queue with measured use (:mod:`.rules_queues`).
QUEUE_SIGNALS: dict[str, pl.DataType] = {
    # ClusterQueue (Kueue) or Queue (KAI); both are cluster-scoped.
    "kind": pl.String(),
    "name": pl.String(),
    # Peak of the GPUs requested by the queue's member pods per day, oldest first (GPUs).
    "daily_peaks": pl.List(pl.Float64()),
    # The cluster's allocatable GPUs (latest node snapshot); null = unknown.
    "allocatable": pl.Float64(),
}

#: One row per (offending tenant, tenant it pushes out of its SLA): the evidence of
#: :func:`sits_observe.analytics.serving.tenants.tenant_report` and the offender's non-critical
#: GPUs.
TENANT_SIGNALS: dict[str, pl.DataType] = {
    # The offending tenant (its non-critical work is what a throttle holds back).
    "namespace": pl.String(),
    "victim": pl.String(),
    "sla_p99_s": pl.Float64(),
    # The victim's exact P99 over its requests in the high-load / low-load bins.
    "victim_p99_high_s": pl.Float64(),
    "victim_p99_low_s": pl.Float64(),
    # Which load (TenantSettings.load) and the offender's mean of it on each side.
    "load": pl.String(),
    "load_high": pl.Float64(),
    "load_low": pl.Float64(),
    "correlation": pl.Float64(),
    "bins_high": pl.Int64(),
    "bins_low": pl.Int64(),
    "breach_high_ratio": pl.Float64(),
    # GPUs the offender's non-critical pods request now (latest inventory); null = unknown.
    "noncritical_gpus": pl.Float64(),
}

#: What the cluster says of each queue beyond its quota values (evidence, eligibility).
QUEUE_FACTS_SCHEMA: dict[str, pl.DataType] = {
    "kind": pl.String(),
    "name": pl.String(),
    # Kueue: the ClusterQueue's cohort (a borrowingLimit needs one); KAI: the parent queue.
    "cohort": pl.String(),
    # Kueue: the ResourceFlavor holding the queue's GPU quota; null for KAI.
    "flavor": pl.String(),
    # Kueue lendingLimit / KAI lendingLimit of the GPU quota (GPUs); null = none set.
    "lending_limit": pl.Float64(),
    # KAI overQuotaWeight of the GPU resource; null for Kueue.
    "over_quota_weight": pl.Float64(),
    # Namespaces whose pods count as the queue's use.
    "member_namespaces": pl.Int64(),
}

#: Which pods' use counts as a queue's: a whole namespace (``pod`` null) or one pod.
QUEUE_MEMBERS_SCHEMA: dict[str, pl.DataType] = {
    "kind": pl.String(),
    "queue": pl.String(),
    "namespace": pl.String(),
    "pod": pl.String(),
}

OBJECTS_SCHEMA: dict[str, pl.DataType] = {
    "kind": pl.String(),
    "namespace": pl.String(),
    "name": pl.String(),
    "opt_out": pl.Boolean(),
    # Namespaces only: the selection label (``namespace_label``): True opted in, False opted
    # out, null unlabelled (or not a Namespace).
    "enabled": pl.Boolean(),
}

#: The workload each pod's recommendations go to (pods without a resolvable owner: no row).
OWNERS_SCHEMA: dict[str, pl.DataType] = {
    "namespace": pl.String(),
    "pod": pl.String(),
    # Deployment, StatefulSet, DaemonSet, Job or CronJob (``control.kube.WORKLOAD_RESOURCES``).
    "owner_kind": pl.String(),
    "owner_name": pl.String(),
}

VALUES_SCHEMA: dict[str, pl.DataType] = {
    "kind": pl.String(),
    "namespace": pl.String(),
    "name": pl.String(),
    "action": pl.String(),
    # The value in effect (label, quota key, QoS annotation, pod's priority class); null =
    # unknown or unset.
    "current": pl.String(),
    # The ``proposed`` of the object's recommendation annotation for this action.
    "recommended": pl.String(),
}

HISTORY_SCHEMA: dict[str, pl.DataType] = {
    "kind": pl.String(),
    "namespace": pl.String(),
    "name": pl.String(),
    "action": pl.String(),
    # The latest decision recorded for the key.
    "proposed": pl.String(),
    "outcome": pl.String(),
    "mode": pl.String(),
    "decided_at": pl.Datetime("us"),
    # The latest time the controller wrote a new value for the key to the cluster (applied,
    # or a recommendation annotated outside dry-run; null: never); the cooldown counts from it.
    "changed_at": pl.Datetime("us"),
}


def conform(frame: pl.DataFrame | None, schema: dict[str, pl.DataType]) -> pl.DataFrame:
    """``frame`` with exactly ``schema``'s columns, in order; missing ones are null.

    Raises ``ValueError`` naming unknown columns, so a misspelt signal is never ignored.
    """
    if frame is None:
        return pl.DataFrame(schema=schema)
    unknown = [c for c in frame.columns if c not in schema]
    if unknown:
        raise ValueError(
            f"unknown column(s) {', '.join(unknown)}; valid columns: {', '.join(schema)}"
        )
    return frame.select(
        [
            pl.col(name).cast(dtype) if name in frame.columns else pl.lit(None, dtype).alias(name)
            for name, dtype in schema.items()
        ]
    )


@dataclass(frozen=True, eq=False)
class Signals:
    """Measured inputs of one control pass (frames conformed to the ``*_SIGNALS`` schemas)."""

    at: datetime
    nodes: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=NODE_SIGNALS))
    pods: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=POD_SIGNALS))
    namespaces: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=NAMESPACE_SIGNALS))
    queues: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=QUEUE_SIGNALS))
    tenants: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=TENANT_SIGNALS))

    @classmethod
    def of(
        cls,
        at: datetime,
        *,
        nodes: pl.DataFrame | None = None,
        pods: pl.DataFrame | None = None,
        namespaces: pl.DataFrame | None = None,
        queues: pl.DataFrame | None = None,
        tenants: pl.DataFrame | None = None,
    ) -> Signals:
        """Signals with each frame conformed (missing columns null)."""
        return cls(
            at,
            conform(nodes, NODE_SIGNALS),
            conform(pods, POD_SIGNALS),
            conform(namespaces, NAMESPACE_SIGNALS),
            conform(queues, QUEUE_SIGNALS),
            conform(tenants, TENANT_SIGNALS),
        )

    def with_queues(self, queues: pl.DataFrame | None) -> Signals:
        """These signals with the queue frame replaced (conformed)."""
        return replace(self, queues=conform(queues, QUEUE_SIGNALS))


@dataclass(frozen=True, eq=False)
class QueueState:
    """The scheduler queues the cluster holds (:mod:`.kube_queues`): the queue objects and
    their quota values in :data:`OBJECTS_SCHEMA` / :data:`VALUES_SCHEMA` form, their facts,
    their members, and the sources that could not be read (each counted as an error)."""

    objects: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=OBJECTS_SCHEMA))
    values: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=VALUES_SCHEMA))
    facts: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=QUEUE_FACTS_SCHEMA))
    members: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=QUEUE_MEMBERS_SCHEMA))
    errors: tuple[str, ...] = ()

    @classmethod
    def of(
        cls,
        *,
        objects: pl.DataFrame | None = None,
        values: pl.DataFrame | None = None,
        facts: pl.DataFrame | None = None,
        members: pl.DataFrame | None = None,
        errors: tuple[str, ...] = (),
    ) -> QueueState:
        """A queue state with each frame conformed."""
        return cls(
            conform(objects, OBJECTS_SCHEMA),
            conform(values, VALUES_SCHEMA),
            conform(facts, QUEUE_FACTS_SCHEMA),
            conform(members, QUEUE_MEMBERS_SCHEMA),
            errors,
        )


@dataclass(frozen=True, eq=False)
class CurrentState:
    """What the cluster holds (or, offline, what the store knows of it).

    ``complete`` is False when the objects could not be listed (offline ``recommend``): then
    every subject is assumed to exist, not to be opted out and in a selected namespace.
    """

    objects: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=OBJECTS_SCHEMA))
    values: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=VALUES_SCHEMA))
    #: ``namespace/workload`` -> time slice (``25ms``) found in the time-slicing ConfigMap.
    time_slices: dict[str, str] = field(default_factory=dict)
    complete: bool = True
    #: Pod -> owning workload (:data:`OWNERS_SCHEMA`); empty offline.
    owners: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=OWNERS_SCHEMA))
    #: The scheduler queues (their objects and values are in ``objects`` / ``values`` too).
    queues: QueueState = field(default_factory=QueueState.of)

    @classmethod
    def of(
        cls,
        *,
        objects: pl.DataFrame | None = None,
        values: pl.DataFrame | None = None,
        time_slices: dict[str, str] | None = None,
        complete: bool = True,
        owners: pl.DataFrame | None = None,
    ) -> CurrentState:
        """A state with each frame conformed."""
        return cls(
            conform(objects, OBJECTS_SCHEMA),
            conform(values, VALUES_SCHEMA),
            dict(time_slices or {}),
            complete,
            conform(owners, OWNERS_SCHEMA),
        )

    def with_queues(self, queues: QueueState) -> CurrentState:
        """This state with ``queues``' objects and values added (the queues replaced)."""
        return replace(
            self,
            objects=pl.concat([self.objects, queues.objects]),
            values=pl.concat([self.values, queues.values]),
            queues=queues,
        )


@dataclass(frozen=True, eq=False)
class History:
    """The latest recorded decision per (kind, namespace, name, action)."""

    latest: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=HISTORY_SCHEMA))

    @classmethod
    def of(cls, latest: pl.DataFrame | None = None) -> History:
        """A history with the frame conformed."""
        return cls(conform(latest, HISTORY_SCHEMA))
