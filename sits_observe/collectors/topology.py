"""GPU topology through NVML -> ``gpu_topology`` (per GPU) and ``gpu_links`` (per GPU pair).

What the extender's distance term and the TopologyManager advice need to know about a node
(SPEC "Topology and interference": NVLink 0.1, same PCIe switch 0.4, cross-NUMA 1.0):

=================================================  ==========================================
NVML call                                          column
=================================================  ==========================================
``nvmlDeviceGetNumaNodeId``                        ``numa_node`` (``numa_source`` = nvml);
                                                   else ``<sys_root>/bus/pci/devices/<bdf>/
                                                   numa_node`` (sysfs; ``-1`` = NULL)
``nvmlDeviceGetCpuAffinity``                       ``cpu_affinity`` (cpulist); else sysfs
                                                   ``local_cpulist``
``nvmlDeviceGetNvLinkState`` for each link         ``nvlink_links_active`` / ``_total``
``nvmlDeviceGetTopologyCommonAncestor``            ``common_ancestor``
``nvmlDeviceGetP2PStatus`` (NVLINK capability)     ``nvlink``
=================================================  ==========================================

A pair's ``path`` is the SPEC's distance class: ``nvlink`` when NVLink peer-to-peer works
(directly or through NVSwitch), else ``pcie-switch`` when the common ancestor is the board or
one or more PCIe switches, ``numa-node`` when it is a host bridge or the CPU of one NUMA node,
``cross-numa`` when the path crosses the inter-socket link (``NVML_TOPOLOGY_SYSTEM``). Without
the common ancestor, two GPUs with known NUMA nodes are ``numa-node`` or ``cross-numa``.

Topology changes only when hardware or the driver does, so a collector reads it once every
``refresh_s`` (300 s by default; the calls in between return empty tables, so an agent may
call it every interval); every read writes the full picture (no deltas).

Errors follow :mod:`.nvml`: no driver raises
:class:`~sits_observe.errors.DriverUnavailable`, an unsupported call is NULL, any other NVML
error on one value is NULL and counted under ``topology error: <what>``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa

from sits_observe.collectors.cgroup.numa_files import (
    cpus_of_mask,
    format_cpulist,
    parse_cpulist,
    parse_numa_node,
    sysfs_bus_id,
)
from sits_observe.collectors.nvml import QUIET_ERRORS, NvmlSession
from sits_observe.domain.collect import CollectResult
from sits_observe.domain.schema.topology_tables import GPU_LINKS, GPU_TOPOLOGY
from sits_observe.domain.times import utc_naive
from sits_observe.errors import CollectorError, ParseError

T = TypeVar("T")

#: NVML topology levels (nvml.h nvmlGpuTopologyLevel_t) -> our names.
ANCESTORS = {
    0: "board",  # NVML_TOPOLOGY_INTERNAL: two GPUs on one board
    10: "pcie-switch",  # NVML_TOPOLOGY_SINGLE
    20: "pcie-switches",  # NVML_TOPOLOGY_MULTIPLE
    30: "host-bridge",  # NVML_TOPOLOGY_HOSTBRIDGE
    40: "numa-node",  # NVML_TOPOLOGY_NODE (== NVML_TOPOLOGY_CPU)
    50: "system",  # NVML_TOPOLOGY_SYSTEM: across NUMA nodes (SMP interconnect)
}
NVLINK, PCIE_SWITCH, NUMA_NODE, CROSS_NUMA = "nvlink", "pcie-switch", "numa-node", "cross-numa"
_PATH_OF_ANCESTOR = {
    "board": PCIE_SWITCH,
    "pcie-switch": PCIE_SWITCH,
    "pcie-switches": PCIE_SWITCH,
    "host-bridge": NUMA_NODE,
    "numa-node": NUMA_NODE,
    "system": CROSS_NUMA,
}
#: 64-bit words of the CPU mask asked of NVML: room for 1,024 CPUs.
CPU_MASK_WORDS = 16
_QUIET_ERRORS = (
    *QUIET_ERRORS,
    "NVML_ERROR_INVALID_ARGUMENT",  # a link number past the GPU's last link
)


def pair_path(
    ancestor: str | None, nvlink: bool | None, numa: tuple[int | None, int | None]
) -> str | None:
    """The distance class of a GPU pair (module docstring); None when nothing is known."""
    if nvlink:
        return NVLINK
    if ancestor is not None:
        return _PATH_OF_ANCESTOR[ancestor]
    if numa[0] is not None and numa[1] is not None:
        return NUMA_NODE if numa[0] == numa[1] else CROSS_NUMA
    return None


class TopologyCollector:
    """Reads every GPU's NUMA node, CPU affinity and NVLink state and every pair's path.

    ``nvml`` is the ``pynvml`` module or a stand-in; ``sys_root`` is the host's ``/sys``.
    """

    name = "topology"

    def __init__(
        self,
        *,
        node: str,
        nvml: object | None = None,
        sys_root: str | Path = "/sys",
        refresh_s: float = 300.0,
    ) -> None:
        if refresh_s < 0:
            raise ValueError(f"refresh_s must be >= 0 seconds, got {refresh_s}")
        self.node = node
        self.sys_root = Path(sys_root)
        self.refresh_s = refresh_s
        self._read_at: datetime | None = None
        self._session = NvmlSession(nvml, without="no GPU topology", quiet=_QUIET_ERRORS)

    def _open(self) -> Any:
        return self._session.open()

    def close(self) -> None:
        """Shut NVML down when this collector initialised it."""
        self._session.close()

    def _get(
        self, what: str, dropped: Counter[str], call: Callable[..., T], *args: Any
    ) -> T | None:
        return self._session.get(f"topology error: {what}", dropped, call, *args)

    def collect(self, now: datetime) -> CollectResult:
        """Read the topology, unless the last read is younger than ``refresh_s`` (then the
        tables are empty); raises :class:`DriverUnavailable` without a driver."""
        if self._read_at is not None and (now - self._read_at).total_seconds() < self.refresh_s:
            return CollectResult(
                {
                    GPU_TOPOLOGY.name: _table(GPU_TOPOLOGY.schema, []),
                    GPU_LINKS.name: _table(GPU_LINKS.schema, []),
                }
            )
        nv = self._open()
        dropped: Counter[str] = Counter()
        try:
            count = int(nv.nvmlDeviceGetCount())
        except nv.NVMLError as exc:
            raise CollectorError(f"NVML could not count the GPUs: {exc}") from exc
        gpus: list[tuple[Any, dict[str, Any]]] = []
        for index in range(count):
            try:
                handle = nv.nvmlDeviceGetHandleByIndex(index)
                uuid = _text(nv.nvmlDeviceGetUUID(handle))
            except nv.NVMLError:
                dropped["topology error: device"] += 1
                continue
            gpus.append((handle, self._gpu(nv, handle, index, uuid, dropped)))
        links = self._links(nv, gpus, dropped)
        self._read_at = now
        at = utc_naive(now)
        rows = [row for _, row in gpus]
        for row in (*rows, *links):
            row.update(ts=at, node=self.node)
        return CollectResult(
            {
                GPU_TOPOLOGY.name: _table(GPU_TOPOLOGY.schema, rows),
                GPU_LINKS.name: _table(GPU_LINKS.schema, links),
            },
            dropped,
        )

    def _gpu(
        self, nv: Any, handle: Any, index: int, uuid: str, dropped: Counter[str]
    ) -> dict[str, Any]:
        pci = self._get("pci", dropped, nv.nvmlDeviceGetPciInfo, handle)
        bus_id = None
        if pci is not None:
            try:
                bus_id = sysfs_bus_id(_text(pci.busId))
            except ParseError:
                dropped["topology error: pci bus id"] += 1
        row: dict[str, Any] = {"gpu_uuid": uuid, "gpu_index": index, "pci_bus_id": bus_id}
        numa = self._get("numa node", dropped, nv.nvmlDeviceGetNumaNodeId, handle)
        if numa is not None and int(numa) >= 0:
            row.update(numa_node=int(numa), numa_source="nvml")
        elif bus_id is not None:
            sysfs = self._sysfs(bus_id, "numa_node", parse_numa_node, dropped)
            row.update(numa_node=sysfs, numa_source="sysfs" if sysfs is not None else None)
        mask = self._get(
            "cpu affinity", dropped, nv.nvmlDeviceGetCpuAffinity, handle, CPU_MASK_WORDS
        )
        cpus = cpus_of_mask([int(w) for w in mask]) if mask is not None else None
        if not cpus and bus_id is not None:
            cpus = self._sysfs(bus_id, "local_cpulist", parse_cpulist, dropped)
        row["cpu_affinity"] = format_cpulist(cpus) if cpus else None
        row.update(self._nvlinks(nv, handle, dropped))
        return row

    def _sysfs(
        self, bus_id: str, name: str, parse: Callable[[str], T], dropped: Counter[str]
    ) -> T | None:
        path = self.sys_root / "bus" / "pci" / "devices" / bus_id / name
        try:
            return parse(path.read_text(encoding="ascii"))
        except FileNotFoundError:
            return None  # an older kernel or a platform without it: not an error
        except (OSError, UnicodeDecodeError, ParseError):
            dropped[f"topology error: sysfs {name}"] += 1
            return None

    def _nvlinks(self, nv: Any, handle: Any, dropped: Counter[str]) -> dict[str, int | None]:
        """Links that exist (answer a state) and those that are up; NULL for a GPU without any."""
        total = active = 0
        for link in range(int(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18))):
            state = self._get("nvlink state", dropped, nv.nvmlDeviceGetNvLinkState, handle, link)
            if state is None:
                continue
            total += 1
            active += int(state == nv.NVML_FEATURE_ENABLED)
        if total == 0:
            return {"nvlink_links_active": None, "nvlink_links_total": None}
        return {"nvlink_links_active": active, "nvlink_links_total": total}

    def _links(
        self, nv: Any, gpus: list[tuple[Any, dict[str, Any]]], dropped: Counter[str]
    ) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        for i, (h1, g1) in enumerate(gpus):
            for h2, g2 in gpus[i + 1 :]:
                level = self._get(
                    "common ancestor", dropped, nv.nvmlDeviceGetTopologyCommonAncestor, h1, h2
                )
                ancestor = ANCESTORS.get(int(level)) if level is not None else None
                if level is not None and ancestor is None:
                    dropped["topology error: unknown topology level"] += 1
                p2p = self._get(
                    "p2p status",
                    dropped,
                    nv.nvmlDeviceGetP2PStatus,
                    h1,
                    h2,
                    nv.NVML_P2P_CAPS_INDEX_NVLINK,
                )
                nvlink = None if p2p is None else p2p == nv.NVML_P2P_STATUS_OK
                path = pair_path(ancestor, nvlink, (g1.get("numa_node"), g2.get("numa_node")))
                for a, b in ((g1, g2), (g2, g1)):
                    rows.append(
                        {
                            "gpu_uuid": a["gpu_uuid"],
                            "peer_gpu_uuid": b["gpu_uuid"],
                            "common_ancestor": ancestor,
                            "nvlink": nvlink,
                            "path": path,
                        }
                    )
        return rows


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _table(schema: pa.Schema, rows: list[dict[str, Any]]) -> pa.Table:
    columns = {f.name: [row.get(f.name) for row in rows] for f in schema}
    return pa.Table.from_pydict(columns, schema=schema)
