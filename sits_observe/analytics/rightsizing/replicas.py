"""Replicas at the SLO: how many replicas (and GPUs) an inference model needs for its peak.

For each model with requests in the window:

- **safe maximum per replica**: the latency-throughput heatmap of each serving pod (a pod is
  one replica; :func:`~.heatmap.compute_heatmaps` grouped by pod) and its safe maximum at the
  P95 SLO (:func:`~.heatmap_knee.find_safe_max`: the highest throughput bin, lower edge, whose
  P95 and every lower bin's meet the SLO); the model's figure is the LOWEST among its pods
  that have one (the replica that saturates first decides);
- **knee**: the heatmap knee of the model's pods (the lowest among them), shown as evidence:
  above it latency grows fastest;
- **peak request rate**: successful requests completed per ``peak_window_s`` window (aligned
  to the epoch), divided by the window, at the ``peak_quantile_ratio`` of the windows (1 =
  the busiest). A minute by default: replicas change in minutes, so a one-second burst is
  queueing, not capacity;
- **replicas** = max(``min_replicas``, ceil(peak / safe maximum)) (:func:`.capacity.
  replicas_needed`), **GPUs** = replicas x the largest ``gpu_request`` of the model's pods
  (1 when the inventory does not say).

When the SLO held in every measured bin, the true safe maximum lies above the measured load
and the replica count is an upper bound (said in the note). No safe maximum (too few requests
per bin, or the SLO broken even at the lowest load) gives no proposal, with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from sits_observe.analytics.heatmap.grid import compute_heatmaps
from sits_observe.analytics.heatmap.knee import find_safe_max
from sits_observe.analytics.heatmap.settings import HeatmapSettings
from sits_observe.analytics.serving.capacity import replicas_needed
from sits_observe.analytics.serving.latency import RequestSelection
from sits_observe.domain.times import utc_naive
from sits_observe.store.duck import Store


class ReplicaSettings(BaseModel):
    """SLO, peak measurement and heatmap of the replica rule."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    slo_ms: float = Field(
        1000.0, gt=0, le=3_600_000, description="P95 end-to-end latency SLO, milliseconds"
    )
    slo_by_model_s: dict[str, float] = Field(
        default_factory=dict, description="P95 latency SLO per model name, seconds"
    )
    peak_window_s: float = Field(
        60.0, gt=0, le=86_400, description="window of the observed request rate, seconds"
    )
    peak_quantile_ratio: float = Field(
        1.0, gt=0, le=1, description="quantile of the windows' rates taken as the peak (1 = max)"
    )
    min_replicas: int = Field(1, ge=0, le=100_000, description="fewest replicas proposed")
    heatmap: HeatmapSettings = Field(
        default_factory=HeatmapSettings,
        description="heatmap windows and bins (SLO replaced)",
        json_schema_extra={
            "nested_flags": True,
            "nested_skip": ["slo_ms"],
            "nested_names": {"window_s": "bin_s"},  # the heatmap report's name for it
        },
    )

    def slo_of(self, model: str) -> float:
        """The P95 SLO of ``model``, seconds."""
        return self.slo_by_model_s.get(model, self.slo_ms / 1000)


@dataclass(frozen=True)
class ReplicaRecommendation:
    """Current and proposed replicas and GPUs of one model, with the evidence."""

    model: str
    workloads: tuple[str, ...]
    pods: tuple[str, ...]
    current_replicas: int
    proposed_replicas: int | None
    gpus_per_replica: int
    current_gpus: int
    proposed_gpus: int | None
    slo_s: float
    safe_max_rps: float | None
    knee_rps: float | None
    peak_rps: float
    since: datetime
    until: datetime
    pods_measured: int
    upper_bound: bool
    reason: str
    #: The namespaces of its serving pods (the latest inventory row of each).
    namespaces: tuple[str, ...] = ()


_PEAK_SQL = """
SELECT quantile_disc(n, ?) AS peak FROM (
    SELECT count(*) AS n FROM requests
    WHERE model = ? AND ts >= ? AND ts < ? AND ok IS DISTINCT FROM false
    GROUP BY floor(epoch_us(ts) / ?)
)
"""

_PODS_SQL = """
SELECT namespace, pod, coalesce(workload, pod) AS workload, gpu_request FROM pods
WHERE pod IN (SELECT unnest(?::VARCHAR[]))
QUALIFY row_number() OVER (PARTITION BY namespace, pod ORDER BY ts DESC) = 1
"""


def peak_rate(
    store: Store, model: str, since: datetime, until: datetime, s: ReplicaSettings
) -> float:
    """The model's peak request rate (requests/s) over ``[since, until)``; 0 without requests."""
    window_us = s.peak_window_s * 1e6
    params = [s.peak_quantile_ratio, model, utc_naive(since), utc_naive(until), window_us]
    peak = store.scalar(_PEAK_SQL, params)
    return 0.0 if peak is None else float(peak) / s.peak_window_s


def replicas_at_slo(
    store: Store, since: datetime, until: datetime, settings: ReplicaSettings | None = None
) -> tuple[ReplicaRecommendation, ...]:
    """One recommendation per model with requests in ``[since, until)``, sorted by model."""
    s = settings or ReplicaSettings()
    models = (
        store.query(
            "SELECT DISTINCT model FROM requests WHERE ts >= ? AND ts < ? AND model IS NOT NULL "
            "ORDER BY model",
            [utc_naive(since), utc_naive(until)],
        )
        .column("model")
        .to_pylist()
    )
    return tuple(_one(store, str(m), since, until, s) for m in models)


def _one(
    store: Store, model: str, since: datetime, until: datetime, s: ReplicaSettings
) -> ReplicaRecommendation:
    slo = s.slo_of(model)
    heat = HeatmapSettings.model_validate({**s.heatmap.model_dump(), "slo_ms": slo * 1000})
    selection = RequestSelection(model=model, since=since, until=until)
    maps = [m for m in compute_heatmaps(store, heat, selection=selection, by="pod") if m.group]
    pods = tuple(sorted(str(m.group) for m in maps))
    verdicts = {str(m.group): find_safe_max(m.bins, slo, heat.min_bin_requests) for m in maps}
    safe = [
        v.value for v in verdicts.values() if v.value is not None and v.value.throughput_lo_rps > 0
    ]
    knees = [m.knee.value.throughput_lo_rps for m in maps if m.knee.value is not None]
    inventory = store.query(_PODS_SQL, [list(pods)]).to_pylist() if pods else []
    per_replica = max((int(r["gpu_request"]) for r in inventory if r["gpu_request"]), default=1)
    workloads = tuple(sorted({str(r["workload"]) for r in inventory}))
    namespaces = tuple(sorted({str(r["namespace"]) for r in inventory if r["namespace"]}))
    peak = peak_rate(store, model, since, until, s)
    current = len(pods)
    # A safe maximum in the lowest bin (lower edge 0 rps) says nothing about capacity.
    lowest_only = (
        f"no safe maximum: the measured load stays in the lowest throughput bin "
        f"(< {heat.throughput_bin_rps:g} rps)"
    )
    said = [
        lowest_only if v.value is not None and v.value.throughput_lo_rps <= 0 else v.note
        for v in verdicts.values()
    ]
    notes = "; ".join(dict.fromkeys(said)) or "no serving pod"
    rec = ReplicaRecommendation(
        model=model,
        workloads=workloads,
        pods=pods,
        current_replicas=current,
        proposed_replicas=None,
        gpus_per_replica=per_replica,
        current_gpus=current * per_replica,
        proposed_gpus=None,
        slo_s=slo,
        safe_max_rps=None,
        knee_rps=min(knees) if knees else None,
        peak_rps=peak,
        since=since,
        until=until,
        pods_measured=len(safe),
        upper_bound=False,
        reason=f"not enough data: {notes}",
        namespaces=namespaces,
    )
    if not safe:
        return rec
    lowest = min(safe, key=lambda v: v.throughput_lo_rps)
    replicas = max(s.min_replicas, replicas_needed(peak, lowest.throughput_lo_rps))
    bound = lowest.exceeded_from_rps is None
    reason = (
        f"peak {peak:.3g} rps ({_quantile(s)} of {s.peak_window_s:g} s windows) / safe maximum "
        f"{lowest.throughput_lo_rps:g} rps per replica at P95 <= {slo:g} s -> {replicas} "
        f"replica(s) x {per_replica} GPU(s)"
    )
    if bound:
        reason += "; the SLO held at every measured load, so this is an upper bound"
    return replace(
        rec,
        proposed_replicas=replicas,
        proposed_gpus=replicas * per_replica,
        safe_max_rps=lowest.throughput_lo_rps,
        upper_bound=bound,
        reason=reason,
    )


def _quantile(s: ReplicaSettings) -> str:
    return "busiest" if s.peak_quantile_ratio >= 1 else f"P{s.peak_quantile_ratio * 100:g}"
