"""Report ``classes``: every workload-class rule applied per pod or workload, or the elastic
rule per GPU.

``view=classes``: memory sensitivity (L1 < 2 GiB <= L2 <= 8 GiB < L3 of the peak GPU memory),
GPU time slice, Kubernetes QoS sharing, SLA-violation rate and the priority class (and
preemption policy) each pod or workload should have. ``view=elastic``: the elastic rule on a
QoS tier's quotas, per GPU over the last 5 s of its samples in the window (the one computation
the controller uses too, :mod:`sits_observe.analytics.rightsizing.elastic`).
docs/analytics/workloads.md gives every rule with its source.

With ``--promql-url`` both run: ``view=elastic`` on the same GPU series; ``view=classes`` on
kube-state-metrics' pods of the window, dcgm-exporter's frame buffer by pod label and vLLM's
request histograms, through the same rules (:mod:`sits_observe.analytics.classes.series`
says what is estimated and within which bound; the report's notes repeat it).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

import polars as pl
import pyarrow as pa
from pydantic import Field

from sits_observe.analytics.classes.classify import (
    WorkloadClass,
    class_report,
    load_class_inputs,
    pod_memory_peaks,
)
from sits_observe.analytics.classes.series import (
    estimated_pods,
    node_gpu_memory,
    pods_of,
    requests_from_histograms,
)
from sits_observe.analytics.classes.settings import ClassSettings
from sits_observe.analytics.rightsizing.elastic import (
    SAMPLE_COLUMNS,
    elastic_rows,
    elastic_rows_from,
)
from sits_observe.domain.units import Unit
from sits_observe.errors import NoDataError
from sits_observe.reports.inventory.names import gpu_labels, gpu_labels_of
from sits_observe.reports.result import Report, col, table_of
from sits_observe.reports.spec import PromQLReader, ReportSpec, require_rows
from sits_observe.reports.window import Window
from sits_observe.store import Store
from sits_observe.store.promql.kube import PromQLKubeSource
from sits_observe.store.promql.requests import PromQLRequestHistograms
from sits_observe.store.promql.source import PromQLGpuSource

PODS_FILLED_BY = "`sits-observe ingest k8s` (or `serve` / `demo`, which snapshot the inventory)"
GPUS_FILLED_BY = "`sits-observe ingest dcgm`, the node agent or `sits-observe demo`"


class ClassView(StrEnum):
    """What the ``classes`` report answers."""

    classes = "classes"
    elastic = "elastic"


class ClassLevel(StrEnum):
    """Rows per pod or per workload."""

    pod = "pod"
    workload = "workload"


class ClassQuery(ClassSettings):
    """Settings of the ``classes`` report."""

    view: ClassView = Field(
        ClassView.classes,
        description="classes (memory class, time slice, QoS, priority per pod or workload) or "
        "elastic (the elastic rule per GPU, over its last elastic-window-s in the window)",
    )
    by: ClassLevel = Field(ClassLevel.pod, description="view classes: one row per pod or workload")
    fragmentation_ratio: float | None = Field(
        None,
        ge=0,
        le=1,
        description="the cluster's fragmentation (0-1, e.g. from the fragmentation report); "
        "decides preemption (none: undecided)",
    )
    tier: str = Field(
        "silver", min_length=1, description="view elastic: QoS tier whose quotas to test"
    )


_CLASSES = (
    col("namespace", "namespace"),
    col("name", "name"),
    col("peak_gpu_memory_bytes", "GPU mem", Unit.bytes),
    col("memory_class", "class"),
    col("p95_latency_s", "P95", Unit.seconds),
    col("time_slice_s", "slice", Unit.seconds),
    col("sla_violation_rate", "SLA miss", Unit.ratio),
    col("proposed_priority_class", "proposed priority"),
    col("qos_class", "QoS", wide=True),
    col("priority_class", "priority now", wide=True),
    col("preemption_policy", "preemption", wide=True),
    col("pods", "pods", Unit.integer, wide=True),
    col("gpu_request", "GPUs", Unit.integer, wide=True),
    col("peak_total_gpu_memory_bytes", "GPU mem total", Unit.bytes, wide=True),
    col("memory_source", "memory from", wide=True),
    col("shared_gpu", "shared", Unit.flag, wide=True),
    col("fitting_tier", "fits tier", wide=True),
    col("exclusive_gpu", "exclusive", Unit.flag, wide=True),
    col("gpu_memory_share_ratio", "mem share", Unit.ratio, wide=True),
    col("requests", "requests", Unit.integer, wide=True),
    col("sequence_p95_tokens", "seq P95", Unit.number, wide=True),
    col("time_slice_rule", "slice rule", wide=True),
    col("sla_p99_s", "SLA P99", Unit.seconds, wide=True),
    col("priority_reason", "priority reason", wide=True),
)
_ELASTIC = (
    col("gpu", "GPU"),
    col("pods", "pods"),
    col("gpu_util_ratio", "util", Unit.ratio),
    col("link_saturation_ratio", "link", Unit.ratio),
    col("triggered", "fires", Unit.flag),
    col("proposed_memory_quota_bytes", "memory quota", Unit.quantity_bytes),
    col("proposed_bandwidth_quota_bytes_per_s", "bandwidth quota", Unit.bytes_per_s),
    col("gpu_uuid", "GPU UUID", wide=True),
    col("node", "node", wide=True),
    col("tier", "tier", wide=True),
    col("samples", "samples", Unit.integer, wide=True),
    col("memory_growth_bytes_per_s", "memory growth", Unit.bytes_per_s, wide=True),
    col("link_bandwidth_variance", "traffic var", Unit.number, wide=True),
    col("memory_quota_bytes", "memory was", Unit.quantity_bytes, wide=True),
    col("bandwidth_quota_bytes_per_s", "bandwidth was", Unit.bytes_per_s, wide=True),
    col("reason", "reason", wide=True),
)


def build(store: Store, window: Window, query: ClassQuery) -> Report:
    """The ``classes`` report over ``window``."""
    if query.view is ClassView.elastic:
        return _elastic(store, window, query)
    # The inventory is the latest snapshot before the window's end, however old.
    require_rows(store, Window(None, window.until, window.rule), "pods", PODS_FILLED_BY)
    result = workload_classes(
        store, window, query, by=query.by.value, fragmentation_ratio=query.fragmentation_ratio
    )
    return _classes(window, query, result, ())


#: The four inputs of the class rules: pods, memory peaks, requests and GPU memory per node.
ClassInputs = tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, dict[str, int]]


def workload_classes(
    store: Store,
    window: Window,
    settings: ClassSettings,
    *,
    by: Literal["pod", "workload"] = "workload",
    fragmentation_ratio: float | None = None,
) -> tuple[WorkloadClass, ...]:
    """Every GPU pod's (or workload's) classes over ``window``: the rows of the report's
    classes view (the exporter counts their memory class for
    ``sits_memory_class_workloads``); empty when no pod requests a GPU or has GPU memory
    measured."""
    inputs = load_class_inputs(store, window.since, window.until)
    return _classify(inputs, settings, by=by, fragmentation_ratio=fragmentation_ratio)


def _classify(
    inputs: ClassInputs,
    settings: ClassSettings,
    *,
    by: Literal["pod", "workload"],
    fragmentation_ratio: float | None,
) -> tuple[WorkloadClass, ...]:
    pods, memory, requests, gpu_memory = inputs
    return class_report(
        pods,
        memory,
        requests,
        settings,
        by=by,
        fragmentation_ratio=fragmentation_ratio,
        gpu_memory_bytes=gpu_memory,
    )


def _classes(
    window: Window,
    query: ClassQuery,
    result: tuple[WorkloadClass, ...],
    notes: tuple[str, ...],
    facts: Mapping[str, Any] | None = None,
) -> Report:
    if not result:
        raise NoDataError(
            "no pod requests a GPU or has GPU memory measured in the window; GPU samples need "
            "pod labels (dcgm-exporter with the kubelet pod-resources mount)"
        )
    main = table_of(
        query.by.value,
        f"workload classes per {query.by.value}",
        [_class_row(w) for w in result],
        _CLASSES,
    )
    if query.fragmentation_ratio is None:
        notes += ("preemption undecided: give --fragmentation-ratio (the fragmentation report's)",)
    return Report("classes", window, main, (), notes, {"by": query.by.value, **(facts or {})})


#: Seconds of histogram scrapes before the window searched for each counter's start value.
HISTOGRAM_PRIME_S = 300.0
#: Seconds before the window's end searched for the newest kube-state-metrics scrape (the
#: nodes' GPU memory); the pods are every pod KSM served in the window.
KSM_LOOKBACK_S = 300.0

_PROMQL_NOTES = (
    "from series: pods from kube-state-metrics (every pod with a kube_pod_info series in the "
    "window; QoS class from kube_pod_status_qos_class), GPU memory from DCGM_FI_DEV_FB_USED "
    "by pod label (no per-process memory: a shared GPU's peak includes its other pods'), "
    "requests from vLLM's histograms",
    "ESTIMATES from histograms, each request at its bucket's upper bound: P95 latency and "
    "P95 sequence length at most one bucket width above the exact P95 (the +Inf bucket reads "
    "as the largest bound); the sequence pairs the i-th shortest prompt with the i-th "
    "shortest output (the exact P95 lies between the larger single P95 and the sum of the "
    "P97.5s); the SLA-violation rate is exact when the SLA is a bucket bound, else too high "
    "by at most the share of the bucket holding the SLA; failed requests are not told apart "
    "(none counts as a violation)",
)


def build_promql(reader: PromQLReader, window: Window, query: ClassQuery) -> Report:
    """The ``classes`` report over ``window`` of a PromQL store's series."""
    assert window.since is not None  # run_promql_report requires --since
    if query.view is ClassView.classes:
        return _classes_promql(reader, window, query, window.since)
    table = PromQLGpuSource(reader.client, matchers=reader.matchers).gpu_samples(
        window.since, window.until, step_s=reader.step_s, columns=list(SAMPLE_COLUMNS[1:])
    )
    if table.num_rows == 0:
        raise NoDataError(
            f"no dcgm-exporter series in {window.describe()} at the PromQL store; check "
            "--promql-url, --promql-matchers and --since"
        )
    samples = pl.DataFrame(table.select(list(SAMPLE_COLUMNS))).filter(
        pl.col("gpu_uuid").is_not_null()
    )
    rows = elastic_rows_from(samples, query, tier=query.tier)
    return _elastic_report(window, query, rows, gpu_labels_of(table))


def _classes_promql(
    reader: PromQLReader, window: Window, query: ClassQuery, since: datetime
) -> Report:
    """``view=classes`` from KSM, dcgm-exporter and vLLM series (module docstring)."""
    ksm = PromQLKubeSource(reader.client, matchers=reader.matchers).inventory(
        since, window.until, lookback_s=KSM_LOOKBACK_S
    )
    pods = pods_of(ksm.workload)
    if pods.height == 0:
        raise NoDataError(
            f"no kube_pod_info series in {window.describe()} at the PromQL store; check "
            "--promql-url, --promql-matchers and --since"
        )
    samples = PromQLGpuSource(reader.client, matchers=reader.matchers).gpu_samples(
        since, window.until, step_s=reader.step_s, columns=["fb_used_bytes"]
    )
    labelled = pl.DataFrame(samples.select(["ts", "gpu_uuid", "namespace", "pod", "fb_used_bytes"]))
    memory = pod_memory_peaks(pl.DataFrame(), labelled.filter(pl.col("pod").is_not_null()), pods)
    buckets = PromQLRequestHistograms(reader.client, matchers=reader.matchers).window_buckets(
        since, window.until, prime_s=HISTOGRAM_PRIME_S
    )
    inputs = (pods, memory, requests_from_histograms(buckets), node_gpu_memory(ksm.nodes))
    notes = list(_PROMQL_NOTES)
    if reader.step_s is not None:
        notes.append(
            f"GPU memory peaks on a {reader.step_s:g} s grid: a peak between grid points is "
            "missed (leave --promql-step-s out for every raw sample)"
        )
    if estimated := estimated_pods(buckets):
        notes.append(
            "counters reset in the window (a restarted server), counted by the store's "
            f"increase(): {', '.join(estimated)}"
        )
    if pods.get_column("qos_class").null_count() == pods.height:
        notes.append(
            "no kube_pod_status_qos_class series (kube-state-metrics before v2.8?): every QoS "
            "class unknown, so every pod reads as shared with no memory share"
        )
    result = _classify(
        inputs, query, by=query.by.value, fragmentation_ratio=query.fragmentation_ratio
    )
    return _classes(window, query, result, tuple(notes), {"source": "promql"})


def _elastic(store: Store, window: Window, query: ClassQuery) -> Report:
    require_rows(store, window, "gpu_samples", GPUS_FILLED_BY)
    rows = elastic_rows(store, window.since, window.until, query, tier=query.tier)
    return _elastic_report(window, query, rows, gpu_labels(store, window))


def _elastic_report(
    window: Window, query: ClassQuery, rows: pa.Table, labels: Mapping[str, str]
) -> Report:
    uuids = rows.column("gpu_uuid").to_pylist()
    rows = rows.append_column("gpu", pa.array([labels.get(u, u) for u in uuids], type=pa.string()))
    title = (
        f"elastic rule ({query.tier.lower()} tier, each GPU's last "
        f"{query.elastic_window_s:g} s in the window)"
    )
    facts = {
        "tier": query.tier.lower(),
        "elastic_window_s": query.elastic_window_s,
        "util_above_ratio": query.elastic_util_above_ratio,
        "link_above_ratio": query.elastic_link_above_ratio,
    }
    main = table_of("gpus", title, rows, _ELASTIC)
    return Report("classes", window, main, (), (), facts)


def _class_row(w: WorkloadClass) -> dict[str, Any]:
    return {
        "namespace": w.namespace,
        "name": w.name,
        "pods": w.pods,
        "qos_class": w.qos_class,
        "gpu_request": w.gpu_request,
        "peak_gpu_memory_bytes": w.peak_gpu_memory_bytes,
        "peak_total_gpu_memory_bytes": w.peak_total_gpu_memory_bytes,
        "memory_source": w.memory_source,
        "shared_gpu": w.shared_gpu,
        "memory_class": w.memory_class,
        "fitting_tier": w.fitting_tier,
        "exclusive_gpu": w.sharing.exclusive,
        "gpu_memory_share_ratio": w.sharing.memory_share_ratio,
        "requests": w.requests,
        "p95_latency_s": w.p95_latency_s,
        "sequence_p95_tokens": w.sequence_p95_tokens,
        "time_slice_s": w.time_slice.slice_s,
        "time_slice_rule": w.time_slice.rule,
        "sla_p99_s": w.sla_p99_s,
        "sla_violation_rate": w.sla_violation_rate,
        "priority_class": w.priority.current,
        "proposed_priority_class": w.priority.proposed,
        "preemption_policy": w.priority.preemption_policy,
        "priority_reason": w.priority.reason,
    }


SPEC = ReportSpec(
    name="classes",
    summary="Workload classes (memory class, time slice, QoS sharing, priority) per pod or "
    "workload, or the elastic quota rule per GPU.",
    settings=ClassQuery,
    reads=("gpu_samples", "pods"),
    build=build,
    promql=build_promql,
)
