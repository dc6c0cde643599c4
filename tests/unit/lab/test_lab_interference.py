"""The simulated cluster's interference model (sits_observe.lab.cluster.serving.interference): a
server alone runs at its measured speed; a bandwidth-heavy neighbour on its GPU slows it, boundedly,
and the same seeded request stream then finishes with a higher P95 latency."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from sits_observe.lab.cluster.activity import PodDemand
from sits_observe.lab.cluster.cluster import SimulatedCluster
from sits_observe.lab.cluster.node_topology import node_placement
from sits_observe.lab.cluster.pods.specs import PodSpec
from sits_observe.lab.cluster.serving.interference import MAX_SLOWDOWN, server_slowdown

NODE = "gpu-node-1"


def _training(c: SimulatedCluster) -> PodSpec:
    while True:
        spec = c.workloads.next_pod()
        if spec.kind == "batch" and spec.num_gpu >= 1 and spec.gpu_percent == 100:
            return dataclasses.replace(spec, num_gpu=1, duration_s=1e6)


def _run(*, neighbour: bool, seconds: int = 240) -> tuple[list[float], list[float]]:
    c = SimulatedCluster(nodes=1, gpus_per_node=8, seed=21, standalone=False)
    server = c.start_pod(c.workloads.llm_replica(), NODE, [0, 1, 2, 3])
    job = _training(c)
    if neighbour:
        c.start_pod(job, NODE, [0])  # time-sliced onto the server's first GPU
    slowdowns: list[float] = []
    for _ in range(seconds):
        c.step(1.0)
        assert server.server is not None
        slowdowns.append(server.server.slowdown)
    latencies = [r.latency_s for _, r in c.finished_requests(NODE)]
    return slowdowns, latencies


def test_a_bandwidth_heavy_neighbour_slows_the_server_and_raises_its_p95() -> None:
    alone_slow, alone_lat = _run(neighbour=False)
    packed_slow, packed_lat = _run(neighbour=True)
    assert set(alone_slow) == {1.0}
    assert all(1.2 < s <= MAX_SLOWDOWN for s in packed_slow[2:])
    assert len(alone_lat) > 100 and len(packed_lat) > 100
    p95_alone = float(np.percentile(alone_lat, 95))
    p95_packed = float(np.percentile(packed_lat, 95))
    assert p95_packed > 1.1 * p95_alone


def test_slowdown_is_one_alone_and_bounded_at_worst() -> None:
    placement = node_placement(8)
    kwargs = {"pcie_bytes_per_s": 64e9, "nvlink_bytes_per_s": 450e9}
    assert server_slowdown([0, 1], [], placement, **kwargs) == 1.0
    flat_out = PodDemand(
        busy_ratio=1.0,
        tensor_ratio=1.0,
        dram_ratio=1.0,
        pcie_tx_bytes_per_s=64e9,
        pcie_rx_bytes_per_s=64e9,
        nvlink_bytes_per_s=450e9,
    )
    worst = server_slowdown([0], [{0: flat_out}] * 4, placement, **kwargs)
    assert worst == MAX_SLOWDOWN


def test_a_neighbour_nearer_on_the_node_slows_more() -> None:
    placement = node_placement(8)
    kwargs = {"pcie_bytes_per_s": 32e9, "nvlink_bytes_per_s": 300e9}
    loader = PodDemand(pcie_rx_bytes_per_s=16e9)
    same_switch = server_slowdown([0], [{1: loader}], placement, **kwargs)
    same_numa = server_slowdown([0], [{2: loader}], placement, **kwargs)
    other_socket = server_slowdown([0], [{6: loader}], placement, **kwargs)
    assert same_switch > same_numa > other_socket > 1.0
    assert same_switch == pytest.approx(1.05)


def test_two_servers_packed_on_the_same_gpus_slow_each_other() -> None:
    c = SimulatedCluster(nodes=1, gpus_per_node=8, seed=21, standalone=False)
    a = c.start_pod(c.workloads.llm_replica(), NODE, [0, 1, 2, 3])
    b = c.start_pod(c.workloads.llm_replica(), NODE, [0, 1, 2, 3])
    spread = c.start_pod(c.workloads.llm_replica(), NODE, [4, 5, 6, 7])
    for _ in range(60):
        c.step(1.0)
    assert a.server is not None and b.server is not None and spread.server is not None
    assert a.server.slowdown > 1.1 and b.server.slowdown > 1.1
    # The third server shares no GPU: only the node's PCIe traffic touches it.
    assert spread.server.slowdown < 1.01
