"""The controller's value types: what it recommends, what it decided, what it wrote.

- :class:`Action` names each decision the spec asks for; :data:`ACTIONS` says, per action,
  which object it concerns, whether its value is numeric (and in which unit), and what
  ``act`` mode changes for it (a label, an annotation, a ResourceQuota key, a Kueue / KAI
  queue's GPU quota field, the time-slicing ConfigMap entry, or nothing: recommendation
  only).
- :class:`Recommendation` is one proposed change on one object, with its reason and evidence
  (for a pod-level action, the object is the pod's owner workload where one was resolved:
  :mod:`.combine`);
  :class:`Decision` is a recommendation after the safety rules (``skip`` says why it will not
  be written); :class:`Plan` holds a pass's decisions as one Polars frame (10,000 pods make
  tens of thousands of rows, so they are materialised as objects only when iterated).
- :class:`Change` is one write ``apply()`` makes; :class:`Outcome` is what became of a
  decision: ``recommended``, ``applied``, ``skipped:<why>`` or ``failed:<why>``.

Values are strings, as they appear in labels, annotations and the ``decisions`` table;
numeric actions use the base unit named in :attr:`ActionSpec.unit` (GPUs, milli-CPU, bytes,
bytes/s), time slices use milliseconds with an ``ms`` suffix.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final, Literal

import polars as pl

from sits_observe.control.controller.actions import Action
from sits_observe.control.controller.quota_settings import QUOTA_CPU, QUOTA_GPU, QUOTA_MEMORY
from sits_observe.control.controller.settings import PREFIX

#: The polars engine every plan query runs on. polars 2.1's default ("auto") picks the
#: streaming engine for some of these queries, and it panics now and then
#: ("assertion failed: i < self.len()" in a string expression; 26 of 200 runs of one recorded
#: demo plan) where the in-memory engine never did (0 of 200). The plans are small, so the
#: in-memory engine costs nothing measurable.
ENGINE: Final = "in-memory"

#: A JSON-able evidence value.
EvidenceValue = str | int | float | bool | None


Actuator = Literal["label", "annotation", "quota", "queue", "configmap", "none"]


@dataclass(frozen=True)
class ActionSpec:
    """How one action is represented and written."""

    action: Action
    #: Kind of the object the rule concerns (quota actions: ResourceQuota, or Namespace when
    #: the namespace has no managed ResourceQuota). A Pod action's decision is made on the
    #: pod's owner workload where one is known (:mod:`.combine`).
    kind: str
    numeric: bool
    unit: str
    #: What ``act`` mode changes: a label or annotation ``key``, a ResourceQuota ``spec.hard``
    #: ``key``, a queue's GPU quota field (per queue kind: :data:`.kube_queues.FIELDS`), the
    #: time-slicing ConfigMap entry (only when one is configured), or nothing.
    actuator: Actuator
    key: str | None
    doc: str


ACTIONS: dict[Action, ActionSpec] = {
    spec.action: spec
    for spec in (
        ActionSpec(
            Action.MEMORY_CLASS,
            "Pod",
            False,
            "L1|L2|L3",
            "label",
            f"{PREFIX}memory-class",
            "memory-sensitivity class from the pod's peak GPU memory",
        ),
        ActionSpec(
            Action.FRAGMENTATION,
            "Node",
            False,
            "low|medium|high",
            "label",
            f"{PREFIX}fragmentation",
            "fragmentation level of the node's idle GPU capacity",
        ),
        ActionSpec(
            Action.TOPOLOGY_POLICY,
            "Node",
            False,
            "policy",
            "none",
            None,
            "kubelet TopologyManager policy (kubelet configuration is not writable via the API)",
        ),
        ActionSpec(
            Action.TIME_SLICE,
            "Pod",
            False,
            "ms",
            "configmap",
            None,
            "GPU time-slice quota of the pod's workload",
        ),
        ActionSpec(
            Action.QOS_MEMORY_QUOTA,
            "Pod",
            True,
            "bytes",
            "annotation",
            f"{PREFIX}qos-memory-quota-bytes",
            "QoS-tier GPU memory quota (elastic rule)",
        ),
        ActionSpec(
            Action.QOS_BANDWIDTH_QUOTA,
            "Pod",
            True,
            "bytes/s",
            "annotation",
            f"{PREFIX}qos-bandwidth-quota-bytes-per-s",
            "QoS-tier bandwidth quota (elastic rule)",
        ),
        ActionSpec(
            Action.PRIORITY_CLASS,
            "Pod",
            False,
            "PriorityClass",
            "none",
            None,
            "priority class from the SLA-violation rate (a running pod's priority is immutable)",
        ),
        ActionSpec(
            Action.QUOTA_GPU,
            "ResourceQuota",
            True,
            "GPUs",
            "quota",
            QUOTA_GPU,
            "namespace GPU quota from measured peaks",
        ),
        ActionSpec(
            Action.QUOTA_CPU,
            "ResourceQuota",
            True,
            "milli-CPU",
            "quota",
            QUOTA_CPU,
            "namespace CPU quota from measured peaks",
        ),
        ActionSpec(
            Action.QUOTA_MEMORY,
            "ResourceQuota",
            True,
            "bytes",
            "quota",
            QUOTA_MEMORY,
            "namespace memory quota from measured peaks",
        ),
        # Queue quotas (:mod:`.rules_queues`): the rule's kind is ClusterQueue (Kueue) or Queue
        # (KAI), both cluster-scoped.
        ActionSpec(
            Action.QUEUE_GPU_QUOTA,
            "ClusterQueue",
            True,
            "GPUs",
            "queue",
            None,
            "queue GPU quota from measured peaks: Kueue nominalQuota, KAI quota",
        ),
        ActionSpec(
            Action.QUEUE_GPU_BORROWING_LIMIT,
            "ClusterQueue",
            True,
            "GPUs",
            "queue",
            None,
            "Kueue ClusterQueue GPU borrowingLimit (in a cohort): the peak cap above nominal",
        ),
        ActionSpec(
            Action.QUEUE_GPU_LIMIT,
            "Queue",
            True,
            "GPUs",
            "queue",
            None,
            "KAI queue GPU limit: the peak cap",
        ),
        # Tenant isolation (:mod:`.rules_tenants`): the GPU key of the offending namespace's
        # ResourceQuota scoped to its non-critical priority classes, else its Namespace.
        ActionSpec(
            Action.TENANT_THROTTLE,
            "ResourceQuota",
            True,
            "GPUs",
            "quota",
            QUOTA_GPU,
            "non-critical GPU quota of a tenant whose load pushes another out of its SLA",
        ),
    )
}

#: Queue actions (:mod:`.rules_queues`) and the kinds of queue they concern.
QUEUE_ACTIONS: tuple[Action, ...] = (
    Action.QUEUE_GPU_QUOTA,
    Action.QUEUE_GPU_BORROWING_LIMIT,
    Action.QUEUE_GPU_LIMIT,
)
QUEUE_KINDS: tuple[str, ...] = ("ClusterQueue", "Queue")

#: ResourceQuota ``spec.hard`` key -> the action that sizes it.
QUOTA_ACTIONS: dict[str, Action] = {
    QUOTA_GPU: Action.QUOTA_GPU,
    QUOTA_CPU: Action.QUOTA_CPU,
    QUOTA_MEMORY: Action.QUOTA_MEMORY,
}


def recommendation_annotation(action: Action | str) -> str:
    """The annotation holding the latest recommendation for ``action`` (JSON)."""
    return f"{PREFIX}recommendation.{action}"


_RECOMMENDATION_PREFIX = recommendation_annotation("")


def recommended_values(annotations: Mapping[str, str]) -> dict[str, str]:
    """action -> ``proposed`` of each recommendation annotation (malformed ones ignored)."""
    found: dict[str, str] = {}
    for key, value in annotations.items():
        if not key.startswith(_RECOMMENDATION_PREFIX):
            continue
        try:
            doc = json.loads(value)
        except ValueError:
            continue
        proposed = doc.get("proposed") if isinstance(doc, dict) else None
        if isinstance(proposed, str):
            found[key[len(_RECOMMENDATION_PREFIX) :]] = proposed
    return found


@dataclass(frozen=True)
class ObjectRef:
    """A Kubernetes object; ``namespace`` is None for cluster-scoped kinds."""

    kind: str
    namespace: str | None
    name: str

    def __str__(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        return f"{self.kind} {where}{self.name}"


@dataclass(frozen=True)
class Recommendation:
    """One proposed change on one object."""

    ref: ObjectRef
    action: Action
    current: str | None
    proposed: str
    reason: str
    evidence: Mapping[str, EvidenceValue] = field(default_factory=dict)
    #: ``namespace/workload`` of a pod's owner (time slices are per workload).
    workload: str | None = None
    #: ``Kind/name`` of the workload holding this pod's recommendation annotation: set on a
    #: pod decision that only writes the pod's own label or annotation (act mode); None: the
    #: recommendation annotation goes on ``ref`` itself.
    owner: str | None = None


@dataclass(frozen=True)
class Decision:
    """A recommendation after the safety rules; ``skip`` (``gone``, ``opt-out``,
    ``not-opted-in``, ``cooldown``) when not written."""

    recommendation: Recommendation
    skip: str | None = None

    @property
    def ref(self) -> ObjectRef:
        """The object concerned."""
        return self.recommendation.ref

    @property
    def action(self) -> Action:
        """The action."""
        return self.recommendation.action


@dataclass(frozen=True)
class Change:
    """One write: set (or, with ``value`` None, remove) ``key`` of ``field`` on ``target``."""

    target: ObjectRef
    field: Literal["label", "annotation", "quota", "queue", "configmap"]
    key: str
    value: str | None


@dataclass(frozen=True)
class Outcome:
    """What became of one decision."""

    decision: Decision
    #: ``recommended`` | ``applied`` | ``skipped:<why>`` | ``failed:<why>``.
    outcome: str
    attempts: int
    at: datetime
    mode: str
    detail: str | None = None


#: Columns of :attr:`Plan.frame` (all strings; ``skip``, ``workload`` and ``owner`` may be
#: null).
PLAN_SCHEMA: dict[str, pl.DataType] = {
    "kind": pl.String(),
    "namespace": pl.String(),
    "name": pl.String(),
    "action": pl.String(),
    "current": pl.String(),
    "proposed": pl.String(),
    "reason": pl.String(),
    "evidence": pl.String(),
    "skip": pl.String(),
    "workload": pl.String(),
    "owner": pl.String(),
}


@dataclass(frozen=True, eq=False)
class Plan:
    """One pass's decisions, as a frame with :data:`PLAN_SCHEMA` columns.

    ``suppressed`` counts proposals dropped before becoming decisions, by reason
    (``unchanged``, ``below-threshold``, ``already-recommended``).
    """

    at: datetime
    frame: pl.DataFrame
    suppressed: Mapping[str, int] = field(default_factory=dict)

    def __len__(self) -> int:
        return self.frame.height

    def decisions(self) -> Iterator[Decision]:
        """The decisions as objects, in the frame's order."""
        for row in self.frame.iter_rows(named=True):
            yield decision_from_row(row)

    def recommendations(self) -> list[dict[str, object]]:
        """Decisions that are not skipped, as ``recommend`` prints them."""
        rows = self.frame.filter(pl.col("skip").is_null())
        return [
            {
                "kind": r["kind"],
                "namespace": r["namespace"],
                "name": r["name"],
                "action": r["action"],
                "current": r["current"],
                "proposed": r["proposed"],
                "reason": r["reason"],
                "evidence": json.loads(r["evidence"]) if r["evidence"] else {},
            }
            for r in rows.iter_rows(named=True)
        ]


def decision_from_row(row: Mapping[str, object]) -> Decision:
    """A :class:`Decision` from one plan-frame row."""
    evidence_text = row.get("evidence")
    evidence = json.loads(str(evidence_text)) if evidence_text else {}
    namespace = row.get("namespace")
    current = row.get("current")
    skip = row.get("skip")
    workload = row.get("workload")
    owner = row.get("owner")
    rec = Recommendation(
        ref=ObjectRef(
            str(row["kind"]), None if namespace is None else str(namespace), str(row["name"])
        ),
        action=Action(str(row["action"])),
        current=None if current is None else str(current),
        proposed=str(row["proposed"]),
        reason=str(row["reason"]),
        evidence=evidence,
        workload=None if workload is None else str(workload),
        owner=None if owner is None else str(owner),
    )
    return Decision(rec, None if skip is None else str(skip))


def empty_plan(at: datetime) -> Plan:
    """A plan with no decisions."""
    return Plan(at, pl.DataFrame(schema=PLAN_SCHEMA))
