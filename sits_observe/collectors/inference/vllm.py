"""vLLM collector: the table-driven engine collector with vLLM's row of the mapping table.

vLLM serves Prometheus metrics at ``/metrics`` with the label ``model_name`` (plus ``engine``
with data parallelism, summed over here). Metric names and bucket bounds are those of
``vllm/v1/metrics/loggers.py`` (vllm-project/vllm, e.g. commit 005a810b); the names are in
:data:`.engines.ENGINES` under ``vllm``:

- histograms ``vllm:e2e_request_latency_seconds``, ``vllm:time_to_first_token_seconds`` and
  ``vllm:inter_token_latency_seconds`` (older releases: ``vllm:time_per_output_token_seconds``,
  used when the newer name is absent);
- counter ``vllm:request_success_total`` (label ``finished_reason``, summed);
- gauges ``vllm:num_requests_running``, ``vllm:num_requests_waiting`` (summed over engines)
  and ``vllm:kv_cache_usage_perc`` (older: ``vllm:gpu_cache_usage_perc``; averaged over
  engines). Despite the name the KV gauge is a 0-1 fraction: vLLM documents it as
  "KV-cache usage. 1 means 100 percent usage." and sets it from ``SchedulerStats.kv_cache_usage``.

The window rules are those of :mod:`.engine`.
"""

from __future__ import annotations

import httpx

from sits_observe.collectors.inference.engine import EngineCollector


class VllmCollector(EngineCollector):
    """Scrapes one vLLM ``/metrics`` URL (:class:`.engine.EngineCollector` for ``vllm``)."""

    name = "vllm"

    def __init__(
        self,
        url: str,
        *,
        node: str | None = None,
        namespace: str | None = None,
        pod: str | None = None,
        client: httpx.Client | None = None,
    ) -> None:
        super().__init__(url, "vllm", node=node, namespace=namespace, pod=pod, client=client)
