"""The simulated cluster in the formats real exporters serve.

- :func:`dcgm_text`: dcgm-exporter ``/metrics`` (default counters, 3.x label set with
  ``Hostname``, pod / namespace / container labels on GPUs that a pod holds; framebuffer in
  MiB, utilisation in percent, PROF fields as ratios, PCIe in bytes/s), as in the real
  exports under shared/data/dcgm. Activity, clocks, power and temperature are each GPU's
  latest step of the activity model (:mod:`.activity`), inside its model's envelope
  (:mod:`.gpu_models`).
- :func:`vllm_text`: a vLLM server's ``/metrics`` (``vllm:`` histograms with cumulative
  ``le`` buckets, ``_sum`` / ``_count``, running / waiting gauges, KV-cache usage as a 0-1
  fraction), labelled with ``model_name``.

Both are plain text writers: the collectors parse them exactly as they parse the real thing.
"""

from __future__ import annotations

from sits_observe.analytics.serving.step_profiles import MIB
from sits_observe.lab.cluster.cluster import SimulatedCluster
from sits_observe.lab.cluster.serving.server import Histogram, ServerSnapshot

#: (field, type, help, unit conversion from the model's value) for each GPU row.
_DCGM_FIELDS: tuple[tuple[str, str, str], ...] = (
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz)."),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %)."),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_DEV_FB_RESERVED", "gauge", "Framebuffer memory reserved (in MiB)."),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "Ratio of time the graphics engine is active."),
    (
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "gauge",
        "Ratio of cycles the tensor (HMMA) pipe is active.",
    ),
    ("DCGM_FI_PROF_DRAM_ACTIVE", "gauge", "Ratio of cycles the device memory interface is active."),
    (
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "gauge",
        "The rate of data transmitted over the PCIe bus in bytes per second.",
    ),
    (
        "DCGM_FI_PROF_PCIE_RX_BYTES",
        "gauge",
        "The rate of data received over the PCIe bus in bytes per second.",
    ),
    (
        "DCGM_FI_PROF_NVLINK_TX_BYTES",
        "gauge",
        "The rate of data transmitted over NVLink in bytes per second.",
    ),
    (
        "DCGM_FI_PROF_NVLINK_RX_BYTES",
        "gauge",
        "The rate of data received over NVLink in bytes per second.",
    ),
)

MODEL_NAMES = {"h100": "NVIDIA H100 80GB HBM3", "a100": "NVIDIA A100-SXM4-80GB"}
_DRIVER = "580.105.08"


def _fmt(value: float) -> str:
    return f"{value:.6f}" if value != int(value) else str(int(value))


def dcgm_text(cluster: SimulatedCluster, node_name: str) -> str:
    """dcgm-exporter exposition text for every GPU of ``node_name``."""
    with cluster.lock():
        node = cluster.nodes[node_name]
        rows: list[tuple[str, dict[str, float]]] = []
        for gpu in node.gpus:
            pod = cluster.pod_of_gpu(node_name, gpu.index)
            labels = (
                f'gpu="{gpu.index}",UUID="{gpu.uuid}",pci_bus_id="{gpu.pci_bus_id}",'
                f'device="nvidia{gpu.index}",modelName="{MODEL_NAMES[gpu.kind]}",'
                f'Hostname="{node_name}",DCGM_FI_DRIVER_VERSION="{_DRIVER}"'
            )
            if pod is not None:
                labels += (
                    f',container="{pod.containers[0].name}",namespace="{pod.namespace}",'
                    f'pod="{pod.name}",pod_uid=""'
                )
            a = cluster.gpu_activity(node_name, gpu.index)
            values = {
                "DCGM_FI_DEV_SM_CLOCK": a.sm_clock_mhz,
                "DCGM_FI_DEV_MEM_CLOCK": a.mem_clock_mhz,
                "DCGM_FI_DEV_GPU_TEMP": round(a.temp_c),
                "DCGM_FI_DEV_POWER_USAGE": round(a.power_w, 3),
                "DCGM_FI_DEV_GPU_UTIL": round(100 * a.util_ratio),
                "DCGM_FI_DEV_MEM_COPY_UTIL": round(100 * a.dram_active_ratio),
                # Used rounds down to MiB and free is the rest, so used + free + reserved is
                # the card's total in MiB, as in every real capture.
                "DCGM_FI_DEV_FB_FREE": (gpu.total_bytes - gpu.reserved_bytes) // MIB
                - gpu.fb_used_bytes // MIB,
                "DCGM_FI_DEV_FB_USED": gpu.fb_used_bytes // MIB,
                "DCGM_FI_DEV_FB_RESERVED": gpu.reserved_bytes // MIB,
                "DCGM_FI_PROF_GR_ENGINE_ACTIVE": round(a.sm_active_ratio, 6),
                "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": round(a.tensor_active_ratio, 6),
                "DCGM_FI_PROF_DRAM_ACTIVE": round(a.dram_active_ratio, 6),
                "DCGM_FI_PROF_PCIE_TX_BYTES": round(a.pcie_tx_bytes_per_s),
                "DCGM_FI_PROF_PCIE_RX_BYTES": round(a.pcie_rx_bytes_per_s),
                "DCGM_FI_PROF_NVLINK_TX_BYTES": round(a.nvlink_tx_bytes_per_s),
                "DCGM_FI_PROF_NVLINK_RX_BYTES": round(a.nvlink_rx_bytes_per_s),
            }
            rows.append((labels, values))
    out: list[str] = []
    for field_name, kind, help_text in _DCGM_FIELDS:
        out.append(f"# HELP {field_name} {help_text}")
        out.append(f"# TYPE {field_name} {kind}")
        out.extend(
            f"{field_name}{{{labels}}} {_fmt(values[field_name])}" for labels, values in rows
        )
    return "\n".join(out) + "\n"


def _histogram(name: str, help_text: str, h: Histogram, labels: str) -> list[str]:
    lines = [f"# HELP {name} {help_text}", f"# TYPE {name} histogram"]
    for bound, count in zip(h.bounds, h.counts, strict=True):
        lines.append(f'{name}_bucket{{{labels},le="{bound}"}} {float(count)}')
    lines.append(f'{name}_bucket{{{labels},le="+Inf"}} {float(h.count)}')
    lines.append(f"{name}_sum{{{labels}}} {h.total}")
    lines.append(f"{name}_count{{{labels}}} {float(h.count)}")
    return lines


def vllm_text(snapshot: ServerSnapshot) -> str:
    """vLLM exposition text for one server."""
    labels = f'model_name="{snapshot.model}"'
    lines = [
        "# HELP vllm:num_requests_running Number of requests in model execution batches.",
        "# TYPE vllm:num_requests_running gauge",
        f"vllm:num_requests_running{{{labels}}} {float(snapshot.running)}",
        "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.",
        "# TYPE vllm:num_requests_waiting gauge",
        f"vllm:num_requests_waiting{{{labels}}} {float(snapshot.waiting)}",
        "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.",
        "# TYPE vllm:kv_cache_usage_perc gauge",
        f"vllm:kv_cache_usage_perc{{{labels}}} {snapshot.kv_cache_usage_ratio}",
        "# HELP vllm:request_success_total Count of successfully processed requests.",
        "# TYPE vllm:request_success_total counter",
        f'vllm:request_success_total{{finished_reason="stop",{labels}}} '
        f"{float(snapshot.success_total)}",
        "# HELP vllm:prompt_tokens_total Number of prefill tokens processed.",
        "# TYPE vllm:prompt_tokens_total counter",
        f"vllm:prompt_tokens_total{{{labels}}} {float(snapshot.prompt_tokens_total)}",
        "# HELP vllm:generation_tokens_total Number of generation tokens processed.",
        "# TYPE vllm:generation_tokens_total counter",
        f"vllm:generation_tokens_total{{{labels}}} {float(snapshot.generation_tokens_total)}",
    ]
    lines += _histogram(
        "vllm:e2e_request_latency_seconds",
        "Histogram of e2e request latency in seconds.",
        snapshot.e2e,
        labels,
    )
    lines += _histogram(
        "vllm:time_to_first_token_seconds",
        "Histogram of time to first token in seconds.",
        snapshot.ttft,
        labels,
    )
    lines += _histogram(
        "vllm:inter_token_latency_seconds",
        "Histogram of inter-token latency in seconds.",
        snapshot.itl,
        labels,
    )
    return "\n".join(lines) + "\n"
