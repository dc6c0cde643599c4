"""Settings of the latency-throughput heatmap, with the exact time units its bins are computed
in. Imported by ``serve`` for its exporter's flags before its port is up, so it holds no
analysis (the scheduler extender's cold start)."""

from __future__ import annotations

from fractions import Fraction

from pydantic import BaseModel, ConfigDict, Field, model_validator

# :mod:`sits_observe.analytics.heatmap.grid`: its bins are whole microseconds, decided exactly.
US_PER_S = 1_000_000


US_PER_MS = 1_000


#: Most decimal places a heatmap throughput bin width may have.
MAX_RPS_DECIMALS = 9


def exact(value: float) -> Fraction:
    """The decimal a float was written as (``0.01`` -> 1/100): its shortest repr, exactly."""
    return Fraction(repr(float(value)))


class HeatmapSettings(BaseModel):
    """Window length, bin widths, SLO and the evidence threshold of one heatmap."""

    model_config = ConfigDict(frozen=True)

    window_s: float = Field(
        1.0, gt=0, le=86_400, description="window length, s (whole microseconds)"
    )
    latency_bin_ms: float = Field(
        100.0, gt=0, le=3_600_000, description="latency bin width, ms (whole microseconds)"
    )
    throughput_bin_rps: float = Field(
        10.0, gt=0, le=1e9, description="throughput bin width, requests/s (<= 9 decimals)"
    )
    slo_ms: float | None = Field(
        None, gt=0, le=3_600_000, description="P95 latency SLO, ms, for the safe maximum"
    )
    min_bin_requests: int = Field(
        20,
        ge=1,
        le=1_000_000,
        description="requests a throughput bin needs before its P95 counts for knee / safe max",
    )

    @model_validator(mode="after")
    def _whole_units(self) -> HeatmapSettings:
        if (exact(self.window_s) * US_PER_S).denominator != 1:
            raise ValueError(f"window_s {self.window_s!r} s is not a whole number of microseconds")
        if (exact(self.latency_bin_ms) * US_PER_MS).denominator != 1:
            raise ValueError(
                f"latency_bin_ms {self.latency_bin_ms!r} ms is not a whole number of microseconds"
            )
        if exact(self.throughput_bin_rps).denominator > 10**MAX_RPS_DECIMALS:
            raise ValueError(
                f"throughput_bin_rps {self.throughput_bin_rps!r} has more than "
                f"{MAX_RPS_DECIMALS} decimals"
            )
        return self

    @property
    def window_us(self) -> int:
        """Window length in microseconds."""
        return int(exact(self.window_s) * US_PER_S)

    @property
    def latency_bin_us(self) -> int:
        """Latency bin width in microseconds."""
        return int(exact(self.latency_bin_ms) * US_PER_MS)
