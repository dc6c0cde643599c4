"""Writes kubelet-style cgroup v2 trees to disk, in the kernel's own file formats.

The simulated cluster and the tests lay out what a node's ``/sys/fs/cgroup`` looks like under
the kubelet: a pod cgroup per pod (named after the systemd or cgroupfs driver and the pod's
QoS class) and a container cgroup per container (named after the runtime), each holding
``memory.current``, ``memory.max``, ``memory.stat``, ``memory.events``, ``memory.pressure``,
``cpu.pressure``, ``cpu.stat`` and ``cpu.max`` as Linux writes them, and ``memory.numa_stat``
when the values say how the memory splits over NUMA nodes
(``Documentation/admin-guide/cgroup-v2.rst``). Values are held in domain units
(:class:`CgroupValues`: bytes, seconds, ratios, cores) and converted to the kernel's (bytes,
microseconds, percentages with two decimals) only when written.

Invariants: files are replaced atomically (written beside, then renamed), so a reader never
sees a half-written file; a file is rewritten only when its text changed; pod-level
``memory.current`` and ``cpu.stat`` hold the sum of the pod's containers, as the kernel's
hierarchical accounting does. This module must not import the collectors (layer rule): the
collector is tested against trees it did not write itself as well.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, replace
from enum import StrEnum
from pathlib import Path, PurePosixPath


class CgroupDriver(StrEnum):
    """The kubelet's ``cgroupDriver``."""

    SYSTEMD = "systemd"
    CGROUPFS = "cgroupfs"


class Runtime(StrEnum):
    """The container runtime, which names the container cgroups."""

    CONTAINERD = "containerd"
    CRIO = "cri-o"
    DOCKER = "docker"


class QosClass(StrEnum):
    """The pod's Kubernetes QoS class, which places its cgroup."""

    GUARANTEED = "Guaranteed"
    BURSTABLE = "Burstable"
    BEST_EFFORT = "BestEffort"


@dataclass(frozen=True)
class CgroupValues:
    """What one container cgroup reports, in domain units (converted when written)."""

    memory_current_bytes: int = 0
    memory_max_bytes: int | None = None
    memory_anon_bytes: int = 0
    memory_file_bytes: int = 0
    memory_kernel_bytes: int = 0
    oom_events_total: int = 0
    oom_kill_events_total: int = 0
    memory_pressure_some_avg10_ratio: float = 0.0
    memory_pressure_full_avg10_ratio: float = 0.0
    memory_pressure_some_total_s: float = 0.0
    memory_pressure_full_total_s: float = 0.0
    cpu_pressure_some_avg10_ratio: float = 0.0
    cpu_pressure_some_total_s: float = 0.0
    cpu_usage_s: float = 0.0
    cpu_throttled_s: float = 0.0
    cpu_periods_total: int = 0
    cpu_throttled_periods_total: int = 0
    cpu_limit_cores: float | None = None
    cpu_period_s: float = 0.1
    #: Share of the memory on each NUMA node (node 0 first); None writes no
    #: ``memory.numa_stat`` (a kernel without NUMA).
    memory_numa_ratios: tuple[float, ...] | None = None


@dataclass(frozen=True)
class ContainerCgroup:
    """One container cgroup the tree holds."""

    pod_uid: str
    container_id: str
    qos: QosClass
    runtime: Runtime
    path: Path


_QOS_STEM = {QosClass.BURSTABLE: "burstable", QosClass.BEST_EFFORT: "besteffort"}
_SCOPE_PREFIX = {
    Runtime.CONTAINERD: "cri-containerd-",
    Runtime.CRIO: "crio-",
    Runtime.DOCKER: "docker-",
}
_ROOT_CONTROLLERS = "cpuset cpu io memory hugetlb pids rdma misc\n"


def pod_cgroup_path(driver: CgroupDriver, qos: QosClass, pod_uid: str) -> PurePosixPath:
    """Where the kubelet puts a pod's cgroup, relative to the cgroup mount."""
    if driver is CgroupDriver.CGROUPFS:
        if qos is QosClass.GUARANTEED:
            return PurePosixPath("kubepods", f"pod{pod_uid}")
        return PurePosixPath("kubepods", _QOS_STEM[qos], f"pod{pod_uid}")
    escaped = pod_uid.replace("-", "_")  # systemd reads '-' in a unit name as nesting
    if qos is QosClass.GUARANTEED:
        return PurePosixPath("kubepods.slice", f"kubepods-pod{escaped}.slice")
    stem = f"kubepods-{_QOS_STEM[qos]}"
    return PurePosixPath("kubepods.slice", f"{stem}.slice", f"{stem}-pod{escaped}.slice")


def container_cgroup_name(driver: CgroupDriver, runtime: Runtime, container_id: str) -> str:
    """The name the runtime gives a container's cgroup inside its pod's cgroup."""
    if driver is CgroupDriver.SYSTEMD:
        return f"{_SCOPE_PREFIX[runtime]}{container_id}.scope"
    # With cgroupfs, CRI-O keeps its prefix; containerd and docker use the bare id.
    return f"crio-{container_id}" if runtime is Runtime.CRIO else container_id


def conmon_cgroup_name(driver: CgroupDriver, container_id: str) -> str:
    """The cgroup CRI-O gives the conmon monitor of a container (not a container itself)."""
    name = f"crio-conmon-{container_id}"
    return f"{name}.scope" if driver is CgroupDriver.SYSTEMD else name


def container_files(values: CgroupValues, *, kernel_stat: bool = True) -> dict[str, str]:
    """The interface files of a container cgroup holding ``values``, name -> text."""
    period_us = round(values.cpu_period_s * 1e6)
    quota = (
        "max" if values.cpu_limit_cores is None else str(round(values.cpu_limit_cores * period_us))
    )
    return {
        "memory.current": f"{values.memory_current_bytes}\n",
        "memory.max": "max\n"
        if values.memory_max_bytes is None
        else f"{values.memory_max_bytes}\n",
        "memory.stat": _memory_stat(values, kernel_stat),
        "memory.events": (
            f"low 0\nhigh 0\nmax {values.oom_events_total}\noom {values.oom_events_total}\n"
            f"oom_kill {values.oom_kill_events_total}\noom_group_kill 0\n"
        ),
        "memory.pressure": _psi(
            values.memory_pressure_some_avg10_ratio,
            values.memory_pressure_some_total_s,
            values.memory_pressure_full_avg10_ratio,
            values.memory_pressure_full_total_s,
        ),
        # A container's CPU "full" stall is not modelled: half of "some" is a fair stand-in.
        "cpu.pressure": _psi(
            values.cpu_pressure_some_avg10_ratio,
            values.cpu_pressure_some_total_s,
            values.cpu_pressure_some_avg10_ratio / 2,
            values.cpu_pressure_some_total_s / 2,
        ),
        "cpu.stat": _cpu_stat(
            _usec(values.cpu_usage_s),
            _usec(values.cpu_throttled_s),
            values.cpu_periods_total,
            values.cpu_throttled_periods_total,
        ),
        "cpu.max": f"{quota} {period_us}\n",
    } | (
        {"memory.numa_stat": _memory_numa_stat(values)}
        if values.memory_numa_ratios is not None
        else {}
    )


def _usec(seconds: float) -> int:
    return round(seconds * 1e6)


def _memory_stat(v: CgroupValues, kernel_stat: bool) -> str:
    """memory.stat with the keys of a 6.x kernel, in its order; the breakdowns are rough."""
    kernel = v.memory_kernel_bytes
    slab = kernel // 2
    lines = [
        ("anon", v.memory_anon_bytes),
        ("file", v.memory_file_bytes),
        *([("kernel", kernel)] if kernel_stat else []),
        ("kernel_stack", kernel // 8),
        ("pagetables", kernel // 8),
        ("sec_pagetables", 0),
        ("percpu", kernel // 16),
        ("sock", 0),
        ("vmalloc", 0),
        ("shmem", 0),
        ("zswap", 0),
        ("zswapped", 0),
        ("file_mapped", v.memory_file_bytes // 4),
        ("file_dirty", 0),
        ("file_writeback", 0),
        ("swapcached", 0),
        ("anon_thp", 0),
        ("file_thp", 0),
        ("shmem_thp", 0),
        ("inactive_anon", v.memory_anon_bytes // 2),
        ("active_anon", v.memory_anon_bytes - v.memory_anon_bytes // 2),
        ("inactive_file", v.memory_file_bytes // 2),
        ("active_file", v.memory_file_bytes - v.memory_file_bytes // 2),
        ("unevictable", 0),
        ("slab_reclaimable", slab // 2),
        ("slab_unreclaimable", slab - slab // 2),
        ("slab", slab),
        ("workingset_refault_anon", 0),
        ("workingset_refault_file", 0),
        ("workingset_activate_anon", 0),
        ("workingset_activate_file", 0),
        ("workingset_restore_anon", 0),
        ("workingset_restore_file", 0),
        ("workingset_nodereclaim", 0),
        ("pgscan", 0),
        ("pgsteal", 0),
        ("pgfault", v.memory_anon_bytes // 4096),
        ("pgmajfault", 0),
        ("thp_fault_alloc", 0),
        ("thp_collapse_alloc", 0),
    ]
    return "".join(f"{key} {value}\n" for key, value in lines)


def _memory_numa_stat(v: CgroupValues) -> str:
    """memory.numa_stat: per memory type, its bytes on each NUMA node (``anon N0=.. N1=..``),
    the keys of a 6.x kernel in its order, split by ``memory_numa_ratios``."""
    ratios = v.memory_numa_ratios or (1.0,)
    kernel = v.memory_kernel_bytes
    types = (
        ("anon", v.memory_anon_bytes),
        ("file", v.memory_file_bytes),
        ("kernel_stack", kernel // 8),
        ("pagetables", kernel // 8),
        ("shmem", 0),
        ("file_mapped", v.memory_file_bytes // 4),
        ("file_dirty", 0),
        ("file_writeback", 0),
        ("swapcached", 0),
        ("anon_thp", 0),
        ("file_thp", 0),
        ("shmem_thp", 0),
        ("inactive_anon", v.memory_anon_bytes // 2),
        ("active_anon", v.memory_anon_bytes - v.memory_anon_bytes // 2),
        ("inactive_file", v.memory_file_bytes // 2),
        ("active_file", v.memory_file_bytes - v.memory_file_bytes // 2),
        ("unevictable", 0),
        ("slab_reclaimable", kernel // 4),
        ("slab_unreclaimable", kernel // 2 - kernel // 4),
    )
    lines = []
    for key, total in types:
        split = [int(total * r) for r in ratios]
        split[0] += total - sum(split)  # rounding lands on node 0
        lines.append(f"{key} " + " ".join(f"N{n}={b}" for n, b in enumerate(split)))
    return "".join(line + "\n" for line in lines)


def _psi(some_ratio: float, some_s: float, full_ratio: float, full_s: float) -> str:
    """A PSI file: averages as percentages with two decimals, totals in microseconds."""

    def line(kind: str, ratio: float, seconds: float) -> str:
        pct = f"{ratio * 100:.2f}"
        return f"{kind} avg10={pct} avg60={pct} avg300={pct} total={_usec(seconds)}\n"

    return line("some", some_ratio, some_s) + line("full", full_ratio, full_s)


def _cpu_stat(usage_us: int, throttled_us: int, periods: int, throttled: int) -> str:
    user_us = usage_us - usage_us // 5  # a user/system split, for realism only
    return (
        f"usage_usec {usage_us}\nuser_usec {user_us}\nsystem_usec {usage_us - user_us}\n"
        f"nr_periods {periods}\nnr_throttled {throttled}\nthrottled_usec {throttled_us}\n"
        "nr_bursts 0\nburst_usec 0\n"
    )


class CgroupTree:
    """A kubelet cgroup hierarchy under ``root`` that can grow, change and shrink.

    ``kernel_stat=False`` leaves the ``kernel`` key out of ``memory.stat`` (kernels before
    5.18); ``psi=False`` writes no pressure files (a kernel booted with ``psi=0``).
    """

    def __init__(
        self,
        root: Path,
        *,
        driver: CgroupDriver = CgroupDriver.SYSTEMD,
        kernel_stat: bool = True,
        psi: bool = True,
    ) -> None:
        self.root = Path(root)
        self.driver = driver
        self.kernel_stat = kernel_stat
        self.psi = psi
        self._containers: dict[str, ContainerCgroup] = {}
        self._values: dict[str, CgroupValues] = {}
        self._pod_qos: dict[str, QosClass] = {}
        self._pod_members: dict[str, list[str]] = {}
        # What each file holds, by its folder (so a removed cgroup forgets its folders only).
        self._written: dict[Path, dict[str, str]] = {}
        self.root.mkdir(parents=True, exist_ok=True)
        self._write(self.root / "cgroup.controllers", _ROOT_CONTROLLERS)

    def add_kubepods(self) -> None:
        """The QoS-level cgroups a kubelet creates at start-up, before any pod runs (so a
        node that runs nothing yet still has the hierarchy the cgroup collector walks)."""
        for qos in (QosClass.BURSTABLE, QosClass.BEST_EFFORT):
            parent = self.root / pod_cgroup_path(self.driver, qos, "0").parent
            parent.mkdir(parents=True, exist_ok=True)

    # -- reads ---------------------------------------------------------------------------

    def containers(self) -> list[ContainerCgroup]:
        """Every container cgroup, in the order they were added."""
        return list(self._containers.values())

    def container(self, container_id: str) -> ContainerCgroup:
        """The container cgroup ``container_id``; raises ``KeyError`` naming the known ids."""
        try:
            return self._containers[container_id]
        except KeyError:
            known = ", ".join(self._containers) or "none"
            raise KeyError(f"no container {container_id!r} in the tree; known: {known}") from None

    def values(self, container_id: str) -> CgroupValues:
        """What container ``container_id`` currently reports."""
        self.container(container_id)
        return self._values[container_id]

    def pod_path(self, pod_uid: str) -> Path:
        """The directory of pod ``pod_uid``'s cgroup."""
        qos = self._pod_qos.get(pod_uid)
        if qos is None:
            raise KeyError(f"no pod {pod_uid!r} in the tree; known: {', '.join(self._pod_qos)}")
        return self.root / pod_cgroup_path(self.driver, qos, pod_uid)

    # -- changes -------------------------------------------------------------------------

    def add_container(
        self,
        pod_uid: str,
        container_id: str,
        *,
        qos: QosClass = QosClass.BURSTABLE,
        runtime: Runtime = Runtime.CONTAINERD,
        values: CgroupValues | None = None,
    ) -> ContainerCgroup:
        """Create a container cgroup (and its pod's, on first use) holding ``values``.

        A pause (sandbox) container is added like any other. CRI-O containers also get their
        ``crio-conmon-<id>`` cgroup, as CRI-O makes one beside each container.
        """
        if container_id in self._containers:
            raise ValueError(f"container {container_id!r} is already in the tree")
        known_qos = self._pod_qos.setdefault(pod_uid, qos)
        if known_qos is not qos:
            raise ValueError(
                f"pod {pod_uid!r} is {known_qos.value}; cannot add a {qos.value} container"
            )
        pod_dir = self.pod_path(pod_uid)
        path = pod_dir / container_cgroup_name(self.driver, runtime, container_id)
        path.mkdir(parents=True)
        if runtime is Runtime.CRIO:
            conmon = pod_dir / conmon_cgroup_name(self.driver, container_id)
            conmon.mkdir()
            self._write(conmon / "memory.current", "1048576\n")
        cgroup = ContainerCgroup(pod_uid, container_id, qos, runtime, path)
        self._containers[container_id] = cgroup
        self._pod_members.setdefault(pod_uid, []).append(container_id)
        self.set_values(container_id, values or CgroupValues())
        return cgroup

    def set_values(self, container_id: str, values: CgroupValues) -> None:
        """Make container ``container_id`` report ``values`` (files rewritten as needed)."""
        cgroup = self.container(container_id)
        self._values[container_id] = values
        for name, text in container_files(values, kernel_stat=self.kernel_stat).items():
            if self.psi or not name.endswith(".pressure"):
                self._write(cgroup.path / name, text)
        self._write_pod_totals(cgroup.pod_uid)

    def advance(
        self,
        container_id: str,
        *,
        memory_delta_bytes: int = 0,
        cpu_delta_s: float = 0.0,
        throttled_delta_s: float = 0.0,
        periods_delta: int = 0,
        throttled_periods_delta: int = 0,
        oom_kills_delta: int = 0,
    ) -> CgroupValues:
        """Grow a container's counters and memory (anonymous memory takes the change)."""
        old = self.values(container_id)
        new = replace(
            old,
            memory_current_bytes=max(0, old.memory_current_bytes + memory_delta_bytes),
            memory_anon_bytes=max(0, old.memory_anon_bytes + memory_delta_bytes),
            cpu_usage_s=old.cpu_usage_s + cpu_delta_s,
            cpu_throttled_s=old.cpu_throttled_s + throttled_delta_s,
            cpu_periods_total=old.cpu_periods_total + periods_delta,
            cpu_throttled_periods_total=old.cpu_throttled_periods_total + throttled_periods_delta,
            oom_events_total=old.oom_events_total + oom_kills_delta,
            oom_kill_events_total=old.oom_kill_events_total + oom_kills_delta,
        )
        self.set_values(container_id, new)
        return new

    def remove_container(self, container_id: str) -> None:
        """Delete a container's cgroup (and CRI-O's conmon cgroup beside it)."""
        cgroup = self.container(container_id)
        pod_dir = cgroup.path.parent
        self._forget(cgroup.path)
        shutil.rmtree(cgroup.path)
        conmon = pod_dir / conmon_cgroup_name(self.driver, container_id)
        if conmon.is_dir():
            self._forget(conmon)
            shutil.rmtree(conmon)
        del self._containers[container_id]
        del self._values[container_id]
        self._pod_members[cgroup.pod_uid].remove(container_id)
        self._write_pod_totals(cgroup.pod_uid)

    def remove_pod(self, pod_uid: str) -> None:
        """Delete a pod's cgroup with every container in it."""
        pod_dir = self.pod_path(pod_uid)
        for cid in self._pod_members.pop(pod_uid, []):
            del self._containers[cid]
            del self._values[cid]
        self._forget(pod_dir)
        shutil.rmtree(pod_dir)
        del self._pod_qos[pod_uid]

    # -- files ---------------------------------------------------------------------------

    def _write_pod_totals(self, pod_uid: str) -> None:
        members = [self._values[cid] for cid in self._pod_members.get(pod_uid, [])]
        pod_dir = self.pod_path(pod_uid)
        self._write(pod_dir / "memory.current", f"{sum(v.memory_current_bytes for v in members)}\n")
        self._write(
            pod_dir / "cpu.stat",
            _cpu_stat(
                sum(_usec(v.cpu_usage_s) for v in members),
                sum(_usec(v.cpu_throttled_s) for v in members),
                sum(v.cpu_periods_total for v in members),
                sum(v.cpu_throttled_periods_total for v in members),
            ),
        )

    def _write(self, path: Path, text: str) -> None:
        """Replace ``path`` atomically with ``text`` unless it already holds it."""
        folder = self._written.setdefault(path.parent, {})
        if folder.get(path.name) == text:
            return
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(text, encoding="ascii")
        os.replace(tmp, path)
        folder[path.name] = text

    def _forget(self, directory: Path) -> None:
        prefix = f"{directory}{os.sep}"
        for folder in [d for d in self._written if d == directory or str(d).startswith(prefix)]:
            del self._written[folder]
