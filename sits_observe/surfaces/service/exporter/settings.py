"""Settings of the derived-signal exporter (``ExporterSettings``); ``serve`` builds them.

Every window, cache age and label cap of docs/metrics.md is a field here, with its unit in
its name and its bound in its description; the analyses' own settings models (interference,
heatmap, SMF, trend clustering) are nested unchanged so the exporter computes exactly what the
matching CLI command computes.
"""

from __future__ import annotations

import itertools
import math

from pydantic import BaseModel, ConfigDict, Field, field_validator

from sits_observe.analytics.classes.settings import ClassSettings
from sits_observe.analytics.fragmentation.settings import IdleSettings, SmfSettings
from sits_observe.analytics.heatmap.settings import HeatmapSettings
from sits_observe.analytics.topology.settings import InterferenceSettings
from sits_observe.analytics.trends.settings import TrendSettings

#: Upper bounds (le) of ``sits_request_latency_window_seconds``, in seconds: Prometheus'
#: client default buckets extended to one minute, where LLM end-to-end latencies live.
DEFAULT_LATENCY_BUCKETS_S: tuple[float, ...] = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)


class ExporterSettings(BaseModel):
    """How often the derived signals are recomputed, over what windows, and label caps."""

    model_config = ConfigDict(frozen=True)

    enabled: bool = Field(
        True,
        description="export the derived signals on /metrics",
        json_schema_extra={"flag": "--exporter"},
    )
    cache_s: float = Field(
        15.0,
        ge=0,
        le=3600,
        description="seconds a computed set of fast signals is served before a scrape starts "
        "its recomputation in the background, serving the previous set meanwhile (0 = every "
        "scrape; the first scrape waits for the first set)",
    )
    slow_cache_s: float = Field(
        300.0,
        ge=0,
        le=86400,
        description="seconds the slow signals (heatmap knee, memory classes, DBSCAN trends, "
        "idle GPUs) are served before they are recomputed in the background",
    )
    window_s: float = Field(
        300.0,
        gt=0,
        le=7 * 86400,
        description="seconds of requests and GPU / cgroup samples (up to now) behind latency, "
        "throughput, interference, SMF and framebuffer occupancy",
    )
    fgd_since_s: float = Field(
        86400.0,
        gt=0,
        le=30 * 86400,
        description="seconds of pod snapshots before the latest one that form the FGD workload",
    )
    latency_slo_s: float = Field(
        1.0,
        gt=0,
        le=3600,
        description="P95 end-to-end latency SLO of every model without its own (the flag "
        "takes milliseconds, as every command does)",
        json_schema_extra={"flag": "--slo-ms", "flag_scale": 1000, "unit": "milliseconds"},
    )
    latency_slo_by_model_s: dict[str, float] = Field(
        default_factory=dict, description="P95 latency SLO in seconds per model name"
    )
    latency_buckets_s: tuple[float, ...] = Field(
        DEFAULT_LATENCY_BUCKETS_S,
        min_length=1,
        max_length=50,
        description="upper bounds in seconds of the request-latency gauge histogram "
        "(ascending; +Inf is added)",
    )
    heatmap_since_s: float = Field(
        3600.0,
        gt=0,
        le=30 * 86400,
        description="seconds of requests behind the knee and the safe maximum throughput",
    )
    heatmap: HeatmapSettings = Field(
        default_factory=HeatmapSettings,
        description="heatmap window and bins (its slo_ms is replaced by the latency SLO)",
    )
    class_window_s: float = Field(
        86400.0,
        gt=0,
        le=30 * 86400,
        description="seconds of GPU memory samples behind the workloads' memory classes",
    )
    trend_window_s: float = Field(
        6 * 3600.0,
        gt=0,
        le=30 * 86400,
        description="seconds of framebuffer occupancy behind the DBSCAN trend clusters",
    )
    pod_start_window_s: float = Field(
        3600.0,
        gt=0,
        le=30 * 86400,
        description="seconds back from now in which a pod's creation counts for pod start",
    )
    idle_window_s: float = Field(
        3600.0,
        gt=0,
        le=7 * 86400,
        description="seconds of GPU samples behind the idle / oversized / stranded GPUs",
    )
    max_models: int = Field(
        100,
        ge=1,
        le=10_000,
        description="most model label values exported (the busiest models in the window)",
    )
    max_nodes: int = Field(
        5000, ge=1, le=100_000, description="most node label values exported per metric"
    )
    max_gpus: int = Field(
        40_000, ge=1, le=1_000_000, description="most (node, gpu) series exported per metric"
    )
    max_namespaces: int = Field(
        1000, ge=1, le=100_000, description="most namespace label values exported per metric"
    )
    interference: InterferenceSettings = Field(
        default_factory=InterferenceSettings, description="interference score settings"
    )
    classes: ClassSettings = Field(
        default_factory=ClassSettings, description="memory class thresholds (L1/L2/L3)"
    )
    smf: SmfSettings = Field(default_factory=SmfSettings, description="SMF alignment settings")
    trends: TrendSettings = Field(
        default_factory=TrendSettings, description="DBSCAN trend clustering settings"
    )
    idle: IdleSettings = Field(
        default_factory=IdleSettings, description="floors and shares of the idle-GPU rules"
    )

    @field_validator("latency_buckets_s")
    @classmethod
    def _ascending(cls, value: tuple[float, ...]) -> tuple[float, ...]:
        if any(not (math.isfinite(b) and b > 0) for b in value):
            raise ValueError("bucket bounds must be finite and > 0 s")
        if any(a >= b for a, b in itertools.pairwise(value)):
            raise ValueError("bucket bounds must be strictly ascending")
        return value

    @field_validator("latency_slo_by_model_s")
    @classmethod
    def _positive(cls, value: dict[str, float]) -> dict[str, float]:
        bad = {m: s for m, s in value.items() if not 0 < s <= 3600}
        if bad:
            raise ValueError(f"SLOs must be in (0, 3600] s; got {bad}")
        return value

    def slo_s(self, model: str) -> float:
        """The P95 SLO of ``model``, in seconds."""
        return self.latency_slo_by_model_s.get(model, self.latency_slo_s)

    def heatmap_settings(self) -> HeatmapSettings:
        """:attr:`heatmap` with its ``slo_ms`` replaced by the latency SLO (the knee and the
        safe maximum of models without their own SLO)."""
        return HeatmapSettings.model_validate(
            {**self.heatmap.model_dump(), "slo_ms": self.latency_slo_s * 1000}
        )
