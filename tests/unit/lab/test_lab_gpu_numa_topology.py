"""A simulated node writes the NUMA counters, container NUMA placement and GPU topology the
real collectors read, so the interference report has its NUMA input on the simulated cluster
(sits_observe.lab.cluster.node_topology, cgroupfs ``memory.numa_stat``)."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta
from pathlib import Path

from sits_observe.analytics.topology.gpu_links import load_node_topology
from sits_observe.analytics.topology.numa import (
    container_numa_rows,
    container_placement,
    numa_miss_ratios,
    numa_sample_rows,
)
from sits_observe.collectors.cgroup.numa import NumaCollector
from sits_observe.collectors.dcgm import parse_dcgm
from sits_observe.collectors.topology import TopologyCollector
from sits_observe.lab.cluster.cgroupfs import CgroupTree, CgroupValues, QosClass
from sits_observe.lab.cluster.cluster import SimulatedCluster
from sits_observe.lab.cluster.render import dcgm_text
from sits_observe.reports.interference import InterferenceQuery, build
from sits_observe.reports.window import Window
from sits_observe.store import Store

NODE = "gpu-node-1"
T0 = datetime(2026, 12, 1, 9, 0)


def _cluster() -> SimulatedCluster:
    c = SimulatedCluster(nodes=1, gpus_per_node=8, seed=4, standalone=False)
    c.start_pod(c.workloads.llm_replica(), NODE, [0, 1, 2, 3])
    while True:
        spec = c.workloads.next_pod()
        if spec.kind == "batch" and spec.num_gpu >= 1 and spec.gpu_percent == 100:
            c.start_pod(dataclasses.replace(spec, num_gpu=1, duration_s=1e6), NODE, [5])
            return c


def _tree(c: SimulatedCluster, root: Path) -> CgroupTree:
    tree = CgroupTree(root)
    tree.add_kubepods()
    for pod in c.nodes[NODE].pods.values():
        for container in pod.containers:
            tree.add_container(
                pod.uid,
                container.container_id,
                qos=QosClass(pod.qos_class),
                values=CgroupValues(
                    memory_current_bytes=container.memory_bytes,
                    memory_anon_bytes=int(container.memory_bytes * 0.8),
                    memory_file_bytes=int(container.memory_bytes * 0.2),
                    memory_numa_ratios=c.numa_split(pod),
                ),
            )
    return tree


def test_the_real_collectors_read_numa_and_topology_from_a_simulated_node(
    tmp_path: Path,
) -> None:
    c = _cluster()
    sys_root = tmp_path / "sys"
    _tree(c, tmp_path / "cgroup")
    numa = NumaCollector(node=NODE, sys_root=sys_root, cgroup_root=tmp_path / "cgroup")
    store = Store.open(":memory:")
    for minute in range(4):
        for _ in range(15):
            c.step(1.0)
        c.write_sysfs(NODE, sys_root)
        at = T0 + timedelta(minutes=minute)
        for result in (numa.collect(at), parse_dcgm(dcgm_text(c, NODE), now=at, node=NODE)):
            assert not result.dropped
            for name, table in result.tables.items():
                store.append(name, table)
    topology = TopologyCollector(node=NODE, nvml=c.nvml(NODE), sys_root=sys_root).collect(T0)
    assert not topology.dropped
    for name, table in topology.tables.items():
        store.append(name, table)

    gpus = topology.tables["gpu_topology"].to_pylist()
    assert [g["numa_node"] for g in gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert {g["cpu_affinity"] for g in gpus} == {"0-63", "64-127"}
    assert {g["nvlink_links_active"] for g in gpus} == {18}
    assert {link["path"] for link in topology.tables["gpu_links"].to_pylist()} == {"nvlink"}
    assert load_node_topology(store)[NODE].gpus == 8

    # The Guaranteed server with whole CPUs stays on its GPUs' socket (1 % misses); the
    # training pod may not, so the node's miss ratio, measured from counter deltas, is
    # between the two.
    ratio = numa_miss_ratios(numa_sample_rows(store))[NODE]
    assert 0.0 < ratio < 0.35
    placements = container_placement(container_numa_rows(store))
    assert len(placements) == 2 and all(p.numa_nodes_used == 2 for p in placements)

    report = build(store, Window(T0, T0 + timedelta(minutes=5), "given"), InterferenceQuery())
    (node_row,) = report.main.rows.to_pylist()
    assert node_row["numa_miss_ratio"] == ratio
    assert "numa_miss_ratio" not in node_row["missing_inputs"]
