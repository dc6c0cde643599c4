"""Settings of fragmentation trend clustering (DBSCAN over per-GPU trend features). Imported by
``serve`` for its exporter's flags before its port is up, so it holds no analysis."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


# :mod:`sits_observe.analytics.trends.clusters`.
class TrendSettings(BaseModel):
    """Knobs of trend clustering; units in every name."""

    model_config = ConfigDict(frozen=True)

    eps: float | None = Field(
        None, gt=0, description="DBSCAN radius in standard-scaled feature units; none = knee"
    )
    min_samples: int | None = Field(
        None,
        ge=1,
        le=1000,
        description="DBSCAN min_samples (series in a core neighbourhood, itself included); "
        "none = n_series // 10 clamped to 3..10",
    )
    min_knee_strength: float = Field(
        0.5,
        ge=0,
        le=1,
        description="weakest knee (0 = straight k-distance curve, 1 = an L) taken as one; "
        "below it eps is the largest k-distance",
    )
    min_points: int = Field(
        3, ge=3, le=100_000, description="fewest finite points a series needs for features"
    )
    drop_ratio: float = Field(
        0.05, gt=0, le=1, description="a sharp drop: occupancy falls by this share at once"
    )
    idle_level_ratio: float = Field(
        0.02, ge=0, le=1, description="'idle/empty': mean occupancy below this ratio"
    )
    full_level_ratio: float = Field(
        0.9, ge=0, le=1, description="'full': mean occupancy at or above this ratio"
    )
    leak_slope_per_h: float = Field(
        0.002,
        gt=0,
        description="'leaking': occupancy rises at least this ratio per hour (0.002 = about "
        "5 pp a day, a third of the framebuffer in a week)",
    )
    sawtooth_drops_per_h: float = Field(
        0.25, gt=0, description="'saw-tooth': at least this many sharp drops per hour"
    )
    daily_amplitude_ratio: float = Field(
        0.05, gt=0, le=1, description="'daily cycle': 24 h harmonic amplitude at least this"
    )
    steady_std_ratio: float = Field(
        0.02, gt=0, le=1, description="'flat': residual standard deviation below this"
    )
