"""Generate dcgm-exporter ``/metrics`` text for a synthetic fleet (benchmark input).

The families, their Prometheus types and HELP strings come from dcgm-exporter's default
counter list (``../shared/data/dcgm/default-counters.csv``); the labels are shaped like the
real L4 capture (``l4-kops-aws-default-counters.prom``): ``gpu``, ``UUID``, ``pci_bus_id``,
``device``, ``modelName``, ``Hostname``, ``DCGM_FI_DRIVER_VERSION``. Values are seeded random
numbers in each field's real unit (MiB, %, MHz, W, mJ, ratio, bytes/s), so the text is
reproducible run to run.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass
from pathlib import Path

#: Used when the reference CSV is absent: the default list at dcgm-exporter e61056b9
#: (field, Prometheus type); the HELP text is then the field name.
FALLBACK_COUNTERS: tuple[tuple[str, str], ...] = tuple(
    (f"DCGM_FI_{name}", kind)
    for name, kind in (
        ("DEV_SM_CLOCK", "gauge"),
        ("DEV_MEM_CLOCK", "gauge"),
        ("DEV_MEMORY_TEMP", "gauge"),
        ("DEV_GPU_TEMP", "gauge"),
        ("DEV_POWER_USAGE", "gauge"),
        ("DEV_TOTAL_ENERGY_CONSUMPTION", "counter"),
        ("DEV_PCIE_REPLAY_COUNTER", "counter"),
        ("DEV_GPU_UTIL", "gauge"),
        ("DEV_MEM_COPY_UTIL", "gauge"),
        ("DEV_ENC_UTIL", "gauge"),
        ("DEV_DEC_UTIL", "gauge"),
        ("DEV_XID_ERRORS", "gauge"),
        ("DEV_FB_FREE", "gauge"),
        ("DEV_FB_USED", "gauge"),
        ("DEV_FB_RESERVED", "gauge"),
        ("DEV_NVLINK_BANDWIDTH_TOTAL", "counter"),
        ("DEV_VGPU_LICENSE_STATUS", "gauge"),
        ("DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter"),
        ("DEV_CORRECTABLE_REMAPPED_ROWS", "counter"),
        ("DEV_ROW_REMAP_FAILURE", "gauge"),
        ("PROF_GR_ENGINE_ACTIVE", "gauge"),
        ("PROF_PIPE_TENSOR_ACTIVE", "gauge"),
        ("PROF_DRAM_ACTIVE", "gauge"),
        ("PROF_PCIE_TX_BYTES", "gauge"),
        ("PROF_PCIE_RX_BYTES", "gauge"),
    )
)

L4_FB_TOTAL_MIB = 23033  # FB free + used + reserved of the real L4 capture


@dataclass(frozen=True)
class Fleet:
    """The generated text and what it holds."""

    text: str
    nodes: int
    gpus_per_node: int
    families: tuple[str, ...]

    @property
    def samples(self) -> int:
        """Sample lines in :attr:`text`."""
        return self.nodes * self.gpus_per_node * len(self.families)


def read_counters(csv_path: Path | None) -> tuple[tuple[str, str, str], ...]:
    """(field, prom type, help) for every enabled metric row of a dcgm-exporter counter CSV."""
    if csv_path is None or not csv_path.is_file():
        return tuple((field, kind, field) for field, kind in FALLBACK_COUNTERS)
    rows: list[tuple[str, str, str]] = []
    for raw in csv_path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        field, kind, help_text = (part.strip() for part in line.split(",", 2))
        if kind == "label":  # DCGM_FI_DRIVER_VERSION: exported as a label, not a series
            continue
        rows.append((field, kind, help_text))
    return tuple(rows)


def _value(field: str, rng: random.Random, fb_used_mib: int) -> str:
    """A plausible value for ``field`` in dcgm-exporter's unit and number format."""
    if field.endswith("_FB_USED"):
        return str(fb_used_mib)
    if field.endswith("_FB_FREE"):
        return str(L4_FB_TOTAL_MIB - 470 - fb_used_mib)
    if field.endswith("_FB_RESERVED"):
        return "470"
    if field.endswith(("_GPU_UTIL", "_MEM_COPY_UTIL", "_ENC_UTIL", "_DEC_UTIL")):
        return str(rng.randint(0, 100))
    if field.startswith("DCGM_FI_PROF_") and field.endswith("_ACTIVE"):
        return f"{rng.random():.6f}"
    if field.endswith("_BYTES"):
        return str(rng.randint(0, 2_000_000_000))
    if field.endswith("_CLOCK"):
        return str(rng.choice((210, 405, 1410, 2040, 6251)))
    if field.endswith("_TEMP"):
        return str(rng.randint(25, 85))
    if field.endswith("_POWER_USAGE"):
        return f"{rng.uniform(16, 72):.6f}"
    if field.endswith("_ENERGY_CONSUMPTION"):
        return str(rng.randint(1_000_000, 9_000_000_000))
    return "0"


def generate(
    nodes: int = 1000, gpus_per_node: int = 8, *, csv_path: Path | None = None, seed: int = 7
) -> Fleet:
    """One body: every node's exporter output, one after the other (as a federation would)."""
    counters = read_counters(csv_path)
    rng = random.Random(seed)
    parts: list[str] = []
    for n in range(nodes):
        host = f"ip-10-0-{n // 250}-{n % 250}.ec2.internal"
        label_sets = []
        fb_used = []
        for g in range(gpus_per_node):
            gpu_uuid = uuid.UUID(int=rng.getrandbits(128))
            bus = f"00000000:{0x31 + g * 0x10:02X}:00.0"
            label_sets.append(
                f'gpu="{g}",UUID="GPU-{gpu_uuid}",pci_bus_id="{bus}",device="nvidia{g}",'
                f'modelName="NVIDIA L4",Hostname="{host}",DCGM_FI_DRIVER_VERSION="580.105.08"'
            )
            fb_used.append(rng.randint(0, 20000))
        for field, kind, help_text in counters:
            parts.append(f"# HELP {field} {help_text}\n# TYPE {field} {kind}\n")
            for g in range(gpus_per_node):
                parts.append(f"{field}{{{label_sets[g]}}} {_value(field, rng, fb_used[g])}\n")
    return Fleet("".join(parts), nodes, gpus_per_node, tuple(c[0] for c in counters))
