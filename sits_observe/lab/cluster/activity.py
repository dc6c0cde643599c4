"""What the pods on a simulated GPU do to it: DCGM's activity counters, clocks, power, heat.

Each step, every pod states what it asks of each GPU it holds (a :class:`PodDemand`, as
fractions of *that* GPU's capacity, so the same work is a smaller fraction of a faster card),
and :func:`gpu_activity` combines the pods of one GPU into a :class:`GpuActivity` inside the
model's envelope (:mod:`.gpu_models`).

Demands, by what a pod runs:

- **An LLM server** (:func:`server_demand`), from the work it did in the step: each decode
  step reads the weights held on the GPU (Llama2-70B fp16 / tensor parallelism) and the KV
  cache of the batch, and does 2 x parameters x batch FLOPs; each prompt token prefilled is
  2 x parameters FLOPs and writes its KV entry. Kernel time is the time the server spent in
  steps. Tensor-parallel GPUs all-reduce the hidden state twice per layer per token over
  NVLink (ring all-reduce: 2 (tp - 1) / tp of the message per GPU). Decode is memory-bound
  (DRAM active well above tensor active); prefill is compute-bound.
- **A training Job** (a batch pod holding whole GPUs, :func:`training_demand`): closed loop,
  it runs as fast as the card goes: busy 0.97, tensor 0.75, DRAM 0.45 of the card, data
  loading over PCIe. These ratios are assumptions in the range DCGM shows for large-model
  training (the A100 capture under shared/data/dcgm: tensor 0.93, DRAM 0.69-0.80 on a matmul
  load).
- **An evaluation Job or a notebook** (a share of one GPU, :func:`open_loop_demand`): a fixed
  amount of work per second (FLOPs, bytes), so a faster card is less busy for it; its kernel
  time is capped at its HAMi core share.
- **An idle notebook** (:func:`idle_demand`): holds a CUDA context and runs nothing.

Combination on one GPU: busy fractions add; when they exceed 1 the pods time-share the card
and every pod's counters scale down together. Power is
``base + (TDP - base) x f``, ``f = 0.35 sm + 0.6 tensor + 0.3 dram`` (tensor work costs the
most energy per cycle, then DRAM traffic; the weights are an assumption chosen so that a
compute-bound training step lands at about 90 % of TDP and a memory-bound decode at 45-55 %,
the shares NVIDIA's and MLPerf's published power traces show), ``base`` the P8 idle power, or
the P0 idle power while a pod holds a context. ``f`` is clamped to :data:`POWER_CAP_RATIO`
(power strictly below TDP); a demand above the cap lowers the SM clock in proportion, down to
the envelope's loaded floor, as the power-capped A100 capture does (1,215 of 1,410 MHz).
Temperature follows power with a first-order lag (:data:`THERMAL_TAU_S`, an assumption).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from sits_observe.analytics.serving.step_profiles import KV_BYTES_PER_TOKEN, WEIGHT_BYTES
from sits_observe.lab.cluster.gpu_models import GpuEnvelope

#: Llama2-70B: parameters, hidden size and layers (its config.json on Hugging Face).
LLM_PARAMS = 70e9
LLM_HIDDEN = 8192
LLM_LAYERS = 80
#: fp16 activations.
ACTIVATION_BYTES = 2
#: Power-weight of each activity (see the module docstring): sm, tensor, dram.
POWER_WEIGHTS = (0.35, 0.6, 0.3)
#: The largest share of (TDP - base) the model draws: power stays strictly below TDP.
POWER_CAP_RATIO = 0.97
#: Thermal time constant of the card and heat sink (assumption).
THERMAL_TAU_S = 30.0
#: Share of the roofline an open-loop kernel mix reaches (kernel time = work / (peak x this)).
ROOFLINE_EFFICIENCY = 0.6
#: Kernel time below which the card drops to its idle clock within a sample.
ACTIVE_THRESHOLD = 0.02
#: Host <-> device traffic a process with a context generates even when idle (bytes/s);
#: the idle capture shows PCIe counters of this order.
IDLE_PCIE_BYTES_PER_S = 1.1e5


@dataclass(frozen=True)
class PodDemand:
    """What one pod asks of one GPU over a step: ratios of that GPU's capacity, bytes/s."""

    busy_ratio: float = 0.0
    tensor_ratio: float = 0.0
    dram_ratio: float = 0.0
    pcie_tx_bytes_per_s: float = 0.0
    pcie_rx_bytes_per_s: float = 0.0
    nvlink_bytes_per_s: float = 0.0
    holds_context: bool = True


@dataclass(frozen=True)
class GpuActivity:
    """One GPU's counters for a step, all inside its envelope."""

    util_ratio: float
    sm_active_ratio: float
    tensor_active_ratio: float
    dram_active_ratio: float
    pcie_tx_bytes_per_s: float
    pcie_rx_bytes_per_s: float
    nvlink_tx_bytes_per_s: float
    nvlink_rx_bytes_per_s: float
    sm_clock_mhz: int
    mem_clock_mhz: int
    power_w: float
    temp_c: float
    #: The share of each pod's demand the card served (1.0 unless the pods time-share it).
    served_ratio: float = 1.0


def idle_activity(env: GpuEnvelope) -> GpuActivity:
    """A card with no process: P8 power, idle clock, steady idle temperature."""
    return GpuActivity(
        0.0,
        0.0,
        0.0,
        0.0,
        IDLE_PCIE_BYTES_PER_S,
        IDLE_PCIE_BYTES_PER_S,
        0.0,
        0.0,
        env.idle_sm_clock_mhz,
        env.mem_clock_mhz,
        env.idle_w,
        steady_temp_c(env, env.idle_w),
    )


def steady_temp_c(env: GpuEnvelope, power_w: float) -> float:
    """Steady-state temperature at ``power_w`` (see :mod:`.gpu_models`)."""
    return min(env.inlet_c + env.thermal_c_per_w * power_w, env.max_temp_c - 1.0)


def _clip(x: float) -> float:
    return min(max(x, 0.0), 1.0)


def server_demand(
    env: GpuEnvelope,
    *,
    tensor_parallel: int,
    dt_s: float,
    busy_s: float,
    steps: int,
    batch: int,
    kv_bytes: int,
    prompt_tokens: int,
) -> PodDemand:
    """One GPU of an LLM server that ran ``steps`` decode steps (``busy_s`` seconds) at
    ``batch`` requests and admitted ``prompt_tokens`` prompt tokens in ``dt_s``."""
    tp = max(tensor_parallel, 1)
    per_gpu_params = LLM_PARAMS / tp
    decode_bytes = steps * (WEIGHT_BYTES + kv_bytes) / tp
    prefill_bytes = prompt_tokens * KV_BYTES_PER_TOKEN / tp
    decode_tokens = steps * batch
    flops = 2 * per_gpu_params * (decode_tokens + prompt_tokens)
    allreduce = 0.0
    if tp > 1:
        per_token = 2 * LLM_LAYERS * LLM_HIDDEN * ACTIVATION_BYTES * 2 * (tp - 1) / tp
        allreduce = per_token * (decode_tokens + prompt_tokens) / dt_s
    busy = _clip(busy_s / dt_s)
    return PodDemand(
        busy_ratio=busy,
        tensor_ratio=_clip(flops / dt_s / env.bf16_dense_flops),
        dram_ratio=_clip((decode_bytes + prefill_bytes) / dt_s / env.memory_bytes_per_s),
        # Token ids in and out, and the sampler's host copies: small next to the card's link.
        pcie_tx_bytes_per_s=IDLE_PCIE_BYTES_PER_S + 4e5 * busy + 4.0 * decode_tokens / dt_s,
        pcie_rx_bytes_per_s=IDLE_PCIE_BYTES_PER_S + 6e5 * busy + 4.0 * prompt_tokens / dt_s,
        nvlink_bytes_per_s=min(allreduce, env.nvlink_bytes_per_s),
    )


def training_demand(env: GpuEnvelope, *, gpus: int) -> PodDemand:
    """One GPU of a training Job (closed loop: as fast as the card goes)."""
    # Data loading: a few GB/s of batches into the card (assumption), gradients out to the
    # host only for logging and checkpoints.
    return PodDemand(
        busy_ratio=0.97,
        tensor_ratio=0.75,
        dram_ratio=0.45,
        pcie_tx_bytes_per_s=3e8,
        pcie_rx_bytes_per_s=min(4e9, 0.1 * env.pcie_bytes_per_s),
        # Data-parallel gradient all-reduce between its GPUs (assumption: 10 % of the link).
        nvlink_bytes_per_s=0.1 * env.nvlink_bytes_per_s if gpus > 1 else 0.0,
    )


def open_loop_demand(
    env: GpuEnvelope,
    *,
    flops_per_s: float,
    dram_bytes_per_s: float,
    pcie_bytes_per_s: float,
    core_share: float,
) -> PodDemand:
    """A fixed amount of work per second on a share of one GPU (evaluation, a notebook)."""
    tensor = flops_per_s / env.bf16_dense_flops
    dram = dram_bytes_per_s / env.memory_bytes_per_s
    busy = max(tensor, dram) / ROOFLINE_EFFICIENCY
    share = _clip(core_share)
    # HAMi's core limit: the pod's kernels get at most its share of the card's time.
    served = min(1.0, share / busy) if busy > 0 else 1.0
    return PodDemand(
        busy_ratio=min(busy, share),
        tensor_ratio=_clip(tensor * served),
        dram_ratio=_clip(dram * served),
        pcie_tx_bytes_per_s=0.25 * pcie_bytes_per_s * served,
        pcie_rx_bytes_per_s=pcie_bytes_per_s * served,
    )


def idle_demand() -> PodDemand:
    """A pod that holds a CUDA context and runs nothing (an idle notebook)."""
    return PodDemand(
        pcie_tx_bytes_per_s=IDLE_PCIE_BYTES_PER_S, pcie_rx_bytes_per_s=IDLE_PCIE_BYTES_PER_S
    )


def gpu_activity(
    env: GpuEnvelope,
    demands: Sequence[PodDemand],
    *,
    previous_temp_c: float | None,
    dt_s: float,
) -> GpuActivity:
    """Combine the demands of the pods on one GPU (see the module docstring)."""
    if not demands:
        idle = idle_activity(env)
        return _with_temp(env, idle, previous_temp_c, dt_s)
    wanted = sum(d.busy_ratio for d in demands)
    served = 1.0 / wanted if wanted > 1.0 else 1.0
    util = _clip(wanted * served)
    tensor = _clip(sum(d.tensor_ratio for d in demands) * served)
    dram = _clip(sum(d.dram_ratio for d in demands) * served)
    pcie_tx = min(
        sum(d.pcie_tx_bytes_per_s for d in demands) * served + IDLE_PCIE_BYTES_PER_S,
        env.pcie_bytes_per_s,
    )
    pcie_rx = min(
        sum(d.pcie_rx_bytes_per_s for d in demands) * served + IDLE_PCIE_BYTES_PER_S,
        env.pcie_bytes_per_s,
    )
    nvlink = min(sum(d.nvlink_bytes_per_s for d in demands) * served, env.nvlink_bytes_per_s)
    # SMs hold resident warps for most of a kernel's time; a memory-bound kernel leaves a
    # few idle at its tail.
    sm = util * (0.9 + 0.1 * max(tensor, dram))
    w_sm, w_tensor, w_dram = POWER_WEIGHTS
    f = w_sm * sm + w_tensor * tensor + w_dram * dram
    base = env.context_idle_w if any(d.holds_context for d in demands) else env.idle_w
    clock = env.max_sm_clock_mhz if util > ACTIVE_THRESHOLD else env.idle_sm_clock_mhz
    if f > POWER_CAP_RATIO:
        # Power capping: the card lowers its clock until the board power fits under the cap.
        clock = max(int(env.max_sm_clock_mhz * POWER_CAP_RATIO / f), env.min_loaded_sm_clock_mhz)
        f = POWER_CAP_RATIO
    power = base + (env.tdp_w - base) * f
    return _with_temp(
        env,
        GpuActivity(
            util_ratio=util,
            sm_active_ratio=_clip(sm),
            tensor_active_ratio=tensor,
            dram_active_ratio=dram,
            pcie_tx_bytes_per_s=pcie_tx,
            pcie_rx_bytes_per_s=pcie_rx,
            nvlink_tx_bytes_per_s=nvlink,
            nvlink_rx_bytes_per_s=nvlink,
            sm_clock_mhz=clock,
            mem_clock_mhz=env.mem_clock_mhz,
            power_w=power,
            temp_c=0.0,
            served_ratio=served,
        ),
        previous_temp_c,
        dt_s,
    )


def _with_temp(
    env: GpuEnvelope, a: GpuActivity, previous_temp_c: float | None, dt_s: float
) -> GpuActivity:
    target = steady_temp_c(env, a.power_w)
    if previous_temp_c is None:
        temp = target
    else:
        temp = previous_temp_c + (target - previous_temp_c) * (1 - math.exp(-dt_s / THERMAL_TAU_S))
    return replace(a, temp_c=temp)
