"""The what-if replay on DRA-shaped nodes: how much of first fit's device waste node choice
recovers.

Under Dynamic Resource Allocation kube-scheduler chooses the node, and its DynamicResources
plugin then takes the first device of the node's ResourceSlices that fits each claim
(:mod:`sits_observe.analytics.fragmentation.dra_allocator`). An extender only steers the node.
This replay measures what that is worth: the same pods, the same arrival order, the same
first-fit device choice, under two node choices:

- ``kube-default``: kube-scheduler's default profile, no extender;
- ``kube-sits``: kube-scheduler calling the service's own extender handler in process
  (:class:`~sits_observe.lab.replay.extender.ExtenderReplayPolicy`, the shipped
  ``deploy/scheduler-config.yaml`` without its bind verb: the GPU hint the bind verb writes
  is HAMi's, which the DRA allocator does not read, and the extender's view learns each
  pod's devices from the placement, as the service does from the next inventory snapshot).

**The nodes** (:func:`dra_cluster`): ``gpus_per_node`` A100-40GB each, the first
``partitionable_gpus`` of them under dynamic MIG (one counter set per GPU: eight
``memory-slice-<i>`` counters and 98 multiprocessors; the whole GPU, then 1g.5gb at 0-6,
2g.10gb at 0/2/4, 3g.20gb at 0/4, 4g.20gb at 0 and 7g.40gb: NVIDIA's A100 placements in the
natural order of the driver's device names, the order
:func:`~sits_observe.analytics.fragmentation.dra.first_fit_waste_of` assumes), the others
plain GPUs, listed after them.

**The pods** (:func:`dra_pods`): claims for one MIG profile (1g.5gb, 2g.10gb, 3g.20gb) or for
1, 2, 4 or 8 whole GPUs, drawn with the weights of :class:`DraReplaySettings`, with CPU and
memory in proportion. The scheduler model and the extender see each claim as the share of
one GPU it takes: its memory slices x 125 milli (a 3g.20gb takes four of eight slices: 500),
as the inventory counts a MIG device's share; whole GPUs as 1000 each.

**The measure**, at the end of each replay, per node: the claims it got, in arrival order,
allocated again by first fit and by the best-fit rule from an empty node
(:func:`~sits_observe.analytics.fragmentation.dra_allocator.first_fit_waste`); first fit's
stranded slices are the replay's own. Summed over the nodes: stranded slices under first fit
and best fit, the slices first fit wastes beyond best fit, and split GPUs. Units: memory
slices (one eighth of an A100-40GB), GPUs. ``best_fit_failed`` counts the devices best fit
could not find for claims first fit placed (best fit is a rule, not an optimum).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from sits_observe.analytics.fragmentation.dra_allocator import (
    WHOLE_GPU,
    FirstFitWaste,
    NodeAllocation,
    NodeDevices,
    PoolDevice,
    first_fit_waste,
)
from sits_observe.analytics.traces.cluster_trace import NodeList, PodList
from sits_observe.lab.replay.engine.kube import KubePolicy
from sits_observe.lab.replay.engine.replay import SimulationSettings, replay
from sits_observe.lab.replay.extender import DEFAULT_SCHEDULER_CONFIG, ExtenderReplayPolicy
from sits_observe.lab.scheduler.config import load_scheduler_config
from sits_observe.lab.scheduler.kube_nodes import SchedPod

#: The GPU model of the DRA-shaped nodes.
A100 = "A100-SXM4-40GB"
#: A100-40GB MIG placements: profile -> (starts, memory slices, multiprocessors), from
#: NVIDIA's MIG user guide (A100 profiles) and the driver's published placements.
A100_PROFILES: dict[str, tuple[tuple[int, ...], int, int]] = {
    "1g.5gb": (tuple(range(7)), 1, 14),
    "2g.10gb": ((0, 2, 4), 2, 28),
    "3g.20gb": ((0, 4), 4, 42),
    "4g.20gb": ((0,), 4, 56),
    "7g.40gb": ((0,), 8, 98),
}
SLICES_PER_GPU = 8
MILLI_PER_SLICE = 1000 // SLICES_PER_GPU
#: The claims of the replay's pods: profile -> GPU milli the scheduler sees.
CLAIM_MILLI = {"1g.5gb": 125, "2g.10gb": 250, "3g.20gb": 500, WHOLE_GPU: 1000}
POLICIES = ("kube-default", "kube-sits")


class DraReplaySettings(BaseModel):
    """The DRA-shaped cluster and workload of :func:`dra_replay`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    nodes: int = Field(32, ge=1, le=1024, description="nodes")
    gpus_per_node: int = Field(8, ge=1, le=16, description="A100-40GB GPUs per node")
    partitionable_gpus: int = Field(
        4, ge=0, le=16, description="GPUs per node under dynamic MIG, listed first"
    )
    cpu_per_node_milli: int = Field(96_000, gt=0, description="CPU per node, milli-CPU")
    cpu_per_gpu_milli: int = Field(
        8_000, gt=0, description="CPU a pod asks per whole GPU it holds (a share: in proportion)"
    )
    mig_1g_weight: float = Field(0.30, ge=0, description="weight of 1g.5gb claims")
    mig_2g_weight: float = Field(0.20, ge=0, description="weight of 2g.10gb claims")
    mig_3g_weight: float = Field(0.15, ge=0, description="weight of 3g.20gb claims")
    gpu_1_weight: float = Field(0.20, ge=0, description="weight of one-GPU claims")
    gpu_2_weight: float = Field(0.08, ge=0, description="weight of two-GPU claims")
    gpu_4_weight: float = Field(0.05, ge=0, description="weight of four-GPU claims")
    gpu_8_weight: float = Field(0.02, ge=0, description="weight of eight-GPU claims")
    pods: int = Field(400, ge=1, description="pods in the list the arrivals are drawn from")
    load_ratio: float = Field(
        1.0, gt=0, le=3.0, description="arrived GPU request as a multiple of GPU capacity"
    )


# -- the cluster and the workload ------------------------------------------------------------


def a100_devices(gpu: int) -> list[PoolDevice]:
    """The devices of A100 ``gpu`` under dynamic MIG, in published order."""
    key = f"gpu-{gpu}"
    totals = {"multiprocessors": 98, **_slices(0, SLICES_PER_GPU)}
    devices = [PoolDevice(key, key, WHOLE_GPU, totals)]
    for profile, (starts, size, sms) in A100_PROFILES.items():
        for start in starts:
            counters = {"multiprocessors": sms, **_slices(start, size)}
            devices.append(PoolDevice(f"{key}-mig-{profile}-{start}", key, profile, counters))
    return devices


def node_devices(node: str, gpus: int, partitionable: int) -> NodeDevices:
    """A node's pool: the first ``partitionable`` GPUs under dynamic MIG, then plain ones."""
    devices: list[PoolDevice] = []
    sets: dict[str, dict[str, int]] = {}
    for g in range(gpus):
        if g < partitionable:
            devices += a100_devices(g)
            sets[f"gpu-{g}"] = {"multiprocessors": 98, **_slices(0, SLICES_PER_GPU)}
        else:
            devices.append(PoolDevice(f"gpu-{g}", f"gpu-{g}", WHOLE_GPU))
    return NodeDevices(node, tuple(devices), sets)


def dra_cluster(settings: DraReplaySettings) -> tuple[NodeList, dict[str, NodeDevices]]:
    """The replay's node list and each node's DRA pool."""
    n = settings.nodes
    names = tuple(f"dra-node-{i:03d}" for i in range(n))
    gpus = settings.gpus_per_node
    nodes = NodeList(
        names,
        np.full(n, settings.cpu_per_node_milli, dtype=np.int64),
        np.full(n, 1024 * 1024, dtype=np.int64),
        np.full(n, gpus, dtype=np.int64),
        (A100,) * n,
        source="dra",
    )
    part = min(settings.partitionable_gpus, gpus)
    return nodes, {name: node_devices(name, gpus, part) for name in names}


def dra_pods(settings: DraReplaySettings, seed: int = 0) -> PodList:
    """The pod list: ``settings.pods`` claims drawn with the settings' weights."""
    kinds = [
        ("1g.5gb", 1),
        ("2g.10gb", 1),
        ("3g.20gb", 1),
        (WHOLE_GPU, 1),
        (WHOLE_GPU, 2),
        (WHOLE_GPU, 4),
        (WHOLE_GPU, 8),
    ]
    weights = np.array(
        [
            settings.mig_1g_weight,
            settings.mig_2g_weight,
            settings.mig_3g_weight,
            settings.gpu_1_weight,
            settings.gpu_2_weight,
            settings.gpu_4_weight,
            settings.gpu_8_weight,
        ]
    )
    if weights.sum() <= 0:
        raise ValueError("at least one claim weight must be > 0")
    rng = np.random.default_rng(seed)
    drawn = rng.choice(len(kinds), size=settings.pods, p=weights / weights.sum())
    milli = np.array([CLAIM_MILLI[kinds[k][0]] for k in drawn], dtype=np.int64)
    count = np.array([kinds[k][1] for k in drawn], dtype=np.int64)
    cpu = count * milli * settings.cpu_per_gpu_milli // 1000
    return PodList(
        tuple(f"dra-pod-{i:05d}" for i in range(settings.pods)),
        cpu,
        count * milli * 64 // 1000 * 1024,  # 64 GiB of host memory per GPU
        count,
        milli,
        ((A100,),) * settings.pods,
        source="dra",
    )


def claim_of(pod: SchedPod) -> tuple[str, int]:
    """The (profile, count) a replay pod's claim asks for."""
    if pod.gpu_milli >= 1000:
        return WHOLE_GPU, pod.num_gpu
    profile = next((p for p, m in CLAIM_MILLI.items() if m == pod.gpu_milli), None)
    if profile is None:
        raise ValueError(f"pod {pod.name}: {pod.gpu_milli} milli is no claim of the replay")
    return profile, pod.num_gpu


# -- DRA's allocator in the replay -----------------------------------------------------------


class DraDevices:
    """The DynamicResources plugin in the replay (a :class:`~sits_observe.lab.replay.engine.kube.
    DeviceStep`): filters nodes where a claim cannot be allocated, allocates first fit, and
    keeps each node's claims in arrival order for the measure."""

    def __init__(self, pools: Mapping[str, NodeDevices]) -> None:
        self.pools = dict(pools)
        self.allocations: dict[str, NodeAllocation] = {}
        self.claims: dict[str, list[tuple[str, int]]] = {}
        self._gpu_index = {
            name: {gpu: i for i, gpu in enumerate(pool.gpus)} for name, pool in self.pools.items()
        }
        self.reset()

    def reset(self) -> None:
        """Empty every node."""
        self.allocations = {name: NodeAllocation(pool) for name, pool in self.pools.items()}
        self.claims = {name: [] for name in self.pools}

    def feasible(self, node: str, pod: SchedPod) -> bool:
        """Whether the pod's claim can be allocated on ``node`` now."""
        profile, count = claim_of(pod)
        return self.allocations[node].can_allocate(profile, count)

    def allocate(self, node: str, pod: SchedPod) -> tuple[int, ...] | None:
        """First fit on ``node``; the GPU index of each device, None when the claim does not fit."""
        profile, count = claim_of(pod)
        allocation = self.allocations[node]
        if not allocation.can_allocate(profile, count):
            return None
        taken = [allocation.allocate(profile, "first_fit") for _ in range(count)]
        self.claims[node].append((profile, count))
        index = self._gpu_index[node]
        return tuple(index[d.gpu] for d in taken if d is not None)

    def waste(self) -> list[FirstFitWaste]:
        """First fit's waste on every node that holds a claim."""
        return [
            first_fit_waste(self.pools[node], claims)
            for node, claims in self.claims.items()
            if claims
        ]


# -- the replay ------------------------------------------------------------------------------


@dataclass(frozen=True)
class DraArmResult:
    """One node choice, one seed: placements and first fit's waste summed over the nodes."""

    policy: str
    seed: int
    pods_placed: int
    pods_failed: int
    alloc_ratio: float
    slices_free: int
    first_fit_stranded_slices: int
    best_fit_stranded_slices: int
    wasted_slices: int
    first_fit_split_gpus: int
    best_fit_split_gpus: int
    best_fit_failed: int


def dra_replay(
    settings: DraReplaySettings,
    seeds: Sequence[int],
    *,
    policies: Sequence[str] = POLICIES,
    scheduler_config: str | None = None,
) -> list[DraArmResult]:
    """Every policy of ``policies`` (:data:`POLICIES`) x every seed, one result each."""
    nodes, pools = dra_cluster(settings)
    pods = dra_pods(settings)
    replay_settings = SimulationSettings(load_ratio=settings.load_ratio, tie_break="random")
    results = []
    for name in policies:
        for seed in seeds:
            devices = DraDevices(pools)
            policy = _policy(name, pods, devices, scheduler_config)
            found = replay(nodes, pods, policy, seed, replay_settings)
            waste = devices.waste()
            results.append(
                DraArmResult(
                    name,
                    seed,
                    found.pods_placed,
                    found.pods_failed,
                    float(found.alloc_ratio[-1]),
                    sum(w.first_fit.slices_free for w in waste),
                    sum(w.first_fit.slices_stranded for w in waste),
                    sum(w.best_fit.slices_stranded for w in waste),
                    sum(w.wasted_slices for w in waste),
                    sum(w.first_fit.split_gpus for w in waste),
                    sum(w.best_fit.split_gpus for w in waste),
                    sum(w.best_fit.failed for w in waste),
                )
            )
    return results


def _policy(
    name: str, pods: PodList, devices: DraDevices, config_path: str | None
) -> KubePolicy | ExtenderReplayPolicy:
    if name == "kube-default":
        return KubePolicy(name, devices=devices)
    if name == "kube-sits":
        config = load_scheduler_config(config_path or DEFAULT_SCHEDULER_CONFIG)
        return ExtenderReplayPolicy(name, config, pods, no_bind=True, devices=devices)
    raise ValueError(f"unknown policy {name!r}: choose from {', '.join(POLICIES)}")


def _slices(start: int, size: int) -> dict[str, int]:
    return {f"memory-slice-{i}": 1 for i in range(start, start + size)}
