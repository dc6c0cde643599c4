"""A simulated GPU node's topology and NUMA memory, in the formats the real collectors read.

Layout (an HGX / DGX-style SXM board): two CPU sockets, one NUMA node each, splitting the
node's CPUs in halves; the first half of the GPUs hang off socket 0, the second off socket 1;
GPUs come in pairs behind one PCIe switch; every GPU reaches every other over NVLink through
the NVSwitches (18 NVLink 4 links on an H100 SXM5, 12 NVLink 3 links on an A100 SXM4: the
GPUs' architecture whitepapers).

What is written, for :mod:`sits_observe.collectors.cgroup.numa` and
:mod:`sits_observe.collectors.topology` to read exactly as on a real node:

- :func:`write_sysfs`: ``<sys_root>/devices/system/node/node<N>/{numastat,cpulist}`` and
  ``<sys_root>/bus/pci/devices/<bdf>/{numa_node,local_cpulist}`` (kernel formats:
  Documentation/admin-guide/numastat.rst, ABI sysfs-bus-pci);
- :class:`SimNvml`: the slice of ``pynvml`` the topology collector calls (device count,
  UUID, PCI bus id, NUMA node, CPU affinity mask, NVLink state, common ancestor, P2P status).

NUMA counters (:class:`NumaCounters`, pages since "boot", only growing): each step a pod
allocates pages at a rate set by its kind (an assumption: page-cache and heap churn of a
server, a training data loader, a notebook) on the NUMA node of its first GPU (its intended
node); a share of them land on the other node, :func:`numa_miss_share`: 1 % for a
Guaranteed pod with whole CPUs (the kubelet's static CPU manager and TopologyManager keep it
on one socket), 35 % for any other pod, whose threads float over both sockets (assumption).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml

from sits_observe.lab.cluster.serving.interference import Placement

NUMA_NODES = 2
PAGE_BYTES = 4096
#: NVLink links per GPU (architecture whitepapers).
NVLINKS = {"h100": 18, "a100": 12}
#: Page allocation rate per pod kind, bytes/s (assumption, see the module docstring).
ALLOC_BYTES_PER_S = {"llm": 64 * 2**20, "batch": 32 * 2**20, "notebook": 4 * 2**20}
ALIGNED_MISS_SHARE = 0.01
UNALIGNED_MISS_SHARE = 0.35
#: The numastat keys in the kernel's order.
NUMASTAT_KEYS = (
    "numa_hit",
    "numa_miss",
    "numa_foreign",
    "interleave_hit",
    "local_node",
    "other_node",
)


def node_placement(gpus: int) -> tuple[Placement, ...]:
    """Each GPU's PCIe switch and NUMA node (see the module docstring)."""
    half = max(gpus // 2, 1)
    return tuple(Placement(pcie_switch=i // 2, numa_node=min(i // half, 1)) for i in range(gpus))


def numa_cpus(numa_node: int, cpus: int) -> tuple[int, ...]:
    """The CPUs of ``numa_node`` on a node with ``cpus`` CPUs."""
    half = cpus // NUMA_NODES
    return tuple(range(numa_node * half, (numa_node + 1) * half))


def numa_miss_share(qos_class: str, cpu_limit_cores: float | None) -> float:
    """The share of a pod's page allocations that land off its intended NUMA node."""
    whole_cpus = cpu_limit_cores is not None and float(cpu_limit_cores).is_integer()
    return ALIGNED_MISS_SHARE if qos_class == "Guaranteed" and whole_cpus else UNALIGNED_MISS_SHARE


@dataclass
class NumaCounters:
    """A node's ``numastat`` counters per NUMA node, pages since boot."""

    pages: list[dict[str, int]] = field(
        default_factory=lambda: [dict.fromkeys(NUMASTAT_KEYS, 0) for _ in range(NUMA_NODES)]
    )

    def allocate(self, intended: int, pages: int, miss_share: float) -> None:
        """``pages`` allocated for a task that wants node ``intended``; ``miss_share`` of
        them come from the other node (counted as the kernel counts them)."""
        other = 1 - intended
        missed = round(pages * miss_share)
        hit = pages - missed
        here, there = self.pages[intended], self.pages[other]
        here["numa_hit"] += hit
        here["local_node"] += hit
        here["numa_foreign"] += missed
        there["numa_miss"] += missed
        there["other_node"] += missed

    def numastat_text(self, numa_node: int) -> str:
        """One node's ``numastat`` file."""
        return "".join(f"{k} {self.pages[numa_node][k]}\n" for k in NUMASTAT_KEYS)


def sysfs_bus_id(pci_bus_id: str) -> str:
    """dcgm / NVML's ``00000000:18:00.0`` as sysfs names it: ``0000:18:00.0``."""
    domain, _, rest = pci_bus_id.partition(":")
    return f"{int(domain, 16):04x}:{rest.lower()}"


def _cpulist(cpus: Sequence[int]) -> str:
    return f"{cpus[0]}-{cpus[-1]}\n" if cpus else "\n"


def _write(path: Path, text: str) -> None:
    """Replace ``path`` atomically (a reader never sees half a file); skip when unchanged."""
    try:
        if path.read_text(encoding="ascii") == text:
            return
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="ascii")
    os.replace(tmp, path)


def write_sysfs(
    sys_root: Path, counters: NumaCounters, pci_bus_ids: Sequence[str], cpus: int
) -> None:
    """The node's NUMA files and its GPUs' PCI NUMA files under ``sys_root``."""
    for n in range(NUMA_NODES):
        directory = sys_root / "devices" / "system" / "node" / f"node{n}"
        _write(directory / "numastat", counters.numastat_text(n))
        _write(directory / "cpulist", _cpulist(numa_cpus(n, cpus)))
    for place, bus_id in zip(node_placement(len(pci_bus_ids)), pci_bus_ids, strict=True):
        directory = sys_root / "bus" / "pci" / "devices" / sysfs_bus_id(bus_id)
        _write(directory / "numa_node", f"{place.numa_node}\n")
        _write(directory / "local_cpulist", _cpulist(numa_cpus(place.numa_node, cpus)))


@dataclass(frozen=True)
class SimGpuHandle:
    """What NVML knows about one simulated GPU."""

    index: int
    uuid: str
    pci_bus_id: str
    kind: str
    place: Placement


class SimNvml:
    """The part of ``pynvml`` the topology collector calls, answering for one simulated
    node (pass as ``TopologyCollector(nvml=SimNvml(...))``)."""

    NVMLError = pynvml.NVMLError
    NVML_ERROR_NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED
    NVML_ERROR_FUNCTION_NOT_FOUND = pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
    NVML_ERROR_INVALID_ARGUMENT = pynvml.NVML_ERROR_INVALID_ARGUMENT
    NVML_FEATURE_ENABLED = pynvml.NVML_FEATURE_ENABLED
    NVML_FEATURE_DISABLED = pynvml.NVML_FEATURE_DISABLED
    NVML_NVLINK_MAX_LINKS = pynvml.NVML_NVLINK_MAX_LINKS
    NVML_P2P_CAPS_INDEX_NVLINK = pynvml.NVML_P2P_CAPS_INDEX_NVLINK
    NVML_P2P_STATUS_OK = pynvml.NVML_P2P_STATUS_OK

    def __init__(self, gpus: Sequence[tuple[str, str, str]], *, cpus: int) -> None:
        """``gpus``: each GPU's (UUID, PCI bus id, kind), in index order."""
        places = node_placement(len(gpus))
        self.handles = [
            SimGpuHandle(i, uuid, bus, kind, places[i]) for i, (uuid, bus, kind) in enumerate(gpus)
        ]
        self.cpus = cpus

    def nvmlInit(self) -> None:  # noqa: N802 (pynvml's names)
        """Nothing to initialise."""

    def nvmlShutdown(self) -> None:  # noqa: N802 (pynvml's names)
        """Nothing to shut down."""

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802 (pynvml's names)
        return len(self.handles)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> SimGpuHandle:  # noqa: N802 (pynvml's names)
        return self.handles[index]

    def nvmlDeviceGetUUID(self, h: SimGpuHandle) -> str:  # noqa: N802 (pynvml's names)
        return h.uuid

    def nvmlDeviceGetPciInfo(self, h: SimGpuHandle) -> Any:  # noqa: N802 (pynvml's names)
        return SimpleNamespace(busId=h.pci_bus_id)

    def nvmlDeviceGetNumaNodeId(self, h: SimGpuHandle) -> int:  # noqa: N802 (pynvml's names)
        return h.place.numa_node

    def nvmlDeviceGetCpuAffinity(self, h: SimGpuHandle, words: int) -> list[int]:  # noqa: N802 (pynvml's names)
        mask = [0] * words
        for cpu in numa_cpus(h.place.numa_node, self.cpus):
            if cpu // 64 < words:
                mask[cpu // 64] |= 1 << (cpu % 64)
        return mask

    def nvmlDeviceGetNvLinkState(self, h: SimGpuHandle, link: int) -> int:  # noqa: N802 (pynvml's names)
        if link >= NVLINKS.get(h.kind, 0):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return int(pynvml.NVML_FEATURE_ENABLED)

    def nvmlDeviceGetTopologyCommonAncestor(self, a: SimGpuHandle, b: SimGpuHandle) -> int:  # noqa: N802 (pynvml's names)
        if a.place.pcie_switch == b.place.pcie_switch:
            return int(pynvml.NVML_TOPOLOGY_SINGLE)
        if a.place.numa_node == b.place.numa_node:
            return int(pynvml.NVML_TOPOLOGY_NODE)
        return int(pynvml.NVML_TOPOLOGY_SYSTEM)

    def nvmlDeviceGetP2PStatus(self, a: SimGpuHandle, b: SimGpuHandle, index: int) -> int:  # noqa: N802 (pynvml's names)
        del a, b, index  # all SXM GPUs of a board reach each other through NVSwitch
        return int(pynvml.NVML_P2P_STATUS_OK)
