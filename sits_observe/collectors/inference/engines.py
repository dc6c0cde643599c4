"""The serving-engine mapping table: engine -> {our column: their metric family, unit, kind}.

Every inference collector reads its engine's metric names from :data:`ENGINES`, and nowhere
else; adding an engine is adding one entry here. The keys of an entry's ``columns`` are
``server_windows`` columns (``docs/schema.md``), plus two that feed several columns:

- ``latency_s``: the end-to-end latency histogram (or, for Triton, the cumulative duration
  counter): ``completed`` (its ``_count`` delta), ``latency_mean_s`` and, for a histogram,
  ``latency_p50_s`` / ``_p95_s`` / ``_p99_s`` / ``latency_error_bound_s``;
- ``completed``: a request counter, used when the latency histogram is absent.

A source lists its family names newest first; per model the first one present is used (vLLM's
renames, the llm-d EPP's legacy ``inference_*`` names). Units are converted at the collector:
``ms`` / ``us`` histogram bounds and sums to seconds, ``percent`` gauges to 0-1 ratios.

Sources, checked for each engine (names, kinds, units, labels, default buckets):

- vLLM: ``vllm/v1/metrics/loggers.py`` (vllm-project/vllm, ``PrometheusStatLogger``), label
  ``model_name`` (plus ``engine``, summed).
- Triton: ``docs/user_guide/metrics.md`` (triton-inference-server/server), label ``model``
  (plus ``version``, summed); durations are cumulative MICROSECOND counters.
- SGLang: ``python/sglang/srt/metrics/collector.py`` (sgl-project/sglang,
  ``TokenizerMetricsCollector`` for the histograms and ``sglang:num_requests_total``,
  ``SchedulerMetricsCollector`` for ``sglang:num_running_reqs``, ``sglang:num_queue_reqs`` and
  ``sglang:token_usage``, a 0-1 fraction), label ``model_name`` (plus ``tp_rank``,
  ``dp_rank``, ... summed or averaged). Default buckets: TTFT 0.1 ... 400 s (18), ITL
  0.002 ... 8 s (23), e2e 0.1 ... 2400 s (22); all configurable by flags.
- TensorRT-LLM: ``tensorrt_llm/metrics/collector.py`` (NVIDIA/TensorRT-LLM,
  ``MetricsCollector``, prefix ``trtllm_``, served by ``trtllm-serve`` at ``/metrics`` and
  passed through by Dynamo workers), labels ``model_name`` and ``engine_type``. Buckets as
  vLLM's (e2e 0.3 ... 7680 s, TTFT 0.001 ... 2560 s, TPOT 0.01 ... 80 s).
  ``trtllm_kv_cache_utilization`` is a 0-1 fraction (the KV manager's used / max blocks).
- NVIDIA Dynamo frontend: ``lib/runtime/src/metrics/prometheus_names.rs``
  (ai-dynamo/dynamo, ``frontend_service``: prefix ``dynamo_frontend_``), label ``model``;
  buckets in ``lib/llm/src/http/service/metrics.rs``: a 0 bucket, then log-spaced bounds
  rounded to 2 significant figures (duration 2 ... 510 s, TTFT 0.0022 ... 480 s, ITL
  0.0019 ... 2 s). The frontend has no KV-cache gauge of its own (the workers' KV stats are
  per worker).
- llm-d endpoint picker: ``docs/metrics.md`` (llm-d/llm-d-router, prefix ``llm_d_epp_``),
  label ``model_name`` (the requested model; ``target_model_name``, ``fairness_id`` and
  ``priority`` are summed). Before the move to llm-d the EPP lived in
  kubernetes-sigs/gateway-api-inference-extension (``pkg/epp/metrics/metrics.go``) as
  ``inference_objective_*`` and, earlier, ``inference_model_*``, still read as fallbacks.
  The pool gauges (``llm_d_epp_average_kv_cache_utilization``,
  ``llm_d_epp_per_endpoint_queue_size``) carry the pool, not the model, and are not mapped.
- OpenTelemetry GenAI server metrics: ``docs/gen-ai/gen-ai-metrics.md``
  (open-telemetry/semantic-conventions; status Development), unit ``s``, as the Prometheus
  exporter writes them (dots to underscores, unit suffix ``_seconds``; the names without the
  suffix are read too), label ``gen_ai_request_model``. Advised buckets: request duration
  0.01 ... 81.92 s (14), TTFT 0.001 ... 10 s (16), time per output token 0.01 ... 2.5 s (13).

``sits-observe ingest <engine> URL`` takes each key of :data:`ENGINES` as an engine.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Literal

from sits_observe.errors import UnknownNameError


class Kind(StrEnum):
    """How a source is read."""

    histogram = "histogram"  #: ``_bucket{le}`` / ``_sum`` / ``_count``, window = difference
    counter = "counter"  #: cumulative, window = difference
    gauge = "gauge"  #: instant value at the window end
    summary = "summary"  #: ``{quantile=...}`` series, the server's own estimates


Unit = Literal["s", "ms", "us", "ratio", "percent", "requests"]

#: factor that turns a value in the unit into the column's unit (seconds, or a 0-1 ratio)
TO_BASE: Mapping[str, float] = MappingProxyType(
    {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ratio": 1.0, "percent": 1e-2, "requests": 1.0}
)


@dataclass(frozen=True, slots=True)
class Source:
    """Where one column comes from: family names (newest first), kind, unit, merge rule.

    ``merge`` says how series of one model that differ in other labels (engines, ranks,
    versions) combine: ``sum`` for counts, ``mean`` for fractions.
    """

    families: tuple[str, ...]
    kind: Kind
    unit: Unit
    merge: Literal["sum", "mean"] = "sum"

    @property
    def scale(self) -> float:
        """Multiply a value in this source's unit by this to get the column's unit."""
        return TO_BASE[self.unit]


@dataclass(frozen=True, slots=True)
class EngineMetrics:
    """One engine's row of the mapping table."""

    engine: str
    model_label: str
    source: str
    columns: Mapping[str, Source] = field(default_factory=dict)

    def get(self, column: str) -> Source | None:
        """The source of ``column`` (None when this engine does not export it)."""
        return self.columns.get(column)


def _hist(*families: str, unit: Unit = "s") -> Source:
    return Source(families, Kind.histogram, unit)


def _sum(*families: str, kind: Kind = Kind.gauge) -> Source:
    return Source(families, kind, "requests")


def _ratio(*families: str, unit: Unit = "ratio") -> Source:
    return Source(families, Kind.gauge, unit, merge="mean")


_ENGINES = (
    EngineMetrics(
        "vllm",
        "model_name",
        "vllm-project/vllm vllm/v1/metrics/loggers.py",
        {
            "latency_s": _hist("vllm:e2e_request_latency_seconds"),
            "ttft_p95_s": _hist("vllm:time_to_first_token_seconds"),
            "inter_token_p95_s": _hist(
                "vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"
            ),
            "completed": _sum("vllm:request_success_total", kind=Kind.counter),
            "requests_running": _sum("vllm:num_requests_running"),
            "requests_waiting": _sum("vllm:num_requests_waiting"),
            "kv_cache_usage_ratio": _ratio("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
        },
    ),
    EngineMetrics(
        "triton",
        "model",
        "triton-inference-server/server docs/user_guide/metrics.md",
        {
            "latency_s": Source(("nv_inference_request_duration_us",), Kind.counter, "us"),
            "completed": _sum("nv_inference_request_success", kind=Kind.counter),
            "requests_waiting": _sum("nv_inference_pending_request_count"),
            "latency_p50_s": Source(("nv_inference_request_summary_us",), Kind.summary, "us"),
        },
    ),
    EngineMetrics(
        "sglang",
        "model_name",
        "sgl-project/sglang python/sglang/srt/metrics/collector.py",
        {
            "latency_s": _hist("sglang:e2e_request_latency_seconds"),
            "ttft_p95_s": _hist("sglang:time_to_first_token_seconds"),
            "inter_token_p95_s": _hist("sglang:inter_token_latency_seconds"),
            "completed": _sum("sglang:num_requests_total", kind=Kind.counter),
            "requests_running": _sum("sglang:num_running_reqs"),
            "requests_waiting": _sum("sglang:num_queue_reqs"),
            "kv_cache_usage_ratio": _ratio("sglang:token_usage"),
        },
    ),
    EngineMetrics(
        "trtllm",
        "model_name",
        "NVIDIA/TensorRT-LLM tensorrt_llm/metrics/collector.py",
        {
            "latency_s": _hist("trtllm_e2e_request_latency_seconds"),
            "ttft_p95_s": _hist("trtllm_time_to_first_token_seconds"),
            "inter_token_p95_s": _hist("trtllm_time_per_output_token_seconds"),
            "completed": _sum("trtllm_request_success_total", kind=Kind.counter),
            "requests_running": _sum("trtllm_num_requests_running"),
            "requests_waiting": _sum("trtllm_num_requests_waiting"),
            "kv_cache_usage_ratio": _ratio("trtllm_kv_cache_utilization"),
        },
    ),
    EngineMetrics(
        "dynamo",
        "model",
        "ai-dynamo/dynamo lib/runtime/src/metrics/prometheus_names.rs",
        {
            "latency_s": _hist("dynamo_frontend_request_duration_seconds"),
            "ttft_p95_s": _hist("dynamo_frontend_time_to_first_token_seconds"),
            "inter_token_p95_s": _hist("dynamo_frontend_inter_token_latency_seconds"),
            "completed": _sum("dynamo_frontend_requests_total", kind=Kind.counter),
            "requests_running": _sum("dynamo_frontend_inflight_requests"),
            "requests_waiting": _sum("dynamo_frontend_queued_requests"),
        },
    ),
    EngineMetrics(
        "llm-d-epp",
        "model_name",
        "llm-d/llm-d-router docs/metrics.md",
        {
            "latency_s": _hist(
                "llm_d_epp_request_duration_seconds",
                "inference_objective_request_duration_seconds",
                "inference_model_request_duration_seconds",
            ),
            "ttft_p95_s": _hist("llm_d_epp_request_ttft_seconds"),
            "inter_token_p95_s": _hist(
                "llm_d_epp_request_streaming_itl_seconds", "llm_d_epp_request_ntpot_seconds"
            ),
            "completed": _sum(
                "llm_d_epp_request_total",
                "inference_objective_request_total",
                "inference_model_request_total",
                kind=Kind.counter,
            ),
            "requests_running": _sum(
                "llm_d_epp_request_running", "inference_objective_running_requests"
            ),
        },
    ),
    EngineMetrics(
        "otel-genai",
        "gen_ai_request_model",
        "open-telemetry/semantic-conventions docs/gen-ai/gen-ai-metrics.md",
        {
            "latency_s": _hist(
                "gen_ai_server_request_duration_seconds", "gen_ai_server_request_duration"
            ),
            "ttft_p95_s": _hist(
                "gen_ai_server_time_to_first_token_seconds", "gen_ai_server_time_to_first_token"
            ),
            "inter_token_p95_s": _hist(
                "gen_ai_server_time_per_output_token_seconds",
                "gen_ai_server_time_per_output_token",
            ),
        },
    ),
)

#: engine name -> its mapping (the one table; docs/collectors/inference.md renders it)
ENGINES: Mapping[str, EngineMetrics] = MappingProxyType({e.engine: e for e in _ENGINES})


def find(engine: str) -> EngineMetrics:
    """The mapping of ``engine``; an unknown name raises with the valid ones listed."""
    try:
        return ENGINES[engine]
    except KeyError:
        raise UnknownNameError(
            f"unknown serving engine {engine!r}; known: {', '.join(ENGINES)}"
        ) from None
