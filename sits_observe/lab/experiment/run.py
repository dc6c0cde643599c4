"""One experiment run: one arm, one seed, stepped on a simulated clock, recorded as a timeline.

Every step of ``step_s`` simulated seconds, in this order (the order a real cluster's
components would interleave within a second, made fixed so a seed gives one result):

1. the simulated cluster advances (servers decode, Jobs finish; the runtime appends the
   finished requests to the nodes' request logs and tells the kubelet which pods ended);
2. the workload controllers pass (arrivals become Pending pods, refused creations retry,
   finished pods are deleted);
3. the live scheduler passes (every Pending pod whose backoff expired gets a cycle, with the
   arm's extenders);
4. the kubelets pass (bound pods get their GPUs and start, deleted ones stop);
5. when due: the agents collect and ship (``collect_every_s``), the inventory is snapshotted
   and the extender's view rebuilt from the store (``inventory_every_s``), the controller
   passes (``controller_every_s``), and the allocation is sampled (``sample_every_s``).

The agents start once every inference replica runs (their vLLM scrapes are fixed at start,
as in the demo). At the end the agents and the inventory take a last pass (unless the last step
took it), and what the
production path stored (request latencies, GPU utilisation, pod start times, applied
decisions) is read back from the run's DuckDB file into the :class:`RunTimeline`.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sits_observe.analytics.fragmentation.fgd.model import MILLI_PER_GPU, PodShape
from sits_observe.analytics.serving.step_profiles import GPU_PRODUCTS
from sits_observe.lab.cluster.cluster import SimulatedCluster
from sits_observe.lab.cluster.pods.specs import PodSpec
from sits_observe.lab.experiment.measures import (
    ClusterSamples,
    PodTimes,
    RunTimeline,
    applied_by_action,
)
from sits_observe.lab.experiment.parts import Arm, RunParts
from sits_observe.lab.experiment.reads import (
    gpu_utilisation,
    pod_start_s,
    request_latencies_s,
    request_ttfts_s,
)
from sits_observe.lab.experiment.settings import Cadence
from sits_observe.reports.actions.decision_totals import applied_decisions
from sits_observe.store import Store
from sits_observe.surfaces.service.inventory import InventoryLoop

log = logging.getLogger(__name__)

#: Progress callback: (arm, seed, simulated seconds done, simulated seconds in all).
Progress = Callable[[str, int, float, float], None]


@dataclass(frozen=True)
class RunResult:
    """A run's timeline, its wall time and the pods that arrived (for the arms' check that
    one seed gave every arm the same workload)."""

    timeline: RunTimeline
    wall_s: float
    arrivals: tuple[str, ...]


def run_one(
    arm: Arm,
    *,
    seed: int,
    hours: float,
    nodes: int,
    gpus_per_node: int,
    cadence: Cadence,
    scheduler_config: Path,
    workdir: Path,
    progress: Progress | None = None,
) -> RunResult:
    """Run ``arm`` with ``seed`` for ``hours`` simulated hours (see the module docstring)."""
    started = time.perf_counter()
    parts = RunParts(
        arm,
        seed=seed,
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        cadence=cadence,
        scheduler_config=scheduler_config,
        workdir=workdir,
    )
    try:
        parts.start()
        timeline = _Stepper(parts, hours * 3600.0, progress).run()
    finally:
        parts.stop()
    arrivals = tuple(f"{s.namespace}/{s.name}" for _, s in parts.workloads.arrived)
    return RunResult(timeline, time.perf_counter() - started, arrivals)


class _Stepper:
    """Steps the parts of one run and records what happened."""

    def __init__(self, parts: RunParts, duration_s: float, progress: Progress | None) -> None:
        assert parts.store is not None
        self.parts = parts
        self.store: Store = parts.store
        self.cluster: SimulatedCluster = parts.cluster
        self.duration_s = duration_s
        self.progress = progress
        self.inventory = InventoryLoop(
            parts.inventory_collector,
            parts.store,
            interval_s=parts.cadence.inventory_every_s,
            clock=parts.clock.utc,
        )
        self.bound_s: dict[str, float] = {}
        self.sample_t: list[float] = []
        self.sample_gpu: list[np.ndarray] = []
        self.sample_cpu: list[np.ndarray] = []

    def run(self) -> RunTimeline:
        parts, cadence = self.parts, self.parts.cadence
        every = {
            "collect": cadence.every(cadence.collect_every_s),
            "inventory": cadence.every(cadence.inventory_every_s),
            "controller": cadence.every(cadence.controller_every_s),
            "sample": cadence.every(cadence.sample_every_s),
        }
        steps = max(1, math.ceil(self.duration_s / cadence.step_s - 1e-9))
        if self.progress is not None:
            self.progress(parts.arm.name, parts.seed, 0.0, steps * cadence.step_s)
        self._snapshot()
        self._sample()
        for k in range(1, steps + 1):
            assert parts.runtime is not None
            parts.runtime.advance(cadence.step_s)
            parts.driver.sync_once()
            now = self.cluster.now_s
            for name, _ in parts.scheduler.run_once().scheduled:
                self.bound_s.setdefault(name, now)
            parts.kubelet.sync_once()
            if not parts.agents and self._servers_running():
                parts.start_agents()
            if k % every["collect"] == 0:
                self._collect()
            if k % every["inventory"] == 0:
                self._snapshot()
            if parts.controller is not None and k % every["controller"] == 0:
                parts.controller.run_once()
            if k % every["sample"] == 0:
                self._sample()
            if self.progress is not None and k % every["sample"] == 0:
                self.progress(parts.arm.name, parts.seed, now, steps * cadence.step_s)
        # The last pass, unless the last step just took it: a second snapshot at the same
        # simulated time would add its rows to that snapshot (the store's chunked snapshots).
        if steps % every["collect"]:
            self._collect()
        if steps % every["inventory"]:
            self._snapshot()
        return self._timeline()

    # -- per step ---------------------------------------------------------------------

    def _servers_running(self) -> bool:
        wanted = sum(d.replicas for d in self.parts.workloads.deployments)
        with self.cluster.lock():
            running = sum(
                1 for n in self.cluster.nodes.values() for p in n.pods.values() if p.server
            )
        return running >= wanted

    def _collect(self) -> None:
        for agent in self.parts.agents:
            agent.tick()

    def _snapshot(self) -> None:
        self.inventory.run_once()
        self.parts.refresh_view()

    def _sample(self) -> None:
        with self.cluster.lock():
            nodes = list(self.cluster.nodes.values())
            width = max(len(n.gpus) for n in nodes)
            gpu = np.zeros((len(nodes), width), dtype=np.int64)
            cpu = np.zeros(len(nodes), dtype=np.int64)
            for i, node in enumerate(nodes):
                gpu[i, : len(node.gpus)] = [g.free_milli for g in node.gpus]
                used = sum(p.cpu_request_milli for p in node.pods.values())
                cpu[i] = node.cpu_milli - used
        self.sample_t.append(self.cluster.now_s)
        self.sample_gpu.append(gpu)
        self.sample_cpu.append(cpu)

    # -- the record -------------------------------------------------------------------

    def _timeline(self) -> RunTimeline:
        nodes = list(self.cluster.nodes.values())
        pods = tuple(
            PodTimes(
                f"{spec.namespace}/{spec.name}",
                _shape(spec),
                at_s,
                self.bound_s.get(f"{spec.namespace}/{spec.name}"),
            )
            for at_s, spec in self.parts.workloads.arrived
        )
        util_t, util = gpu_utilisation(self.store, self.parts.clock.epoch.timestamp())
        return RunTimeline(
            arm=self.parts.arm.name,
            seed=self.parts.seed,
            end_s=self.cluster.now_s,
            node_names=tuple(n.name for n in nodes),
            gpu_models=tuple(GPU_PRODUCTS[n.kind] for n in nodes),
            gpu_count=np.array([len(n.gpus) for n in nodes], dtype=np.int64),
            cpu_capacity_milli=np.array([n.cpu_milli for n in nodes], dtype=np.int64),
            samples=ClusterSamples(
                np.array(self.sample_t, dtype=np.float64),
                np.stack(self.sample_gpu),
                np.stack(self.sample_cpu),
            ),
            pods=pods,
            util_t_s=util_t,
            util_ratio=util,
            latencies_s=request_latencies_s(self.store),
            ttfts_s=request_ttfts_s(self.store),
            pod_start_s=pod_start_s(self.store),
            quota_rejections=int(self.parts.driver.counts.outcomes["rejected_quota"]),
            controller_applied=applied_by_action(applied_decisions(self.store)),
            scheduled_by_path=applied_by_action(
                {
                    k.removeprefix("scheduled_"): v
                    for k, v in self.parts.scheduler.totals.items()
                    if k.startswith("scheduled_")
                }
            ),
            extender_calls=applied_by_action(
                {
                    f"{verb}_{outcome}": n
                    for (verb, outcome), n in self.parts.extender_calls().items()
                    if n
                }
            ),
        )


def _shape(spec: PodSpec) -> PodShape:
    """The FGD shape of a workload pod (a share is ``gpu_percent`` of one GPU)."""
    if not spec.num_gpu:
        return PodShape(spec.cpu_request_milli, 0, 0)
    milli = spec.gpu_percent * MILLI_PER_GPU // 100
    return PodShape(spec.cpu_request_milli, spec.num_gpu, milli, spec.gpu_types)
