"""Settings of the workload classes (SPEC "Workload classes"): memory and compute thresholds,
QoS tiers and their quotas, priority classes."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from sits_observe.analytics.settings import GB_PER_S, GIB
from sits_observe.domain.validation import named_seconds


class TierQuota(BaseModel):
    """The two quotas of one QoS tier."""

    model_config = ConfigDict(frozen=True)

    memory_bytes: int = Field(..., gt=0, description="GPU memory quota, bytes")
    bandwidth_bytes_per_s: float = Field(..., gt=0, description="bandwidth quota, bytes/s")


class PriorityClass(BaseModel):
    """One Kubernetes PriorityClass the spec names."""

    model_config = ConfigDict(frozen=True)

    name: str = Field(..., min_length=1, description="PriorityClass name")
    value: int = Field(..., description="PriorityClass value (higher schedules first)")


class ClassSettings(BaseModel):
    """Workload classes, QoS tiers, time slices and priorities (SPEC "Workload classes")."""

    model_config = ConfigDict(frozen=True)

    # SPEC: "Memory sensitivity: L1 < 2 GiB, L2 2-8 GiB, L3 > 8 GiB". Exactly 2 GiB and
    # exactly 8 GiB are L2.
    l1_below_bytes: int = Field(2 * GIB, gt=0, description="peak GPU memory below this is L1")
    l3_above_bytes: int = Field(8 * GIB, gt=0, description="peak GPU memory above this is L3")
    # SPEC: "Gold 8 GiB and 32 GB/s, Silver 4 GiB and 16 GB/s, Bronze 2 GiB and 8 GB/s".
    tiers: dict[str, TierQuota] = Field(
        default_factory=lambda: {
            "gold": TierQuota(memory_bytes=8 * GIB, bandwidth_bytes_per_s=32 * GB_PER_S),
            "silver": TierQuota(memory_bytes=4 * GIB, bandwidth_bytes_per_s=16 * GB_PER_S),
            "bronze": TierQuota(memory_bytes=2 * GIB, bandwidth_bytes_per_s=8 * GB_PER_S),
        },
        description="QoS tier -> memory quota (bytes) and bandwidth quota (bytes/s)",
    )
    # SPEC elastic rule: "GPU utilisation > 90% and link saturation > 75%: memory quota
    # max(quota x 0.8, minimum), bandwidth quota min(quota x 1.2, hardware maximum)";
    # "Inputs are a 5 s sliding window".
    elastic_util_above_ratio: float = Field(
        0.90, ge=0, le=1, description="GPU utilisation (0-1) above which the elastic rule fires"
    )
    elastic_link_above_ratio: float = Field(
        0.75, ge=0, le=1, description="link saturation (0-1) above which the elastic rule fires"
    )
    elastic_memory_factor: float = Field(
        0.8, gt=0, le=1, description="memory quota multiplier when the elastic rule fires"
    )
    elastic_bandwidth_factor: float = Field(
        1.2, ge=1, le=10, description="bandwidth quota multiplier when the elastic rule fires"
    )
    elastic_window_s: float = Field(
        5.0, gt=0, le=3600, description="sliding window of the elastic rule's inputs, seconds"
    )
    # SPEC: "GPU time-slice quota: p95 > 10 ms -> 25 ms slice; sequence length > 4096 ->
    # 10 ms; else 15 ms".
    slice_p95_above_s: float = Field(
        0.010, gt=0, description="request P95 latency (s) above which the long slice is given"
    )
    slice_long_s: float = Field(0.025, gt=0, description="long time slice, seconds")
    slice_sequence_above_tokens: int = Field(
        4096, gt=0, description="sequence length (tokens) above which the short slice is given"
    )
    slice_short_s: float = Field(0.010, gt=0, description="short time slice, seconds")
    slice_default_s: float = Field(0.015, gt=0, description="default time slice, seconds")
    # SPEC: "Burstable = shared (60% memory)".
    burstable_memory_share_ratio: float = Field(
        0.6, gt=0, le=1, description="share of GPU memory a Burstable pod may use (0-1)"
    )
    # SPEC: "ultra-low-latency 1,000,000, throughput-guaranteed 500,000, best-effort 1,000".
    priority_classes: tuple[PriorityClass, ...] = Field(
        (
            PriorityClass(name="ultra-low-latency", value=1_000_000),
            PriorityClass(name="throughput-guaranteed", value=500_000),
            PriorityClass(name="best-effort", value=1_000),
        ),
        description="priority classes, any order (sorted by value when used)",
    )
    # SPEC: "SLA-violation rate > 5% -> lower priority; fragmentation > 70% -> allow
    # preemption of lower priority".
    sla_violation_above_ratio: float = Field(
        0.05, ge=0, le=1, description="SLA-violation rate (0-1) above which priority is lowered"
    )
    preemption_fragmentation_above_ratio: float = Field(
        0.70, ge=0, le=1, description="fragmentation (0-1) above which preemption is allowed"
    )
    # Configuration, not a default: the SPEC's "Namespace SLA example: finance 15 ms P99,
    # medical 120 ms, government 300 ms" is an example in docs/analytics/tenants.md. Without
    # an SLA a namespace misses none, so the SLA rules (priority class, elastic reset, tenant
    # throttle) leave it alone.
    namespace_sla_p99_s: dict[str, float] = Field(
        default_factory=dict,
        description="namespace -> P99 latency SLA, seconds (none by default)",
    )
    sla: tuple[str, ...] = Field(
        (),
        description="NAMESPACE=SECONDS: a namespace's P99 latency SLA (repeat for each; "
        "finance=0.015); none: no namespace has an SLA",
    )

    @model_validator(mode="before")
    @classmethod
    def _sla_flags(cls, data: Any) -> Any:
        """``sla`` items (the flags' form) into ``namespace_sla_p99_s`` (they win)."""
        if not isinstance(data, dict) or not data.get("sla"):
            return data
        items = (data["sla"],) if isinstance(data["sla"], str) else tuple(data["sla"])
        given = named_seconds(items, "NAMESPACE", "finance=0.015")
        return {**data, "namespace_sla_p99_s": {**data.get("namespace_sla_p99_s", {}), **given}}

    @model_validator(mode="after")
    def _check(self) -> ClassSettings:
        if self.l1_below_bytes > self.l3_above_bytes:
            raise ValueError(
                f"l1_below_bytes ({self.l1_below_bytes}) must not exceed "
                f"l3_above_bytes ({self.l3_above_bytes})"
            )
        if not self.tiers:
            raise ValueError("at least one QoS tier is needed")
        if not self.priority_classes:
            raise ValueError("at least one priority class is needed")
        if any(v <= 0 for v in self.namespace_sla_p99_s.values()):
            raise ValueError("every namespace SLA must be a positive number of seconds")
        return self
