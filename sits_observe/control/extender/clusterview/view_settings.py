"""How the extender's cluster view is built and how often (:mod:`.view`, :mod:`.source`,
:mod:`.source_promql` read it)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from sits_observe.analytics.topology.settings import InterferenceSettings
from sits_observe.domain.validation import check_promql_url


class ViewSettings(BaseModel):
    """How the extender's cluster view is built and how often."""

    model_config = ConfigDict(frozen=True)

    refresh_interval_s: float = Field(
        5.0, ge=0.05, le=3600, description="seconds between rebuilds of the view from the store"
    )
    first_view_timeout_s: float = Field(
        2.0, ge=0, le=60, description="seconds the first call waits for the first view"
    )
    max_snapshot_age_s: float = Field(
        300.0,
        gt=0,
        le=86400,
        description="seconds after which the node inventory counts as stale (calls fail open)",
    )
    gpu_sample_window_s: float = Field(
        120.0, gt=0, le=86400, description="seconds back to look for each GPU's latest sample"
    )
    workload_window_s: float = Field(
        600.0,
        ge=0,
        le=7 * 86400,
        description="seconds of pod snapshots whose pods form the FGD target workload",
    )
    slow_refresh_s: float = Field(
        60.0,
        ge=0.05,
        le=86400,
        description="seconds between recomputations of interference and measured memory needs",
    )
    slow_window_s: float = Field(
        300.0,
        gt=0,
        le=86400,
        description="seconds of GPU samples behind interference and measured memory needs",
    )
    interference: InterferenceSettings = Field(
        default_factory=InterferenceSettings,
        description="interference score weights and the NVLink capacity table",
    )
    promql_url: str | None = Field(
        None,
        description="build the view from kube-state-metrics and dcgm-exporter series at this "
        "Prometheus-compatible query URL instead of the DuckDB file (docs/extender.md)",
    )
    promql_ksm_matchers: str = Field(
        "",
        description="with promql_url: extra label matchers for the kube-state-metrics series, "
        'e.g. job="kube-state-metrics"',
    )
    promql_gpu_matchers: str = Field(
        "",
        description="with promql_url: extra label matchers for the dcgm-exporter series, "
        'e.g. job="dcgm-exporter"',
    )

    _check_url = field_validator("promql_url")(check_promql_url)
