"""GPU topology collector: NVML's topology levels, NVLink states and affinities against a small
stand-in for ``pynvml`` (real error classes and constants), the sysfs fallback on a tree
written to disk, and the real library (a ``gpu`` test, and the no-driver path)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from sits_observe.collectors.topology import TopologyCollector, pair_path
from sits_observe.domain.schema.topology_tables import GPU_LINKS, GPU_TOPOLOGY
from sits_observe.errors import DriverUnavailable

NOW = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


@dataclass
class Gpu:
    uuid: str
    bus_id: bytes
    numa: int | None  # None: nvmlDeviceGetNumaNodeId is not supported (older drivers)
    mask: list[int] | None  # CPU affinity words; None: not supported
    links: list[int]  # state per existing NVLink (1 up, 0 down)
    failing: set[str] = field(default_factory=set)


class FakeNvml:
    """The slice of ``pynvml`` the topology collector calls."""

    NVMLError = pynvml.NVMLError
    NVML_ERROR_NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED
    NVML_ERROR_FUNCTION_NOT_FOUND = pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
    NVML_ERROR_INVALID_ARGUMENT = pynvml.NVML_ERROR_INVALID_ARGUMENT
    NVML_FEATURE_ENABLED = pynvml.NVML_FEATURE_ENABLED
    NVML_NVLINK_MAX_LINKS = pynvml.NVML_NVLINK_MAX_LINKS
    NVML_P2P_CAPS_INDEX_NVLINK = pynvml.NVML_P2P_CAPS_INDEX_NVLINK
    NVML_P2P_STATUS_OK = pynvml.NVML_P2P_STATUS_OK

    def __init__(
        self, gpus: list[Gpu], levels: dict[frozenset[str], int], nvlinked: set[frozenset[str]]
    ) -> None:
        self.gpus, self.levels, self.nvlinked = gpus, levels, nvlinked
        self.shutdowns = 0

    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Gpu:
        return self.gpus[index]

    def nvmlDeviceGetUUID(self, h: Gpu) -> str:
        return h.uuid

    def nvmlDeviceGetPciInfo(self, h: Gpu) -> Any:
        return SimpleNamespace(busId=h.bus_id)

    def nvmlDeviceGetNumaNodeId(self, h: Gpu) -> int:
        if h.numa is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        return h.numa

    def nvmlDeviceGetCpuAffinity(self, h: Gpu, words: int) -> list[int]:
        if h.mask is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return (h.mask + [0] * words)[:words]

    def nvmlDeviceGetNvLinkState(self, h: Gpu, link: int) -> int:
        if "nvlink" in h.failing:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)
        if link >= len(h.links):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return h.links[link]

    def nvmlDeviceGetTopologyCommonAncestor(self, a: Gpu, b: Gpu) -> int:
        level = self.levels.get(frozenset((a.uuid, b.uuid)))
        if level is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return level

    def nvmlDeviceGetP2PStatus(self, a: Gpu, b: Gpu, index: int) -> int:
        assert index == pynvml.NVML_P2P_CAPS_INDEX_NVLINK
        ok = frozenset((a.uuid, b.uuid)) in self.nvlinked
        return int(pynvml.NVML_P2P_STATUS_OK if ok else pynvml.NVML_P2P_STATUS_NOT_SUPPORTED)


def pci_dir(sys_root: Path, bus_id: str, numa: str, cpus: str) -> None:
    device = sys_root / "bus" / "pci" / "devices" / bus_id
    device.mkdir(parents=True)
    (device / "numa_node").write_text(numa)
    (device / "local_cpulist").write_text(cpus)


def two_socket_box(tmp_path: Path) -> tuple[FakeNvml, Path]:
    """GPU-0 and GPU-1 NVLinked under one PCIe switch on socket 0; GPU-2 on socket 0 through
    the host bridge, with an old driver (no NUMA id or affinity: sysfs has them); GPU-3 on
    socket 1."""
    gpus = [
        Gpu("GPU-0", b"00000000:18:00.0", 0, [0xFFFFFF], [1] * 18),
        Gpu("GPU-1", b"00000000:2A:00.0", 0, [0xFFFFFF], [1] * 17 + [0]),
        Gpu("GPU-2", b"00000000:3B:00.0", None, None, []),
        Gpu("GPU-3", b"00000000:9C:00.0", 1, [0xFFFFFF000000], []),
    ]
    levels = {
        frozenset(("GPU-0", "GPU-1")): pynvml.NVML_TOPOLOGY_SINGLE,
        frozenset(("GPU-0", "GPU-2")): pynvml.NVML_TOPOLOGY_HOSTBRIDGE,
        frozenset(("GPU-1", "GPU-2")): pynvml.NVML_TOPOLOGY_NODE,
        frozenset(("GPU-0", "GPU-3")): pynvml.NVML_TOPOLOGY_SYSTEM,
        frozenset(("GPU-1", "GPU-3")): pynvml.NVML_TOPOLOGY_SYSTEM,
        # GPU-2 / GPU-3: not answered, so the NUMA nodes decide
    }
    sys_root = tmp_path / "sys"
    pci_dir(sys_root, "0000:3b:00.0", "0\n", "0-23\n")
    pci_dir(sys_root, "0000:9c:00.0", "1\n", "24-47\n")
    return FakeNvml(gpus, levels, {frozenset(("GPU-0", "GPU-1"))}), sys_root


def test_gpus_numa_affinity_and_nvlinks(tmp_path: Path) -> None:
    fake, sys_root = two_socket_box(tmp_path)
    result = TopologyCollector(node="n1", nvml=fake, sys_root=sys_root).collect(NOW)
    table = result.tables["gpu_topology"]
    assert table.schema.equals(GPU_TOPOLOGY.schema)
    rows = {r["gpu_uuid"]: r for r in table.to_pylist()}
    assert rows["GPU-0"]["pci_bus_id"] == "0000:18:00.0"
    assert (rows["GPU-0"]["numa_node"], rows["GPU-0"]["numa_source"]) == (0, "nvml")
    assert rows["GPU-0"]["cpu_affinity"] == "0-23"
    assert (rows["GPU-1"]["nvlink_links_active"], rows["GPU-1"]["nvlink_links_total"]) == (17, 18)
    assert (rows["GPU-2"]["numa_node"], rows["GPU-2"]["numa_source"]) == (0, "sysfs")
    assert rows["GPU-2"]["cpu_affinity"] == "0-23"  # sysfs local_cpulist
    assert rows["GPU-2"]["nvlink_links_total"] is None  # no NVLink: NULL, not 0 of 0
    assert rows["GPU-3"]["cpu_affinity"] == "24-47"
    assert result.dropped == {}  # unsupported calls are not errors


def test_pairs_get_the_specs_distance_classes(tmp_path: Path) -> None:
    fake, sys_root = two_socket_box(tmp_path)
    result = TopologyCollector(node="n1", nvml=fake, sys_root=sys_root).collect(NOW)
    table = result.tables["gpu_links"]
    assert table.schema.equals(GPU_LINKS.schema)
    paths = {(r["gpu_uuid"], r["peer_gpu_uuid"]): r for r in table.to_pylist()}
    assert len(paths) == 12  # every ordered pair of 4 GPUs
    assert paths["GPU-0", "GPU-1"]["path"] == "nvlink"
    assert paths["GPU-0", "GPU-1"]["common_ancestor"] == "pcie-switch"
    assert paths["GPU-1", "GPU-0"]["path"] == "nvlink"
    assert paths["GPU-0", "GPU-2"]["path"] == "numa-node"
    assert paths["GPU-1", "GPU-2"]["common_ancestor"] == "numa-node"
    assert paths["GPU-0", "GPU-3"]["path"] == "cross-numa"
    assert paths["GPU-2", "GPU-3"]["common_ancestor"] is None
    assert paths["GPU-2", "GPU-3"]["path"] == "cross-numa"  # from the NUMA nodes 0 and 1
    assert paths["GPU-0", "GPU-3"]["nvlink"] is False


def test_pair_path_rules() -> None:
    assert pair_path("system", True, (0, 1)) == "nvlink"  # NVLink wins over any PCIe path
    assert pair_path("board", False, (None, None)) == "pcie-switch"
    assert pair_path("pcie-switches", None, (0, 0)) == "pcie-switch"
    assert pair_path("host-bridge", False, (0, 1)) == "numa-node"
    assert pair_path(None, None, (1, 1)) == "numa-node"
    assert pair_path(None, None, (0, None)) is None


def test_other_errors_are_counted_and_close_shuts_down(tmp_path: Path) -> None:
    fake, sys_root = two_socket_box(tmp_path)
    fake.gpus[0].failing.add("nvlink")
    collector = TopologyCollector(node="n1", nvml=fake, sys_root=sys_root)
    result = collector.collect(NOW)
    row = result.tables["gpu_topology"].to_pylist()[0]
    assert row["nvlink_links_total"] is None
    assert result.dropped == {"topology error: nvlink state": pynvml.NVML_NVLINK_MAX_LINKS}
    collector.close()
    collector.close()
    assert fake.shutdowns == 1


# -- the real library -----------------------------------------------------------------------


def _driver_error() -> str | None:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return str(exc)
    pynvml.nvmlShutdown()
    return None


@pytest.mark.gpu
def test_real_driver_topology() -> None:
    reason = _driver_error()
    if reason is not None:
        pytest.skip(f"no NVIDIA driver here (pynvml.nvmlInit failed: {reason})")
    collector = TopologyCollector(node="this-node")
    try:
        result = collector.collect(datetime.now(UTC))
    finally:
        collector.close()
    gpus = result.tables["gpu_topology"].to_pylist()
    assert gpus, "NVML initialised but listed no GPU"
    for row in gpus:
        assert row["gpu_uuid"].startswith("GPU-")
        assert row["pci_bus_id"] is not None and len(row["pci_bus_id"].split(":")[0]) == 4
        if row["nvlink_links_total"] is not None:
            assert 0 <= row["nvlink_links_active"] <= row["nvlink_links_total"]
    n = len(gpus)
    links = result.tables["gpu_links"].to_pylist()
    assert len(links) == n * (n - 1)
    assert all(
        r["path"] in {"nvlink", "pcie-switch", "numa-node", "cross-numa", None} for r in links
    )


def test_real_library_without_a_driver_raises_driver_unavailable() -> None:
    if _driver_error() is None:
        pytest.skip("an NVIDIA driver is present here; the no-driver path cannot be exercised")
    with pytest.raises(DriverUnavailable, match="NVML not available"):
        TopologyCollector(node="n").collect(NOW)


def test_reads_once_per_refresh_interval(tmp_path: Path) -> None:
    fake, sys_root = two_socket_box(tmp_path)
    collector = TopologyCollector(node="n1", nvml=fake, sys_root=sys_root, refresh_s=60)
    assert collector.collect(NOW).tables["gpu_topology"].num_rows == 4
    quiet = collector.collect(NOW + timedelta(seconds=59))
    assert quiet.tables["gpu_topology"].num_rows == 0
    assert quiet.tables["gpu_links"].num_rows == 0
    assert quiet.tables["gpu_links"].schema.equals(GPU_LINKS.schema)
    assert collector.collect(NOW + timedelta(seconds=60)).tables["gpu_links"].num_rows == 12
    with pytest.raises(ValueError, match="refresh_s"):
        TopologyCollector(node="n1", refresh_s=-1)
