"""MIG GPU-instance profiles of the A100, H100 and H200, and the smallest one that fits.

Source: NVIDIA Multi-Instance GPU User Guide, "Supported MIG Profiles"
(docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html): each product
has 8 memory slices and 7 compute slices; a profile ``<c>g.<m>gb`` takes c compute slices and
1/8, 2/8, 4/8 or all of the memory. The tables list the profiles without media extensions
(``+me`` variants have the same memory and compute).

Memory of a profile, in bytes: the figure of its name in decimal GB (``1g.10gb`` = 10 x 10^9
bytes). It is what the profile name promises and slightly under what an instance reports
(``nvidia-smi mig -lgip`` on an H100 80GB lists 1g.10gb with 9.75 GiB = 10.47 x 10^9 bytes,
3g.40gb with 39.50 GiB), so a workload sized under it fits in the instance.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class MigProfile:
    """One GPU-instance profile: name, compute slices (of 7), memory slices (of 8), bytes."""

    name: str
    compute_slices: int
    memory_slices: int
    memory_bytes: int


@dataclass(frozen=True)
class MigProduct:
    """The profiles of one GPU product, matched by a regex on its product name."""

    product: str
    pattern: str
    total_memory_bytes: int
    profiles: tuple[MigProfile, ...]

    def matches(self, gpu_product: str) -> bool:
        """Whether ``gpu_product`` (``nvidia.com/gpu.product``, e.g. ``NVIDIA-H100-80GB-HBM3``)
        is this product."""
        return re.search(self.pattern, gpu_product, flags=re.IGNORECASE) is not None


GB = 1_000_000_000


def _profiles(gb: tuple[int, int, int, int, int, int]) -> tuple[MigProfile, ...]:
    """The six profiles 1g (1/8), 1g (2/8), 2g (2/8), 3g (4/8), 4g (4/8), 7g (all) of a product
    whose names carry the memory figures ``gb``."""
    shape = ((1, 1), (1, 2), (2, 2), (3, 4), (4, 4), (7, 8))
    return tuple(
        MigProfile(f"{c}g.{g}gb", c, m, g * GB) for (c, m), g in zip(shape, gb, strict=True)
    )


#: First match wins: the 80 GB / 94 GB / NVL variants come before the shorter names.
MIG_PRODUCTS: tuple[MigProduct, ...] = (
    MigProduct("A100 80GB", r"A100.*80\s*GB", 80 * GB, _profiles((10, 20, 20, 40, 40, 80))),
    MigProduct("A100 40GB", r"A100", 40 * GB, _profiles((5, 10, 10, 20, 20, 40))),
    MigProduct("H100 94GB", r"H100.*(94\s*GB|NVL)", 94 * GB, _profiles((12, 24, 24, 47, 47, 94))),
    MigProduct("H100 80GB", r"H100", 80 * GB, _profiles((10, 20, 20, 40, 40, 80))),
    MigProduct("H200 141GB", r"H200", 141 * GB, _profiles((18, 35, 35, 71, 71, 141))),
)


def mig_product(gpu_product: str | None) -> MigProduct | None:
    """The MIG table of ``gpu_product`` (None for a product without MIG in these tables)."""
    if not gpu_product:
        return None
    return next((p for p in MIG_PRODUCTS if p.matches(gpu_product)), None)


def product_of_profile(profile: str) -> tuple[MigProduct, ...]:
    """The products that have a profile of this name (``3g.40gb``: A100 80GB and H100 80GB)."""
    return tuple(p for p in MIG_PRODUCTS if any(x.name == profile for x in p.profiles))


def smallest_fitting(
    product: MigProduct, memory_bytes: float, compute_slices: int = 1
) -> MigProfile | None:
    """The profile with the least memory, then the fewest compute slices, that holds
    ``memory_bytes`` and at least ``compute_slices``; None when even the full GPU is short."""
    fitting = [
        p
        for p in product.profiles
        if p.memory_bytes >= memory_bytes and p.compute_slices >= compute_slices
    ]
    return min(fitting, key=lambda p: (p.memory_bytes, p.compute_slices), default=None)
