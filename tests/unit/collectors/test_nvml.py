"""NVML collector: unit conversion, NVLink rates, MIG, processes and their cgroup owners,
error handling, against a small injected stand-in for ``pynvml``; plus the real library:
a ``gpu`` test that reads the real driver, and the no-driver path."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from sits_observe.collectors.nvml import NvmlCollector
from sits_observe.domain.tables import GPU_PROCESSES, GPU_SAMPLES
from sits_observe.errors import CollectorError, DriverUnavailable

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
GIB = 1 << 30
CONTAINER_ID = "a" * 64
POD_UID = "1f2e3d4c-5b6a-7980-a1b2-c3d4e5f60718"


def error(code: int) -> Exception:
    """A real ``pynvml.NVMLError`` (its subclass for ``code``), as the library raises."""
    return pynvml.NVMLError(code)


@dataclass
class FakeMig:
    instance_id: int
    name: str
    total: int
    used: int
    processes: list[Any] = field(default_factory=list)


@dataclass
class FakeGpu:
    uuid: str
    name: str = "NVIDIA H100 80GB HBM3"
    minor: int = 0
    bus_id: bytes = b"00000000:18:00.0"
    memory: tuple[int, int, int, int] = (80 * GIB, 1 * GIB, 60 * GIB, 19 * GIB)  # tot res free used
    memory_v2: bool = True
    util: tuple[int, int] = (87, 40)
    pcie_kb: tuple[int, int] = (1000, 3000)
    nvlink_kib: tuple[int, int] = (0, 0)
    nvlink_ts_us: int = 0
    nvlink_supported: bool = True
    power_mw: int = 250_000
    temp_c: int = 65
    clocks_mhz: tuple[int, int] = (1980, 2619)
    energy_mj: int = 123_456_789
    processes: list[Any] = field(default_factory=list)
    migs: dict[int, FakeMig] | None = None  # slot -> MIG device; None = MIG disabled
    failing: dict[str, int] = field(default_factory=dict)  # method -> NVML error code


class FakeNvml:
    """The slice of ``pynvml`` the collector calls, over ``FakeGpu`` records."""

    NVMLError = pynvml.NVMLError
    NVML_SUCCESS = pynvml.NVML_SUCCESS
    NVML_ERROR_NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED
    NVML_ERROR_FUNCTION_NOT_FOUND = pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
    NVML_PCIE_UTIL_TX_BYTES = pynvml.NVML_PCIE_UTIL_TX_BYTES
    NVML_PCIE_UTIL_RX_BYTES = pynvml.NVML_PCIE_UTIL_RX_BYTES
    NVML_TEMPERATURE_GPU = pynvml.NVML_TEMPERATURE_GPU
    NVML_CLOCK_SM = pynvml.NVML_CLOCK_SM
    NVML_CLOCK_MEM = pynvml.NVML_CLOCK_MEM
    NVML_DEVICE_MIG_ENABLE = pynvml.NVML_DEVICE_MIG_ENABLE
    NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX = pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX
    NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX = pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX
    nvmlMemory_v2 = pynvml.nvmlMemory_v2  # noqa: N815 (pynvml's own name)

    def __init__(self, gpus: list[FakeGpu], *, init_error: int | None = None) -> None:
        self.gpus = gpus
        self.init_error = init_error
        self.inits = 0
        self.shutdowns = 0

    # -- library ----------------------------------------------------------------------------
    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise error(self.init_error)
        self.inits += 1

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlSystemGetDriverVersion(self) -> str:
        return "580.105.08"

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        gpu = self.gpus[index]
        self._maybe_fail(gpu, "handle")
        return gpu

    # -- per device -------------------------------------------------------------------------
    def _maybe_fail(self, handle: Any, method: str) -> None:
        code = getattr(handle, "failing", {}).get(method)
        if code is not None:
            raise error(code)

    def nvmlDeviceGetUUID(self, h: FakeGpu) -> str:
        return h.uuid

    def nvmlDeviceGetName(self, h: FakeGpu | FakeMig) -> bytes:
        return h.name.encode()  # older bindings return bytes

    def nvmlDeviceGetPciInfo(self, h: FakeGpu) -> Any:
        return SimpleNamespace(busId=h.bus_id)

    def nvmlDeviceGetMinorNumber(self, h: FakeGpu) -> int:
        return h.minor

    def nvmlDeviceGetMemoryInfo(self, h: FakeGpu | FakeMig, version: int | None = None) -> Any:
        if isinstance(h, FakeMig):
            if version is not None:
                raise error(pynvml.NVML_ERROR_NOT_SUPPORTED)
            return SimpleNamespace(total=h.total, free=h.total - h.used, used=h.used)
        self._maybe_fail(h, "memory")
        total, reserved, free, used = h.memory
        if version is None:
            return SimpleNamespace(total=total, free=free, used=used)
        assert version == pynvml.nvmlMemory_v2
        if not h.memory_v2:
            raise error(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        return SimpleNamespace(
            version=version, total=total, reserved=reserved, free=free, used=used
        )

    def nvmlDeviceGetUtilizationRates(self, h: FakeGpu) -> Any:
        return SimpleNamespace(gpu=h.util[0], memory=h.util[1])

    def nvmlDeviceGetPcieThroughput(self, h: FakeGpu, counter: int) -> int:
        return h.pcie_kb[counter]

    def nvmlDeviceGetFieldValues(self, h: FakeGpu, fields: list[int]) -> list[Any]:
        assert fields == [
            self.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
            self.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX,
        ]
        status = self.NVML_SUCCESS if h.nvlink_supported else self.NVML_ERROR_NOT_SUPPORTED
        return [
            SimpleNamespace(
                fieldId=f,
                nvmlReturn=status,
                timestamp=h.nvlink_ts_us,
                valueType=pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG,
                value=SimpleNamespace(ullVal=kib),
            )
            for f, kib in zip(fields, h.nvlink_kib, strict=True)
        ]

    def nvmlDeviceGetPowerUsage(self, h: FakeGpu) -> int:
        self._maybe_fail(h, "power")
        return h.power_mw

    def nvmlDeviceGetTemperature(self, h: FakeGpu, sensor: int) -> int:
        assert sensor == self.NVML_TEMPERATURE_GPU
        self._maybe_fail(h, "temperature")
        return h.temp_c

    def nvmlDeviceGetClockInfo(self, h: FakeGpu, clock: int) -> int:
        return h.clocks_mhz[0] if clock == self.NVML_CLOCK_SM else h.clocks_mhz[1]

    def nvmlDeviceGetTotalEnergyConsumption(self, h: FakeGpu) -> int:
        self._maybe_fail(h, "energy")
        return h.energy_mj

    def nvmlDeviceGetMigMode(self, h: FakeGpu) -> list[int]:
        if h.migs is None:
            raise error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return [1, 1]

    def nvmlDeviceGetMaxMigDeviceCount(self, h: FakeGpu) -> int:
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: FakeGpu, slot: int) -> FakeMig:
        assert h.migs is not None
        if slot not in h.migs:
            raise error(pynvml.NVML_ERROR_NOT_FOUND)
        return h.migs[slot]

    def nvmlDeviceGetGpuInstanceId(self, h: FakeMig) -> int:
        return h.instance_id

    def nvmlDeviceGetComputeRunningProcesses(self, h: FakeGpu | FakeMig) -> list[Any]:
        return h.processes


def proc(pid: int, used: int | None, gpu_instance: int = 0xFFFFFFFF) -> Any:
    return SimpleNamespace(pid=pid, usedGpuMemory=used, gpuInstanceId=gpu_instance)


def collect(fake: FakeNvml, now: datetime = NOW, **kwargs: Any) -> Any:
    collector = NvmlCollector(node="gpu-node-1", nvml=fake, **kwargs)
    return collector, collector.collect(now)


def test_units_of_a_whole_gpu() -> None:
    _, result = collect(FakeNvml([FakeGpu("GPU-1", minor=3)]))
    table = result.tables["gpu_samples"]
    assert table.schema.equals(GPU_SAMPLES.schema)
    (row,) = table.to_pylist()
    assert row == {
        "ts": NOW.replace(tzinfo=None),
        "node": "gpu-node-1",
        "gpu_uuid": "GPU-1",
        "gpu_index": 0,
        "device": "nvidia3",
        "model_name": "NVIDIA H100 80GB HBM3",
        "pci_bus_id": "00000000:18:00.0",
        "driver_version": "580.105.08",
        "mig_profile": None,
        "mig_instance_id": None,
        "namespace": None,
        "pod": None,
        "container": None,
        "fb_used_bytes": 19 * GIB,
        "fb_free_bytes": 60 * GIB,
        "fb_reserved_bytes": 1 * GIB,
        "fb_total_bytes": 80 * GIB,
        "gpu_util_ratio": 0.87,
        "mem_copy_util_ratio": 0.40,
        "gr_engine_active_ratio": None,
        "sm_active_ratio": None,
        "tensor_active_ratio": None,
        "dram_active_ratio": None,
        "pcie_tx_bytes_per_s": 1000 * 1024.0,
        "pcie_rx_bytes_per_s": 3000 * 1024.0,
        "nvlink_tx_bytes_per_s": None,  # first read: no rate yet
        "nvlink_rx_bytes_per_s": None,
        "power_w": 250.0,
        "gpu_temp_c": 65.0,
        "memory_temp_c": None,
        "sm_clock_hz": 1980e6,
        "mem_clock_hz": 2619e6,
        "energy_j": 123_456.789,
        "xid_last": None,
        "source": "nvml",
    }
    assert not result.dropped


def test_nvlink_rate_from_two_reads_and_a_reset() -> None:
    gpu = FakeGpu("GPU-1", nvlink_kib=(1_000, 5_000), nvlink_ts_us=10_000_000)
    fake = FakeNvml([gpu])
    collector = NvmlCollector(node="n", nvml=fake)
    collector.collect(NOW)
    gpu.nvlink_kib = (1_000 + 1_000_000, 5_000 + 250_000)
    gpu.nvlink_ts_us = 12_000_000  # 2 s later, by the field timestamps
    (row,) = collector.collect(NOW + timedelta(seconds=2)).tables["gpu_samples"].to_pylist()
    assert row["nvlink_tx_bytes_per_s"] == 1_000_000 * 1024 / 2
    assert row["nvlink_rx_bytes_per_s"] == 250_000 * 1024 / 2
    gpu.nvlink_kib = (10, 10)  # the driver reloaded: counters restart
    gpu.nvlink_ts_us = 13_000_000
    result = collector.collect(NOW + timedelta(seconds=3))
    (row,) = result.tables["gpu_samples"].to_pylist()
    assert row["nvlink_tx_bytes_per_s"] is None
    assert result.dropped == {"nvlink counter reset": 1}


def test_unsupported_metrics_are_null_and_other_errors_counted() -> None:
    gpu = FakeGpu(
        "GPU-1",
        nvlink_supported=False,
        failing={
            "power": pynvml.NVML_ERROR_NOT_SUPPORTED,
            "temperature": pynvml.NVML_ERROR_UNKNOWN,
            "energy": pynvml.NVML_ERROR_NO_PERMISSION,
        },
    )
    _, result = collect(FakeNvml([gpu]))
    (row,) = result.tables["gpu_samples"].to_pylist()
    assert row["power_w"] is None and row["gpu_temp_c"] is None and row["energy_j"] is None
    assert row["nvlink_tx_bytes_per_s"] is None
    assert row["fb_total_bytes"] == 80 * GIB  # the rest of the GPU is still read
    assert result.dropped == {"nvml error: temperature": 1, "nvml error: energy": 1}


def test_memory_v1_fallback_leaves_reserved_null() -> None:
    _, result = collect(FakeNvml([FakeGpu("GPU-1", memory_v2=False)]))
    (row,) = result.tables["gpu_samples"].to_pylist()
    assert row["fb_reserved_bytes"] is None
    assert (row["fb_total_bytes"], row["fb_used_bytes"]) == (80 * GIB, 19 * GIB)


def test_utilisation_out_of_range_is_dropped() -> None:
    _, result = collect(FakeNvml([FakeGpu("GPU-1", util=(101, 50))]))
    (row,) = result.tables["gpu_samples"].to_pylist()
    assert row["gpu_util_ratio"] is None and row["mem_copy_util_ratio"] == 0.5
    assert result.dropped == {"out of range: gpu_util_ratio": 1}


def test_an_unreadable_gpu_is_skipped_and_counted() -> None:
    broken = FakeGpu("GPU-lost", failing={"handle": pynvml.NVML_ERROR_GPU_IS_LOST})
    _, result = collect(FakeNvml([broken, FakeGpu("GPU-2")]))
    assert [r["gpu_uuid"] for r in result.tables["gpu_samples"].to_pylist()] == ["GPU-2"]
    assert [r["gpu_index"] for r in result.tables["gpu_samples"].to_pylist()] == [1]
    assert result.dropped == {"nvml error: device": 1}


def write_cgroup(root: Path, pid: int, text: str) -> None:
    (root / str(pid)).mkdir(parents=True)
    (root / str(pid) / "cgroup").write_text(text)


def test_processes_with_cgroup_owners(tmp_path: Path) -> None:
    escaped = POD_UID.replace("-", "_")
    write_cgroup(
        tmp_path,
        4242,
        "0::/kubepods.slice/kubepods-burstable.slice/"
        f"kubepods-burstable-pod{escaped}.slice/cri-containerd-{CONTAINER_ID}.scope\n",
    )
    write_cgroup(tmp_path, 7, "0::/system.slice/sshd.service\n")  # not a container
    gpu = FakeGpu("GPU-1", processes=[proc(4242, 3 * GIB), proc(7, None), proc(99, GIB)])
    _, result = collect(FakeNvml([gpu]), proc_root=tmp_path)
    table = result.tables["gpu_processes"]
    assert table.schema.equals(GPU_PROCESSES.schema)
    assert [
        (r["pid"], r["used_memory_bytes"], r["container_id"], r["pod_uid"], r["mig_instance_id"])
        for r in table.to_pylist()
    ] == [
        (4242, 3 * GIB, CONTAINER_ID, POD_UID, None),
        (7, None, None, None, None),
        (99, GIB, None, None, None),  # no /proc entry (it exited): unattributed, kept
    ]
    assert {r["node"] for r in table.to_pylist()} == {"gpu-node-1"}
    assert {r["source"] for r in table.to_pylist()} == {"nvml"}


def test_mig_devices_memory_and_processes(tmp_path: Path) -> None:
    write_cgroup(tmp_path, 55, f"0::/kubepods/besteffort/pod{POD_UID}/{CONTAINER_ID}\n")
    migs = {
        0: FakeMig(13, "NVIDIA A100-SXM4-40GB MIG 1g.5gb", 5 * GIB, 1 * GIB, [proc(55, GIB, 13)]),
        2: FakeMig(2, "NVIDIA A100-SXM4-40GB MIG 3g.20gb", 20 * GIB, 0),
    }
    gpu = FakeGpu("GPU-mig", name="NVIDIA A100-SXM4-40GB", migs=migs, processes=[proc(1, 1)])
    _, result = collect(FakeNvml([gpu]), proc_root=tmp_path)
    found = result.tables["gpu_samples"].to_pylist()
    assert [(r["mig_profile"], r["mig_instance_id"]) for r in found] == [
        (None, None),
        ("1g.5gb", 13),
        ("3g.20gb", 2),
    ]
    mig = found[1]
    assert mig["gpu_uuid"] == "GPU-mig"
    assert (mig["fb_total_bytes"], mig["fb_used_bytes"], mig["fb_free_bytes"]) == (
        5 * GIB,
        1 * GIB,
        4 * GIB,
    )
    assert mig["fb_reserved_bytes"] is None and mig["gpu_util_ratio"] is None
    (process,) = result.tables["gpu_processes"].to_pylist()  # per MIG device, not the parent
    assert (process["pid"], process["mig_instance_id"], process["pod_uid"]) == (55, 13, POD_UID)
    assert not result.dropped


def test_no_driver_raises_driver_unavailable_with_a_clear_message() -> None:
    fake = FakeNvml([], init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
    collector = NvmlCollector(node="n", nvml=fake)
    with pytest.raises(DriverUnavailable, match=r"^NVML not available: .*continues without NVML"):
        collector.collect(NOW)
    with pytest.raises(DriverUnavailable):  # and again next tick, never a crash
        collector.collect(NOW)
    collector.close()
    assert fake.shutdowns == 0


def test_count_failure_is_a_collector_error() -> None:
    class CannotCount(FakeNvml):
        def nvmlDeviceGetCount(self) -> int:
            raise error(pynvml.NVML_ERROR_UNKNOWN)

    with pytest.raises(CollectorError, match="could not count the GPUs"):
        NvmlCollector(node="n", nvml=CannotCount([])).collect(NOW)


def test_init_once_and_shutdown_on_close() -> None:
    fake = FakeNvml([FakeGpu("GPU-1")])
    with NvmlCollector(node="n", nvml=fake) as collector:
        assert collector.name == "nvml"
        collector.collect(NOW)
        collector.collect(NOW)
    assert (fake.inits, fake.shutdowns) == (1, 1)


# -- the real library -----------------------------------------------------------------------


def _driver_error() -> str | None:
    """None when the real NVML initialises here, else why not."""
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return str(exc)
    pynvml.nvmlShutdown()
    return None


@pytest.mark.gpu
def test_real_driver_reads_every_gpu() -> None:
    reason = _driver_error()
    if reason is not None:
        pytest.skip(f"no NVIDIA driver here (pynvml.nvmlInit failed: {reason})")
    with NvmlCollector(node="this-node") as collector:
        result = collector.collect(datetime.now(UTC))
    gpus = result.tables["gpu_samples"].to_pylist()
    assert gpus, "NVML initialised but listed no GPU"
    for row in gpus:
        assert row["gpu_uuid"].startswith(("GPU-", "MIG-"))
        assert row["fb_total_bytes"] > 0
        assert row["fb_used_bytes"] + row["fb_free_bytes"] <= row["fb_total_bytes"]
        if row["gpu_util_ratio"] is not None:
            assert 0.0 <= row["gpu_util_ratio"] <= 1.0
        if row["power_w"] is not None:
            assert 0.0 < row["power_w"] < 5000.0
    assert result.tables["gpu_processes"].schema.equals(GPU_PROCESSES.schema)


def test_real_library_without_a_driver_raises_driver_unavailable() -> None:
    if _driver_error() is None:
        pytest.skip("an NVIDIA driver is present here; the no-driver path cannot be exercised")
    with pytest.raises(DriverUnavailable, match="NVML not available"):
        NvmlCollector(node="n").collect(NOW)
