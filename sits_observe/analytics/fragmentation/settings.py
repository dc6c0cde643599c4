"""Settings of the SMF alignment and of the idle-GPU analysis. Imported by ``serve`` for its
exporter's flags before its port is up, so it holds no analysis (the extender's cold start)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


# :mod:`sits_observe.analytics.fragmentation.smf`.
class SmfSettings(BaseModel):
    """How cgroup and GPU samples are aligned for the SMF fragmentation rate."""

    model_config = ConfigDict(frozen=True)

    max_skew_s: float = Field(
        2.0,
        gt=0,
        le=3600,
        description="largest age, in seconds, of the GPU sample matched to a cgroup sample "
        "(the GPU sample is taken at or before the cgroup sample)",
    )


# :mod:`sits_observe.analytics.fragmentation.idle_gpus`.
class IdleSettings(BaseModel):
    """Floors and shares of the idle and oversized rules (ratios 0-1)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    util_floor_ratio: float = Field(
        0.05, ge=0, le=1, description="GPU utilisation (0-1) under which a sample is idle"
    )
    activity_floor_ratio: float = Field(
        0.05, ge=0, le=1, description="memory-copy / DRAM activity (0-1) under which it is idle"
    )
    idle_share_ratio: float = Field(
        0.9, gt=0, le=1, description="share of a holding's samples that must be idle (0-1)"
    )
    oversized_below_ratio: float = Field(
        0.5, gt=0, le=1, description="used share of the allocation under which it is oversized"
    )
    used_percentile_ratio: float = Field(
        0.95, gt=0, le=1, description="percentile of the used share the oversized rule reads"
    )
    max_gap_s: float = Field(
        300.0, gt=0, le=86_400, description="longest time one sample stands for, seconds"
    )
