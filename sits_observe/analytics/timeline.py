"""Pod start timeline: where the time between creation and readiness goes, per pod.

SPEC "Pod start jitter": "Timeline per pod: scheduled -> device allocated -> containers started
-> ready, with the cause of delay (device-plugin registration late, CUDA context warm-up, image
pull). The documents report p95 start 2,140 ms ... before, 480 ms ... after fixes."

What the inventory gives (``pods`` table, latest snapshot per pod UID): ``created_at``
(metadata.creationTimestamp) and the ``lastTransitionTime`` of the PodScheduled, Initialized,
ContainersReady and Ready conditions. The stages and what each gap can honestly be blamed on:

=============  =======================================  =====================================
stage          gap                                      likely cause
=============  =======================================  =====================================
scheduling     created_at -> scheduled_at               scheduling delay: queueing, no node
                                                        fits; a late device-plugin
                                                        registration shows here (the node
                                                        advertises no nvidia.com/gpu yet)
init           scheduled_at -> initialized_at           admission and device allocation
                                                        (device-plugin Allocate, topology
                                                        manager), sandbox, init containers
containers     initialized_at -> containers_ready_at    image pull, container start and
                                                        readiness: model load / CUDA context
                                                        warm-up (not separable without events)
readiness      containers_ready_at -> ready_at          readiness gates
=============  =======================================  =====================================

Limits, stated rather than hidden: no Kubernetes events are stored yet, so an image pull
cannot be told apart from model load; container ``startedAt`` is not stored, so "containers
started" is not a stage of its own; condition times have one-second resolution on a real API
server, so sub-second gaps read as 0 or 1 s; a condition that went False and True again
(restart) carries its latest transition, which can make a gap negative or long - negative
gaps are flagged and never named as a cause.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
import polars as pl

from sits_observe.analytics.row_changes import Fingerprint, query_fingerprint
from sits_observe.analytics.settings import TimelineSettings
from sits_observe.domain.times import utc_naive
from sits_observe.store.duck import Store

#: (stage, start column, end column, likely cause), in order.
STAGES: tuple[tuple[str, str, str, str], ...] = (
    (
        "scheduling",
        "created_at",
        "scheduled_at",
        "scheduling delay (queueing, no fitting node, or the device plugin registered late)",
    ),
    (
        "init",
        "scheduled_at",
        "initialized_at",
        "admission / device allocation / init containers",
    ),
    (
        "containers",
        "initialized_at",
        "containers_ready_at",
        "image pull, container start, model load / CUDA context warm-up",
    ),
    ("readiness", "containers_ready_at", "ready_at", "readiness gates"),
)
CAUSES = {stage: cause for stage, _, _, cause in STAGES}

#: Columns of ``pods`` the timeline reads.
POD_COLUMNS = (
    "pod_uid",
    "namespace",
    "pod",
    "workload",
    "node",
    "phase",
    "created_at",
    "scheduled_at",
    "initialized_at",
    "containers_ready_at",
    "ready_at",
)


@dataclass(frozen=True)
class PodTimeline:
    """One pod's start: stage durations (None = that condition not reached / not known)."""

    namespace: str | None
    pod: str | None
    pod_uid: str
    workload: str | None
    node: str | None
    phase: str | None
    created_at: datetime | None
    ready_at: datetime | None
    scheduling_s: float | None
    init_s: float | None
    containers_s: float | None
    readiness_s: float | None
    total_s: float | None
    reached: str
    largest_stage: str | None
    likely_cause: str | None
    anomaly: str | None


@dataclass(frozen=True)
class TimelineSummary:
    """Start times of a group of pods, with the spec's reference P95s for comparison."""

    group: tuple[tuple[str, str | None], ...]
    pods: int
    pods_ready: int
    start_p50_s: float | None
    start_p95_s: float | None
    start_max_s: float | None
    stage_p95_s: tuple[tuple[str, float | None], ...]
    dominant_stage: str | None
    reference_before_p95_s: float
    reference_after_p95_s: float
    comparison: str


def _gap(start: datetime | None, end: datetime | None) -> float | None:
    if start is None or end is None:
        return None
    return (end - start).total_seconds()


def pod_timeline(row: dict[str, object]) -> PodTimeline:
    """The timeline of one ``pods`` row (a mapping with :data:`POD_COLUMNS`)."""
    times = {c: row.get(c) for c in POD_COLUMNS if c.endswith("_at")}
    stamps = {c: v if isinstance(v, datetime) else None for c, v in times.items()}
    gaps = {stage: _gap(stamps[a], stamps[b]) for stage, a, b, _ in STAGES}
    reached = "created" if stamps["created_at"] is not None else "unknown"
    for _, _, end, _ in STAGES:
        if stamps[end] is None:
            break
        reached = end.removesuffix("_at")
    negative = [s for s, g in gaps.items() if g is not None and g < 0]
    anomaly = (
        f"negative {', '.join(negative)} gap: a condition changed again after the start (restart?)"
        if negative
        else None
    )
    positive = {s: g for s, g in gaps.items() if g is not None and g > 0}
    largest = max(positive, key=lambda s: positive[s]) if positive else None

    def text(key: str) -> str | None:
        value = row.get(key)
        return None if value is None else str(value)

    return PodTimeline(
        namespace=text("namespace"),
        pod=text("pod"),
        pod_uid=str(row.get("pod_uid")),
        workload=text("workload"),
        node=text("node"),
        phase=text("phase"),
        created_at=stamps["created_at"],
        ready_at=stamps["ready_at"],
        scheduling_s=gaps["scheduling"],
        init_s=gaps["init"],
        containers_s=gaps["containers"],
        readiness_s=gaps["readiness"],
        total_s=_gap(stamps["created_at"], stamps["ready_at"]),
        reached=reached,
        largest_stage=largest,
        likely_cause=CAUSES[largest] if largest else None,
        anomaly=anomaly,
    )


def pod_timelines(pods: pl.DataFrame) -> tuple[PodTimeline, ...]:
    """Timelines of every pod UID in ``pods`` (its latest snapshot by ``ts`` when present)."""
    if pods.height == 0:
        return ()
    latest = pods
    if "ts" in pods.columns:
        latest = pods.sort("ts", descending=True).unique("pod_uid", keep="first")
    latest = latest.sort("namespace", "pod", nulls_last=True)
    return tuple(pod_timeline(r) for r in latest.iter_rows(named=True))


def _q(values: list[float], q: float) -> float | None:
    return float(np.quantile(np.asarray(values), q)) if values else None


def summarize(
    timelines: Sequence[PodTimeline],
    settings: TimelineSettings,
    *,
    by: Sequence[str] = ("namespace", "workload"),
) -> tuple[TimelineSummary, ...]:
    """P50 / P95 start (created -> ready) per group of ``by`` fields (``()`` = everything).

    Pods not ready yet and pods with a negative gap (anomaly) are counted in ``pods`` but left
    out of the quantiles.
    """
    groups: dict[tuple[str | None, ...], list[PodTimeline]] = {}
    for t in timelines:
        groups.setdefault(tuple(getattr(t, k) for k in by), []).append(t)
    out = []
    for key, members in sorted(groups.items(), key=lambda kv: [v or "" for v in kv[0]]):
        clean = [t for t in members if t.anomaly is None]
        totals = [t.total_s for t in clean if t.total_s is not None]
        stage_p95 = tuple(
            (
                stage,
                _q([g for t in clean if (g := getattr(t, f"{stage}_s")) is not None], 0.95),
            )
            for stage, *_ in STAGES
        )
        largest = [t.largest_stage for t in clean if t.largest_stage is not None]
        # Ties go to the earlier stage, so the answer does not depend on set order.
        dominant = max((s for s, *_ in STAGES), key=largest.count) if largest else None
        p95 = _q(totals, 0.95)
        out.append(
            TimelineSummary(
                group=tuple(zip(by, key, strict=True)),
                pods=len(members),
                pods_ready=len(totals),
                start_p50_s=_q(totals, 0.50),
                start_p95_s=p95,
                start_max_s=max(totals) if totals else None,
                stage_p95_s=stage_p95,
                dominant_stage=dominant,
                reference_before_p95_s=settings.reference_before_p95_s,
                reference_after_p95_s=settings.reference_after_p95_s,
                comparison=compare_to_reference(p95, settings),
            )
        )
    return tuple(out)


def compare_to_reference(p95_s: float | None, settings: TimelineSettings) -> str:
    """Where a measured P95 start sits against the documents' 2,140 ms / 480 ms."""
    before, after = settings.reference_before_p95_s, settings.reference_after_p95_s
    ref = f"(spec: {before * 1000:,.0f} ms before fixes, {after * 1000:,.0f} ms after)"
    if p95_s is None:
        return f"no ready pods {ref}"
    measured = f"p95 {p95_s * 1000:,.0f} ms"
    if p95_s <= after:
        return f"{measured}: at or below the after-fix figure {ref}"
    if p95_s <= before:
        return f"{measured}: between the after- and before-fix figures {ref}"
    return f"{measured}: above the before-fix figure {ref}"


#: Each candidate pod's versions (``pod_versions``, store/inventory.py) with the latest
#: snapshot of their epoch before ``least(valid_to, until)`` (an as-of join: at most one
#: snapshot per version, however long the history): a version is seen at that snapshot when
#: it is at or after its ``valid_from``, and a pod's latest row is the version seen latest.
#: The candidates are the pods with a version created in the window: the creation filter
#: applies to a pod's latest row, which is one of its versions, so no other pod can pass it.
_LATEST_POD_VERSIONS = """
WITH candidates AS (
    SELECT DISTINCT pod_uid FROM pod_versions
    WHERE pod_uid IS NOT NULL
      AND (?::TIMESTAMP IS NULL OR created_at >= ?) AND (?::TIMESTAMP IS NULL OR created_at < ?)
),
versions AS (
    SELECT v.*, least(coalesce(v.valid_to, 'infinity'::TIMESTAMP),
                      coalesce(?::TIMESTAMP, 'infinity'::TIMESTAMP)) AS read_until
    FROM pod_versions AS v SEMI JOIN candidates USING (pod_uid)
)
SELECT s.ts, {cols}
FROM versions AS v
ASOF JOIN pod_snapshots AS s ON s.epoch_at = v.epoch_at AND v.read_until > s.ts
WHERE s.ts >= v.valid_from
QUALIFY row_number() OVER (PARTITION BY v.pod_uid ORDER BY s.ts DESC) = 1
    AND (?::TIMESTAMP IS NULL OR v.created_at >= ?) AND (?::TIMESTAMP IS NULL OR v.created_at < ?)
"""


def _latest_pods(
    since: datetime | None, until: datetime | None, columns: Sequence[str]
) -> tuple[str, list[object]]:
    """:data:`_LATEST_POD_VERSIONS` with ``columns`` and its parameters."""
    cols = ", ".join(f"v.{c}" for c in columns)
    lo = utc_naive(since) if since is not None else None
    hi = utc_naive(until) if until is not None else None
    return _LATEST_POD_VERSIONS.format(cols=cols), [lo, lo, hi, hi, hi, lo, lo, hi, hi]


def load_pods(
    store: Store, since: datetime | None = None, until: datetime | None = None
) -> pl.DataFrame:
    """The latest snapshot before ``until`` of each pod created in ``[since, until)`` (NULL
    creation included only without ``since``): the ``pods`` rows of :data:`POD_COLUMNS` and
    their ``ts``.

    Read from the versions (:data:`_LATEST_POD_VERSIONS`) rather than the ``pods`` view,
    which expands every snapshot of the history (tens of millions of rows a day at 10,000
    pods): the same rows (tests/unit/analytics/test_timeline_versions.py checks them against
    the view's ``row_number() OVER (PARTITION BY pod_uid ORDER BY ts DESC) = 1``), read in
    time that grows with the window's pods and their versions, not with the snapshots. Two
    rows of one pod in one snapshot are a tie either way: one of them is kept.
    """
    sql, params = _latest_pods(since, until, POD_COLUMNS)
    return pl.DataFrame(store.query(sql, params))


def pods_fingerprint(
    store: Store, since: datetime | None = None, until: datetime | None = None
) -> Fingerprint:
    """The fingerprint of :func:`load_pods`' rows without their ``ts``
    (:func:`~sits_observe.analytics.row_changes.query_fingerprint`): what the timelines of
    those pods are a function of, so a new snapshot that repeats every pod's row keeps it."""
    sql, params = _latest_pods(since, until, POD_COLUMNS)
    cols = ", ".join(POD_COLUMNS)
    return query_fingerprint(store, f"SELECT {cols} FROM ({sql})", params)


def _gap_us(start: str, end: str) -> pl.Expr:
    """``end - start`` in whole microseconds (None when either is None)."""
    return (pl.col(end) - pl.col(start)).dt.total_microseconds()


def _seconds(us: pl.Series) -> np.ndarray[Any, np.dtype[np.float64]]:
    """Microseconds to seconds as :func:`_gap` computes them: one correctly rounded
    division each (numpy's; polars divides a long column by a reciprocal, which can differ
    in the last bit)."""
    return us.to_numpy().astype(np.float64) / 1_000_000


def ready_start_s(pods: pl.DataFrame) -> pl.DataFrame:
    """Scheduled -> ready seconds of each pod in ``pods`` (rows with :data:`POD_COLUMNS`,
    one per pod UID, as :func:`load_pods` returns them) that became ready without an anomaly:
    columns ``namespace`` (None when unknown) and ``start_s``, the ``init_s + containers_s +
    readiness_s`` of its :func:`pod_timeline`, summed in that order.

    The same values, to the bit, as looping over :func:`pod_timelines` (checked in
    tests/unit/analytics/test_timeline_versions.py) in one vectorised pass: the exporter
    computes it for every pod created in the last hour on each inventory snapshot.
    """
    if pods.height == 0:
        return pl.DataFrame(schema={"namespace": pl.String, "start_s": pl.Float64})
    gaps = {stage: _gap_us(start, end) for stage, start, end, _ in STAGES}
    summed = ("init", "containers", "readiness")
    reached = pl.all_horizontal(gaps[s].is_not_null() for s in summed)
    # pod_timeline's anomaly: any known gap below 0 (the scheduling one included).
    anomaly = pl.any_horizontal(gap.fill_null(0) < 0 for gap in gaps.values())
    kept = pods.filter(reached & ~anomaly).select(
        pl.col("namespace").cast(pl.String), *(gaps[s].alias(s) for s in summed)
    )
    init, containers, readiness = (_seconds(kept[s]) for s in summed)
    return kept.select("namespace").with_columns(
        pl.Series("start_s", init + containers + readiness, dtype=pl.Float64)
    )
