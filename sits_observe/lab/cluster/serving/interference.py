"""How much co-located pods slow a simulated LLM server (its ``slowdown``, 1.0 = alone).

Built on the inputs of the product's interference score (SPEC "Topology and interference":
0.4 GPU-bandwidth utilisation + 0.35 NVLink conflict + 0.25 NUMA miss;
:mod:`sits_observe.analytics.topology.interference`), from what the *other* pods did in the
previous step (:class:`~.activity.PodDemand`, as fractions of the card):

- **Same GPU** (time-sliced or HAMi-shared: several pods on one GPU index). A decode step is
  memory-bound, so a neighbour's DRAM traffic takes bandwidth it needs:
  ``K_DRAM x min(1, sum of the neighbours' DRAM active)``; the neighbours' kernel time also
  delays the server's kernels on a shared card: ``K_SM x min(1, sum of their busy)``.
- **Same node**: PCIe and host-memory contention. Each neighbour's PCIe traffic, as a
  fraction of its GPU's link, counts in full when it sits behind the same PCIe switch, by
  :data:`SAME_NUMA_WEIGHT` on the same NUMA node, by :data:`CROSS_NUMA_WEIGHT` across
  sockets: ``K_PCIE x min(1, weighted sum)``. NVLink traffic of other pods on the server's
  GPUs (the score's NVLink-conflict input) adds ``K_NVLINK x min(1, their NVLink share)``.

``slowdown = min(MAX_SLOWDOWN, 1 + same-GPU terms + node terms)``: exactly 1.0 with no
neighbour, at most :data:`MAX_SLOWDOWN`. A tensor-parallel server takes the worst of its
GPUs (its all-reduce waits for the slowest rank).

What the constants rest on, and what is assumed:

- Elvinger, Strati, Enright Jerger, Klimovic, "Understanding GPU Resource Interference One
  Level Deeper" (SoCC 2025, arXiv 2501.16909): memory bandwidth is the dominant contention
  channel for co-located kernels, compute-unit sharing next.
- Villarrubia et al., "A comprehensive evaluation of spatial co-execution on GPUs using MPS
  and MIG" (arXiv 2604.22430, 2026): under memory contention MPS co-execution is about 30 %
  slower than alone.
- A public A100-80GB case study of two vLLM servers sharing one card through MPS (two light
  models): time per output token +19.5 %, TTFT +1.4 %.
- ``K_DRAM`` = 0.5 (a neighbour that saturates the card's memory bandwidth makes a decode step
  1.5x: the 30 % above at partial saturation, extrapolated), ``K_SM`` = 0.25, ``K_PCIE`` = 0.1,
  ``K_NVLINK`` = 0.1 and ``MAX_SLOWDOWN`` = 1.8 are assumptions of this model, chosen inside
  those published ranges; the NUMA weights are assumptions too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sits_observe.lab.cluster.activity import PodDemand

K_DRAM = 0.5
K_SM = 0.25
K_PCIE = 0.1
K_NVLINK = 0.1
MAX_SLOWDOWN = 1.8
SAME_NUMA_WEIGHT = 0.3
CROSS_NUMA_WEIGHT = 0.05


@dataclass(frozen=True)
class Placement:
    """Where a GPU sits on its node: its PCIe switch and NUMA node."""

    pcie_switch: int
    numa_node: int


def _proximity(a: Placement, b: Placement) -> float:
    if a.pcie_switch == b.pcie_switch:
        return 1.0
    return SAME_NUMA_WEIGHT if a.numa_node == b.numa_node else CROSS_NUMA_WEIGHT


def server_slowdown(
    server_gpus: Sequence[int],
    neighbours: Sequence[Mapping[int, PodDemand]],
    placement: Sequence[Placement],
    *,
    pcie_bytes_per_s: float,
    nvlink_bytes_per_s: float,
) -> float:
    """The slowdown of a server on ``server_gpus`` given the other pods of its node, each
    as ``{gpu index: its demand there}`` from the previous step."""
    worst = 1.0
    for g in server_gpus:
        dram = busy = nvlink = pcie = 0.0
        for pod in neighbours:
            for h, d in pod.items():
                if h == g:
                    dram += d.dram_ratio
                    busy += d.busy_ratio
                    nvlink += d.nvlink_bytes_per_s / nvlink_bytes_per_s
                link = (d.pcie_tx_bytes_per_s + d.pcie_rx_bytes_per_s) / pcie_bytes_per_s
                pcie += link * _proximity(placement[g], placement[h])
        extra = (
            K_DRAM * min(1.0, dram)
            + K_SM * min(1.0, busy)
            + K_NVLINK * min(1.0, nvlink)
            + K_PCIE * min(1.0, pcie)
        )
        worst = max(worst, 1.0 + extra)
    return min(worst, MAX_SLOWDOWN)
