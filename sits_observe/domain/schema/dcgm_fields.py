"""The dcgm-exporter field table: which exporter family becomes which ``gpu_samples`` column.

Shared by the collector that parses dcgm-exporter text (:mod:`sits_observe.collectors.dcgm`)
and the PromQL source that reads the same families back from a Prometheus-compatible store
(:mod:`sits_observe.store.promql.source`), so the two cannot disagree on names, units or
bounds. Families are listed with their dcgm-exporter 2.x/3.x name first and the 1.x name
second (see docs/collectors/dcgm.md).
"""

from __future__ import annotations

from dataclasses import dataclass

MIB = 1 << 20


@dataclass(frozen=True, slots=True)
class FieldSpec:
    """How one dcgm-exporter family becomes one ``gpu_samples`` column.

    ``low`` / ``high`` bound the value in the exporter's unit (inclusive); ``scale``
    multiplies it into the column's unit.
    """

    column: str
    families: tuple[str, ...]
    scale: float
    low: float
    high: float
    integer: bool = False


# DCGM blank sentinels (dcgm_structs.h): BLANK, NOT_FOUND, NOT_SUPPORTED, ... = BLANK + 0..15.
INT32_BLANK = float(0x7FFFFFF0)
FP64_BLANK = 2.0**47
INT64_BLANK = float(0x7FFFFFFFFFFFFFF0)
_FB_MAX_MIB = INT32_BLANK - 1  # 2 PiB: anything above is a sentinel, not a frame buffer
_RATE_MAX = 1e14  # bytes/s: 100 TB/s, far above any NVLink or PCIe generation
FIELDS: tuple[FieldSpec, ...] = (
    FieldSpec("fb_used_bytes", ("DCGM_FI_DEV_FB_USED", "dcgm_fb_used"), MIB, 0, _FB_MAX_MIB, True),
    FieldSpec("fb_free_bytes", ("DCGM_FI_DEV_FB_FREE", "dcgm_fb_free"), MIB, 0, _FB_MAX_MIB, True),
    FieldSpec("fb_reserved_bytes", ("DCGM_FI_DEV_FB_RESERVED",), MIB, 0, _FB_MAX_MIB, True),
    FieldSpec("fb_total_bytes", ("DCGM_FI_DEV_FB_TOTAL",), MIB, 0, _FB_MAX_MIB, True),
    FieldSpec("gpu_util_ratio", ("DCGM_FI_DEV_GPU_UTIL", "dcgm_gpu_utilization"), 0.01, 0, 100),
    FieldSpec(
        "mem_copy_util_ratio",
        ("DCGM_FI_DEV_MEM_COPY_UTIL", "dcgm_mem_copy_utilization"),
        0.01,
        0,
        100,
    ),
    FieldSpec(
        "gr_engine_active_ratio",
        ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "dcgm_fi_prof_gr_engine_active"),
        1.0,
        0,
        1,
    ),
    FieldSpec("sm_active_ratio", ("DCGM_FI_PROF_SM_ACTIVE", "dcgm_fi_prof_sm_active"), 1.0, 0, 1),
    FieldSpec(
        "tensor_active_ratio",
        ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "dcgm_fi_prof_pipe_tensor_active"),
        1.0,
        0,
        1,
    ),
    FieldSpec(
        "dram_active_ratio", ("DCGM_FI_PROF_DRAM_ACTIVE", "dcgm_fi_prof_dram_active"), 1.0, 0, 1
    ),
    FieldSpec(
        "pcie_tx_bytes_per_s",
        ("DCGM_FI_PROF_PCIE_TX_BYTES", "dcgm_fi_prof_pcie_tx_bytes"),
        1.0,
        0,
        _RATE_MAX,
    ),
    FieldSpec(
        "pcie_rx_bytes_per_s",
        ("DCGM_FI_PROF_PCIE_RX_BYTES", "dcgm_fi_prof_pcie_rx_bytes"),
        1.0,
        0,
        _RATE_MAX,
    ),
    FieldSpec("nvlink_tx_bytes_per_s", ("DCGM_FI_PROF_NVLINK_TX_BYTES",), 1.0, 0, _RATE_MAX),
    FieldSpec("nvlink_rx_bytes_per_s", ("DCGM_FI_PROF_NVLINK_RX_BYTES",), 1.0, 0, _RATE_MAX),
    FieldSpec("power_w", ("DCGM_FI_DEV_POWER_USAGE", "dcgm_power_usage"), 1.0, 0, 1e5),
    FieldSpec("gpu_temp_c", ("DCGM_FI_DEV_GPU_TEMP", "dcgm_gpu_temp"), 1.0, -60, 250),
    FieldSpec("memory_temp_c", ("DCGM_FI_DEV_MEMORY_TEMP", "dcgm_memory_temp"), 1.0, -60, 250),
    FieldSpec("sm_clock_hz", ("DCGM_FI_DEV_SM_CLOCK", "dcgm_sm_clock"), 1e6, 0, 1e5),
    FieldSpec("mem_clock_hz", ("DCGM_FI_DEV_MEM_CLOCK", "dcgm_memory_clock"), 1e6, 0, 1e5),
    FieldSpec(
        "energy_j",
        ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "dcgm_total_energy_consumption"),
        1e-3,
        0,
        9.2e18,
    ),
    FieldSpec(
        "xid_last", ("DCGM_FI_DEV_XID_ERRORS", "dcgm_xid_errors"), 1.0, 0, INT32_BLANK - 1, True
    ),
)
