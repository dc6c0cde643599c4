"""Settings of the interference score and the GPU-link capacities it divides by (SPEC
"Topology and interference"; NVLink figures from the vendors' data sheets, cited per entry).
Units: ``_bytes_per_s`` is GB/s = 10^9 bytes/s, as link figures are quoted decimally."""

from __future__ import annotations

import re
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, model_validator


class LinkCapacity(BaseModel):
    """Link capacities of one GPU product, matched by a regular expression on its name."""

    model_config = ConfigDict(frozen=True)

    pattern: str = Field(
        ..., min_length=1, description="case-insensitive regex matched against the GPU name"
    )
    nvlink_bytes_per_s: float = Field(
        ..., ge=0, description="NVLink bandwidth, both directions summed, bytes/s (0 = none)"
    )
    pcie_bytes_per_s: float = Field(
        ..., gt=0, description="PCIe x16 bandwidth, both directions summed, bytes/s"
    )

    def matches(self, gpu_name: str) -> bool:
        """Whether ``gpu_name`` (e.g. ``NVIDIA H100 80GB HBM3``) is this product."""
        return re.search(self.pattern, gpu_name, flags=re.IGNORECASE) is not None


# Bidirectional figures from NVIDIA's datasheets: H100 SXM and H200 NVLink 4 = 900 GB/s,
# H100 PCIe / NVL bridge = 600 GB/s, A100 NVLink 3 (SXM4, and PCIe with bridge) = 600 GB/s,
# V100 SXM2 NVLink 2 = 300 GB/s, B200 NVLink 5 = 1.8 TB/s, A40 bridge = 112.5 GB/s; L4, L40,
# L40S, A10 and T4 have no NVLink. PCIe x16 as the datasheets quote it (both directions):
# Gen3 32 GB/s, Gen4 64 GB/s, Gen5 128 GB/s. First match wins, so the more specific names
# (H100 PCIe, L40S) come before the shorter ones (H100, L4).
DEFAULT_LINKS: tuple[LinkCapacity, ...] = (
    LinkCapacity(pattern=r"H100.*(PCIe|NVL)", nvlink_bytes_per_s=600e9, pcie_bytes_per_s=128e9),
    LinkCapacity(pattern=r"H100|H200|GH200", nvlink_bytes_per_s=900e9, pcie_bytes_per_s=128e9),
    LinkCapacity(pattern=r"B200|GB200", nvlink_bytes_per_s=1800e9, pcie_bytes_per_s=128e9),
    LinkCapacity(pattern=r"A100", nvlink_bytes_per_s=600e9, pcie_bytes_per_s=64e9),
    LinkCapacity(pattern=r"V100", nvlink_bytes_per_s=300e9, pcie_bytes_per_s=32e9),
    LinkCapacity(pattern=r"A40\b", nvlink_bytes_per_s=112.5e9, pcie_bytes_per_s=64e9),
    LinkCapacity(pattern=r"L40S|L40\b|\bL4\b|A10G?\b", nvlink_bytes_per_s=0, pcie_bytes_per_s=64e9),
    LinkCapacity(pattern=r"\bT4\b", nvlink_bytes_per_s=0, pcie_bytes_per_s=32e9),
)


def find_link_capacity(
    links: tuple[LinkCapacity, ...], gpu_name: str | None
) -> LinkCapacity | None:
    """The first entry of ``links`` whose pattern matches ``gpu_name`` (None when none does)."""
    if not gpu_name:
        return None
    return next((link for link in links if link.matches(gpu_name)), None)


class NvlinkScope(StrEnum):
    """When NVLink traffic counts as conflict (see ``nvlink_conflict_scope``)."""

    gpu = "gpu"
    node = "node"


class InterferenceSettings(BaseModel):
    """Interference score and TopologyManager rule (SPEC "Topology and interference")."""

    model_config = ConfigDict(frozen=True)

    # SPEC: score = 0.4 x GPU-bandwidth utilisation + 0.35 x NVLink conflict + 0.25 x NUMA miss.
    bandwidth_weight: float = Field(0.4, ge=0, le=1, description="weight of GPU bandwidth use")
    nvlink_weight: float = Field(0.35, ge=0, le=1, description="weight of NVLink conflict")
    numa_weight: float = Field(0.25, ge=0, le=1, description="weight of the NUMA miss ratio")
    # SPEC: "Above 0.65 -> recommend TopologyManager single-numa-node" (strictly above).
    threshold_ratio: float = Field(
        0.65, ge=0, le=1, description="score (0-1) above which single-numa-node is recommended"
    )
    # SPEC: "three consecutive sync delays above 80 ms -> fall back to best-effort".
    sync_delay_threshold_s: float = Field(
        0.080, gt=0, le=60, description="sync delay (seconds) above which a delay counts as bad"
    )
    sync_delay_consecutive: int = Field(
        3, ge=1, le=1000, description="consecutive bad sync delays that force best-effort"
    )
    nvlink_conflict_scope: NvlinkScope = Field(
        NvlinkScope.gpu,
        description="when NVLink traffic counts as conflict: 'gpu' = the GPU serves 2+ pods at "
        "that sample; 'node' = 2+ pods on the node move NVLink traffic at that sample",
    )
    links: tuple[LinkCapacity, ...] = Field(
        DEFAULT_LINKS, description="NVLink / PCIe capacity per GPU product (bytes/s)"
    )

    @model_validator(mode="after")
    def _weights_sum_to_one(self) -> InterferenceSettings:
        total = self.bandwidth_weight + self.nvlink_weight + self.numa_weight
        if abs(total - 1.0) > 1e-9:
            raise ValueError(f"interference weights must sum to 1 (a 0-1 score), got {total:g}")
        return self
