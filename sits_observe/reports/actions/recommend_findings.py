"""``recommend`` rows from the analytics: idle GPUs, GPU memory per workload, replicas at the SLO.

One row per workload (the owner the inventory resolved from ``ownerReferences``,
``pods.workload``) for each finding, in the row shape of :mod:`.recommend_plan`:

- ``idle-gpu`` / ``oversized-gpu`` (:mod:`sits_observe.analytics.fragmentation.idle_gpus`): the GPUs
  the workload holds -> 0 (idle) or -> the share it uses (oversized), with the GPU-hours wasted;
  ``stranded-gpu`` per node: the GPUs FGD finds no typical pod can use -> 0;
- ``gpu-memory`` (:mod:`sits_observe.analytics.rightsizing.stacks`): the framebuffer reserved
  per GPU now -> the VPA-style target, the setting in the workload's stack's form in the
  reason; "not enough data" leaves ``proposed`` empty and says why;
- ``replicas`` (:mod:`sits_observe.analytics.rightsizing.replicas`): serving pods now -> the
  replicas the observed peak needs at the P95 SLO, one row per model, named by its serving workload
  (by the model when several workloads serve it); no safe maximum: "not enough data".

Confidence (the ``confidence`` column), each a stated rule:

- ``gpu-memory``: VPA's confidence in days of history, :func:`.recommend_plan.days_confidence`
  (high >= 7 days, medium >= 2, low below; ``none`` without a proposal);
- ``idle-gpu`` / ``oversized-gpu``: how long the workload was seen holding its GPUs: high
  >= 24 h (a whole daily cycle), medium >= 1 h, low below;
- ``replicas``: high when every serving pod has a safe maximum and the SLO broke inside the
  measured load (the limit is measured), medium when the SLO held at every measured load
  (the count is an upper bound) or some pods had none; and never above what the days of
  request history allow on VPA's scale (:func:`.recommend_plan.days_confidence`: minutes of
  data are ``low``); ``none`` without a proposal;
- ``stranded-gpu``: ``rule`` (FGD over the latest inventory).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from sits_observe.analytics.fragmentation.fgd_live import LiveCluster, live_cluster
from sits_observe.analytics.fragmentation.idle_gpus import (
    KINDS,
    Finding,
    IdleReport,
    Kind,
    find_waste,
    load_held_samples,
)
from sits_observe.analytics.fragmentation.settings import IdleSettings
from sits_observe.analytics.rightsizing.memory import RightsizingSettings
from sits_observe.analytics.rightsizing.replicas import (
    ReplicaRecommendation,
    ReplicaSettings,
    replicas_at_slo,
)
from sits_observe.analytics.rightsizing.stacks import WorkloadSizing, workload_sizings
from sits_observe.domain.units import Unit, human
from sits_observe.errors import StoreError
from sits_observe.reports.actions.recommend_plan import (
    MAX_REASON,
    RULE,
    backing,
    change_ratio,
    days_confidence,
)
from sits_observe.reports.window import Window
from sits_observe.store import Store

#: The kinds of waste, in the order every total lists them: idle, oversized, stranded.
WASTE_KINDS: tuple[Kind, ...] = KINDS

WORKLOAD = "Workload"
HIGH_HELD_H = 24.0
MEDIUM_HELD_H = 1.0


DAY_S = 86_400.0
_RANK = {"none": 0, "low": 1, "medium": 2, "high": 3}


def weaker(*levels: str) -> str:
    """The lowest of confidence ``levels`` (none < low < medium < high)."""
    return min(levels, key=lambda level: _RANK[level])


def held_confidence(hours: float) -> str:
    """``high`` (seen >= 24 h), ``medium`` (>= 1 h) or ``low``."""
    if hours >= HIGH_HELD_H:
        return "high"
    return "medium" if hours >= MEDIUM_HELD_H else "low"


def row(
    *,
    kind: str,
    namespace: str | None,
    name: str,
    action: str,
    current: float | None,
    proposed: float | None,
    unit: Unit,
    unit_name: str,
    confidence: str,
    reason_short: str,
    reason: str,
    evidence: dict[str, Any],
    workload: str | None = None,
    history_s: float | None = None,
) -> dict[str, Any]:
    """One ``recommend`` row of a finding (numbers shown in ``unit``), backed by
    ``history_s`` seconds of data (None: a rule over the latest state)."""
    return {
        "kind": kind,
        "namespace": namespace,
        "name": name,
        "target": name if namespace is None else f"{namespace}/{name}",
        "action": action,
        "current": None if current is None else human(current, unit),
        "proposed": None if proposed is None else human(proposed, unit),
        "current_value": current,
        "proposed_value": proposed,
        "unit": unit_name,
        "change_ratio": change_ratio(current, proposed),
        "confidence": confidence,
        "history_s": history_s,
        "backing": backing(confidence, history_s),
        "reason_short": _fit(reason_short),
        "reason": reason,
        "evidence": json.dumps(evidence, sort_keys=True, separators=(",", ":"), default=str),
        "workload": workload,
    }


def _fit(text: str) -> str:
    return text if len(text) <= MAX_REASON else text[: MAX_REASON - 1] + "…"


def _key(namespace: str | None, workload: str) -> str:
    """The workload key the controller's rows carry (``namespace/workload``)."""
    return workload if namespace is None else f"{namespace}/{workload}"


# -- idle, oversized and stranded GPUs ----------------------------------------------------------


def waste(
    store: Store, since: datetime, until: datetime, window_s: float | None, s: IdleSettings
) -> tuple[IdleReport | None, list[str]]:
    """The idle report over ``[since, until)`` (stranded GPUs over ``window_s``, or from the
    first held sample) and the notes of what could not be measured."""
    samples = load_held_samples(store, since, until)
    if samples.height == 0:
        return None, []
    span_s = window_s
    if span_s is None:
        span_s = until.timestamp() - float(samples.get_column("ts_s").min())  # type: ignore[arg-type]
    notes: list[str] = []
    try:
        live = live_cluster(store, since=since, until=until)
    except StoreError as exc:
        live = None
        notes.append(f"stranded GPUs not measured: {exc}")
    return find_waste(samples, s, window_s=max(span_s, 0.0), live=live), notes


def idle_gpus(
    store: Store, window: Window, s: IdleSettings, *, window_s: float, live: LiveCluster | None
) -> IdleReport:
    """The idle and oversized GPUs held by pods in ``window`` (``window.since`` is
    required) and the capacity ``live`` strands (None: none measured), the GPU-hours over
    ``window_s``: the findings :func:`waste` gives the ``recommend`` report for its own
    window and inventory; the exporter's ``sits_gpu_idle_*`` families, with every kind's
    total even when nothing is held."""
    assert window.since is not None
    samples = load_held_samples(store, window.since, window.until)
    return find_waste(samples, s, window_s=window_s, live=live)


def idle_rows(report: IdleReport, s: IdleSettings) -> list[dict[str, Any]]:
    """One row per (kind, namespace, workload) of the idle and oversized findings, one per
    node of the stranded ones."""
    groups: dict[tuple[str, str | None, str], list[Finding]] = defaultdict(list)
    out = []
    for f in report.findings:
        if f.kind == "stranded":
            out.append(_stranded(f))
        else:
            groups[(f.kind, f.namespace, f.workload or f.pod or "?")].append(f)
    for (kind, namespace, workload), found in groups.items():
        out.append(_held(kind, namespace, workload, found, s))
    return out


def _held(
    kind: str, namespace: str | None, workload: str, found: list[Finding], s: IdleSettings
) -> dict[str, Any]:
    gpus = sum(f.allocated_gpus for f in found)
    wasted = sum(f.wasted_gpu_hours for f in found)
    held_h = max(f.held_hours for f in found)
    samples = sum(f.samples for f in found)
    evidence: dict[str, Any] = {
        "gpus": sorted({f.gpu_uuid for f in found if f.gpu_uuid}),
        "nodes": sorted({f.node for f in found if f.node}),
        "pods": sorted({f.pod for f in found if f.pod}),
        "samples": samples,
        "held_hours": held_h,
        "wasted_gpu_hours": wasted,
        "idle_share_ratio": max(f.idle_share_ratio or 0.0 for f in found),
    }
    span = human(held_h * 3600, Unit.seconds)
    if kind == "idle":
        share = evidence["idle_share_ratio"]
        proposed = 0.0
        short = f"idle {share:.0%} of {span}: {wasted:.2g} GPU-h"
        reason = (
            f"utilisation < {s.util_floor_ratio:.0%} and memory activity < "
            f"{s.activity_floor_ratio:.0%} in {share:.0%} of {samples} samples over {span} "
            f"(idle from {s.idle_share_ratio:.0%}): {wasted:.3g} GPU-hours wasted; release "
            "the GPUs or scale the workload to zero while idle"
        )
    else:
        used = max(f.used_share_ratio or 0.0 for f in found)
        evidence["used_share_ratio"] = used
        proposed = gpus * used
        short = f"P{s.used_percentile_ratio * 100:g} use {used:.0%}: {wasted:.2g} GPU-h"
        reason = (
            f"P{s.used_percentile_ratio * 100:g} of the used share (framebuffer or "
            f"utilisation) {used:.0%} < {s.oversized_below_ratio:.0%} of the allocation over "
            f"{span}: {wasted:.3g} GPU-hours wasted; a share of {proposed:.3g} GPU would hold it"
        )
    return row(
        kind=WORKLOAD,
        namespace=namespace,
        name=workload,
        action=f"{kind}-gpu",
        current=gpus,
        proposed=proposed,
        unit=Unit.number,
        unit_name="GPUs",
        confidence=held_confidence(held_h),
        reason_short=short,
        reason=reason,
        evidence=evidence,
        workload=_key(namespace, workload),
        history_s=held_h * 3600,
    )


def _stranded(f: Finding) -> dict[str, Any]:
    return row(
        kind="Node",
        namespace=None,
        name=f.node or "?",
        action="stranded-gpu",
        current=f.allocated_gpus,
        proposed=0.0,
        unit=Unit.number,
        unit_name="GPUs",
        confidence=RULE,
        reason_short=f"no typical pod fits: {f.wasted_gpu_hours:.2g} GPU-h",
        reason=(
            f"FGD: {f.allocated_gpus:.3g} GPU(s) of idle capacity that no typical pod of the "
            f"workload can use, {f.wasted_gpu_hours:.3g} GPU-hours over the window; the "
            "fragmentation label steers the scheduler extender away from it"
        ),
        evidence={"stranded_gpus": f.allocated_gpus, "wasted_gpu_hours": f.wasted_gpu_hours},
    )


# -- GPU memory per workload --------------------------------------------------------------------


def sizing_rows(
    store: Store, since: datetime, until: datetime, s: RightsizingSettings
) -> list[dict[str, Any]]:
    """One ``gpu-memory`` row per workload with framebuffer samples in the window."""
    return [_sizing(z) for z in workload_sizings(store, since, until, s)]


def _short_form(text: str) -> str:
    return text.replace("nvidia.com/", "")


def _sizing(z: WorkloadSizing) -> dict[str, Any]:
    m, p = z.memory, z.proposal
    evidence: dict[str, Any] = {
        "stack": z.stack.kind,
        "stack_current": z.stack.current,
        "gpu_product": z.gpu_product,
        "gpu_memory_bytes": z.gpu_memory_bytes,
        "points": m.points,
        "series": m.series,
        "peaks": m.peaks,
        "history_s": m.history_s,
        "confidence_days": m.confidence_days,
        "peak_bytes": m.peak_bytes,
        "target_bytes": m.target_bytes,
        "lower_bytes": m.lower_bytes,
        "upper_bytes": m.upper_bytes,
        "max_allowed_bytes": m.max_allowed_bytes,
        "capped": m.capped,
        "compute_ratio": z.compute_ratio,
    }
    if p is None:
        reason, confidence = m.reason, "none"
        short = f"not enough data: {m.points} samples over {human(m.history_s, Unit.seconds)}"
    else:
        evidence |= {"setting": p.proposed, "alternatives": list(p.alternatives), "fits": p.fits}
        if p.proposed != p.current:
            short = f"set {_short_form(p.proposed)}"
        elif p.alternatives:
            short = f"{_short_form(p.alternatives[0])} would hold it"
        else:
            short = f"keep {_short_form(p.current)}"
        more = f"; or {', '.join(p.alternatives)}" if p.alternatives else ""
        reason = f"{p.proposed}: {p.note}{more}; {m.reason}"
        confidence = days_confidence(m.confidence_days)
    # A form that keeps its setting below the target (vLLM: the framebuffer measured is its
    # own pre-allocation) proposes what that setting holds, not a raise it does not make.
    target = m.target_bytes
    kept = p is not None and p.proposed == p.current and z.reserved_bytes is not None
    if kept and target is not None and z.reserved_bytes is not None and target > z.reserved_bytes:
        target = z.reserved_bytes
    return row(
        kind=WORKLOAD,
        namespace=z.namespace,
        name=z.workload,
        action="gpu-memory",
        current=None if z.reserved_bytes is None else float(z.reserved_bytes),
        proposed=None if target is None else float(target),
        unit=Unit.quantity_bytes,
        unit_name="bytes per GPU",
        confidence=confidence,
        reason_short=short,
        reason=reason,
        evidence=evidence,
        workload=_key(z.namespace, z.workload),
        history_s=m.history_s,
    )


# -- replicas at the SLO ------------------------------------------------------------------------


def replica_rows(
    store: Store, since: datetime, until: datetime, s: ReplicaSettings
) -> list[dict[str, Any]]:
    """One ``replicas`` row per model with requests in the window."""
    return [_replicas(r) for r in replicas_at_slo(store, since, until, s)]


def _replicas(r: ReplicaRecommendation) -> dict[str, Any]:
    evidence: dict[str, Any] = {
        "model": r.model,
        "slo_s": r.slo_s,
        "safe_max_rps": r.safe_max_rps,
        "knee_rps": r.knee_rps,
        "peak_rps": r.peak_rps,
        "pods": list(r.pods),
        "pods_measured": r.pods_measured,
        "gpus_per_replica": r.gpus_per_replica,
        "current_gpus": r.current_gpus,
        "proposed_gpus": r.proposed_gpus,
        "upper_bound": r.upper_bound,
        "needed_replicas": r.needed_replicas,
        "history_s": r.history_s,
        "since": r.since,
        "until": r.until,
    }
    if r.slo_s is None:
        confidence, short = "none", f"no SLO set: --slo {r.model}=SECONDS"
    elif r.proposed_replicas is None or r.safe_max_rps is None:
        confidence, short = "none", "not enough data: no safe maximum"
    else:
        measured = not r.upper_bound and r.pods_measured == len(r.pods)
        # The measurement's quality, and no more than the history behind it allows.
        confidence = weaker("high" if measured else "medium", days_confidence(r.history_s / DAY_S))
        short = f"peak {r.peak_rps:.3g} rps, {r.safe_max_rps:g} rps each"
        if r.needed_replicas is not None and r.needed_replicas > r.proposed_replicas:
            short = f"needs {r.needed_replicas}; the cluster has room for {r.proposed_replicas}"
    # The object is the serving workload; a model several workloads serve is named itself.
    name = r.workloads[0] if len(r.workloads) == 1 else r.model
    evidence["workloads"] = list(r.workloads)
    namespace = r.namespaces[0] if r.namespaces else None
    return row(
        kind=WORKLOAD,
        namespace=namespace,
        name=name,
        action="replicas",
        current=float(r.current_replicas),
        proposed=None if r.proposed_replicas is None else float(r.proposed_replicas),
        unit=Unit.integer,
        unit_name="replicas",
        confidence=confidence,
        reason_short=short,
        reason=f"{r.reason} (model {r.model})",
        evidence=evidence,
        workload=_key(namespace, name),
        history_s=r.history_s,
    )


def not_enough(rows: Iterable[dict[str, Any]]) -> int:
    """Rows without a proposal because the data is too short (confidence ``none``)."""
    return sum(1 for r in rows if r["confidence"] == "none")
