"""Settings of the namespace quota rule: which ResourceQuota keys it sizes, their hard bounds,
and the VPA-style sizing (:class:`QuotaRuleSettings`, embedded in the controller's settings as
``quota``)."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from sits_observe.analytics.settings import GIB

#: ResourceQuota ``spec.hard`` keys the namespace-quota rule sizes, and their measured unit.
QUOTA_GPU = "requests.nvidia.com/gpu"
QUOTA_CPU = "requests.cpu"
QUOTA_MEMORY = "requests.memory"
QUOTA_RESOURCES = (QUOTA_GPU, QUOTA_CPU, QUOTA_MEMORY)

#: A Kubernetes object name (RFC 1123 subdomain).
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


class Bound(BaseModel):
    """Hard limits of one numeric value: a proposal outside is clamped, never exceeded."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    min_value: float = Field(..., ge=0, description="smallest value ever written, in the unit")
    max_value: float = Field(..., gt=0, description="largest value ever written, in the unit")

    @model_validator(mode="after")
    def _ordered(self) -> Bound:
        if self.min_value > self.max_value:
            raise ValueError(f"min_value {self.min_value:g} exceeds max_value {self.max_value:g}")
        return self


def _default_quota_bounds() -> dict[str, Bound]:
    return {
        QUOTA_GPU: Bound(min_value=1, max_value=4096),  # GPUs
        QUOTA_CPU: Bound(min_value=1000, max_value=10_000_000),  # milli-CPU
        QUOTA_MEMORY: Bound(min_value=1 * GIB, max_value=64 * 1024 * GIB),  # bytes
    }


class QuotaRuleSettings(BaseModel):
    """Namespace ResourceQuota sizing, VPA-style.

    proposed = quantile(daily peaks, ``percentile_ratio``) x (1 + ``margin_ratio``)
    x (1 + ``confidence_multiplier`` / days) ** ``confidence_exponent``,
    held under the largest daily peak x ``peak_factor_max`` and the cluster's allocatable.
    The last factor is the Vertical Pod Autoscaler recommender's upper-bound confidence
    interval (``WithConfidenceMultiplier(1.0, 1.0, ...)`` in its ``estimator.go``): with one
    day of history it doubles the estimate, with 14 days it adds 7%.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    percentile_ratio: float = Field(
        0.95, gt=0, le=1, description="quantile (0-1) of the daily peaks the quota covers"
    )
    margin_ratio: float = Field(
        0.15, ge=0, le=10, description="safety margin added on top of the quantile (0.15 = +15%)"
    )
    confidence_multiplier: float = Field(
        1.0, ge=0, le=100, description="confidence widening at one day of history (1.0 = x2)"
    )
    confidence_exponent: float = Field(
        1.0, ge=0, le=10, description="exponent of the confidence factor (1 + multiplier/days)"
    )
    history_days: int = Field(
        14, ge=1, le=365, description="days of inventory snapshots the daily peaks come from"
    )
    peak_factor_max: float = Field(
        2.0,
        ge=1,
        le=100,
        description="a quota is never proposed above the largest daily peak x this factor "
        "(nor above the cluster's allocatable)",
    )
    lower_after_s: float = Field(
        900.0,
        ge=0,
        le=30 * 86_400,
        description="a managed quota is lowered only once its namespace has this much "
        "history, seconds: a shorter one has not seen the namespace's next Jobs (HPA waits "
        "out a 5-minute window before it scales down for the same reason)",
    )
    bounds: dict[str, Bound] = Field(
        default_factory=_default_quota_bounds,
        description="hard limits per spec.hard key: GPUs, milli-CPU, bytes",
    )
    quota_name: str = Field(
        "sits-quota",
        description="name of the ResourceQuota the controller may change in each namespace; "
        "create it to opt a namespace in (without it the advice is annotated on the namespace)",
    )

    @field_validator("quota_name")
    @classmethod
    def _dns(cls, value: str) -> str:
        if not DNS_SUBDOMAIN.match(value) or len(value) > 253:
            raise ValueError(f"quota_name {value!r} is not a valid object name")
        return value

    @field_validator("bounds")
    @classmethod
    def _known_keys(cls, value: dict[str, Bound]) -> dict[str, Bound]:
        unknown = sorted(set(value) - set(QUOTA_RESOURCES))
        if unknown:
            raise ValueError(
                f"unknown quota key(s) {', '.join(unknown)}; valid: {', '.join(QUOTA_RESOURCES)}"
            )
        missing = sorted(set(QUOTA_RESOURCES) - set(value))
        if missing:
            raise ValueError(f"bounds are needed for every quota key; missing {', '.join(missing)}")
        return value
