"""The kubelet-style cgroup tree writer: paths, kernel file formats, updates and removal.

Expected paths and file texts are spelled out literally from the kubelet / kernel rules
(Documentation/admin-guide/cgroup-v2.rst), not computed with the writer's own helpers.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path, PurePosixPath

import pytest

from sits_observe.lab.cluster.cgroupfs import (
    CgroupDriver,
    CgroupTree,
    CgroupValues,
    QosClass,
    Runtime,
    container_cgroup_name,
    container_files,
    pod_cgroup_path,
)

UID = "6f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0"
UID_ = "6f1e2d3c_4b5a_4968_8776_a5b4c3d2e1f0"
CID = "ab" * 32


@pytest.mark.parametrize(
    ("driver", "qos", "expected"),
    [
        (CgroupDriver.SYSTEMD, QosClass.GUARANTEED, f"kubepods.slice/kubepods-pod{UID_}.slice"),
        (
            CgroupDriver.SYSTEMD,
            QosClass.BURSTABLE,
            f"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice",
        ),
        (
            CgroupDriver.SYSTEMD,
            QosClass.BEST_EFFORT,
            f"kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice",
        ),
        (CgroupDriver.CGROUPFS, QosClass.GUARANTEED, f"kubepods/pod{UID}"),
        (CgroupDriver.CGROUPFS, QosClass.BURSTABLE, f"kubepods/burstable/pod{UID}"),
        (CgroupDriver.CGROUPFS, QosClass.BEST_EFFORT, f"kubepods/besteffort/pod{UID}"),
    ],
)
def test_pod_paths(driver: CgroupDriver, qos: QosClass, expected: str) -> None:
    assert pod_cgroup_path(driver, qos, UID) == PurePosixPath(expected)


@pytest.mark.parametrize(
    ("driver", "runtime", "expected"),
    [
        (CgroupDriver.SYSTEMD, Runtime.CONTAINERD, f"cri-containerd-{CID}.scope"),
        (CgroupDriver.SYSTEMD, Runtime.CRIO, f"crio-{CID}.scope"),
        (CgroupDriver.SYSTEMD, Runtime.DOCKER, f"docker-{CID}.scope"),
        (CgroupDriver.CGROUPFS, Runtime.CONTAINERD, CID),
        (CgroupDriver.CGROUPFS, Runtime.CRIO, f"crio-{CID}"),
        (CgroupDriver.CGROUPFS, Runtime.DOCKER, CID),
    ],
)
def test_container_names(driver: CgroupDriver, runtime: Runtime, expected: str) -> None:
    assert container_cgroup_name(driver, runtime, CID) == expected


def test_files_are_in_kernel_formats() -> None:
    files = container_files(
        CgroupValues(
            memory_current_bytes=1234,
            memory_max_bytes=4096,
            memory_anon_bytes=1000,
            memory_file_bytes=200,
            memory_kernel_bytes=34,
            oom_events_total=3,
            oom_kill_events_total=2,
            memory_pressure_some_avg10_ratio=0.0125,
            memory_pressure_some_total_s=4.5,
            memory_pressure_full_avg10_ratio=0.5,
            memory_pressure_full_total_s=1.0,
            cpu_pressure_some_avg10_ratio=1.0,
            cpu_pressure_some_total_s=0.000002,
            cpu_usage_s=12.5,
            cpu_throttled_s=0.25,
            cpu_periods_total=40,
            cpu_throttled_periods_total=5,
            cpu_limit_cores=2.0,
        )
    )
    assert files["memory.current"] == "1234\n"
    assert files["memory.max"] == "4096\n"
    assert files["cpu.max"] == "200000 100000\n"
    assert files["memory.pressure"] == (
        "some avg10=1.25 avg60=1.25 avg300=1.25 total=4500000\n"
        "full avg10=50.00 avg60=50.00 avg300=50.00 total=1000000\n"
    )
    assert files["cpu.pressure"].startswith(
        "some avg10=100.00 avg60=100.00 avg300=100.00 total=2\n"
    )
    assert files["cpu.stat"].splitlines()[0] == "usage_usec 12500000"
    assert "nr_periods 40\nnr_throttled 5\nthrottled_usec 250000\n" in files["cpu.stat"]
    assert "\noom 3\noom_kill 2\n" in files["memory.events"]
    assert files["memory.stat"].startswith("anon 1000\nfile 200\nkernel 34\nkernel_stack ")
    for text in files.values():
        assert text.endswith("\n") and text.isascii()


def test_unlimited_values_are_written_as_max() -> None:
    files = container_files(CgroupValues(cpu_period_s=0.05))
    assert files["memory.max"] == "max\n"
    assert files["cpu.max"] == "max 50000\n"


def test_older_kernel_memory_stat_lacks_only_kernel() -> None:
    text = container_files(CgroupValues(), kernel_stat=False)["memory.stat"]
    keys = [line.split(" ")[0] for line in text.splitlines()]
    assert "kernel" not in keys
    assert {"anon", "file", "kernel_stack", "slab"} <= set(keys)


def test_tree_layout_updates_and_pod_totals(tmp_path: Path) -> None:
    tree = CgroupTree(tmp_path)
    pause = tree.add_container(UID, "01" * 32, values=CgroupValues(memory_current_bytes=100))
    app = tree.add_container(UID, CID, values=CgroupValues(memory_current_bytes=1000))
    pod = tmp_path / f"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice"
    assert app.path == pod / f"cri-containerd-{CID}.scope"
    assert pause.path.parent == pod
    assert (pod / "memory.current").read_text() == "1100\n"

    new = tree.advance(CID, memory_delta_bytes=500, cpu_delta_s=1.5, periods_delta=10)
    assert new.memory_current_bytes == 1500
    assert new.memory_anon_bytes == 500
    assert (app.path / "memory.current").read_text() == "1500\n"
    assert "usage_usec 1500000\n" in (app.path / "cpu.stat").read_text()
    assert "nr_periods 10\n" in (app.path / "cpu.stat").read_text()
    assert (pod / "memory.current").read_text() == "1600\n"
    assert "usage_usec 1500000\n" in (pod / "cpu.stat").read_text()
    assert not list(tmp_path.rglob(".*.tmp"))


def test_unchanged_files_are_not_rewritten(tmp_path: Path) -> None:
    tree = CgroupTree(tmp_path)
    cgroup = tree.add_container(UID, CID)
    inodes = {p.name: p.stat().st_ino for p in cgroup.path.iterdir()}
    tree.advance(CID, cpu_delta_s=1.0)
    after = {p.name: p.stat().st_ino for p in cgroup.path.iterdir()}
    changed = {name for name in inodes if inodes[name] != after[name]}
    assert changed == {"cpu.stat"}


def test_crio_conmon_and_removal(tmp_path: Path) -> None:
    tree = CgroupTree(tmp_path, driver=CgroupDriver.CGROUPFS)
    cgroup = tree.add_container(UID, CID, qos=QosClass.GUARANTEED, runtime=Runtime.CRIO)
    other = tree.add_container(UID, "cd" * 32, qos=QosClass.GUARANTEED, runtime=Runtime.CRIO)
    pod = tmp_path / f"kubepods/pod{UID}"
    assert cgroup.path == pod / f"crio-{CID}"
    assert (pod / f"crio-conmon-{CID}").is_dir()

    tree.remove_container(CID)
    assert not cgroup.path.exists()
    assert not (pod / f"crio-conmon-{CID}").exists()
    assert other.path.is_dir()
    assert [c.container_id for c in tree.containers()] == ["cd" * 32]

    tree.remove_pod(UID)
    assert not pod.exists()
    assert tree.containers() == []
    # A container added again after removal gets fresh files (the write cache was dropped).
    again = tree.add_container(UID, CID, qos=QosClass.GUARANTEED, runtime=Runtime.CRIO)
    assert (again.path / "memory.current").read_text() == "0\n"


def test_misuse_is_refused(tmp_path: Path) -> None:
    tree = CgroupTree(tmp_path)
    tree.add_container(UID, CID, qos=QosClass.BURSTABLE)
    with pytest.raises(ValueError, match="already"):
        tree.add_container(UID, CID)
    with pytest.raises(ValueError, match="Burstable"):
        tree.add_container(UID, "cd" * 32, qos=QosClass.GUARANTEED)
    with pytest.raises(KeyError, match="known"):
        tree.advance("nope", cpu_delta_s=1)


def test_writer_does_not_import_the_collectors() -> None:
    code = (
        "import sys, sits_observe.lab.cluster.cgroupfs; "
        "bad = [m for m in sys.modules if m.startswith('sits_observe.collectors')]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
