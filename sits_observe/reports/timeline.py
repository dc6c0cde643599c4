"""Report ``timeline``: where pod start time goes, created -> scheduled -> initialized -> ready.

One row per group of pods (``by``: namespace, workload, node) with P50 / P95 / max start and
the stage that is most often the largest, or one row per pod (``pods``). The pods are those
*created* in the window (``since <= created_at < until``), each as its latest inventory
snapshot before ``until``; the stages and what each can honestly be blamed on are in
:mod:`sits_observe.analytics.timeline` (docs/analytics/timeline.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
from pydantic import Field, field_validator

from sits_observe.analytics.settings import TimelineSettings
from sits_observe.analytics.timeline import (
    STAGES,
    PodTimeline,
    TimelineSummary,
    load_pods,
    pod_timelines,
    ready_start_s,
    summarize,
)
from sits_observe.domain.units import Unit
from sits_observe.reports.result import Column, Report, col, table_of
from sits_observe.reports.spec import ReportSpec, require_rows
from sits_observe.reports.window import Window
from sits_observe.store import Store

#: The fields pods can be grouped by.
GROUPS = ("namespace", "workload", "node")

FILLED_BY = "`sits-observe ingest k8s` (or `serve` / `demo`, which snapshot the inventory)"


class TimelineQuery(TimelineSettings):
    """Settings of the ``timeline`` report."""

    by: list[str] = Field(
        ["namespace", "workload"],
        description="summary groups: namespace, workload, node (repeat the flag or comma-separate)",
    )
    pods: bool = Field(False, description="one row per pod instead of a summary")

    @field_validator("by", mode="before")
    @classmethod
    def _groups(cls, value: Any) -> list[str]:
        items = [value] if isinstance(value, str) else list(value)
        keys = [k.strip() for item in items for k in str(item).split(",") if k.strip()]
        bad = [k for k in keys if k not in GROUPS]
        if bad:
            raise ValueError(f"{', '.join(bad)}: choose from {', '.join(GROUPS)}")
        return list(dict.fromkeys(keys))


_STAGE_P95 = tuple(
    col(f"{stage}_p95_s", f"{stage} p95", Unit.seconds, wide=True) for stage, *_ in STAGES
)
_SUMMARY = (
    col("pods", "pods", Unit.integer),
    col("pods_ready", "ready", Unit.integer),
    col("start_p50_s", "start p50", Unit.seconds),
    col("start_p95_s", "start p95", Unit.seconds),
    col("start_max_s", "start max", Unit.seconds, wide=True),
    *_STAGE_P95,
    col("dominant_stage", "largest stage"),
    col("comparison", "against the spec", wide=True),
)
_PODS = (
    col("namespace", "namespace"),
    col("pod", "pod"),
    col("workload", "workload", wide=True),
    col("node", "node", wide=True),
    col("phase", "phase", wide=True),
    col("pod_uid", "pod UID", wide=True),
    col("created_at", "created", Unit.time, wide=True),
    col("scheduling_s", "scheduling", Unit.seconds),
    col("init_s", "init", Unit.seconds),
    col("containers_s", "containers", Unit.seconds),
    col("readiness_s", "readiness", Unit.seconds),
    col("total_s", "total", Unit.seconds),
    col("largest_stage", "largest stage"),
    col("reached", "reached", wide=True),
    col("likely_cause", "likely cause", wide=True),
    col("anomaly", "anomaly", wide=True),
)


def build(store: Store, window: Window, query: TimelineQuery) -> Report:
    """The ``timeline`` report over ``window``."""
    require_rows(store, window, "pods", FILLED_BY)
    timelines = pod_timelines(load_pods(store, since=window.since, until=window.until))
    notes = _notes(timelines)
    facts: dict[str, Any] = {
        "pods": len(timelines),
        "reference_before_p95_s": query.reference_before_p95_s,
        "reference_after_p95_s": query.reference_after_p95_s,
    }
    if query.pods:
        rows = [_pod_row(t) for t in timelines]
        main = table_of("pods", "Pod start timeline", rows, _PODS)
        return Report("timeline", window, main, (), tuple(notes), facts)
    keys = tuple(query.by)
    summary = summarize(timelines, query, by=keys)
    if summary:
        everything = summarize(timelines, query, by=())[0]
        notes.insert(0, f"all pods: {everything.comparison}")
    columns: Sequence[Column] = (*(col(k, k) for k in keys), *_SUMMARY)
    title = f"Pod start by {', '.join(keys) or 'all pods'}"
    main = table_of("summary", title, [_summary_row(s) for s in summary], columns)
    return Report("timeline", window, main, (), tuple(notes), {**facts, "by": list(keys)})


def ready_starts(store: Store, window: Window) -> pa.Table:
    """Scheduled -> ready seconds of each pod created in ``window`` that became ready
    without an anomaly: columns ``namespace`` (None when unknown) and ``start_s``, each the
    report's ``start`` of that pod (its ``init + containers + readiness``; the same values to
    the bit, in one vectorised pass); the exporter's ``sits_pod_start_seconds``."""
    return ready_start_s(load_pods(store, since=window.since, until=window.until)).to_arrow()


def _summary_row(s: TimelineSummary) -> dict[str, Any]:
    return {
        **dict(s.group),
        "pods": s.pods,
        "pods_ready": s.pods_ready,
        "start_p50_s": s.start_p50_s,
        "start_p95_s": s.start_p95_s,
        "start_max_s": s.start_max_s,
        **{f"{stage}_p95_s": v for stage, v in s.stage_p95_s},
        "dominant_stage": s.dominant_stage,
        "comparison": s.comparison,
    }


def _pod_row(t: PodTimeline) -> dict[str, Any]:
    return {
        "namespace": t.namespace,
        "pod": t.pod,
        "workload": t.workload,
        "node": t.node,
        "phase": t.phase,
        "pod_uid": t.pod_uid,
        "created_at": t.created_at,
        "ready_at": t.ready_at,
        "scheduling_s": t.scheduling_s,
        "init_s": t.init_s,
        "containers_s": t.containers_s,
        "readiness_s": t.readiness_s,
        "total_s": t.total_s,
        "reached": t.reached,
        "largest_stage": t.largest_stage,
        "likely_cause": t.likely_cause,
        "anomaly": t.anomaly,
    }


def _notes(timelines: Sequence[PodTimeline]) -> list[str]:
    notes: list[str] = []
    if not timelines:
        notes.append("no pod was created in the window (pods are picked by creation time)")
    anomalies = sum(1 for t in timelines if t.anomaly is not None)
    if anomalies:
        notes.append(
            f"{anomalies} pod(s) have a negative stage gap (a condition changed again after "
            "the start, a restart?): left out of the quantiles"
        )
    return notes


SPEC = ReportSpec(
    name="timeline",
    summary="Pod start timeline: created -> scheduled -> initialized -> ready, largest gap named.",
    settings=TimelineQuery,
    reads=("pods",),
    build=build,
)
