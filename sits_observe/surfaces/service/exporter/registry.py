"""The derived signals on ``/metrics``, by name: each a builder (imported when its pass first
needs it) over the inputs it reads; :mod:`.exporter` runs them in passes."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeHistogramMetricFamily,
    GaugeMetricFamily,
    Metric,
)

from sits_observe.analytics.row_changes import Read
from sits_observe.surfaces.service.exporter import reads
from sits_observe.surfaces.service.exporter.signals import requests as fast
from sits_observe.surfaces.service.exporter.signals.requests import PassInputs

_G, _C, _H = GaugeMetricFamily, CounterMetricFamily, GaugeHistogramMetricFamily

Builder = Callable[[PassInputs], list[Metric]]
#: The spans of rows a signal's builder reads in one pass (:mod:`.reads`); None
#: when they cannot be declared in this pass (the signal is rebuilt).
Reads = Callable[[PassInputs], tuple[Read, ...] | None]


@dataclass(frozen=True)
class Signal:
    """One isolated unit of the exporter: its error-label name, builder, families, pass, and
    the rows its result depends on (None: rebuilt on every pass)."""

    name: str
    build: Builder
    families: tuple[tuple[str, Callable[[str, str], Metric]], ...]
    slow: bool = False
    reads: Reads | None = None


def _later(module: str, builder: str) -> Builder:
    """``signals.<module>.<builder>``, imported when a pass first calls it."""

    def build(inputs: PassInputs) -> list[Metric]:
        found = importlib.import_module(f"sits_observe.surfaces.service.exporter.signals.{module}")
        built: list[Metric] = getattr(found, builder)(inputs)
        return built

    build.__name__ = build.__qualname__ = builder
    return build


#: Every signal, in pass order; ``name`` is the bounded ``signal`` label of
#: ``sits_exporter_errors_total``.
REGISTRY: tuple[Signal, ...] = (
    Signal("latency", fast.latency, (("sits_latency_seconds", _G),), reads=reads.requests),
    Signal(
        "throughput", fast.throughput, (("sits_requests_per_second", _G),), reads=reads.requests
    ),
    Signal(
        "latency_estimate",
        fast.latency_estimate,
        (("sits_latency_estimate_seconds", _G),),
        reads=reads.server_windows,
    ),
    Signal(
        "latency_slo",
        fast.latency_slo,
        (("sits_latency_slo_seconds", _G),),
        reads=reads.requests_and_windows,
    ),
    Signal(
        "latency_histogram",
        fast.request_latency_histogram,
        (("sits_request_latency_window_seconds", _H),),
        reads=reads.requests,
    ),
    Signal(
        "fragmentation",
        _later("cluster", "fragmentation"),
        (
            ("sits_fgd_fragmentation_ratio", _G),
            ("sits_fgd_fragmentation_amount_ratio", _G),
            ("sits_fgd_node_fragmentation_gpus", _G),
        ),
        reads=reads.fragmentation,
    ),
    Signal(
        "dra",
        _later("dra", "dra"),
        (
            ("sits_dra_memory_slices_free", _G),
            ("sits_dra_memory_slices_stranded", _G),
            ("sits_dra_first_fit_wasted_slices", _G),
            ("sits_dra_shared_free_bytes", _G),
            ("sits_dra_shared_stranded_bytes", _G),
        ),
    ),
    Signal(
        "interference",
        _later("cluster", "interference"),
        (("sits_interference_score_ratio", _G),),
        reads=reads.interference,
    ),
    Signal(
        "smf",
        _later("cluster", "smf"),
        (("sits_smf_ratio", _G), ("sits_smf_node_ratio", _G), ("sits_smf_namespace_ratio", _G)),
        reads=reads.smf,
    ),
    Signal(
        "framebuffer",
        _later("cluster", "framebuffer"),
        (("sits_gpu_framebuffer_used_ratio", _G),),
        reads=reads.framebuffer,
    ),
    Signal(
        "gpu_attribution",
        _later("cluster", "gpu_attribution"),
        (("sits_gpu_framebuffer_used_bytes", _G), ("sits_gpu_shared_pods", _G)),
        reads=reads.gpu_window,
    ),
    Signal("quotas", _later("cluster", "quotas"), (("sits_quota", _G),), reads=reads.decisions),
    Signal(
        "pod_start",
        _later("cluster", "pod_start"),
        (("sits_pod_start_seconds", _G),),
        reads=reads.pod_start,
    ),
    Signal(
        "collector_drops",
        fast.collector_drops,
        (("sits_collector_drops", _C),),
        reads=reads.collector_drops,
    ),
    Signal(
        "collector_last_seen",
        fast.collector_last_seen,
        (("sits_collector_last_seen_timestamp_seconds", _G),),
    ),
    Signal(
        "controller_decisions",
        fast.controller_decisions,
        (("sits_controller_decisions", _C),),
        reads=reads.decisions,
    ),
    Signal(
        "controller_errors",
        fast.controller_errors,
        (("sits_controller_errors", _C), ("sits_controller_last_decision_timestamp_seconds", _G)),
        reads=reads.decisions,
    ),
    Signal(
        "heatmap",
        _later("slow", "heatmap"),
        (("sits_knee_requests_per_second", _G), ("sits_safe_max_requests_per_second", _G)),
        slow=True,
    ),
    Signal(
        "memory_classes",
        _later("slow", "memory_classes"),
        (("sits_memory_class_workloads", _G),),
        slow=True,
    ),
    Signal(
        "gpu_trends",
        _later("slow", "gpu_trends"),
        (("sits_gpu_trend_cluster", _G),),
        slow=True,
        reads=reads.gpu_trends,
    ),
    Signal(
        "gpu_idle",
        _later("idle", "gpu_idle"),
        (
            ("sits_gpu_idle_gpus", _G),
            ("sits_gpu_idle_wasted_gpu_hours", _G),
            ("sits_gpu_idle_ratio", _G),
        ),
        slow=True,
    ),
)


#: Every signal name used in ``sits_exporter_errors_total{signal}`` (a bounded label set).
SIGNALS: tuple[str, ...] = tuple(s.name for s in REGISTRY)
