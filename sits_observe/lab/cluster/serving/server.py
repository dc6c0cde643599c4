"""A simulated LLM inference server with continuous batching.

Each server runs one model on one GPU type. Requests join the running batch when a slot is
free (at most ``max_batch``), otherwise they wait in FIFO order. Every step decodes one token
for each running request and prefills up to :data:`PREFILL_CHUNK_TOKENS` prompt tokens of the
requests that joined (vLLM's chunked prefill, which mixes prefill chunks into decode steps; a
request emits its first token at the end of the step that holds the last chunk of its prompt).
A step takes the measured decode step at the running batch plus what the measured prefill of
its chunk costs beyond one forward pass
(:mod:`sits_observe.analytics.serving.step_profiles`: ``prefill(chunk) - decode(1)``), so a
request alone on the server sees exactly the measured prefill as its TTFT and the measured
decode step as its time per output token. Prefill therefore takes GPU time from every
running request, as it does on a real server: with the Azure trace's prompts (mean 1,250
tokens) it is 40 % (H100) to 50 % (A100) of the GPU time a request costs. Latency grows with
load, slowly while the batch has room and sharply once requests queue: the knee the heatmap
shows.

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
one over the GPU seconds a request costs, ``decode step at max_batch x mean output tokens /
max_batch`` plus its mean prefill cost, for the requests' token shape (the Azure trace by
default: 221 output tokens on average). At tensor parallel 4 that is about 3.4 requests/s on
H100 and 1.9 on A100. The demo's load profile is relative to it (:mod:`.workload`).
"""

from __future__ import annotations

import functools
import threading
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from sits_observe.analytics.serving.step_profiles import (
    AZURE_CONV,
    KV_BYTES_PER_TOKEN,
    GpuLatencyProfile,
    TokenShape,
)

#: Cost of one time-slice preemption (context save and restore), seconds: an assumption of the
#: model (see the module docstring), not a measured figure.
CONTEXT_SWITCH_S = 0.002
#: Prompt tokens one step may prefill (vLLM's ``max_num_batched_tokens`` under chunked
#: prefill): 8,192, vLLM's default for its OpenAI server on 80 GB H100s (vllm/engine/
#: arg_utils.py). Its A100 default, 2,048, is not modelled: the measured prefill costs about
#: the same per token past 1,024 tokens, so the budget moves how a prompt is cut into steps,
#: not the GPU time it takes.
PREFILL_CHUNK_TOKENS = 8192

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
    prefill_left_tokens: int = 0
    #: Whether the step in progress was planned with it (False: it joined mid-step).
    scheduled: bool = True
    first_token_s: float | None = None


def chunk_cost_s(profile: GpuLatencyProfile, tokens: int) -> float:
    """What a step carrying ``tokens`` prompt tokens takes beyond its decode: the measured
    prefill of those tokens less the one forward pass a decode step pays anyway."""
    if tokens <= 0:
        return 0.0
    return max(profile.prefill_s(tokens) - profile.decode_step_s(1), 0.0)


def prefill_cost_s(profile: GpuLatencyProfile, prompt_tokens: int) -> float:
    """GPU seconds prefilling ``prompt_tokens`` adds to the steps that carry its chunks."""
    full, rest = divmod(prompt_tokens, PREFILL_CHUNK_TOKENS)
    return full * chunk_cost_s(profile, PREFILL_CHUNK_TOKENS) + chunk_cost_s(profile, rest)


@functools.cache
def full_batch_capacity_rps(
    profile: GpuLatencyProfile, tokens: TokenShape, max_batch: int
) -> float:
    """Requests per second a server sustains at a full batch: one over the GPU seconds a
    ``tokens``-shaped request costs (its share of full-batch decode steps and its prefill)."""
    decode_s = profile.decode_step_s(max_batch) * tokens.mean_output_tokens() / max_batch
    prompts = np.unique(tokens.prompt_grid(), return_counts=True)
    prefill_s = sum(prefill_cost_s(profile, int(p)) * n for p, n in zip(*prompts, strict=True))
    return float(1.0 / (decode_s + prefill_s / prompts[1].sum()))


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
        tokens: TokenShape = AZURE_CONV,
    ) -> None:
        self.model = model
        self.profile = profile
        #: The shape of the requests it serves (for :meth:`capacity_rps`).
        self.tokens = tokens
        self.tensor_parallel = tensor_parallel
        self.kv_capacity_bytes = kv_capacity_bytes
        self.max_batch = max_batch
        #: Batching window: waiting requests join only once they fill the free slots or the
        #: oldest has waited this long (Triton's ``max_queue_delay``; 0 = join at once).
        self.batch_window_s = batch_window_s
        #: Seconds the GPU spent running steps (the busy time of docs/analytics/batching.md).
        self.busy_s_total = 0.0
        self.steps_total = 0
        #: Tokens decoded (first tokens included): over ``steps_total``, the mean batch.
        self.decoded_tokens_total = 0
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
        return full_batch_capacity_rps(self.profile, self.tokens, self.max_batch)

    def _chunk_cost_s(self, tokens: int) -> float:
        """What a step carrying ``tokens`` prompt tokens takes beyond its decode (alone)."""
        return chunk_cost_s(self.profile, tokens)

    def _chunks(self) -> list[tuple[_Active, int]]:
        """The prompt tokens the next step prefills, per request, first come first served."""
        budget = PREFILL_CHUNK_TOKENS
        plan: list[tuple[_Active, int]] = []
        for request in self._running:
            if budget <= 0:
                break
            if request.prefill_left_tokens > 0 and request.scheduled:
                take = min(request.prefill_left_tokens, budget)
                plan.append((request, take))
                budget -= take
        return plan

    def _step_s(self) -> float:
        """One step: the decode at the running batch and the prefill chunk it carries, with
        the interference slowdown and the time-slicing overhead."""
        chunk = sum(tokens for _, tokens in self._chunks())
        step_s = self.profile.decode_step_s(len(self._running) or 1) * self.slowdown
        step_s += self._chunk_cost_s(chunk) * self.slowdown
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
                # A request that joins a step in progress prefills from the next one.
                self._admit(now_s, in_step=bool(self._running))
            step_s = self._step_s()
            self._step_carry_s += dt_s
            t = now_s - self._step_carry_s
            while self._running and self._step_carry_s >= step_s:
                steady = self._steady_steps() - 1
                if steady > 0:
                    # Steps that only count (see _steady_steps): the same arithmetic, in
                    # the same order, without a pass over the batch each.
                    done = 0
                    while done < steady and self._step_carry_s >= step_s:
                        self._step_carry_s -= step_s
                        t += step_s
                        self.busy_s_total += step_s
                        done += 1
                    for request in self._running:
                        request.emitted += done
                    self.decoded_tokens_total += done * len(self._running)
                    self.steps_total += done
                    continue
                self._step_carry_s -= step_s
                t += step_s
                self._decode_step(t, step_s)
                self.busy_s_total += step_s
                self.steps_total += 1
                self._admit(t)
                step_s = self._step_s()
            if not self._running:
                self._step_carry_s = 0.0

    def _steady_steps(self) -> int:
        """How many next steps change nothing but the tokens emitted, the last one
        included (the step in which the first request finishes): every running request
        prefilled and past its first token, and nothing to admit after a step (no request
        waits, or the batch is full); 0 otherwise. The step time stays the same over them."""
        if self._waiting and len(self._running) < self.max_batch:
            return 0
        left = None
        for request in self._running:
            if request.prefill_left_tokens > 0 or request.first_token_s is None:
                return 0
            remaining = request.output_tokens - request.emitted
            left = remaining if left is None or remaining < left else left
        return left or 0

    def _admit(self, now_s: float, *, in_step: bool = False) -> None:
        free = self.max_batch - len(self._running)
        if (
            self.batch_window_s > 0
            and 0 < len(self._waiting) < free
            and now_s - self._waiting[0].arrived_s < self.batch_window_s
        ):
            return
        while self._waiting and len(self._running) < self.max_batch:
            request = self._waiting.popleft()
            request.prefill_left_tokens = max(request.prompt_tokens, 1)
            request.scheduled = not in_step
            self._running.append(request)

    def _decode_step(self, t: float, step_s: float) -> None:
        for request, tokens in self._chunks():
            request.prefill_left_tokens -= tokens
        still: list[_Active] = []
        for request in self._running:
            request.scheduled = True
            if request.prefill_left_tokens > 0:
                still.append(request)
                continue
            request.emitted += 1
            self.decoded_tokens_total += 1
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
