"""The physical envelope of each simulated GPU model, from the vendor's data sheets.

One :class:`GpuEnvelope` per simulated kind (``"h100"``, ``"a100"``: the keys of
``render.MODEL_NAMES`` and ``step_profiles.PROFILES``). The activity model
(:mod:`.activity`) turns what the pods on a GPU do into counters inside this envelope, and
every rendered sample stays in it: power strictly below the board power limit, clocks at most
the maximum, ratios in 0-1, framebuffer used + free + reserved = total.

Sources (numbers as the documents print them; decimal units: 1 TB/s = 10^12 bytes/s):

- **H100 SXM5 80GB** (``NVIDIA H100 80GB HBM3``): *NVIDIA H100 Tensor Core GPU* datasheet
  (2023): GPU memory 80 GB HBM3, memory bandwidth 3.35 TB/s, BF16 Tensor Core 1,979 TFLOPS
  *with sparsity* (so 989.5 dense), max TDP up to 700 W (configurable), NVLink 900 GB/s,
  PCIe Gen5 128 GB/s (both directions together). *NVIDIA H100 Tensor Core GPU Architecture*
  whitepaper: max boost clock 1,980 MHz for the SXM5 part; ``nvidia-smi -q`` lists the HBM3
  memory clock as 2,619 MHz.
- **A100 SXM4 80GB** (``NVIDIA A100-SXM4-80GB``): *NVIDIA A100 Tensor Core GPU* datasheet
  (2021): 80 GB HBM2e, memory bandwidth 2,039 GB/s, BF16 Tensor Core 312 TFLOPS (624 with
  sparsity), max TDP 400 W, NVLink 600 GB/s, PCIe Gen4 64 GB/s. *NVIDIA A100 Tensor Core GPU
  Architecture* whitepaper: boost clock 1,410 MHz; ``nvidia-smi -q`` lists the HBM2e memory
  clock of the 80 GB part as 1,593 MHz.

Idle figures are measured, not data-sheet values (no data sheet states them):

- H100: the real capture ``shared/data/dcgm/h100-k8s-*.json`` (16 H100 SXM5 on EKS, driver
  580.105.08) has 15 GPUs without a process at 65.7-69.5 W (mean 67.6 W), 26-30 C, and one GPU
  that holds a loaded vLLM model (74,166 MiB used) at 0 % utilisation at 113.6 W: a CUDA
  context keeps the card in its P0 state, which costs about 46 W more than P8.
  ``idle_w`` = 68 and ``context_idle_w`` = 114 come from there; the idle SM clock 345 MHz is
  what ``nvidia-smi`` shows for an idle H100 SXM5.
- A100: no capture of an idle A100-SXM4-80GB is at hand; ``idle_w`` = 58 and
  ``context_idle_w`` = 90 are assumptions (NVIDIA documents no idle figure) scaled from the H100
  measurement by the 400 / 700 W TDP ratio's square root, and the idle SM clock 210 MHz is the
  floor the L4, L40S and A100 parts report (captures under shared/data/dcgm). The busy
  A100 40GB capture (``a100-40gb-mig-1g5gb-nvidia-docs.prom``: 409.7 W, SM 1,215 MHz, 61 C,
  tensor 0.93, DRAM 0.69) shows a card at its power limit throttling its SM clock to about
  86 % of the boost clock: the model does the same (:mod:`.activity`).

Temperature: ``inlet_c`` + ``thermal_c_per_w`` x power at steady state. The inlet is fitted to
the idle captures (27.6 C mean at 67.6 W); the slope gives 61 C at 410 W for the A100 (the MIG
capture) and 75 C at 700 W for the H100 (an assumption: NVIDIA's SXM5 thermal design, no
capture of a loaded H100 is at hand).

Compared (tests/unit/lab/test_lab_gpu_telemetry.py, which skips without shared/data): an
H100 with no process renders 68 W / 27 C / 345 MHz against the capture's 65.7-69.5 W and
26-30 C; one holding a context at 0 % utilisation 114 W against 113.6 W; an A100 under the
capture's load (busy 0.996, tensor 0.93, DRAM 0.69) 391 W / 1,231 MHz / 59 C against
409.7 W / 1,215 MHz / 61 C. The capture's 409.7 W is above the 400 W limit (the board's power
controller overshoots briefly); the model keeps every sample strictly below TDP, so that a
rendered sample never leaves the rated envelope, and reads 5 % low there.
"""

from __future__ import annotations

from dataclasses import dataclass

from sits_observe.analytics.serving.step_profiles import (
    GPU_FB_RESERVED_MIB,
    GPU_FB_TOTAL_MIB,
    MIB,
)


@dataclass(frozen=True)
class GpuEnvelope:
    """One GPU model's physical limits (units in the names; decimal bytes per second)."""

    kind: str
    model_name: str
    tdp_w: float
    #: Board power with no process on the card (P8).
    idle_w: float
    #: Board power with a CUDA context held and no kernel running (P0 idle).
    context_idle_w: float
    fb_total_bytes: int
    fb_reserved_bytes: int
    memory_bytes_per_s: float
    max_sm_clock_mhz: int
    idle_sm_clock_mhz: int
    #: The lowest SM clock the card drops to while capping its power under load.
    min_loaded_sm_clock_mhz: int
    mem_clock_mhz: int
    pcie_gen: int
    #: PCIe x16, one direction (the data sheet's figure counts both).
    pcie_bytes_per_s: float
    #: NVLink, one direction (the data sheet's figure counts both).
    nvlink_bytes_per_s: float
    bf16_dense_flops: float
    inlet_c: float
    thermal_c_per_w: float
    #: Temperature at which the card throttles (slowdown temperature), never reached here.
    max_temp_c: float


H100_SXM5 = GpuEnvelope(
    kind="h100",
    model_name="NVIDIA H100 80GB HBM3",
    tdp_w=700.0,
    idle_w=68.0,
    context_idle_w=114.0,
    fb_total_bytes=GPU_FB_TOTAL_MIB["h100"] * MIB,
    fb_reserved_bytes=GPU_FB_RESERVED_MIB["h100"] * MIB,
    memory_bytes_per_s=3.35e12,
    max_sm_clock_mhz=1980,
    idle_sm_clock_mhz=345,
    min_loaded_sm_clock_mhz=1500,
    mem_clock_mhz=2619,
    pcie_gen=5,
    pcie_bytes_per_s=64e9,
    nvlink_bytes_per_s=450e9,
    bf16_dense_flops=989.5e12,
    inlet_c=22.3,
    thermal_c_per_w=0.075,
    max_temp_c=87.0,
)

A100_SXM4 = GpuEnvelope(
    kind="a100",
    model_name="NVIDIA A100-SXM4-80GB",
    tdp_w=400.0,
    idle_w=58.0,
    context_idle_w=90.0,
    fb_total_bytes=GPU_FB_TOTAL_MIB["a100"] * MIB,
    fb_reserved_bytes=GPU_FB_RESERVED_MIB["a100"] * MIB,
    memory_bytes_per_s=2.039e12,
    max_sm_clock_mhz=1410,
    idle_sm_clock_mhz=210,
    min_loaded_sm_clock_mhz=1100,
    mem_clock_mhz=1593,
    pcie_gen=4,
    pcie_bytes_per_s=32e9,
    nvlink_bytes_per_s=300e9,
    bf16_dense_flops=312e12,
    inlet_c=22.3,
    thermal_c_per_w=0.094,
    max_temp_c=85.0,
)

ENVELOPES: dict[str, GpuEnvelope] = {e.kind: e for e in (H100_SXM5, A100_SXM4)}


def envelope(kind: str) -> GpuEnvelope:
    """The envelope of ``kind``; raises ``KeyError`` naming the known kinds."""
    try:
        return ENVELOPES[kind]
    except KeyError:
        raise KeyError(f"no GPU envelope for kind {kind!r}; known: {sorted(ENVELOPES)}") from None
