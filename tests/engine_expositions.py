"""Exposition text as each serving engine writes it, from each project's documented names,
labels and default bucket bounds, for the collector tests (unit and loopback HTTP).

Every fixture below cites where its names and buckets come from. Observations are drawn from
a seeded log-normal, so a test knows the true window quantiles and means exactly. The text
follows prometheus_client's layout (HELP / TYPE lines, ``le`` as ``repr(float)``, ``+Inf``,
``_created`` series the collector must ignore).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

MODEL = "meta-llama/Llama-3.1-8B-Instruct"

#: vLLM-derived bounds (vllm/v1/metrics/loggers.py), which TensorRT-LLM's
#: tensorrt_llm/metrics/collector.py copies as its defaults
TRT_E2E = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
           120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0]  # fmt: skip
TRT_TTFT = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
            7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0]  # fmt: skip
TRT_TPOT = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
            10.0, 20.0, 40.0, 80.0]  # fmt: skip
#: sgl-project/sglang python/sglang/srt/metrics/collector.py, TokenizerMetricsCollector defaults
SGL_TTFT = [0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400]
SGL_ITL = [0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060,
           0.080, 0.100, 0.200, 0.400, 0.600, 0.800, 1.000, 2.000, 4.000, 6.000, 8.000]  # fmt: skip
SGL_E2E = [0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 600,
           1200, 1800, 2400]  # fmt: skip
#: gateway-api-inference-extension pkg/epp/metrics/metrics.go (request duration, NTPOT), the
#: EPP's buckets before it moved to llm-d/llm-d-router under the llm_d_epp_ prefix
EPP_DURATION = [0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2, 3, 4, 5, 6, 8,
                10, 15, 20, 30, 45, 60, 120, 180, 240, 300, 360, 480, 600, 900, 1200, 1800,
                2700, 3600]  # fmt: skip
EPP_NTPOT = [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0]
#: open-telemetry/semantic-conventions docs/gen-ai/gen-ai-metrics.md, advised boundaries
OTEL_DURATION = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48,
                 40.96, 81.92]  # fmt: skip
OTEL_TTFT = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
             7.5, 10.0]  # fmt: skip
OTEL_TPOT = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5]


def dynamo_log_buckets(low: float, high: float, count: int) -> list[float]:
    """ai-dynamo/dynamo lib/llm/src/http/service/metrics.rs ``generate_log_buckets``: 0.0, then
    ``count - 1`` log-spaced bounds from ``low`` to ``high`` rounded to 2 significant figures,
    duplicates dropped."""
    bounds = [0.0]
    for i in range(1, count):
        value = math.exp(math.log(low) + (math.log(high) - math.log(low)) * i / (count - 1))
        scale = 10 ** (1 - math.floor(math.log10(value)))
        rounded = round(value * scale) / scale
        if rounded != bounds[-1]:
            bounds.append(rounded)
    return bounds


#: Dynamo frontend defaults (same file): request duration (1, 512, 10), TTFT (0.001, 480, 18),
#: ITL (0.001, 2, 13); configurable through DYN_METRICS_{REQUEST_DURATION,TTFT,ITL}_*
DYN_DURATION = dynamo_log_buckets(1.0, 512.0, 10)
DYN_TTFT = dynamo_log_buckets(0.001, 480.0, 18)
DYN_ITL = dynamo_log_buckets(0.001, 2.0, 13)


@dataclass(frozen=True)
class Layout:
    """How one engine writes its series: names, model label, extra labels, bounds."""

    engine: str
    model_label: str
    #: label sets of the series that make up one model (summed by the collector)
    series: tuple[str, ...]
    #: (family, bounds) for e2e, TTFT and inter-token; None where the engine has none
    e2e: tuple[str, list[float]]
    ttft: tuple[str, list[float]] | None
    itl: tuple[str, list[float]] | None
    counter: str | None = None
    running: str | None = None
    waiting: str | None = None
    #: (family, value as the engine writes it, value as a 0-1 ratio)
    kv: tuple[str, float, float] | None = None


LAYOUTS = {
    "sglang": Layout(
        "sglang",
        "model_name",
        ('tp_rank="0",dp_rank="0"', 'tp_rank="0",dp_rank="1"'),
        ("sglang:e2e_request_latency_seconds", SGL_E2E),
        ("sglang:time_to_first_token_seconds", SGL_TTFT),
        ("sglang:inter_token_latency_seconds", SGL_ITL),
        counter="sglang:num_requests_total",
        running="sglang:num_running_reqs",
        waiting="sglang:num_queue_reqs",
        kv=("sglang:token_usage", 0.28, 0.28),
    ),
    "trtllm": Layout(
        "trtllm",
        "model_name",
        ('engine_type="trtllm"',),
        ("trtllm_e2e_request_latency_seconds", TRT_E2E),
        ("trtllm_time_to_first_token_seconds", TRT_TTFT),
        ("trtllm_time_per_output_token_seconds", TRT_TPOT),
        counter="trtllm_request_success_total",
        running="trtllm_num_requests_running",
        waiting="trtllm_num_requests_waiting",
        kv=("trtllm_kv_cache_utilization", 0.61, 0.61),
    ),
    "dynamo": Layout(
        "dynamo",
        "model",
        ('dynamo_namespace="dynamo",dynamo_component="frontend"',),
        ("dynamo_frontend_request_duration_seconds", DYN_DURATION),
        ("dynamo_frontend_time_to_first_token_seconds", DYN_TTFT),
        ("dynamo_frontend_inter_token_latency_seconds", DYN_ITL),
        counter="dynamo_frontend_requests_total",
        running="dynamo_frontend_inflight_requests",
        waiting="dynamo_frontend_queued_requests",
    ),
    "llm-d-epp": Layout(
        "llm-d-epp",
        "model_name",
        (
            'target_model_name="llama-8b-v2",fairness_id="team-a",priority="0"',
            'target_model_name="llama-8b-v1",fairness_id="team-b",priority="0"',
        ),
        ("llm_d_epp_request_duration_seconds", EPP_DURATION),
        ("llm_d_epp_request_ttft_seconds", EPP_DURATION),
        ("llm_d_epp_request_ntpot_seconds", EPP_NTPOT),
        counter="llm_d_epp_request_total",
        running="llm_d_epp_request_running",
    ),
    "otel-genai": Layout(
        "otel-genai",
        "gen_ai_request_model",
        ('gen_ai_operation_name="chat",gen_ai_provider_name="openai"',),
        ("gen_ai_server_request_duration_seconds", OTEL_DURATION),
        ("gen_ai_server_time_to_first_token_seconds", OTEL_TTFT),
        ("gen_ai_server_time_per_output_token_seconds", OTEL_TPOT),
    ),
}


def fmt(value: float) -> str:
    """prometheus_client's float format (``+Inf``, ``12.0``)."""
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


@dataclass
class FakeEngine:
    """Cumulative state of one model served by ``layout``'s engine, split over its series."""

    layout: Layout
    model: str = MODEL
    rng: np.random.Generator = field(default_factory=lambda: np.random.default_rng(11))
    e2e: list[np.ndarray] = field(default_factory=list)
    ttft: list[np.ndarray] = field(default_factory=list)
    itl: list[np.ndarray] = field(default_factory=list)

    def __post_init__(self) -> None:
        n = len(self.layout.series)
        self.e2e = [np.empty(0) for _ in range(n)]
        self.ttft = [np.empty(0) for _ in range(n)]
        self.itl = [np.empty(0) for _ in range(n)]

    def serve(self, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Finish ``n`` more requests, split over the series; returns what was added."""
        e2e = self.rng.lognormal(math.log(2.0), 0.6, n)
        ttft = self.rng.lognormal(math.log(0.3), 0.5, n)
        itl = self.rng.lognormal(math.log(0.03), 0.3, n)
        parts = np.array_split(np.arange(n), len(self.layout.series))
        for i, part in enumerate(parts):
            self.e2e[i] = np.concatenate([self.e2e[i], e2e[part]])
            self.ttft[i] = np.concatenate([self.ttft[i], ttft[part]])
            self.itl[i] = np.concatenate([self.itl[i], itl[part]])
        return e2e, ttft, itl

    def _labels(self, i: int) -> str:
        return f'{self.layout.model_label}="{self.model}",{self.layout.series[i]}'

    def exposition(self, running: float = 6.0, waiting: float = 2.0) -> str:
        """The /metrics body now: histograms, counter and gauges (gauges split over series)."""
        lay = self.layout
        lines = [
            "# HELP process_resident_memory_bytes Resident memory size in bytes.",
            "# TYPE process_resident_memory_bytes gauge",
            "process_resident_memory_bytes 2.1474836e+09",
        ]
        for spec, data in ((lay.e2e, self.e2e), (lay.ttft, self.ttft), (lay.itl, self.itl)):
            if spec is None:
                continue
            name, bounds = spec
            lines += [f"# HELP {name} Histogram in seconds.", f"# TYPE {name} histogram"]
            for i, values in enumerate(data):
                labels = self._labels(i)
                for bound in [*bounds, math.inf]:
                    count = float(np.count_nonzero(values <= bound))
                    lines.append(f'{name}_bucket{{{labels},le="{fmt(bound)}"}} {fmt(count)}')
                lines.append(f"{name}_count{{{labels}}} {fmt(float(values.size))}")
                lines.append(f"{name}_sum{{{labels}}} {fmt(float(values.sum()))}")
                lines.append(f"{name}_created{{{labels}}} 1767225600.123")
        if lay.counter is not None:
            lines += [f"# HELP {lay.counter} Requests.", f"# TYPE {lay.counter} counter"]
            for i, values in enumerate(self.e2e):
                lines.append(f"{lay.counter}{{{self._labels(i)}}} {fmt(float(values.size))}")
        n = len(lay.series)
        gauges = [(lay.running, running / n), (lay.waiting, waiting / n)]
        if lay.kv is not None:
            gauges.append((lay.kv[0], lay.kv[1]))
        for name, value in gauges:
            if name is None:
                continue
            lines += [f"# HELP {name} Gauge.", f"# TYPE {name} gauge"]
            lines += [f"{name}{{{self._labels(i)}}} {fmt(value)}" for i in range(n)]
        return "\n".join(lines) + "\n"


def bucket_width(bounds: list[float], value: float) -> float:
    """Width of the bucket ``(lower, upper]`` holding ``value`` (first lower bound 0)."""
    edges = [0.0, *bounds, math.inf]
    i = int(np.searchsorted(edges, value, side="left"))
    return edges[i] - edges[i - 1]
