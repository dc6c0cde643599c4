"""Replicas at the SLO: how many replicas (and GPUs) an inference model needs for its peak.

For each model with requests in the window:

- **safe maximum per replica**: the latency-throughput heatmap of each serving pod (a pod is
  one replica; :func:`~.heatmap.compute_heatmaps` grouped by pod) and its safe maximum at the
  P95 SLO (:func:`~.heatmap_knee.find_safe_max`: the highest throughput bin, lower edge, whose
  P95 and every lower bin's meet the SLO); the model's figure is the LOWEST among its pods
  that have one (the replica that saturates first decides). The bins are chosen from the
  model's requests (:mod:`sits_observe.analytics.heatmap.bins`) unless ``heatmap`` fixes
  them; the SLO is the model's own (``slo``), else ``slo_ms``, and a model with neither gets
  no proposal, with a reason that says how to set one;
- **knee**: the heatmap knee of the model's pods (the lowest among them), shown as evidence:
  above it latency grows fastest;
- **peak request rate**: successful requests completed per ``peak_window_s`` window (aligned
  to the epoch), divided by the window, at the ``peak_quantile_ratio`` of the windows (1 =
  the busiest). A minute by default: replicas change in minutes, so a one-second burst is
  queueing, not capacity;
- **replicas** = max(``min_replicas``, ceil(peak / safe maximum)) (:func:`.capacity.
  replicas_needed`), **GPUs** = replicas x the largest ``gpu_request`` of the model's pods
  (1 when the inventory does not say); held to the GPUs the cluster has for the model (its
  allocatable less what the other pods request in the latest snapshot, never below the
  current replicas), the reason giving the count the peak needs.

When the SLO held in every measured bin, the true safe maximum lies above the measured load
and the replica count is an upper bound (said in the note). No safe maximum (too few requests
per bin, or the SLO broken even at the lowest load) gives no proposal, with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field, field_validator

from sits_observe.analytics.cluster_allocatable import cluster_allocatable
from sits_observe.analytics.heatmap.bins import data_bins
from sits_observe.analytics.heatmap.grid import compute_heatmaps
from sits_observe.analytics.heatmap.knee import find_safe_max
from sits_observe.analytics.heatmap.settings import HeatmapSettings
from sits_observe.analytics.serving.capacity import replicas_needed
from sits_observe.analytics.serving.latency import RequestSelection
from sits_observe.domain.times import utc_naive
from sits_observe.domain.validation import named_seconds
from sits_observe.store.duck import Store


class ReplicaSettings(BaseModel):
    """SLO, peak measurement and heatmap of the replica rule."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    slo_ms: float | None = Field(
        None,
        gt=0,
        le=3_600_000,
        description="P95 end-to-end latency SLO of every model without its own (--slo), "
        "milliseconds; none: no replica proposal without one",
    )
    slo: tuple[str, ...] = Field(
        (),
        description="MODEL=SECONDS: a model's P95 end-to-end latency SLO (repeat for each)",
    )
    peak_window_s: float = Field(
        60.0, gt=0, le=86_400, description="window of the observed request rate, seconds"
    )
    peak_quantile_ratio: float = Field(
        1.0, gt=0, le=1, description="quantile of the windows' rates taken as the peak (1 = max)"
    )
    min_replicas: int = Field(1, ge=0, le=100_000, description="fewest replicas proposed")
    heatmap: HeatmapSettings | None = Field(
        None,
        description="heatmap windows and bins (SLO replaced); none: chosen from each model's "
        "requests, as the heatmap report does; any flag given fixes them all",
        json_schema_extra={
            "nested_flags": True,
            "nested_skip": ["slo_ms"],
            "nested_names": {"window_s": "bin_s"},  # the heatmap report's name for it
        },
    )

    @field_validator("slo")
    @classmethod
    def _model_seconds(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        named_seconds(value, "MODEL", "llama2-70b=40")
        return value

    def slo_of(self, model: str) -> float | None:
        """The P95 SLO of ``model``, seconds: its own, else ``slo_ms``; None when neither."""
        own = named_seconds(self.slo, "MODEL", "llama2-70b=40")
        if model in own:
            return own[model]
        return None if self.slo_ms is None else self.slo_ms / 1000


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
    #: None: no SLO is set for the model.
    slo_s: float | None
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
    #: Seconds from the model's first to its last request in the window: the history the
    #: proposal rests on.
    history_s: float = 0.0
    #: Replicas the peak needs at the safe maximum, before holding the proposal to the GPUs
    #: the cluster has for the model (None without a proposal).
    needed_replicas: int | None = None


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


def _heat(
    store: Store, selection: RequestSelection, s: ReplicaSettings, slo_s: float
) -> HeatmapSettings:
    """The heatmap settings of one model's pods: ``s.heatmap``, or bins from its requests."""
    slo_ms = slo_s * 1000
    if s.heatmap is not None:
        return HeatmapSettings.model_validate({**s.heatmap.model_dump(), "slo_ms": slo_ms})
    fixed = HeatmapSettings(slo_ms=slo_ms)
    bins = data_bins(store, selection, by="pod", min_bin_requests=fixed.min_bin_requests)
    if bins is None:
        return fixed
    return HeatmapSettings(
        window_s=bins.bin_s,
        latency_bin_ms=bins.latency_bin_ms,
        throughput_bin_rps=bins.throughput_bin_rps,
        slo_ms=slo_ms,
        min_bin_requests=fixed.min_bin_requests,
    )


def _one(
    store: Store, model: str, since: datetime, until: datetime, s: ReplicaSettings
) -> ReplicaRecommendation:
    slo = s.slo_of(model)
    selection = RequestSelection(model=model, since=since, until=until)
    history_s = _history_s(store, model, since, until)
    if slo is None:
        return _without_slo(store, model, since, until, s, history_s=history_s)
    heat = _heat(store, selection, s, slo)
    maps = [m for m in compute_heatmaps(store, heat, selection=selection, by="pod") if m.group]
    pods = tuple(sorted(str(m.group) for m in maps))
    verdicts = {str(m.group): find_safe_max(m.bins, slo, heat.min_bin_requests) for m in maps}
    safe = [
        v.value for v in verdicts.values() if v.value is not None and v.value.throughput_lo_rps > 0
    ]
    knees = [m.knee.value.throughput_lo_rps for m in maps if m.knee.value is not None]
    per_replica, workloads, namespaces = _inventory(store, pods)
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
        history_s=history_s,
    )
    if not safe:
        return rec
    lowest = min(safe, key=lambda v: v.throughput_lo_rps)
    needed = max(s.min_replicas, replicas_needed(peak, lowest.throughput_lo_rps))
    bound = lowest.exceeded_from_rps is None
    reason = (
        f"peak {peak:.3g} rps ({_quantile(s)} of {s.peak_window_s:g} s windows) / safe maximum "
        f"{lowest.throughput_lo_rps:g} rps per replica at P95 <= {slo:g} s -> {needed} "
        f"replica(s) x {per_replica} GPU(s)"
    )
    if bound:
        reason += "; the SLO held at every measured load, so this is an upper bound"
    room = _room_gpus(store, since, until, current * per_replica)
    replicas = needed
    if room is not None and needed * per_replica > room:
        replicas = max(min(needed, current), room // per_replica)
        reason += (
            f"; held at {replicas} replica(s): the cluster has {room} GPU(s) for the model "
            "(its allocatable less what the other pods request)"
        )
    return replace(
        rec,
        proposed_replicas=replicas,
        proposed_gpus=replicas * per_replica,
        needed_replicas=needed,
        safe_max_rps=lowest.throughput_lo_rps,
        upper_bound=bound,
        reason=reason,
    )


_REQUESTED_SQL = """
SELECT sum(coalesce(gpu_request, 0)) FROM pods
WHERE ts = (SELECT max(ts) FROM pod_snapshots WHERE ts >= ? AND ts < ?)
  AND coalesce(phase, '') NOT IN ('Succeeded', 'Failed')
"""


def _room_gpus(store: Store, since: datetime, until: datetime, own_gpus: int) -> int | None:
    """GPUs the model could hold: the cluster's allocatable less what the other pods request
    in the latest inventory snapshot (None when the inventory does not say)."""
    held = cluster_allocatable(store, since, until)
    if held is None or held.gpus is None:
        return None
    requested = store.scalar(_REQUESTED_SQL, [utc_naive(since), utc_naive(until)])
    return max(0, held.gpus - int(requested or 0) + own_gpus)


_SPAN_SQL = """
SELECT epoch_us(max(ts)) - epoch_us(min(ts)) FROM requests
WHERE model = ? AND ts >= ? AND ts < ? AND ok IS DISTINCT FROM false
"""

_MODEL_PODS_SQL = """
SELECT DISTINCT pod FROM requests
WHERE model = ? AND ts >= ? AND ts < ? AND pod IS NOT NULL ORDER BY pod
"""


def _history_s(store: Store, model: str, since: datetime, until: datetime) -> float:
    span_us = store.scalar(_SPAN_SQL, [model, utc_naive(since), utc_naive(until)])
    return 0.0 if span_us is None else float(span_us) / 1e6


def _inventory(store: Store, pods: tuple[str, ...]) -> tuple[int, tuple[str, ...], tuple[str, ...]]:
    """GPUs per replica (the largest request of the pods; 1 when the inventory does not say),
    the pods' workloads and namespaces."""
    inventory = store.query(_PODS_SQL, [list(pods)]).to_pylist() if pods else []
    per_replica = max((int(r["gpu_request"]) for r in inventory if r["gpu_request"]), default=1)
    workloads = tuple(sorted({str(r["workload"]) for r in inventory}))
    namespaces = tuple(sorted({str(r["namespace"]) for r in inventory if r["namespace"]}))
    return per_replica, workloads, namespaces


def _without_slo(
    store: Store,
    model: str,
    since: datetime,
    until: datetime,
    s: ReplicaSettings,
    *,
    history_s: float,
) -> ReplicaRecommendation:
    """The row of a model with no SLO set: what it runs on, and how to set one."""
    params = [model, utc_naive(since), utc_naive(until)]
    pods = tuple(str(p) for p in store.query(_MODEL_PODS_SQL, params).column("pod").to_pylist())
    per_replica, workloads, namespaces = _inventory(store, pods)
    return ReplicaRecommendation(
        model=model,
        workloads=workloads,
        pods=pods,
        current_replicas=len(pods),
        proposed_replicas=None,
        gpus_per_replica=per_replica,
        current_gpus=len(pods) * per_replica,
        proposed_gpus=None,
        slo_s=None,
        safe_max_rps=None,
        knee_rps=None,
        peak_rps=peak_rate(store, model, since, until, s),
        since=since,
        until=until,
        pods_measured=0,
        upper_bound=False,
        reason=f"no P95 SLO set for {model}: set one with --slo {model}=SECONDS (or --slo-ms "
        "for every model) to size its replicas",
        namespaces=namespaces,
        history_s=history_s,
    )


def _quantile(s: ReplicaSettings) -> str:
    return "busiest" if s.peak_quantile_ratio >= 1 else f"P{s.peak_quantile_ratio * 100:g}"
