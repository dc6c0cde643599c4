"""NUMA collector and its parsers, against sysfs and cgroup v2 trees written to disk with
the kernel's literal formats (numastat.rst, cgroup-v2.rst memory.numa_stat)."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sits_observe.collectors.cgroup.numa import NumaCollector
from sits_observe.collectors.cgroup.numa_files import (
    cpus_of_mask,
    format_cpulist,
    parse_cpulist,
    parse_numa_node,
    parse_numa_stat,
    parse_numastat,
    sysfs_bus_id,
)
from sits_observe.domain.schema.topology_tables import CONTAINER_NUMA_SAMPLES, NUMA_SAMPLES
from sits_observe.errors import CollectorError, ParseError

NOW = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
UID = "6f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0"
CID = "a" * 64
CID_2 = "b" * 64

# A two-socket machine's numastat, as the kernel prints it (values in pages).
NUMASTAT_0 = (
    "numa_hit 2419021392\nnuma_miss 1150\nnuma_foreign 73342\ninterleave_hit 47521\n"
    "local_node 2418764893\nother_node 257649\n"
)
NUMASTAT_1 = (
    "numa_hit 1987311041\nnuma_miss 73342\nnuma_foreign 1150\ninterleave_hit 47519\n"
    "local_node 1986977562\nother_node 406821\n"
)
# memory.numa_stat of a container that lives mostly on node 1 (bytes).
NUMA_STAT = (
    "anon N0=4096 N1=104853504\nfile N0=2097152 N1=39845888\nkernel_stack N0=0 N1=327680\n"
    "pagetables N0=0 N1=1048576\nsec_pagetables N0=0 N1=0\nshmem N0=0 N1=0\n"
    "file_mapped N0=0 N1=8388608\nfile_dirty N0=0 N1=0\nfile_writeback N0=0 N1=0\n"
    "swapcached N0=0 N1=0\nanon_thp N0=0 N1=0\nfile_thp N0=0 N1=0\nshmem_thp N0=0 N1=0\n"
    "inactive_anon N0=0 N1=0\nactive_anon N0=4096 N1=104853504\n"
    "inactive_file N0=1048576 N1=19922944\nactive_file N0=1048576 N1=19922944\n"
    "unevictable N0=0 N1=0\nslab_reclaimable N0=0 N1=2097152\n"
    "slab_unreclaimable N0=0 N1=1048576\nworkingset_refault_anon N0=0 N1=0\n"
)


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def sysfs(root: Path) -> Path:
    nodes = root / "devices" / "system" / "node"
    write(nodes / "node0" / "numastat", NUMASTAT_0)
    write(nodes / "node1" / "numastat", NUMASTAT_1)
    write(nodes / "node0" / "cpulist", "0-23,48-71\n")
    write(nodes / "possible", "0-1\n")  # a file, not a node directory
    (nodes / "power").mkdir()  # a directory that is not a node
    return root


def container_dir(cgroup: Path, cid: str, qos: str = "burstable") -> Path:
    pod = f"kubepods-{qos}-pod{UID.replace('-', '_')}.slice"
    return cgroup / "kubepods.slice" / f"kubepods-{qos}.slice" / pod / f"cri-containerd-{cid}.scope"


def test_numastat_parser_reads_the_six_counters() -> None:
    values = parse_numastat(NUMASTAT_0 + "some_future_counter 7\n")
    assert values == {
        "numa_hit": 2419021392,
        "numa_miss": 1150,
        "numa_foreign": 73342,
        "interleave_hit": 47521,
        "local_node": 2418764893,
        "other_node": 257649,
    }
    with pytest.raises(ParseError, match="lacks numa_miss"):
        parse_numastat("numa_hit 1\n")
    with pytest.raises(ParseError, match="numa_hit"):
        parse_numastat(NUMASTAT_0.replace("2419021392", "-3"))


def test_numa_stat_parser_per_type_and_node() -> None:
    stat = parse_numa_stat(NUMA_STAT)
    assert stat["anon"] == {0: 4096, 1: 104853504}
    assert stat["file"] == {0: 2097152, 1: 39845888}
    assert len(stat) == 21
    with pytest.raises(ParseError, match="N<node>=<bytes>"):
        parse_numa_stat("anon 0=12\n")


def test_pci_and_cpu_list_formats() -> None:
    assert parse_numa_node("1\n") == 1
    assert parse_numa_node("-1\n") is None
    assert parse_cpulist("0-3,8,10-11\n") == (0, 1, 2, 3, 8, 10, 11)
    assert parse_cpulist("\n") == ()
    assert format_cpulist((0, 1, 2, 3, 8, 10, 11)) == "0-3,8,10-11"
    assert cpus_of_mask([0b1011, 1]) == (0, 1, 3, 64)
    assert sysfs_bus_id("00000000:1A:00.0") == "0000:1a:00.0"
    with pytest.raises(ParseError):
        parse_cpulist("5-3")
    with pytest.raises(ParseError):
        sysfs_bus_id("zz:00.0")


@given(st.sets(st.integers(min_value=0, max_value=2047)))
def test_cpulist_round_trip(cpus: set[int]) -> None:
    ordered = tuple(sorted(cpus))
    assert parse_cpulist(format_cpulist(ordered)) == ordered
    words = [0] * 32
    for cpu in ordered:
        words[cpu // 64] |= 1 << (cpu % 64)
    assert cpus_of_mask(words) == ordered


def test_collect_reads_nodes_and_containers(tmp_path: Path) -> None:
    root = sysfs(tmp_path / "sys")
    cgroup = tmp_path / "cgroup"
    write(container_dir(cgroup, CID) / "memory.numa_stat", NUMA_STAT)
    write(container_dir(cgroup, CID_2, "besteffort") / "memory.numa_stat", "anon N0=8192\n")
    pod_dir = container_dir(cgroup, CID).parent
    write(pod_dir / "memory.numa_stat", "anon N0=1\n")  # the pod level: not a container
    write(cgroup / "system.slice" / "memory.numa_stat", "anon N0=1\n")  # no kubelet cgroup

    result = NumaCollector(node="n1", sys_root=root, cgroup_root=cgroup).collect(NOW)

    nodes = result.tables["numa_samples"]
    assert nodes.schema.equals(NUMA_SAMPLES.schema)
    assert nodes.column("numa_node").to_pylist() == [0, 1]
    assert nodes.column("numa_miss_pages_total").to_pylist() == [1150, 73342]
    assert nodes.column("other_node_pages_total").to_pylist() == [257649, 406821]
    assert set(nodes.column("node").to_pylist()) == {"n1"}
    placed = result.tables["container_numa_samples"]
    assert placed.schema.equals(CONTAINER_NUMA_SAMPLES.schema)
    rows = sorted(placed.to_pylist(), key=lambda r: (r["container_id"], r["numa_node"]))
    assert [
        (r["container_id"], r["numa_node"], r["anon_bytes"], r["file_bytes"]) for r in rows
    ] == [
        (CID, 0, 4096, 2097152),
        (CID, 1, 104853504, 39845888),
        (CID_2, 0, 8192, None),
    ]
    assert {r["pod_uid"] for r in rows} == {UID}
    assert result.dropped == {}
    # The kubepods directory itself as the root reads the same containers.
    own = NumaCollector(node="n1", sys_root=root, cgroup_root=cgroup / "kubepods.slice")
    assert own.collect(NOW).tables["container_numa_samples"].equals(placed)


def test_faults_are_counted_not_raised(tmp_path: Path) -> None:
    root = sysfs(tmp_path / "sys")
    write(root / "devices" / "system" / "node" / "node1" / "numastat", "numa_hit x\n")
    cgroup = tmp_path / "cgroup"
    write(container_dir(cgroup, CID) / "memory.numa_stat", "anon N0=oops\n")
    container_dir(cgroup, CID_2).mkdir(parents=True)  # exited between listing and reading
    fifo = container_dir(cgroup, "c" * 64)
    fifo.mkdir(parents=True)
    os.mkfifo(fifo / "memory.numa_stat")  # never a cgroup file: must not block the read

    result = NumaCollector(node="n1", sys_root=root, cgroup_root=cgroup).collect(NOW)

    assert result.tables["numa_samples"].column("numa_node").to_pylist() == [0]
    assert result.tables["container_numa_samples"].num_rows == 0
    assert result.dropped == {
        "numa:malformed:numastat": 1,
        "numa:malformed:memory.numa_stat": 1,
        "numa:missing:memory.numa_stat": 1,
        "numa:unreadable:memory.numa_stat": 1,
    }


def test_no_numa_sysfs_raises_and_no_cgroup_root_is_counted(tmp_path: Path) -> None:
    with pytest.raises(CollectorError, match="NUMA"):
        NumaCollector(node="n1", sys_root=tmp_path / "nothing").collect(NOW)
    root = sysfs(tmp_path / "sys")
    result = NumaCollector(node="n1", sys_root=root, cgroup_root=tmp_path / "absent").collect(NOW)
    assert result.tables["numa_samples"].num_rows == 2
    assert result.dropped == {"numa:no_cgroup_root": 1}
    host = tmp_path / "host-cgroup"
    write(host / "system.slice" / "memory.numa_stat", "anon N0=1\n")
    no_kubelet = NumaCollector(node="n1", sys_root=root, cgroup_root=host).collect(NOW)
    assert no_kubelet.dropped == {"numa:no_kubepods": 1}
    skipped = NumaCollector(node="n1", sys_root=root, cgroup_root=None).collect(NOW)
    assert skipped.dropped == {} and skipped.tables["container_numa_samples"].num_rows == 0
