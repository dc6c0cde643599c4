"""NVML (nvidia-ml-py, ``import pynvml``) -> ``gpu_samples`` and ``gpu_processes`` rows.

The direct path to the driver, for nodes without dcgm-exporter or to link processes (and so
containers) to GPUs. One ``collect`` reads every GPU once:

=====================================================  =================  ===================
NVML call                                              NVML unit          column
=====================================================  =================  ===================
``nvmlDeviceGetMemoryInfo(h, version=nvmlMemory_v2)``  bytes              ``fb_{total,reserved,
                                                                          free,used}_bytes``
``nvmlDeviceGetUtilizationRates`` ``.gpu`` /           percent            ``gpu_util_ratio`` /
``.memory``                                                               ``mem_copy_util_ratio``
``nvmlDeviceGetPcieThroughput`` (TX / RX)              KB/s (1024 B)      ``pcie_*_bytes_per_s``
``nvmlDeviceGetFieldValues`` NVLINK_THROUGHPUT_DATA_*  KiB, cumulative    ``nvlink_*_bytes_per_s``
``nvmlDeviceGetPowerUsage``                            mW                 ``power_w``
``nvmlDeviceGetTemperature`` (GPU)                     C                  ``gpu_temp_c``
``nvmlDeviceGetClockInfo`` (SM / MEM)                  MHz                ``*_clock_hz``
``nvmlDeviceGetTotalEnergyConsumption``                mJ                 ``energy_j``
=====================================================  =================  ===================

NVLink throughput fields are GPU-wide cumulative counters, so the rate is the difference
between two reads over the field timestamps (microseconds): the first read of a GPU, and a
read after a counter reset, leave the NVLink columns NULL. A GPU in MIG mode also gets one
row per MIG device (memory only: NVML reports no utilisation per MIG device), with the GPU
instance id and the profile from the MIG device name (``... MIG 1g.5gb``). Processes come
from ``nvmlDeviceGetComputeRunningProcesses`` (per MIG device in MIG mode, as NVML asks);
their container id and pod UID come from ``<proc_root>/<pid>/cgroup`` when it is readable.

Errors: without a driver (no library, driver not loaded) ``collect`` raises
:class:`~sits_observe.errors.DriverUnavailable`; the agent logs it and carries on without
NVML. A metric a GPU does not support is NULL; any other NVML error on one metric is NULL
and counted under ``nvml error: <metric>``; a GPU that cannot be read at all is skipped and
counted under ``nvml error: device``.
"""

from __future__ import annotations

import contextlib
import importlib
from collections import Counter
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa

from sits_observe.collectors.cgroup.paths import parse_cgroup_path
from sits_observe.domain.collect import CollectResult
from sits_observe.domain.tables import GPU_PROCESSES, GPU_SAMPLES
from sits_observe.domain.times import utc_naive
from sits_observe.errors import CollectorError, DriverUnavailable

T = TypeVar("T")

#: NVML's PCIe throughput is in KB/s with KB = 1024 bytes (nvml.h: "in KB/s").
PCIE_KB = 1024
#: NVLink throughput field values count KiB (nvml.h: "NVLink TX Data throughput in KiB").
NVLINK_KIB = 1024
_NO_INSTANCE = 0xFFFFFFFF  # gpuInstanceId of a process outside any MIG instance
#: NVML errors that only mean "this GPU does not support the call" (not counted as drops).
QUIET_ERRORS = ("NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_FUNCTION_NOT_FOUND")


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _opt_text(value: object | None) -> str | None:
    return None if value is None else _text(value)


def _bus_id(pci: Any) -> str | None:
    return None if pci is None else _text(pci.busId)


class NvmlSession:
    """NVML for one collector: ``nvml`` (the ``pynvml`` module or a stand-in; None = import
    it) initialised on first :meth:`open`, shut down by :meth:`close`; ``without`` ends the
    :class:`DriverUnavailable` message (what the agent does without it); errors named in
    ``quiet`` only mean the GPU cannot say, and are not counted."""

    def __init__(
        self, nvml: object | None, *, without: str, quiet: tuple[str, ...] = QUIET_ERRORS
    ) -> None:
        self.module: Any = nvml
        self._without = without
        self._quiet_names = quiet
        self._initialised = False
        self._quiet: tuple[int, ...] = ()

    def open(self) -> Any:
        """The NVML module, initialised; :class:`DriverUnavailable` without a driver."""
        if self.module is None:
            try:
                self.module = importlib.import_module("pynvml")
            except ImportError as exc:
                raise DriverUnavailable(
                    f"NVML not available: nvidia-ml-py is not installed ({exc}); {self._without}"
                ) from exc
        nv = self.module
        if not self._initialised:
            try:
                nv.nvmlInit()
            except (nv.NVMLError, OSError) as exc:  # OSError: a broken libnvidia-ml.so
                raise DriverUnavailable(f"NVML not available: {exc}; {self._without}") from exc
            self._initialised = True
            self._quiet = tuple(getattr(nv, name, -1) for name in self._quiet_names)
        return nv

    def close(self) -> None:
        """Shut NVML down when this session initialised it."""
        if self._initialised:
            self._initialised = False
            # A library that is already gone has nothing left to release.
            with contextlib.suppress(self.module.NVMLError):
                self.module.nvmlShutdown()

    def get(self, key: str, dropped: Counter[str], call: Callable[..., T], *args: Any) -> T | None:
        """``call(*args)``, or None when NVML refuses: counted under ``key`` in ``dropped``
        unless the GPU merely does not support the call."""
        try:
            return call(*args)
        except self.module.NVMLError as exc:
            if getattr(exc, "value", None) not in self._quiet:
                dropped[key] += 1
            return None


class NvmlCollector:
    """Reads every GPU through NVML; ``nvml`` is the ``pynvml`` module or a stand-in.

    ``proc_root`` is where ``<pid>/cgroup`` files are read (the host's ``/proc`` in a
    DaemonSet with ``hostPID``). NVML is initialised on the first ``collect`` and shut down
    by :meth:`close`.
    """

    name = "nvml"

    def __init__(
        self, *, node: str, nvml: object | None = None, proc_root: str | Path = "/proc"
    ) -> None:
        self.node = node
        self.proc_root = Path(proc_root)
        self._session = NvmlSession(nvml, without="the agent continues without NVML")
        self._nvlink: dict[str, tuple[int, int, int]] = {}  # uuid -> (ts_us, tx_kib, rx_kib)

    # -- life cycle -------------------------------------------------------------------

    def _open(self) -> Any:
        return self._session.open()

    def close(self) -> None:
        """Shut NVML down when this collector initialised it."""
        self._session.close()

    def __enter__(self) -> NvmlCollector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reading ----------------------------------------------------------------------

    def collect(self, now: datetime) -> CollectResult:
        """Read every GPU once; raises :class:`DriverUnavailable` without a driver."""
        nv = self._open()
        dropped: Counter[str] = Counter()
        try:
            count = int(nv.nvmlDeviceGetCount())
        except nv.NVMLError as exc:
            raise CollectorError(f"NVML could not count the GPUs: {exc}") from exc
        driver = _opt_text(self._get("driver", dropped, nv.nvmlSystemGetDriverVersion))
        gpus: list[dict[str, Any]] = []
        processes: list[dict[str, Any]] = []
        for index in range(count):
            try:
                handle = nv.nvmlDeviceGetHandleByIndex(index)
                uuid = _text(nv.nvmlDeviceGetUUID(handle))
            except nv.NVMLError:
                dropped["nvml error: device"] += 1
                continue
            row = self._device(nv, handle, index, uuid, dropped)
            row["driver_version"] = driver
            gpus.append(row)
            mode = self._get("mig mode", dropped, nv.nvmlDeviceGetMigMode, handle)
            if mode is not None and mode[0] == nv.NVML_DEVICE_MIG_ENABLE:
                # In MIG mode NVML lists processes per MIG device, not on the parent.
                for mig_handle, mig_row in self._mig_devices(nv, handle, row, dropped):
                    gpus.append(mig_row)
                    processes += self._processes(
                        nv, mig_handle, uuid, mig_row["mig_instance_id"], dropped
                    )
            else:
                processes += self._processes(nv, handle, uuid, None, dropped)
        at = utc_naive(now)
        for row in gpus:
            row.update(ts=at, node=self.node, source="nvml")
        for proc in processes:
            proc.update(ts=at, node=self.node, source="nvml")
        return CollectResult(
            {
                GPU_SAMPLES.name: _table(GPU_SAMPLES.schema, gpus),
                GPU_PROCESSES.name: _table(GPU_PROCESSES.schema, processes),
            },
            dropped,
        )

    def _get(
        self, what: str, dropped: Counter[str], call: Callable[..., T], *args: Any
    ) -> T | None:
        """``call(*args)``, or None when NVML refuses (counted unless merely unsupported)."""
        return self._session.get(f"nvml error: {what}", dropped, call, *args)

    def _device(
        self, nv: Any, handle: object, index: int, uuid: str, dropped: Counter[str]
    ) -> dict[str, Any]:
        get = self._get
        row: dict[str, Any] = {
            "gpu_uuid": uuid,
            "gpu_index": index,
            "model_name": _opt_text(get("name", dropped, nv.nvmlDeviceGetName, handle)),
            "pci_bus_id": _bus_id(get("pci", dropped, nv.nvmlDeviceGetPciInfo, handle)),
        }
        minor = get("minor number", dropped, nv.nvmlDeviceGetMinorNumber, handle)
        row["device"] = f"nvidia{minor}" if minor is not None else None
        row.update(self._memory(nv, handle, dropped))
        util = get("utilisation", dropped, nv.nvmlDeviceGetUtilizationRates, handle)
        if util is not None:
            row["gpu_util_ratio"] = _percent(util.gpu, "gpu_util_ratio", dropped)
            row["mem_copy_util_ratio"] = _percent(util.memory, "mem_copy_util_ratio", dropped)
        for column, counter in (
            ("pcie_tx_bytes_per_s", nv.NVML_PCIE_UTIL_TX_BYTES),
            ("pcie_rx_bytes_per_s", nv.NVML_PCIE_UTIL_RX_BYTES),
        ):
            kb = get("pcie", dropped, nv.nvmlDeviceGetPcieThroughput, handle, counter)
            row[column] = float(kb) * PCIE_KB if kb is not None else None
        row.update(self._nvlink_rates(nv, handle, uuid, dropped))
        mw = get("power", dropped, nv.nvmlDeviceGetPowerUsage, handle)
        row["power_w"] = mw / 1000.0 if mw is not None else None
        celsius = get(
            "temperature", dropped, nv.nvmlDeviceGetTemperature, handle, nv.NVML_TEMPERATURE_GPU
        )
        row["gpu_temp_c"] = float(celsius) if celsius is not None else None
        for column, clock in (
            ("sm_clock_hz", nv.NVML_CLOCK_SM),
            ("mem_clock_hz", nv.NVML_CLOCK_MEM),
        ):
            mhz = get("clock", dropped, nv.nvmlDeviceGetClockInfo, handle, clock)
            row[column] = mhz * 1e6 if mhz is not None else None
        mj = get("energy", dropped, nv.nvmlDeviceGetTotalEnergyConsumption, handle)
        row["energy_j"] = mj / 1000.0 if mj is not None else None
        return row

    def _memory(self, nv: Any, handle: object, dropped: Counter[str]) -> dict[str, Any]:
        """Frame buffer in bytes; v2 (with ``reserved``) when the driver has it, else v1."""
        try:
            mem = nv.nvmlDeviceGetMemoryInfo(handle, version=nv.nvmlMemory_v2)
            reserved: int | None = int(mem.reserved)
        except nv.NVMLError:
            mem = self._get("memory", dropped, nv.nvmlDeviceGetMemoryInfo, handle)
            if mem is None:
                return {}
            reserved = None
        return {
            "fb_total_bytes": int(mem.total),
            "fb_free_bytes": int(mem.free),
            "fb_used_bytes": int(mem.used),
            "fb_reserved_bytes": reserved,
        }

    def _nvlink_rates(
        self, nv: Any, handle: object, uuid: str, dropped: Counter[str]
    ) -> dict[str, float | None]:
        rates: dict[str, float | None] = {
            "nvlink_tx_bytes_per_s": None,
            "nvlink_rx_bytes_per_s": None,
        }
        fields = [
            nv.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
            nv.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX,
        ]
        values = self._get("nvlink", dropped, nv.nvmlDeviceGetFieldValues, handle, fields)
        if values is None or any(v.nvmlReturn != nv.NVML_SUCCESS for v in values):
            return rates
        ts_us = int(values[0].timestamp)
        tx, rx = (int(v.value.ullVal) for v in values)
        previous = self._nvlink.get(uuid)
        self._nvlink[uuid] = (ts_us, tx, rx)
        if previous is None:
            return rates
        span_s = (ts_us - previous[0]) / 1e6
        if span_s <= 0 or tx < previous[1] or rx < previous[2]:
            dropped["nvlink counter reset"] += 1
            return rates
        rates["nvlink_tx_bytes_per_s"] = (tx - previous[1]) * NVLINK_KIB / span_s
        rates["nvlink_rx_bytes_per_s"] = (rx - previous[2]) * NVLINK_KIB / span_s
        return rates

    def _mig_devices(
        self, nv: Any, handle: object, parent: dict[str, Any], dropped: Counter[str]
    ) -> list[tuple[object, dict[str, Any]]]:
        found: list[tuple[object, dict[str, Any]]] = []
        slots = self._get("mig", dropped, nv.nvmlDeviceGetMaxMigDeviceCount, handle) or 0
        for slot in range(slots):
            try:
                mig = nv.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
            except nv.NVMLError:  # an empty slot answers NVML_ERROR_NOT_FOUND
                continue
            instance = self._get("mig", dropped, nv.nvmlDeviceGetGpuInstanceId, mig)
            name = _opt_text(self._get("name", dropped, nv.nvmlDeviceGetName, mig))
            row: dict[str, Any] = {
                key: parent.get(key)
                for key in ("gpu_uuid", "gpu_index", "device", "model_name", "pci_bus_id")
            }
            row["driver_version"] = parent.get("driver_version")
            row["mig_instance_id"] = instance
            row["mig_profile"] = _mig_profile(name)
            row.update(self._memory(nv, mig, dropped))
            found.append((mig, row))
        return found

    def _processes(
        self,
        nv: Any,
        handle: object,
        uuid: str,
        mig_instance: int | None,
        dropped: Counter[str],
    ) -> list[dict[str, Any]]:
        procs = self._get("processes", dropped, nv.nvmlDeviceGetComputeRunningProcesses, handle)
        rows = []
        for proc in procs or ():
            instance = getattr(proc, "gpuInstanceId", None)
            if mig_instance is None and instance is not None and instance != _NO_INSTANCE:
                mig_instance_id: int | None = int(instance)
            else:
                mig_instance_id = mig_instance
            used = getattr(proc, "usedGpuMemory", None)
            container_id, pod_uid = self._cgroup_owner(int(proc.pid))
            rows.append(
                {
                    "gpu_uuid": uuid,
                    "mig_instance_id": mig_instance_id,
                    "pid": int(proc.pid),
                    "used_memory_bytes": int(used) if used is not None else None,
                    "container_id": container_id,
                    "pod_uid": pod_uid,
                }
            )
        return rows

    def _cgroup_owner(self, pid: int) -> tuple[str | None, str | None]:
        """(container id, pod UID) from ``<proc_root>/<pid>/cgroup``; Nones if unreadable."""
        try:
            text = (self.proc_root / str(pid) / "cgroup").read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            return None, None  # the process ended, or the agent cannot see it: unattributed
        for line in text.splitlines():
            path = line.split(":", 2)[-1]
            owner = parse_cgroup_path(path)
            if owner is not None:
                return owner.container_id, owner.pod_uid
        return None, None


def _percent(value: float, column: str, dropped: Counter[str]) -> float | None:
    percent = float(value)
    if not 0.0 <= percent <= 100.0:
        dropped[f"out of range: {column}"] += 1
        return None
    return percent / 100.0


def _mig_profile(device_name: str | None) -> str | None:
    """``NVIDIA A100-SXM4-40GB MIG 1g.5gb`` -> ``1g.5gb``."""
    if device_name is None or "MIG " not in device_name:
        return None
    return device_name.rpartition("MIG ")[2].strip() or None


def _table(schema: pa.Schema, rows: list[dict[str, Any]]) -> pa.Table:
    columns = {f.name: [row.get(f.name) for row in rows] for f in schema}
    return pa.Table.from_pydict(columns, schema=schema)
