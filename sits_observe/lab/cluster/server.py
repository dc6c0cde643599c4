"""A simulated LLM inference server with continuous batching.

Each server runs one model on one GPU type. Requests join the running batch when a slot is
free (at most ``max_batch``), otherwise they wait in FIFO order. A joining request first
pays its prefill time; then every running request emits one token per decode step, whose
length depends on the batch size (:mod:`.calibration`). Latency therefore grows with load,
slowly while the batch has room and sharply once requests queue: the knee the heatmap shows.

The server keeps what a real vLLM process exports (cumulative histograms, counters, running
and waiting gauges, KV-cache usage) and the exact per-request records a request log holds.
It advances in explicit time steps (:meth:`advance`), so it is deterministic under a seed and
independent of the wall clock.

Time slicing. On a GPU shared by time slicing (the NVIDIA device plugin's ``timeSlicing``
sharing; the controller writes a per-workload slice into its ConfigMap, docs/controller.md),
the driver preempts the running context at the end of every slice and saves and restores its
state. Modelled as a cost of :data:`CONTEXT_SWITCH_S` per slice boundary a decode step
crosses; boundaries fall anywhere in a step, so a step of ``d`` seconds crosses ``d / slice``
of them on average and takes ``d x (1 + CONTEXT_SWITCH_S / slice)``. Without a slice
(``time_slice_s`` None: an exclusive GPU) there is no preemption. The switch cost is an
assumption of this model, not a measurement: it makes a longer slice (fewer preemptions)
measurably faster, which is what the controller's rule "P95 > 10 ms -> 25 ms" is for.

Capacity. :meth:`InferenceServer.capacity_rps` is the request rate a full batch sustains:
``max_batch / (decode step at max_batch x mean output tokens)`` with the Azure trace's mean
output length (log-normal mean ``exp(mu + sigma^2 / 2)``, about 229 tokens). The demo's load
profile is relative to it (:mod:`.workload`).
"""

from __future__ import annotations

import math
import threading
from collections import deque
from dataclasses import dataclass, field

from sits_observe.analytics.serving.step_profiles import (
    KV_BYTES_PER_TOKEN,
    OUTPUT_TOKENS_LOG_MEAN,
    OUTPUT_TOKENS_LOG_SD,
    GpuLatencyProfile,
)

#: Cost of one time-slice preemption (context save and restore), seconds: an assumption of the
#: model (see the module docstring), not a measured figure.
CONTEXT_SWITCH_S = 0.002
#: Mean output tokens of the Azure conversation trace's log-normal fit.
MEAN_OUTPUT_TOKENS = math.exp(OUTPUT_TOKENS_LOG_MEAN + OUTPUT_TOKENS_LOG_SD**2 / 2)

#: vLLM's bucket boundaries (seconds) for request latency, TTFT and time per output token,
#: as its Prometheus metrics module declares them (vllm/engine/metrics.py, 0.7 and later).
E2E_BUCKETS_S = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)
TTFT_BUCKETS_S = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
ITL_BUCKETS_S = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)


@dataclass
class Histogram:
    """A cumulative Prometheus-style histogram."""

    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        self.counts = [0] * len(self.bounds)

    def observe(self, value: float) -> None:
        """Add one observation."""
        for i, bound in enumerate(self.bounds):
            if value <= bound:
                self.counts[i] += 1
        self.total += value
        self.count += 1


@dataclass(frozen=True)
class RequestRecord:
    """One finished request, with exact timings."""

    finished_at_s: float
    model: str
    latency_s: float
    ttft_s: float
    inter_token_s: float
    prompt_tokens: int
    output_tokens: int


@dataclass
class _Active:
    arrived_s: float
    prompt_tokens: int
    output_tokens: int
    emitted: int = 0
    prefill_left_s: float = 0.0
    first_token_s: float | None = None


class InferenceServer:
    """One simulated vLLM server (see module docstring). Thread-safe for readers."""

    def __init__(
        self,
        model: str,
        profile: GpuLatencyProfile,
        *,
        tensor_parallel: int,
        kv_capacity_bytes: int,
        max_batch: int = 64,
        batch_window_s: float = 0.0,
        join_mid_step: bool = True,
    ) -> None:
        self.model = model
        self.profile = profile
        self.tensor_parallel = tensor_parallel
        self.kv_capacity_bytes = kv_capacity_bytes
        self.max_batch = max_batch
        #: Batching window: waiting requests join only once they fill the free slots or the
        #: oldest has waited this long (Triton's ``max_queue_delay``; 0 = join at once).
        self.batch_window_s = batch_window_s
        #: Seconds the GPU spent running steps (the busy time of docs/analytics/batching.md).
        self.busy_s_total = 0.0
        self.steps_total = 0
        #: Whether a request may join the step in progress (a one-step error, negligible for
        #: decode; False for one-step requests, which then wait for the next step boundary).
        self.join_mid_step = join_mid_step
        self.e2e = Histogram(E2E_BUCKETS_S)
        self.ttft = Histogram(TTFT_BUCKETS_S)
        self.itl = Histogram(ITL_BUCKETS_S)
        self.success_total = 0
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self._waiting: deque[_Active] = deque()
        self._running: list[_Active] = []
        self._finished: list[RequestRecord] = []
        self._step_carry_s = 0.0
        self._lock = threading.Lock()
        #: The GPU time slice this server's GPUs run under (None: exclusive, no preemption).
        self.time_slice_s: float | None = None
        #: How much slower than alone its steps run (1.0: alone on its GPUs): set by the
        #: cluster each step from what co-located pods do to the GPU's memory bandwidth and
        #: PCIe (the simulated cluster's interference model).
        self.slowdown = 1.0

    def capacity_rps(self) -> float:
        """Requests per second a full batch sustains (see the module docstring)."""
        return self.max_batch / (self.profile.decode_step_s(self.max_batch) * MEAN_OUTPUT_TOKENS)

    def _step_s(self) -> float:
        """One decode step at the running batch, with the time-slicing overhead."""
        step_s = self.profile.decode_step_s(len(self._running) or 1) * self.slowdown
        if self.time_slice_s:
            step_s *= 1.0 + CONTEXT_SWITCH_S / self.time_slice_s
        return step_s

    # -- load -------------------------------------------------------------------------

    def submit(self, at_s: float, prompt_tokens: int, output_tokens: int) -> None:
        """A request arrives at simulated time ``at_s``."""
        with self._lock:
            self._waiting.append(_Active(at_s, prompt_tokens, max(output_tokens, 1)))

    def advance(self, now_s: float, dt_s: float) -> None:
        """Run the server from ``now_s - dt_s`` to ``now_s``."""
        with self._lock:
            if self.join_mid_step or not self._running:
                self._admit(now_s)
            step_s = self._step_s()
            self._step_carry_s += dt_s
            t = now_s - self._step_carry_s
            while self._running and self._step_carry_s >= step_s:
                self._step_carry_s -= step_s
                t += step_s
                self._decode_step(t, step_s)
                self.busy_s_total += step_s
                self.steps_total += 1
                self._admit(t)
                step_s = self._step_s()
            if not self._running:
                self._step_carry_s = 0.0

    def _admit(self, now_s: float) -> None:
        free = self.max_batch - len(self._running)
        if (
            self.batch_window_s > 0
            and 0 < len(self._waiting) < free
            and now_s - self._waiting[0].arrived_s < self.batch_window_s
        ):
            return
        while self._waiting and len(self._running) < self.max_batch:
            request = self._waiting.popleft()
            request.prefill_left_s = self.profile.prefill_s(request.prompt_tokens) * self.slowdown
            self._running.append(request)

    def _decode_step(self, t: float, step_s: float) -> None:
        still: list[_Active] = []
        for request in self._running:
            if request.prefill_left_s > 0:
                request.prefill_left_s -= step_s
                if request.prefill_left_s > 0:
                    still.append(request)
                    continue
            request.emitted += 1
            if request.first_token_s is None:
                request.first_token_s = max(t, request.arrived_s)
            if request.emitted >= request.output_tokens:
                self._finish(request, t)
            else:
                still.append(request)
        self._running = still

    def _finish(self, request: _Active, t: float) -> None:
        # A request that arrived inside the current step cannot finish before it arrived.
        t = max(t, request.arrived_s)
        latency = t - request.arrived_s
        first = min(request.first_token_s if request.first_token_s is not None else t, t)
        ttft = first - request.arrived_s
        itl = (t - first) / max(request.output_tokens - 1, 1)
        self.e2e.observe(latency)
        self.ttft.observe(ttft)
        if request.output_tokens > 1:
            self.itl.observe(itl)
        self.success_total += 1
        self.prompt_tokens_total += request.prompt_tokens
        self.generation_tokens_total += request.output_tokens
        self._finished.append(
            RequestRecord(
                t, self.model, latency, ttft, itl, request.prompt_tokens, request.output_tokens
            )
        )

    # -- observation ------------------------------------------------------------------

    def take_finished(self) -> list[RequestRecord]:
        """Requests finished since the last call (for the request log)."""
        with self._lock:
            done, self._finished = self._finished, []
        return done

    @property
    def running(self) -> int:
        """Requests in the running batch."""
        return len(self._running)

    @property
    def waiting(self) -> int:
        """Requests queued for a batch slot."""
        return len(self._waiting)

    def kv_cache_bytes(self) -> int:
        """KV cache in use over every GPU of the server."""
        with self._lock:
            tokens = sum(r.prompt_tokens + r.emitted for r in self._running)
        return min(tokens * KV_BYTES_PER_TOKEN, self.kv_capacity_bytes)

    def kv_cache_usage_ratio(self) -> float:
        """KV cache in use as a fraction of what the server reserved."""
        return self.kv_cache_bytes() / self.kv_capacity_bytes if self.kv_capacity_bytes else 0.0

    def snapshot(self) -> ServerSnapshot:
        """A consistent copy of the exported counters."""
        with self._lock:
            return ServerSnapshot(
                model=self.model,
                e2e=_copy(self.e2e),
                ttft=_copy(self.ttft),
                itl=_copy(self.itl),
                success_total=self.success_total,
                prompt_tokens_total=self.prompt_tokens_total,
                generation_tokens_total=self.generation_tokens_total,
                running=len(self._running),
                waiting=len(self._waiting),
                kv_cache_usage_ratio=min(
                    sum(r.prompt_tokens + r.emitted for r in self._running)
                    * KV_BYTES_PER_TOKEN
                    / max(self.kv_capacity_bytes, 1),
                    1.0,
                ),
            )


@dataclass(frozen=True)
class ServerSnapshot:
    """What a scrape of the server's ``/metrics`` sees."""

    model: str
    e2e: Histogram
    ttft: Histogram
    itl: Histogram
    success_total: int
    prompt_tokens_total: int
    generation_tokens_total: int
    running: int
    waiting: int
    kv_cache_usage_ratio: float


def _copy(h: Histogram) -> Histogram:
    c = Histogram(h.bounds)
    c.counts = list(h.counts)
    c.total = h.total
    c.count = h.count
    return c
