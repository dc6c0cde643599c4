"""Workload classes applied to pods or workloads read from the store: memory sensitivity, the
fitting QoS tier, GPU sharing by Kubernetes QoS class, the GPU time slice, the SLA-violation
rate and the priority advice (SPEC "Workload classes and QoS tiers").

The rules themselves, with their edges, are in :mod:`.class_rules` (once, vectorised; the
controller calls the same expressions); the elastic rule's inputs are in :mod:`.elastic`.
:func:`class_report` aggregates each pod or workload in one pass and applies every rule to
the aggregated frame; only the result objects and their reason texts are built per row.

The scalar names this module used to define (``memory_class``, ``time_slice``,
``elastic_quota`` ...) are re-exported from :mod:`.class_scalar`, one-row front-ends of the
same rules, for the callers that still import them from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal, cast

import polars as pl

from sits_observe.analytics.classes import rules
from sits_observe.analytics.classes.rules import NO_PREEMPT, PREEMPT, tier_quota
from sits_observe.analytics.classes.scalar import (
    ElasticDecision,
    ElasticSignals,
    GpuSharing,
    MemoryClass,
    PriorityRecommendation,
    Task,
    TimeSlice,
    elastic_quota,
    elastic_signals,
    memory_class,
    priority_text,
    recommend_priority,
    tasks_to_reset,
    time_slice,
    time_slice_text,
)
from sits_observe.analytics.classes.settings import ClassSettings
from sits_observe.store.duck import Store, utc_naive

# Re-exported for the callers that import the class rules' names from here.
__all__ = [
    "NO_PREEMPT",
    "PREEMPT",
    "ElasticDecision",
    "ElasticSignals",
    "GpuSharing",
    "MemoryClass",
    "PriorityRecommendation",
    "Task",
    "TimeSlice",
    "WorkloadClass",
    "class_report",
    "elastic_quota",
    "elastic_signals",
    "load_class_inputs",
    "load_latest_pods",
    "memory_class",
    "pod_memory_peaks",
    "recommend_priority",
    "tasks_to_reset",
    "tier_quota",
    "time_slice",
]

# -- applying the rules to pods and workloads -----------------------------------------------


@dataclass(frozen=True)
class WorkloadClass:
    """Every class rule applied to one pod or workload (None = not measured)."""

    namespace: str | None
    name: str | None
    level: Literal["pod", "workload"]
    pods: int
    qos_class: str | None
    priority_class: str | None
    gpu_request: int | None
    peak_gpu_memory_bytes: int | None
    peak_total_gpu_memory_bytes: int | None
    memory_source: str | None
    shared_gpu: bool
    memory_class: MemoryClass | None
    fitting_tier: str | None
    sharing: GpuSharing
    requests: int
    p95_latency_s: float | None
    sequence_p95_tokens: float | None
    time_slice: TimeSlice
    sla_p99_s: float | None
    sla_violation_rate: float | None
    priority: PriorityRecommendation


def pod_memory_peaks(
    processes: pl.DataFrame, samples: pl.DataFrame, pods: pl.DataFrame
) -> pl.DataFrame:
    """Peak GPU memory per pod: ``namespace``, ``pod``, ``peak_gpu_memory_bytes`` (largest on
    one GPU), ``peak_total_gpu_memory_bytes`` (largest sum over its GPUs at one time),
    ``memory_source`` and ``shared_gpu``.

    Per-process memory (``gpu_processes``, summed per pod, GPU and time) is preferred: it counts
    only the pod's own processes. Otherwise the device's ``fb_used_bytes`` from ``gpu_samples``
    rows labelled with the pod; on a GPU shared with another pod (``shared_gpu``) that includes
    the other pod's memory, so it overstates.
    """
    empty = pl.DataFrame(
        schema={
            "namespace": pl.String,
            "pod": pl.String,
            "peak_gpu_memory_bytes": pl.Int64,
            "peak_total_gpu_memory_bytes": pl.Int64,
            "memory_source": pl.String,
            "shared_gpu": pl.Boolean,
        }
    )
    parts = [empty]
    if processes.height and pods.height:
        named = processes.join(
            pods.select("pod_uid", "namespace", "pod").unique("pod_uid"), on="pod_uid"
        )
        per = named.group_by("namespace", "pod", "gpu_uuid", "ts").agg(
            pl.col("used_memory_bytes").sum().alias("mem")
        )
        parts.append(_peaks(per, "gpu_processes", shared=pl.lit(False)))
    if samples.height:
        labelled = samples.filter(pl.col("pod").is_not_null() & pl.col("gpu_uuid").is_not_null())
        sharers = labelled.group_by("gpu_uuid", "ts").agg(pl.col("pod").n_unique().alias("sharers"))
        per = (
            labelled.group_by("namespace", "pod", "gpu_uuid", "ts")
            .agg(pl.col("fb_used_bytes").max().alias("mem"))
            .join(sharers, on=["gpu_uuid", "ts"])
        )
        parts.append(_peaks(per, "gpu_samples", shared=(pl.col("sharers") >= 2).any()))
    merged = pl.concat(parts, how="vertical_relaxed")
    # One row per pod: the process source wins where both exist.
    return merged.sort(pl.col("memory_source") != "gpu_processes", maintain_order=True).unique(
        ["namespace", "pod"], keep="first", maintain_order=True
    )


def _peaks(per: pl.DataFrame, source: str, *, shared: pl.Expr) -> pl.DataFrame:
    per = per.filter(pl.col("mem").is_not_null())
    totals = per.group_by("namespace", "pod", "ts").agg(pl.col("mem").sum().alias("total"))
    peaks = per.group_by("namespace", "pod").agg(
        pl.col("mem").max().cast(pl.Int64).alias("peak_gpu_memory_bytes"),
        shared.alias("shared_gpu"),
    )
    total_peaks = totals.group_by("namespace", "pod").agg(
        pl.col("total").max().cast(pl.Int64).alias("peak_total_gpu_memory_bytes")
    )
    return peaks.join(total_peaks, on=["namespace", "pod"]).select(
        "namespace",
        "pod",
        "peak_gpu_memory_bytes",
        "peak_total_gpu_memory_bytes",
        pl.lit(source).alias("memory_source"),
        "shared_gpu",
    )


def _one(column: str) -> pl.Expr:
    """The group's single non-null value, ``mixed`` when it has several, null when none."""
    values = pl.col(column).drop_nulls().cast(pl.String).unique()
    return (
        pl.when(values.len() == 0)
        .then(pl.lit(None, pl.String))
        .when(values.len() == 1)
        .then(values.first())
        .otherwise(pl.lit("mixed"))
        .alias(column)
    )


_KEYS = ["namespace", "name"]


def class_report(
    pods: pl.DataFrame,
    memory: pl.DataFrame,
    requests: pl.DataFrame,
    settings: ClassSettings,
    *,
    by: Literal["pod", "workload"] = "pod",
    fragmentation_ratio: float | None = None,
    gpu_memory_bytes: dict[str, int] | None = None,
) -> tuple[WorkloadClass, ...]:
    """Apply every class rule to each GPU pod (or workload) in ``pods``.

    ``pods``: one row per pod (``namespace``, ``pod``, ``workload``, ``node``, ``qos_class``,
    ``priority_class``, ``gpu_request``); ``memory``: :func:`pod_memory_peaks`; ``requests``:
    ``namespace``, ``pod``, ``latency_s``, ``ok``, ``prompt_tokens``, ``output_tokens``.
    ``gpu_memory_bytes`` (node -> bytes per GPU) sizes the Burstable memory share. Pods with
    no GPU request and no GPU memory measured are left out. ``fragmentation_ratio`` (0-1, the
    cluster's) decides preemption; None leaves it undecided. A workload's peak is its pods'
    largest; its P95s and SLA-violation rate are over all its pods' requests.
    """
    node_mem = gpu_memory_bytes or {}
    table = (
        pods.join(memory, on=["namespace", "pod"], how="left")
        .filter(
            (pl.col("gpu_request").fill_null(0) > 0) | pl.col("peak_gpu_memory_bytes").is_not_null()
        )
        .with_columns(
            name=pl.coalesce("workload", "pod") if by == "workload" else pl.col("pod"),
            gpu_memory_bytes=pl.col("node").replace_strict(
                node_mem, default=None, return_dtype=pl.Int64
            ),
        )
    )
    known_memory = pl.col("gpu_memory_bytes").drop_nulls()
    groups = table.group_by(_KEYS).agg(
        pl.len().alias("pods"),
        _one("qos_class"),
        _one("priority_class"),
        _one("memory_source"),
        pl.col("gpu_request").max(),
        pl.col("peak_gpu_memory_bytes").max(),
        pl.col("peak_total_gpu_memory_bytes").max(),
        pl.col("shared_gpu").fill_null(False).any(),
        pl.when(known_memory.n_unique() == 1).then(known_memory.first()).alias("gpu_memory_bytes"),
    )
    sla = pl.col("namespace").replace_strict(
        settings.namespace_sla_p99_s, default=None, return_dtype=pl.Float64
    )
    frame = (
        groups.join(_request_stats(requests, table, sla), on=_KEYS, how="left", nulls_equal=True)
        .with_columns(pl.col("requests").fill_null(0), sla.alias("sla_p99_s"))
        .with_columns(_rules(settings, fragmentation_ratio))
        .with_columns(
            rules.time_slice_s(pl.col("slice_rule"), settings).alias("slice_s"),
            rules.proposed_priority_class(
                pl.col("priority_class"), pl.col("sla_violation_rate"), settings
            ).alias("proposed_priority_class"),
        )
        .sort(pl.col("namespace").fill_null(""), pl.col("name").fill_null(""))
    )
    return tuple(_result(r, by, fragmentation_ratio, settings) for r in frame.iter_rows(named=True))


def _request_stats(requests: pl.DataFrame, table: pl.DataFrame, sla: pl.Expr) -> pl.DataFrame:
    """Per group: request count, P95 latency and sequence length of the requests that did not
    fail (linear interpolation, numpy's default), and the SLA-violation counts."""
    ok = pl.col("ok").fill_null(True)
    latency = pl.col("latency_s")
    sequence = pl.col("prompt_tokens") + pl.col("output_tokens").fill_null(0)
    names = table.select("namespace", "pod", "name").unique(["namespace", "pod"])
    return (
        requests.join(names, on=["namespace", "pod"])
        .with_columns(sla.alias("_sla"))
        .group_by(_KEYS)
        .agg(
            pl.len().alias("requests"),
            latency.filter(ok).quantile(0.95, "linear").alias("p95_latency_s"),
            sequence.filter(ok)
            .cast(pl.Float64)
            .quantile(0.95, "linear")
            .alias("sequence_p95_tokens"),
            (latency > pl.col("_sla")).filter(ok).sum().alias("_slow"),
            latency.filter(ok).count().alias("_timed"),
            (~ok).sum().alias("_failed"),
        )
    )


def _rules(settings: ClassSettings, fragmentation_ratio: float | None) -> list[pl.Expr]:
    peak = pl.col("peak_gpu_memory_bytes")
    return [
        rules.memory_class(peak, settings).alias("memory_class"),
        rules.smallest_fitting_tier(peak, settings).alias("fitting_tier"),
        *rules.gpu_sharing(pl.col("qos_class"), pl.col("gpu_memory_bytes"), settings),
        rules.time_slice_rule(
            pl.col("p95_latency_s"), pl.col("sequence_p95_tokens"), settings
        ).alias("slice_rule"),
        pl.when(pl.col("sla_p99_s").is_not_null())
        .then(rules.sla_violation_ratio(pl.col("_slow"), pl.col("_failed"), pl.col("_timed")))
        .alias("sla_violation_rate"),
        rules.preemption_policy(pl.lit(fragmentation_ratio, pl.Float64), settings).alias(
            "preemption_policy"
        ),
    ]


def _result(
    r: dict[str, object],
    level: Literal["pod", "workload"],
    fragmentation_ratio: float | None,
    settings: ClassSettings,
) -> WorkloadClass:
    """One aggregated, classified row as its result object (with the reasons in words)."""

    def opt_float(key: str) -> float | None:
        value = r[key]
        return None if value is None else float(cast(float, value))

    def opt_int(key: str) -> int | None:
        value = r[key]
        return None if value is None else int(cast(int, value))

    def opt_str(key: str) -> str | None:
        value = r[key]
        return None if value is None else str(value)

    p95, seq = opt_float("p95_latency_s"), opt_float("sequence_p95_tokens")
    rate, current = opt_float("sla_violation_rate"), opt_str("priority_class")
    proposed = opt_str("proposed_priority_class")
    return WorkloadClass(
        namespace=opt_str("namespace"),
        name=opt_str("name"),
        level=level,
        pods=int(cast(int, r["pods"])),
        qos_class=opt_str("qos_class"),
        priority_class=current,
        gpu_request=opt_int("gpu_request"),
        peak_gpu_memory_bytes=opt_int("peak_gpu_memory_bytes"),
        peak_total_gpu_memory_bytes=opt_int("peak_total_gpu_memory_bytes"),
        memory_source=opt_str("memory_source"),
        shared_gpu=bool(r["shared_gpu"]),
        memory_class=cast(MemoryClass | None, r["memory_class"]),
        fitting_tier=opt_str("fitting_tier"),
        sharing=GpuSharing(
            bool(r["exclusive_gpu"]),
            opt_float("gpu_memory_share_ratio"),
            opt_int("gpu_memory_limit_bytes"),
        ),
        requests=int(cast(int, r["requests"])),
        p95_latency_s=p95,
        sequence_p95_tokens=seq,
        time_slice=TimeSlice(
            float(cast(float, r["slice_s"])),
            time_slice_text(str(r["slice_rule"]), p95, seq, settings),
        ),
        sla_p99_s=opt_float("sla_p99_s"),
        sla_violation_rate=rate,
        priority=PriorityRecommendation(
            current,
            proposed,
            opt_str("preemption_policy"),
            priority_text(current, proposed, rate, fragmentation_ratio, settings),
        ),
    )


# -- reading the store -------------------------------------------------------------------------

_RANGE = "(?::TIMESTAMP IS NULL OR ts >= ?) AND (?::TIMESTAMP IS NULL OR ts < ?)"


def _range(since: datetime | None, until: datetime | None) -> list[object]:
    lo = utc_naive(since) if since is not None else None
    hi = utc_naive(until) if until is not None else None
    return [lo, lo, hi, hi]


def load_latest_pods(store: Store, until: datetime | None = None) -> pl.DataFrame:
    """The latest ``pods`` row of every pod UID (as of ``until``, default: all)."""
    hi = utc_naive(until) if until is not None else None
    sql = (
        "SELECT * FROM pods WHERE pod_uid IS NOT NULL AND (?::TIMESTAMP IS NULL OR ts < ?) "
        "QUALIFY row_number() OVER (PARTITION BY pod_uid ORDER BY ts DESC) = 1"
    )
    return pl.DataFrame(store.query(sql, [hi, hi]))


def load_class_inputs(
    store: Store, since: datetime | None = None, until: datetime | None = None
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, dict[str, int]]:
    """``(pods, memory peaks, requests, node -> GPU memory bytes)`` for :func:`class_report`."""
    pods = load_latest_pods(store, until)
    processes = pl.DataFrame(
        store.query(
            "SELECT ts, gpu_uuid, pod_uid, used_memory_bytes FROM gpu_processes "
            f"WHERE pod_uid IS NOT NULL AND {_RANGE}",
            _range(since, until),
        )
    )
    samples = pl.DataFrame(
        store.query(
            "SELECT ts, gpu_uuid, namespace, pod, fb_used_bytes FROM gpu_samples "
            f"WHERE pod IS NOT NULL AND {_RANGE}",
            _range(since, until),
        )
    )
    requests = pl.DataFrame(
        store.query(
            "SELECT namespace, pod, latency_s, ok, prompt_tokens, output_tokens FROM requests "
            f"WHERE {_RANGE}",
            _range(since, until),
        )
    )
    nodes = store.query(
        "SELECT node, gpu_memory_bytes FROM nodes WHERE gpu_memory_bytes IS NOT NULL "
        "QUALIFY row_number() OVER (PARTITION BY node ORDER BY ts DESC) = 1"
    ).to_pylist()
    memory = {str(n["node"]): int(n["gpu_memory_bytes"]) for n in nodes}
    return pods, pod_memory_peaks(processes, samples, pods), requests, memory
