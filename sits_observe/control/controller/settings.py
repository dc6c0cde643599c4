"""Typed settings of the controller: modes, decision rules, safety rules, writes and the lease.

Every field carries bounds and a description naming its unit; the CLI's help text comes from
these descriptions. The spec's thresholds (memory classes, QoS tiers, time slices, priority
classes, interference) live once in :mod:`sits_observe.analytics.settings` and are embedded
here as ``classes`` and ``interference``; the fields below are the controller's own.

Units: ``_s`` seconds, ``_ratio`` 0-1 (a fraction, never a percentage), ``_bytes``,
``_bytes_per_s``, ``_per_minute``.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from sits_observe.analytics.classes.settings import ClassSettings
from sits_observe.analytics.serving.settings import TenantSettings
from sits_observe.analytics.settings import GIB
from sits_observe.analytics.topology.settings import InterferenceSettings
from sits_observe.control.controller.actions import Action
from sits_observe.control.controller.quota_settings import DNS_SUBDOMAIN as _DNS_SUBDOMAIN
from sits_observe.control.controller.quota_settings import QuotaRuleSettings
from sits_observe.domain.validation import comma_separated

#: Every label and annotation the controller writes starts with this prefix.
PREFIX = "sits.io/"


#: The namespace quota rule's actions (``rules_on`` takes them together to switch it on).
NAMESPACE_QUOTA_ACTIONS: tuple[str, ...] = (
    str(Action.QUOTA_GPU),
    str(Action.QUOTA_CPU),
    str(Action.QUOTA_MEMORY),
)

#: Rules that are off in the writing modes (annotate, act) unless ``rules_on`` names them
#: (docs/controller.md, "Rules off by default"; docs/evidence/controller-ablation.md):
#:
#: - the two label rules: their labels are read by nothing that places or runs pods (the
#:   extender measures a pod's memory and FGD fragmentation itself), so they move no measure,
#:   and their writes came first in the write rate limit's order;
#: - the namespace quota rule's three actions: it lends a tenant's idle quota to the tenants
#:   queued behind theirs, which lowers their queue but raised the cluster's more in the
#:   experiment (all GPU pods 35.3 -> 46.0 queued GPU-hours, five seeds: the Jobs let in on
#:   lent quota held the GPUs other tenants' multi-GPU Jobs waited for).
RULES_OFF_BY_DEFAULT: tuple[str, ...] = (
    str(Action.FRAGMENTATION),
    str(Action.MEMORY_CLASS),
    *NAMESPACE_QUOTA_ACTIONS,
)

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class Mode(StrEnum):
    """What the controller writes to the cluster (docs/controller.md has the full table).

    - ``dry-run`` (default): nothing; decisions are stored and printed only.
    - ``annotate``: recommendation annotations and Events only; no label, quota, ConfigMap
      or QoS value changes.
    - ``act``: annotations and Events, plus the changes themselves (labels, ResourceQuota
      ``spec.hard``, the time-slicing ConfigMap entry, QoS quota annotations).
    """

    DRY_RUN = "dry-run"
    ANNOTATE = "annotate"
    ACT = "act"


class NamespaceSelection(StrEnum):
    """Which namespaces the controller works in, besides the opt-out annotation.

    The namespace label ``namespace_label`` (``sits.io/enabled``) set to ``"true"`` opts a
    namespace in and ``"false"`` opts it out in both; they differ on unlabelled namespaces:

    - ``opt-out`` (default, the behaviour before the label existed): unlabelled namespaces
      are included;
    - ``opt-in``: unlabelled namespaces are left alone (``skipped:not-opted-in``), as
      Goldilocks does with its ``goldilocks.fairwinds.com/enabled`` label.
    """

    OPT_OUT = "opt-out"
    OPT_IN = "opt-in"


def _default_tier_by_priority() -> dict[str, str]:
    return {"ultra-low-latency": "gold", "throughput-guaranteed": "silver", "best-effort": "bronze"}


class ControllerSettings(BaseModel):
    """Everything the controller's plan, safety rules, writes and leader election use."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _sla_into_classes(cls, data: Any) -> Any:
        """The ``sla`` flags go to ``classes.sla`` (one place holds the SLAs)."""
        if not isinstance(data, dict) or not data.get("sla"):
            return data
        classes = data.get("classes") or {}
        if isinstance(classes, BaseModel):
            classes = classes.model_dump()
        items = (data["sla"],) if isinstance(data["sla"], str) else tuple(data["sla"])
        return {**data, "classes": {**classes, "sla": (*classes.get("sla", ()), *items)}}

    # -- mode and loop ------------------------------------------------------------------
    mode: Mode = Field(
        Mode.DRY_RUN,
        description="dry-run (write nothing), annotate (recommendation annotations and "
        "Events only) or act (also labels, quotas, ConfigMap entry, QoS values)",
    )
    interval_s: float = Field(
        30.0, ge=0.2, le=86_400, description="seconds between two control-loop passes"
    )
    replica_id: str = Field(
        "sits-controller",
        min_length=1,
        max_length=128,
        description="identity of this replica in the Lease and the decisions table",
    )

    # -- decision rules -----------------------------------------------------------------
    sla: tuple[str, ...] = Field(
        (),
        description="NAMESPACE=SECONDS: a namespace's P99 latency SLA (repeat for each; "
        "finance=0.015), the priority-class, elastic and tenant-throttle rules' input; none: "
        "no namespace has an SLA and those rules leave every pod alone",
    )
    classes: ClassSettings = Field(
        default_factory=ClassSettings,
        description="the spec's memory classes, QoS tiers, time slices and priority classes",
    )
    interference: InterferenceSettings = Field(
        default_factory=InterferenceSettings,
        description="the spec's interference score and TopologyManager thresholds",
    )
    fragmentation_medium_above_ratio: float = Field(
        0.30, ge=0, le=1, description="node fragmentation (0-1) above which the level is medium"
    )
    fragmentation_high_above_ratio: float = Field(
        0.70,
        ge=0,
        le=1,
        description="node fragmentation (0-1) above which the level is high (the spec's "
        "preemption threshold)",
    )
    tier_by_priority_class: dict[str, str] = Field(
        default_factory=_default_tier_by_priority,
        description="PriorityClass name -> QoS tier; pods of other classes get no QoS quota",
    )
    qos_memory_min_bytes: int = Field(
        1 * GIB, gt=0, description="the elastic rule's memory-quota minimum, bytes"
    )
    qos_bandwidth_max_bytes_per_s: float = Field(
        64e9,
        gt=0,
        description="the elastic rule's bandwidth maximum when the GPU's link capacity is "
        "unknown, bytes/s (PCIe Gen4 x16, both directions)",
    )
    quota: QuotaRuleSettings = Field(
        default_factory=QuotaRuleSettings, description="namespace ResourceQuota sizing"
    )
    tenants: TenantSettings = Field(
        default_factory=TenantSettings,
        description="tenant isolation: detecting one tenant pushing another out of its SLA",
    )
    # 15 one-minute bins: enough for three a side, short enough that a throttle that
    # worked stops being re-justified by the bins before it.
    tenant_window_s: float = Field(
        900.0,
        ge=60,
        le=7 * 86_400,
        description="seconds of requests and GPU samples the tenant detection looks back over",
    )
    # SPEC: "when one tenant's load pushes another out of its SLA, non-critical work is
    # throttled"; non-critical = below throughput-guaranteed (500,000): best-effort, and
    # pods without a priority class (value 0).
    tenant_noncritical_below_priority: int = Field(
        500_000,
        description="pods whose priority class value (classes.priority_classes) is below "
        "this, or that have none, are non-critical: the work a tenant throttle holds back",
    )
    tenant_throttle_step_ratio: float = Field(
        0.25,
        gt=0,
        lt=1,
        description="share (0-1) one tenant throttle takes off the offending tenant's "
        "non-critical GPU quota (then max_step_ratio, the GPU quota bounds and the cooldown)",
    )
    tenant_throttle_quota_name: str = Field(
        "sits-noncritical",
        description="name of the ResourceQuota (scoped to the non-critical priority classes) "
        "a tenant throttle may lower; create it to opt a namespace in (without it the "
        "throttle is a recommendation on the namespace)",
    )
    time_slicing_configmap: str | None = Field(
        None,
        description="namespace/name of the NVIDIA device plugin's time-slicing ConfigMap; "
        "without it time slices are recommendations only",
    )
    time_slicing_key: str = Field(
        "sits-time-slices.yaml",
        min_length=1,
        max_length=253,
        description="data key of that ConfigMap the controller owns (workload -> slice, ms)",
    )

    # -- safety -------------------------------------------------------------------------
    opt_out_annotation: str = Field(
        f"{PREFIX}opt-out",
        description='annotation that, set to "true" on an object, keeps the controller off it',
    )
    namespace_label: str = Field(
        f"{PREFIX}enabled",
        description='namespace label: "true" opts the namespace in, "false" opts it out',
    )
    namespace_selection: NamespaceSelection = Field(
        NamespaceSelection.OPT_OUT,
        description="opt-out: every namespace unless labelled false (or annotated opt-out); "
        "opt-in: only namespaces labelled true (Goldilocks' default)",
    )
    change_threshold_ratio: float = Field(
        0.10,
        ge=0,
        le=10,
        description="smallest relative change of a numeric value worth a write (0.1 = 10%)",
    )
    hysteresis_ratio: float = Field(
        0.10,
        ge=0,
        lt=1,
        description="to leave a level, the signal must fall this fraction below the boundary "
        "it crossed (0.1 = 10%); entering uses the spec's threshold exactly",
    )
    max_step_ratio: float = Field(
        0.50,
        gt=0,
        le=10,
        description="largest relative change of a numeric value in one write (0.5 = 50%)",
    )
    min_change_interval_s: float = Field(
        300.0,
        ge=0,
        le=7 * 86_400,
        description="seconds an object's value is left alone after the controller changed it",
    )
    rules_on: tuple[str, ...] = Field(
        (),
        description="rules that are off by default in annotate and act mode switched on "
        "(fragmentation, memory-class; repeat or comma-separate)",
    )
    rules_off: tuple[str, ...] = Field(
        (),
        validate_default=True,
        description="actions switched off: neither recommended nor applied (ablation; "
        "repeat or comma-separate, e.g. time-slice,quota-gpu); in annotate and act mode the "
        "rules off by default are added unless rules_on names them",
    )
    writes_per_minute: float = Field(
        60.0,
        gt=0,
        le=100_000,
        description="sustained rate of API requests (writes, retries, Events), per minute",
    )
    write_burst: int = Field(
        10, ge=1, le=10_000, description="API requests allowed at once before the rate applies"
    )
    max_attempts: int = Field(
        5, ge=1, le=20, description="tries of one write on 409 / 429 / 5xx / unreachable"
    )
    backoff_base_s: float = Field(
        0.5, gt=0, le=60, description="first retry delay, seconds; doubles on each retry"
    )
    backoff_max_s: float = Field(10.0, gt=0, le=600, description="longest retry delay, seconds")
    request_timeout_s: float = Field(
        30.0, gt=0, le=600, description="timeout of one API request, seconds"
    )
    page_size: int = Field(
        500, ge=1, le=10_000, description="objects per list page when reading the cluster"
    )
    event_namespace: str = Field(
        "default",
        description="namespace of Events about cluster-scoped objects (nodes), as kubelet does",
    )

    # -- leader election ----------------------------------------------------------------
    lease_name: str = Field("sits-controller", description="name of the coordination Lease")
    lease_namespace: str = Field("kube-system", description="namespace of the Lease")
    lease_duration_s: float = Field(
        15.0,
        ge=1,
        le=3600,
        description="seconds without renewal after which another replica may take the lease",
    )
    renew_deadline_s: float = Field(
        10.0,
        gt=0,
        le=3600,
        description="seconds after its last successful renewal a leader stops acting "
        "(must be below lease_duration_s)",
    )
    retry_period_s: float = Field(
        2.0,
        gt=0,
        le=600,
        description="seconds between two lease renewals or acquisition attempts, also between "
        "passes (must be below renew_deadline_s)",
    )

    @field_validator("time_slicing_configmap")
    @classmethod
    def _ns_name(cls, value: str | None) -> str | None:
        if value is None:
            return None
        namespace, sep, name = value.partition("/")
        if not sep or not _DNS_LABEL.match(namespace) or not _DNS_SUBDOMAIN.match(name):
            raise ValueError(f"time_slicing_configmap {value!r} must be NAMESPACE/NAME")
        return value

    @field_validator("opt_out_annotation", "namespace_label")
    @classmethod
    def _annotation_key(cls, value: str) -> str:
        # Labels and annotations share the key syntax: [DNS-subdomain prefix /] name (<= 63).
        prefix, _, name = value.rpartition("/")
        if not name or len(name) > 63 or (prefix and not _DNS_SUBDOMAIN.match(prefix)):
            raise ValueError(f"{value!r} is not a valid label or annotation key")
        return value

    _split_rules = field_validator("rules_on", "rules_off", mode="before")(comma_separated)

    @field_validator("rules_on")
    @classmethod
    def _off_by_default(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for name in value:
            if name not in RULES_OFF_BY_DEFAULT:
                raise ValueError(
                    f"{name!r} is not off by default; rules_on takes "
                    f"{', '.join(RULES_OFF_BY_DEFAULT)} (every other rule is on unless "
                    "rules_off names it)"
                )
        return value

    @field_validator("rules_off")
    @classmethod
    def _known_actions(cls, value: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
        known = [str(a) for a in Action]
        for name in value:
            if name not in known:
                raise ValueError(f"unknown action {name!r}; valid actions: {', '.join(known)}")
        # Off by default where the controller writes; dry-run (and so ``recommend``) still
        # lists what they advise, which costs no API request.
        if info.data.get("mode", Mode.DRY_RUN) is Mode.DRY_RUN:
            return value
        switched_on = info.data.get("rules_on", ())
        defaults = tuple(a for a in RULES_OFF_BY_DEFAULT if a not in switched_on)
        return tuple(dict.fromkeys((*value, *defaults)))

    @field_validator(
        "lease_name", "lease_namespace", "event_namespace", "tenant_throttle_quota_name"
    )
    @classmethod
    def _names(cls, value: str) -> str:
        if not _DNS_SUBDOMAIN.match(value) or len(value) > 253:
            raise ValueError(f"{value!r} is not a valid Kubernetes object name")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> ControllerSettings:
        if self.fragmentation_medium_above_ratio > self.fragmentation_high_above_ratio:
            raise ValueError(
                "fragmentation_medium_above_ratio must not exceed fragmentation_high_above_ratio"
            )
        if self.renew_deadline_s >= self.lease_duration_s:
            raise ValueError(
                f"renew_deadline_s ({self.renew_deadline_s:g}) must be below lease_duration_s "
                f"({self.lease_duration_s:g}) so a leader stops before another can take over"
            )
        if self.retry_period_s >= self.renew_deadline_s:
            raise ValueError(
                f"retry_period_s ({self.retry_period_s:g}) must be below renew_deadline_s "
                f"({self.renew_deadline_s:g}) so a leader renews before its deadline"
            )
        if self.backoff_base_s > self.backoff_max_s:
            raise ValueError("backoff_base_s must not exceed backoff_max_s")
        unknown = sorted(set(self.tier_by_priority_class.values()) - set(self.classes.tiers))
        if unknown:
            raise ValueError(
                f"tier_by_priority_class names unknown tier(s) {', '.join(unknown)}; "
                f"tiers: {', '.join(self.classes.tiers)}"
            )
        return self

    @property
    def writes(self) -> bool:
        """Whether this mode writes anything to the cluster."""
        return self.mode is not Mode.DRY_RUN

    @property
    def dry_run(self) -> bool:
        """True in dry-run mode (nothing is written to the cluster)."""
        return self.mode is Mode.DRY_RUN

    def time_slicing_ref(self) -> tuple[str, str] | None:
        """(namespace, name) of the time-slicing ConfigMap, or None."""
        if self.time_slicing_configmap is None:
            return None
        namespace, _, name = self.time_slicing_configmap.partition("/")
        return namespace, name
