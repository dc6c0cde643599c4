"""The cgroup v2 container collector against trees on disk.

Two kinds of tree: ones written here by hand with literal kernel-format contents (so the
collector is not only checked against its own project's writer), and ones laid out by
``sits_observe.lab.cluster.cgroupfs``. Faults the test process cannot cause for real (tests
run as root, so chmod never denies) come from an injected ``read_file``.
"""

from __future__ import annotations

import errno
import shutil
from collections import Counter
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pytest

from sits_observe.collectors.cgroup.collector import CgroupCollector, read_cgroup_file
from sits_observe.domain.tables import CONTAINER_SAMPLES
from sits_observe.errors import CollectorError
from sits_observe.lab.cluster.cgroupfs import (
    CgroupDriver,
    CgroupTree,
    CgroupValues,
    QosClass,
    Runtime,
)

NOW = datetime(2026, 11, 1, 12, 0, 0, tzinfo=UTC)
UID_A = "6f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0"
UID_B = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
CID_APP = "a" * 64
CID_PAUSE = "b" * 64
CID_CRIO = "c" * 64

FILES = {
    "memory.current": "157286400\n",
    "memory.max": "268435456\n",
    "memory.stat": (
        "anon 104857600\nfile 41943040\nkernel 5242880\nkernel_stack 327680\n"
        "pagetables 1048576\nsec_pagetables 0\npercpu 4320\nsock 0\nvmalloc 8192\nshmem 0\n"
        "file_mapped 8388608\nfile_dirty 0\nfile_writeback 0\nswapcached 0\nanon_thp 0\n"
        "inactive_anon 0\nactive_anon 104857600\ninactive_file 20971520\n"
        "active_file 20971520\nunevictable 0\nslab_reclaimable 2097152\n"
        "slab_unreclaimable 1048576\nslab 3145728\npgfault 51200\npgmajfault 3\n"
    ),
    "memory.events": "low 0\nhigh 0\nmax 12\noom 2\noom_kill 1\noom_group_kill 0\n",
    "memory.pressure": (
        "some avg10=3.50 avg60=1.20 avg300=0.40 total=4500000\n"
        "full avg10=1.25 avg60=0.30 avg300=0.10 total=1500000\n"
    ),
    "cpu.pressure": (
        "some avg10=12.00 avg60=8.00 avg300=4.00 total=90000000\n"
        "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
    ),
    "cpu.stat": (
        "usage_usec 123456789\nuser_usec 100000000\nsystem_usec 23456789\n"
        "nr_periods 5000\nnr_throttled 250\nthrottled_usec 7500000\nnr_bursts 0\nburst_usec 0\n"
    ),
    "cpu.max": "150000 100000\n",
}

EXPECTED = {
    "memory_current_bytes": 157286400,
    "memory_max_bytes": 268435456,
    "memory_anon_bytes": 104857600,
    "memory_file_bytes": 41943040,
    "memory_kernel_bytes": 5242880,
    "oom_events_total": 2,
    "oom_kill_events_total": 1,
    "memory_pressure_some_avg10_ratio": 0.035,
    "memory_pressure_full_avg10_ratio": 0.0125,
    "memory_pressure_some_total_s": 4.5,
    "cpu_pressure_some_avg10_ratio": 0.12,
    "cpu_pressure_some_total_s": 90.0,
    "cpu_usage_s": 123.456789,
    "cpu_throttled_s": 7.5,
    "cpu_periods_total": 5000,
    "cpu_throttled_periods_total": 250,
    "cpu_limit_cores": 1.5,
}


def write_cgroup(path: Path, files: dict[str, str] = FILES) -> Path:
    path.mkdir(parents=True)
    for name, text in files.items():
        (path / name).write_text(text)
    return path


def rows_by_container(result_table: pa.Table) -> dict[str, dict[str, object]]:
    return {row["container_id"]: row for row in result_table.to_pylist()}


def collect(root: Path, **kwargs: object) -> tuple[dict[str, dict[str, object]], Counter[str]]:
    result = CgroupCollector(root, node="node-1", **kwargs).collect(NOW)  # type: ignore[arg-type]
    table = result.tables["container_samples"]
    assert table.schema == CONTAINER_SAMPLES.schema
    return rows_by_container(table), result.dropped


def assert_measures(row: dict[str, object], expected: dict[str, object] = EXPECTED) -> None:
    for column, value in expected.items():
        assert row[column] == pytest.approx(value), column


# -- hand-written trees --------------------------------------------------------------------


def test_systemd_tree_written_by_hand(tmp_path: Path) -> None:
    """A containerd Burstable pod with its pause container, and a CRI-O Guaranteed pod."""
    pod_a = (
        tmp_path
        / "kubepods.slice/kubepods-burstable.slice"
        / (f"kubepods-burstable-pod{UID_A.replace('-', '_')}.slice")
    )
    write_cgroup(pod_a / f"cri-containerd-{CID_APP}.scope")
    write_cgroup(pod_a / f"cri-containerd-{CID_PAUSE}.scope", {"memory.current": "4096\n"})
    (pod_a / "memory.current").write_text("999999999\n")  # pod level: never a row
    pod_b = tmp_path / "kubepods.slice" / f"kubepods-pod{UID_B.replace('-', '_')}.slice"
    write_cgroup(pod_b / f"crio-{CID_CRIO}.scope", {**FILES, "memory.max": "max\n"})
    write_cgroup(pod_b / f"crio-conmon-{CID_CRIO}.scope")  # CRI-O's monitor: skipped

    rows, dropped = collect(tmp_path)

    assert set(rows) == {CID_APP, CID_PAUSE, CID_CRIO}
    app = rows[CID_APP]
    assert (app["pod_uid"], app["runtime"], app["qos_class"]) == (UID_A, "containerd", "Burstable")
    assert (app["node"], app["ts"]) == ("node-1", NOW.replace(tzinfo=None))
    assert (app["namespace"], app["pod"], app["container"]) == (None, None, None)
    assert_measures(app)
    crio = rows[CID_CRIO]
    assert (crio["pod_uid"], crio["runtime"], crio["qos_class"]) == (UID_B, "cri-o", "Guaranteed")
    assert_measures(crio, {**EXPECTED, "memory_max_bytes": None})
    # The pause container is kept: only memory.current was written for it.
    pause = rows[CID_PAUSE]
    assert pause["memory_current_bytes"] == 4096
    assert pause["cpu_usage_s"] is None
    assert dropped == Counter(
        {f"missing_file:{name}": 1 for name in FILES if name != "memory.current"}
    )


def test_cgroupfs_tree_written_by_hand(tmp_path: Path) -> None:
    write_cgroup(tmp_path / "kubepods/besteffort" / f"pod{UID_A}" / CID_APP)
    write_cgroup(tmp_path / "kubepods" / f"pod{UID_B}" / f"crio-{CID_CRIO}")
    write_cgroup(tmp_path / "kubepods" / f"pod{UID_B}" / f"crio-conmon-{CID_CRIO}")
    rows, dropped = collect(tmp_path)
    assert set(rows) == {CID_APP, CID_CRIO}
    assert (rows[CID_APP]["pod_uid"], rows[CID_APP]["runtime"], rows[CID_APP]["qos_class"]) == (
        UID_A,
        "unknown",
        "BestEffort",
    )
    assert (rows[CID_CRIO]["runtime"], rows[CID_CRIO]["qos_class"]) == ("cri-o", "Guaranteed")
    assert_measures(rows[CID_APP])
    assert dropped == Counter()


def test_root_may_be_the_kubepods_directory(tmp_path: Path) -> None:
    write_cgroup(
        tmp_path / "kubepods.slice" / f"kubepods-pod{'ab' * 16}.slice" / f"docker-{CID_APP}.scope"
    )
    rows, _ = collect(tmp_path / "kubepods.slice")
    assert rows[CID_APP]["pod_uid"] == "ab" * 16
    assert rows[CID_APP]["runtime"] == "docker"


def test_unrecognised_directories_are_counted_not_read(tmp_path: Path) -> None:
    kubepods = tmp_path / "kubepods.slice"
    pod = kubepods / f"kubepods-pod{UID_A.replace('-', '_')}.slice"
    write_cgroup(pod / f"cri-containerd-{CID_APP}.scope")
    write_cgroup(pod / "not-a-container")
    write_cgroup(kubepods / "something-else.slice")
    write_cgroup(kubepods / "kubepods-burstable.slice" / "stray")
    (tmp_path / "system.slice").mkdir()  # outside kubelet's tree: not looked at
    rows, dropped = collect(tmp_path)
    assert set(rows) == {CID_APP}
    assert dropped == Counter({"unrecognised_cgroup": 3})


def test_aware_now_is_stored_as_naive_utc(tmp_path: Path) -> None:
    write_cgroup(tmp_path / "kubepods" / f"pod{UID_A}" / CID_APP)
    now = datetime(2026, 11, 1, 14, 0, tzinfo=timezone(timedelta(hours=2)))
    table = CgroupCollector(tmp_path, node="n").collect(now).tables["container_samples"]
    assert table.column("ts").to_pylist() == [datetime(2026, 11, 1, 12, 0)]


def test_empty_hierarchy_gives_an_empty_table(tmp_path: Path) -> None:
    (tmp_path / "kubepods.slice").mkdir()
    result = CgroupCollector(tmp_path, node="n").collect(NOW)
    assert result.tables["container_samples"].num_rows == 0
    assert result.tables["container_samples"].schema == CONTAINER_SAMPLES.schema
    assert result.dropped == Counter()


def test_unreachable_root_raises_collector_error(tmp_path: Path) -> None:
    with pytest.raises(CollectorError, match="not a directory"):
        CgroupCollector(tmp_path / "absent", node="n").collect(NOW)
    (tmp_path / "memory").mkdir()
    (tmp_path / "cpu,cpuacct").mkdir()
    with pytest.raises(CollectorError, match="cgroup v1"):
        CgroupCollector(tmp_path, node="n").collect(NOW)


# -- trees from the simulator's writer -------------------------------------------------------


@pytest.mark.parametrize("driver", list(CgroupDriver))
def test_every_runtime_and_qos_class_from_the_writer(tmp_path: Path, driver: CgroupDriver) -> None:
    tree = CgroupTree(tmp_path, driver=driver)
    expected: dict[str, tuple[str, str, str]] = {}
    n = 0
    for qos in QosClass:
        for runtime in Runtime:
            n += 1
            uid = f"{n:08x}-1111-4222-8333-444455556666"
            cid = f"{n:02x}" * 32
            values = CgroupValues(
                memory_current_bytes=n * 1_000_000,
                memory_max_bytes=None if qos is QosClass.BEST_EFFORT else 2**30,
                memory_anon_bytes=n * 600_000,
                cpu_usage_s=n * 1.5,
                cpu_limit_cores=None if qos is QosClass.BEST_EFFORT else 0.25 * n,
                memory_pressure_some_avg10_ratio=n / 100,
            )
            tree.add_container(uid, cid, qos=qos, runtime=runtime, values=values)
            shown = runtime.value
            if driver is CgroupDriver.CGROUPFS and runtime is not Runtime.CRIO:
                shown = "unknown"  # the bare-id cgroup name does not say who made it
            expected[cid] = (uid, shown, qos.value)
    rows, dropped = collect(tmp_path)
    assert dropped == Counter()
    assert {
        cid: (r["pod_uid"], r["runtime"], r["qos_class"]) for cid, r in rows.items()
    } == expected
    for cid, row in rows.items():
        values = tree.values(cid)
        assert row["memory_current_bytes"] == values.memory_current_bytes
        assert row["memory_max_bytes"] == values.memory_max_bytes
        assert row["memory_anon_bytes"] == values.memory_anon_bytes
        assert row["cpu_usage_s"] == pytest.approx(values.cpu_usage_s)
        assert row["cpu_limit_cores"] == pytest.approx(values.cpu_limit_cores)
        assert row["memory_pressure_some_avg10_ratio"] == pytest.approx(
            values.memory_pressure_some_avg10_ratio
        )


def test_growth_between_collects_is_seen(tmp_path: Path) -> None:
    tree = CgroupTree(tmp_path)
    tree.add_container(UID_A, CID_APP, values=CgroupValues(memory_current_bytes=10, cpu_usage_s=1))
    first, _ = collect(tmp_path)
    tree.advance(CID_APP, memory_delta_bytes=4096, cpu_delta_s=0.5, oom_kills_delta=1)
    second, _ = collect(tmp_path)
    assert second[CID_APP]["memory_current_bytes"] == first[CID_APP]["memory_current_bytes"] + 4096
    assert second[CID_APP]["cpu_usage_s"] == pytest.approx(1.5)
    assert second[CID_APP]["oom_kill_events_total"] == 1


def test_older_kernel_without_memory_stat_kernel_gives_null(tmp_path: Path) -> None:
    tree = CgroupTree(tmp_path, kernel_stat=False)
    tree.add_container(UID_A, CID_APP, values=CgroupValues(memory_kernel_bytes=4096))
    rows, dropped = collect(tmp_path)
    assert rows[CID_APP]["memory_kernel_bytes"] is None
    assert rows[CID_APP]["memory_anon_bytes"] == 0
    assert dropped == Counter({"missing_key:memory.stat:kernel": 1})


def test_psi_disabled_gives_null_pressure(tmp_path: Path) -> None:
    tree = CgroupTree(tmp_path, psi=False)
    tree.add_container(UID_A, CID_APP)
    rows, dropped = collect(tmp_path)
    row = rows[CID_APP]
    for column in ("memory_pressure_some_avg10_ratio", "cpu_pressure_some_total_s"):
        assert row[column] is None
    assert row["memory_current_bytes"] == 0
    assert dropped == Counter({"missing_file:memory.pressure": 1, "missing_file:cpu.pressure": 1})


# -- faults ------------------------------------------------------------------------------------


def two_container_tree(tmp_path: Path) -> CgroupTree:
    tree = CgroupTree(tmp_path)
    tree.add_container(
        UID_A, CID_APP, values=CgroupValues(memory_current_bytes=1000, cpu_usage_s=2)
    )
    tree.add_container(UID_B, CID_CRIO, runtime=Runtime.CRIO, values=CgroupValues(cpu_usage_s=3))
    return tree


def test_permission_denied_file_is_skipped_and_counted(tmp_path: Path) -> None:
    tree = two_container_tree(tmp_path)
    denied = tree.container(CID_APP).path / "cpu.stat"

    def reader(path: Path) -> str:
        if path == denied:
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return read_cgroup_file(path)

    rows, dropped = collect(tmp_path, read_file=reader)
    assert rows[CID_APP]["cpu_usage_s"] is None
    assert rows[CID_APP]["cpu_periods_total"] is None
    assert rows[CID_APP]["memory_current_bytes"] == 1000  # the other files still count
    assert rows[CID_CRIO]["cpu_usage_s"] == pytest.approx(3)
    assert dropped == Counter({"permission_denied:cpu.stat": 1})


def test_other_read_errors_and_undecodable_text_are_counted(tmp_path: Path) -> None:
    tree = two_container_tree(tmp_path)
    app = tree.container(CID_APP).path
    (app / "memory.max").write_bytes(b"\xff\xfe\n")  # real reader: not ASCII

    def reader(path: Path) -> str:
        if path == app / "memory.events":
            raise OSError(errno.EIO, "Input/output error", str(path))
        return read_cgroup_file(path)

    rows, dropped = collect(tmp_path, read_file=reader)
    assert rows[CID_APP]["memory_max_bytes"] is None
    assert rows[CID_APP]["oom_events_total"] is None
    assert dropped == Counter({"malformed:memory.max": 1, "read_error:memory.events": 1})


def test_malformed_values_are_dropped_and_counted(tmp_path: Path) -> None:
    tree = two_container_tree(tmp_path)
    app = tree.container(CID_APP).path
    (app / "memory.current").write_text("lots\n")
    (app / "cpu.max").write_text("100000\n")
    (app / "memory.stat").write_text("anon 12\nfile -3\n")
    (app / "memory.pressure").write_text(
        "some avg10=0.50 avg60=0.00 avg300=0.00 total=7\nfull avg10=x avg60=0 avg300=0 total=0\n"
    )
    rows, dropped = collect(tmp_path)
    row = rows[CID_APP]
    assert row["memory_current_bytes"] is None
    assert row["cpu_limit_cores"] is None
    assert (row["memory_anon_bytes"], row["memory_file_bytes"]) == (12, None)
    assert row["memory_pressure_some_avg10_ratio"] == pytest.approx(0.005)
    assert row["memory_pressure_full_avg10_ratio"] is None
    assert row["cpu_usage_s"] == pytest.approx(2)
    assert dropped == Counter(
        {
            "malformed:memory.current": 1,
            "malformed:cpu.max": 1,
            "malformed:memory.stat:file": 1,
            "missing_key:memory.stat:kernel": 1,
            "malformed:memory.pressure": 1,
            "missing_key:memory.pressure:full": 1,
        }
    )


def test_container_removed_between_collects_is_gone(tmp_path: Path) -> None:
    tree = two_container_tree(tmp_path)
    before, _ = collect(tmp_path)
    shutil.rmtree(tree.container(CID_APP).path)
    after, dropped = collect(tmp_path)
    assert set(before) == {CID_APP, CID_CRIO}
    assert set(after) == {CID_CRIO}
    assert dropped == Counter()


def test_container_vanishing_mid_read_is_dropped_whole(tmp_path: Path) -> None:
    """The cgroup disappears after its memory files were read: no half row is stored."""
    tree = two_container_tree(tmp_path)
    app = tree.container(CID_APP).path

    def reader(path: Path) -> str:
        if path == app / "cpu.pressure":
            shutil.rmtree(app)  # the container exits while we read it
        return read_cgroup_file(path)

    rows, dropped = collect(tmp_path, read_file=reader)
    assert set(rows) == {CID_CRIO}
    assert dropped == Counter({"cgroup_vanished": 1})
    rows, dropped = collect(tmp_path)
    assert set(rows) == {CID_CRIO}
    assert dropped == Counter()


def test_pod_vanishing_after_listing_is_counted(tmp_path: Path) -> None:
    """A pod listed with its QoS directory is deleted before the walk reaches it."""
    tree = CgroupTree(tmp_path)
    tree.add_container(UID_A, CID_APP)
    tree.add_container(UID_B, CID_CRIO)
    pods = {UID_A: tree.pod_path(UID_A), UID_B: tree.pod_path(UID_B)}
    removed: list[str] = []

    def reader(path: Path) -> str:
        if not removed:
            victim = next(uid for uid, p in pods.items() if not path.is_relative_to(p))
            shutil.rmtree(pods[victim])
            removed.append(victim)
        return read_cgroup_file(path)

    rows, dropped = collect(tmp_path, read_file=reader)
    assert len(rows) == 1
    assert next(iter(rows.values()))["pod_uid"] != removed[0]
    assert dropped == Counter({"cgroup_vanished": 1})


def test_a_missing_file_is_not_taken_for_a_vanished_cgroup(tmp_path: Path) -> None:
    tree = two_container_tree(tmp_path)
    gone = tree.container(CID_APP).path / "memory.stat"

    def reader(path: Path) -> str:
        if path == gone:
            raise FileNotFoundError(errno.ENOENT, "No such file", str(path))
        return read_cgroup_file(path)

    rows, dropped = collect(tmp_path, read_file=reader)
    assert rows[CID_APP]["memory_anon_bytes"] is None
    assert rows[CID_APP]["memory_current_bytes"] == 1000
    assert dropped == Counter({"missing_file:memory.stat": 1})


def test_default_reader_counts_a_directory_gone_before_it_is_opened(tmp_path: Path) -> None:
    """The race between listing a pod and opening a container cannot be staged through
    ``collect`` without an injected reader, so the default reader's step is called alone."""
    tree = two_container_tree(tmp_path)
    gone = tree.container(CID_APP).path
    shutil.rmtree(gone)
    dropped: Counter[str] = Counter()
    collector = CgroupCollector(tmp_path, node="n")
    assert collector._read_container(str(gone), dropped) is None
    assert dropped == Counter({"cgroup_vanished": 1})
    kept = collector._read_container(str(tree.container(CID_CRIO).path), dropped)
    assert kept is not None and kept["cpu_usage_s"] == pytest.approx(3)


# -- cost ------------------------------------------------------------------------------------


def test_each_container_file_is_read_once_and_nothing_else(tmp_path: Path) -> None:
    tree = two_container_tree(tmp_path)
    reads: Counter[Path] = Counter()

    def reader(path: Path) -> str:
        reads[path] += 1
        return read_cgroup_file(path)

    collect(tmp_path, read_file=reader)
    expected = {c.path / name for c in tree.containers() for name in FILES}
    assert set(reads) == expected
    assert set(reads.values()) == {1}


def test_reader_returns_files_longer_than_one_read(tmp_path: Path) -> None:
    path = tmp_path / "memory.stat"
    text = "".join(f"key_{i} {i}\n" for i in range(20_000))
    path.write_text(text)
    assert len(text) > 64 * 1024
    assert read_cgroup_file(path) == text
    path.write_text("x" * 64 * 1024)
    assert read_cgroup_file(path) == "x" * 64 * 1024


def test_slow_files_are_read_every_nth_collect_and_reused_between(tmp_path: Path) -> None:
    """Limits, events and PSI are read on every n-th collect; fast files on every one."""
    from sits_observe.lab.cluster.cgroupfs import CgroupTree, CgroupValues

    tree = CgroupTree(tmp_path)
    cid = "ab" * 32
    tree.add_container(
        "11111111-2222-3333-4444-555555555555",
        cid,
        values=CgroupValues(memory_current_bytes=100, memory_max_bytes=1000),
    )
    reads: list[str] = []

    def reader(path: Path) -> str:
        reads.append(path.name)
        return path.read_text()

    collector = CgroupCollector(tmp_path, node="n", read_file=reader, slow_every=3)
    now = datetime(2026, 1, 1, tzinfo=UTC)

    def one() -> dict[str, object]:
        reads.clear()
        (row,) = collector.collect(now).tables["container_samples"].to_pylist()
        return row

    first = one()
    assert sorted(reads) == sorted(
        [
            "memory.current",
            "memory.stat",
            "cpu.stat",
            "memory.max",
            "memory.events",
            "memory.pressure",
            "cpu.pressure",
            "cpu.max",
        ]
    )
    tree.set_values(cid, CgroupValues(memory_current_bytes=200, memory_max_bytes=2000))
    second = one()
    assert sorted(reads) == ["cpu.stat", "memory.current", "memory.stat"]
    assert (second["memory_current_bytes"], second["memory_max_bytes"]) == (200, 1000)
    assert first["memory_max_bytes"] == 1000
    one()
    fourth = one()  # the 4th collect is 3 after the 1st: the slow files are read again
    assert "memory.max" in reads
    assert fourth["memory_max_bytes"] == 2000
