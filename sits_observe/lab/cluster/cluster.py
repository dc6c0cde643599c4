"""The simulated GPU cluster: nodes, GPUs, the pods running on them, and their memory.

The model holds what the nodes run; it does not decide where pods go. Pods start on a node
through :meth:`SimulatedCluster.start_pod`, with the GPUs the node's device plugin chose:

- in the demo (``standalone=False``) the pods come from the workloads (:mod:`.pods.generator`) as
  Pending pods in the Kubernetes API; a scheduler binds them and the simulated kubelet
  (:mod:`.kubelet`) starts them here. Nothing runs until then.
- ``standalone=True`` (the default, for format tests that run the exporters without an API)
  is the node model alone: every node starts one inference replica and each arriving Job or
  notebook goes to a random node whose device plugin finds it room (or is dropped and counted
  in :attr:`SimulatedCluster.dropped_arrivals`).

Inference pods run an LLM server (:mod:`.server`) that claims the share of its GPUs' memory its
``--gpu-memory-utilization`` argument sets; batch jobs grow their GPU memory linearly to the
peak and free it when they end; notebooks hold small allocations, and an idle notebook (one
that runs for ever) holds the model it loaded and runs no kernel. That churn leaves free
memory and free shares scattered over GPUs, which the fragmentation analytics measure, and
pushes container memory towards its cgroup limits, which the memory-pressure signals show.
Each GPU also records the share (milli-GPU) and the pods the device plugin assigned to it.

Each step also turns what the pods on each GPU did into its DCGM activity, clocks, power and
temperature (:mod:`.activity`, inside the model's envelope, :mod:`.gpu_models`), sets every
server's slowdown from its neighbours' use of the GPU, NVLink and PCIe in the previous step
(:mod:`.interference`), and counts the node's NUMA page allocations (:mod:`.node_topology`,
which also lays out its sysfs NUMA files and answers NVML's topology calls). The state records
(GPU, container, pod, node) are in :mod:`.sim_state`.

The model is deterministic for a seed and advances in explicit steps (:meth:`step`); the
runtime (:mod:`.runtime`) maps it to wall time and serves it in the real formats.
"""

from __future__ import annotations

import threading
import uuid
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from sits_observe.analytics.placement.device_plugin import (
    MILLI_PER_GPU,
    DeviceAllocationError,
    allocate_gpus,
)
from sits_observe.analytics.serving.step_profiles import (
    GIB,
    GPU_PRODUCTS,
    KV_BYTES_PER_TOKEN,
    MIB,
    PROFILES,
    WEIGHT_BYTES,
)
from sits_observe.lab.cluster.activity import (
    GpuActivity,
    PodDemand,
    gpu_activity,
    idle_activity,
    idle_demand,
    open_loop_demand,
    server_demand,
    training_demand,
)
from sits_observe.lab.cluster.gpu_models import GpuEnvelope
from sits_observe.lab.cluster.node_topology import (
    ALLOC_BYTES_PER_S,
    PAGE_BYTES,
    SimNvml,
    node_placement,
    numa_miss_share,
    write_sysfs,
)
from sits_observe.lab.cluster.pods.generator import LLM_MODEL, WorkloadGenerator
from sits_observe.lab.cluster.pods.specs import PodSpec
from sits_observe.lab.cluster.serving.interference import server_slowdown
from sits_observe.lab.cluster.serving.server import InferenceServer, RequestRecord
from sits_observe.lab.cluster.serving.workload import ArrivalGenerator, LoadProfile
from sits_observe.lab.cluster.sim_state import PodEvent, SimContainer, SimGpu, SimNode, SimPod

# The state records live in .sim_state; importers of the cluster get them from here too.
__all__ = ["PodEvent", "SimContainer", "SimGpu", "SimNode", "SimPod", "SimulatedCluster"]


class SimulatedCluster:
    """The whole cluster model (see module docstring). Thread-safe."""

    def __init__(
        self,
        *,
        nodes: int = 2,
        gpus_per_node: int = 4,
        seed: int = 7,
        load: LoadProfile | None = None,
        standalone: bool = True,
        idle_notebooks: int = 0,
    ) -> None:
        if nodes < 1 or gpus_per_node < 1:
            raise ValueError("a simulated cluster needs at least one node and one GPU per node")
        self.rng = np.random.default_rng(seed)
        self._uuid_rng = np.random.default_rng(seed + 1)
        # Each server's requests draw from a stream of its own (_requests): the pods' memory
        # noise draws from self.rng once per running container and step, so one shared
        # stream gave the servers different requests whenever the scheduler ran a different
        # number of pods, and two experiment arms of one seed were not the same traffic.
        self._seed = seed
        self._load = load or LoadProfile()
        self._streams: dict[str, ArrivalGenerator] = {}
        self._replicas_seen: dict[str, int] = {}
        self.now_s = 0.0
        self.nodes: dict[str, SimNode] = {}
        self.events: list[PodEvent] = []
        self.standalone = standalone
        #: Standalone arrivals no node had room for.
        self.dropped_arrivals = 0
        self._lock = threading.RLock()
        self._time_slices: dict[str, float] = {}
        for n in range(nodes):
            kind = "h100" if n % 2 == 0 else "a100"
            name = f"gpu-node-{n + 1}"
            gpus = [
                SimGpu(name, i, f"GPU-{self._uuid()}", kind, f"00000000:{0x18 + 0x11 * i:02X}:00.0")
                for i in range(gpus_per_node)
            ]
            self.nodes[name] = SimNode(name, kind, gpus)
        self.workloads = WorkloadGenerator(
            products=[GPU_PRODUCTS[n.kind] for n in self.nodes.values()],
            gpus_per_node=gpus_per_node,
            seed=seed,
            idle_notebooks=idle_notebooks,
        )
        if standalone:
            tp = self.workloads.tensor_parallel
            by_product = {d.product: d for d in self.workloads.deployments}
            for node in self.nodes.values():
                replica = self.workloads.llm_replica(by_product[GPU_PRODUCTS[node.kind]])
                self.start_pod(replica, node.name, list(range(tp)))
            for owner in self.workloads.idle_notebook_owners:
                self._place_standalone(self.workloads.idle_notebook(owner))

    # -- identity helpers -------------------------------------------------------------

    def _uuid(self) -> str:
        return str(uuid.UUID(bytes=self._uuid_rng.bytes(16), version=4))

    def _container_id(self) -> str:
        return self._uuid_rng.bytes(32).hex()

    # -- pod life cycle ---------------------------------------------------------------

    def start_pod(self, spec: PodSpec, node_name: str, gpu_indices: Sequence[int]) -> SimPod:
        """Run ``spec`` on ``node_name`` holding ``gpu_indices`` (the device plugin's choice).

        Raises ``KeyError`` for an unknown node and ``ValueError`` when the pod already runs.
        """
        with self._lock:
            node = self.nodes[node_name]
            if any(spec.uid in n.pods for n in self.nodes.values()):
                raise ValueError(f"pod {spec.namespace}/{spec.name} is already running")
            milli = spec.gpu_percent * MILLI_PER_GPU // 100
            pod = SimPod(
                uid=spec.uid,
                name=spec.name,
                namespace=spec.namespace,
                kind=spec.kind,
                node=node_name,
                qos_class=spec.qos_class,
                gpu_indices=list(gpu_indices),
                containers=[
                    SimContainer(
                        spec.container,
                        self._container_id(),
                        24 * GIB if spec.kind == "llm" else int(0.5 * GIB),
                        spec.memory_limit_bytes,
                        spec.cpu_limit_cores,
                    )
                ],
                created_s=self.now_s,
                ends_s=None if spec.duration_s is None else self.now_s + spec.duration_s,
                gpu_peak_bytes=spec.gpu_peak_bytes,
                gpu_request=spec.num_gpu,
                cpu_request_milli=spec.cpu_request_milli,
                memory_request_bytes=spec.memory_request_bytes,
                owner=spec.owner.name,
                gpu_milli=milli,
                workload=spec.workload,
                args=spec.args,
            )
            if spec.kind == "llm":
                self._attach_server(node, pod, spec.gpu_memory_utilization)
            for i in pod.gpu_indices:
                gpu = node.gpus[i]
                gpu.share_milli[pod.uid] = milli
                # A server claims its share and a pod that runs for ever has loaded its model;
                # a Job grows to its peak (_step_node).
                held = pod.server is not None or pod.ends_s is None
                gpu.used_bytes[pod.uid] = (
                    pod.gpu_peak_bytes if held else int(pod.gpu_peak_bytes * 0.1)
                )
            node.pods[pod.uid] = pod
            self.events.append(PodEvent("added", pod, self.now_s))
            return pod

    def _attach_server(self, node: SimNode, pod: SimPod, utilization: float) -> None:
        """vLLM's claim: ``utilization`` (its ``--gpu-memory-utilization``) of each GPU."""
        tp = max(1, len(pod.gpu_indices))
        per_gpu_claim = int(node.gpus[0].total_bytes * utilization)
        kv_capacity = max(per_gpu_claim * tp - WEIGHT_BYTES, 64 * KV_BYTES_PER_TOKEN * 1024)
        pod.gpu_peak_bytes = per_gpu_claim
        pod.server = InferenceServer(
            LLM_MODEL, PROFILES[node.kind], tensor_parallel=tp, kv_capacity_bytes=kv_capacity
        )
        pod.server.time_slice_s = self._time_slices.get(pod.workload_key)

    def stop_pod(self, uid: str) -> SimPod | None:
        """Stop a running pod (deleted through the API); None when it does not run here."""
        with self._lock:
            for node in self.nodes.values():
                pod = node.pods.get(uid)
                if pod is not None:
                    self._remove(node, pod, completed=False)
                    return pod
            return None

    def running(self, uid: str) -> SimPod | None:
        """The running pod with ``uid``, if any."""
        with self._lock:
            for node in self.nodes.values():
                if uid in node.pods:
                    return node.pods[uid]
            return None

    def _remove(self, node: SimNode, pod: SimPod, *, completed: bool) -> None:
        for gpu in node.gpus:
            gpu.used_bytes.pop(pod.uid, None)
            gpu.share_milli.pop(pod.uid, None)
        del node.pods[pod.uid]
        self.events.append(PodEvent("deleted", pod, self.now_s, completed))

    def _place_standalone(self, spec: PodSpec) -> None:
        """The node model alone: a random node whose device plugin has room, else dropped."""
        names = list(self.nodes)
        order = self.rng.permutation(len(names))
        milli = spec.gpu_percent * MILLI_PER_GPU // 100
        for i in order.tolist():
            node = self.nodes[names[i]]
            free, pods, uuids = node.device_state()
            try:
                gpus = allocate_gpus(free, pods, uuids, num_gpu=spec.num_gpu, gpu_milli=milli)
            except DeviceAllocationError:
                continue
            if all(node.gpus[g].fb_free_bytes >= spec.gpu_peak_bytes for g in gpus):
                self.start_pod(spec, node.name, gpus)
                return
        self.dropped_arrivals += 1

    # -- time slices ------------------------------------------------------------------

    def set_time_slices(self, slices_s: Mapping[str, float]) -> None:
        """The GPU time slice per ``namespace/workload`` (the device plugin's config); servers
        of workloads not named run without time slicing."""
        with self._lock:
            self._time_slices = dict(slices_s)
            for node in self.nodes.values():
                for pod in node.pods.values():
                    if pod.server is not None:
                        pod.server.time_slice_s = self._time_slices.get(pod.workload_key)

    # -- time -------------------------------------------------------------------------

    def step(self, dt_s: float) -> None:
        """Advance the cluster by ``dt_s`` simulated seconds."""
        with self._lock:
            start = self.now_s
            self.now_s += dt_s
            servers = [
                (p, p.server) for n in self.nodes.values() for p in n.pods.values() if p.server
            ]
            for pod, server in servers:
                capacity = server.capacity_rps()
                for arrival in self._requests(pod).between(start, self.now_s, capacity):
                    server.submit(arrival.at_s, arrival.prompt_tokens, arrival.output_tokens)
                    pod.prompt_tokens_step += arrival.prompt_tokens
            for node in self.nodes.values():
                self._step_node(node, dt_s)
            if self.standalone:
                for spec in self.workloads.arrivals(start, self.now_s):
                    self._place_standalone(spec)

    def _requests(self, pod: SimPod) -> ArrivalGenerator:
        """The request stream of the server in ``pod``: the n-th replica of a workload to
        start gets the workload's n-th stream, wherever the scheduler put it, so every run of
        this seed sends the same requests to its n-th replica."""
        stream = self._streams.get(pod.uid)
        if stream is None:
            n = self._replicas_seen.get(pod.workload_key, 0)
            self._replicas_seen[pod.workload_key] = n + 1
            key = f"{pod.workload_key}#{n}".encode()
            rng = np.random.default_rng([self._seed, 3, zlib.crc32(key)])
            stream = self._streams[pod.uid] = ArrivalGenerator(self._load, rng)
        return stream

    def _step_node(self, node: SimNode, dt_s: float) -> None:
        for pod in list(node.pods.values()):
            if pod.ends_s is not None and self.now_s >= pod.ends_s:
                self._remove(node, pod, completed=True)
        self._set_slowdowns(node)
        env = node.gpus[0].envelope
        for pod in node.pods.values():
            if pod.server is not None:
                pod.server.advance(self.now_s, dt_s)
            elif pod.ends_s is not None:
                life = (self.now_s - pod.created_s) / (pod.ends_s - pod.created_s)
                grown = int(pod.gpu_peak_bytes * min(1.0, 0.1 + 0.9 * life))
                for i in pod.gpu_indices:
                    node.gpus[i].used_bytes[pod.uid] = grown
            demand = self._demand(env, pod, dt_s)
            pod.demand = {i: demand for i in pod.gpu_indices}
        for gpu in node.gpus:
            on_gpu = [p.demand[gpu.index] for p in node.pods.values() if gpu.index in p.demand]
            previous = gpu.activity.temp_c if gpu.activity is not None else None
            gpu.activity = gpu_activity(env, on_gpu, previous_temp_c=previous, dt_s=dt_s)
            gpu.util_ratio = gpu.activity.util_ratio
        placement = node_placement(len(node.gpus))
        for pod in node.pods.values():
            busy = max((d.busy_ratio for d in pod.demand.values()), default=0.0)
            for c in pod.containers:
                self._step_container(pod, c, busy, dt_s)
            intended = placement[pod.gpu_indices[0]].numa_node if pod.gpu_indices else 0
            pages = int(ALLOC_BYTES_PER_S[pod.kind] * dt_s) // PAGE_BYTES
            miss = numa_miss_share(pod.qos_class, pod.containers[0].cpu_limit_cores)
            node.numa.allocate(intended, pages, miss)

    def _demand(self, env: GpuEnvelope, pod: SimPod, dt_s: float) -> PodDemand:
        """What ``pod`` asked of each of its GPUs in the step just run (:mod:`.activity`)."""
        share = pod.gpu_milli / MILLI_PER_GPU
        server = pod.server
        if server is not None:
            busy_s = server.busy_s_total - pod.busy_s_seen
            steps = server.steps_total - pod.steps_seen
            pod.busy_s_seen, pod.steps_seen = server.busy_s_total, server.steps_total
            prompt, pod.prompt_tokens_step = pod.prompt_tokens_step, 0
            return server_demand(
                env,
                tensor_parallel=server.tensor_parallel,
                dt_s=dt_s,
                busy_s=busy_s,
                steps=steps,
                batch=server.running,
                kv_bytes=server.kv_cache_bytes(),
                prompt_tokens=prompt,
            )
        if pod.ends_s is None or not pod.gpu_indices:
            return idle_demand()
        if pod.kind == "batch" and share >= 1.0:
            return training_demand(env, gpus=len(pod.gpu_indices))
        if pod.kind == "batch":
            # An evaluation run: batched inference over a data set (assumed work rate).
            work = (120e12, 0.5e12, 5e8)
        else:
            # A notebook's interactive cells: light, bursty kernels (assumed work rate).
            work = (15e12, 0.08e12, 5e7)
        return open_loop_demand(
            env,
            flops_per_s=work[0],
            dram_bytes_per_s=work[1],
            pcie_bytes_per_s=work[2],
            core_share=share,
        )

    def _set_slowdowns(self, node: SimNode) -> None:
        """Each server's slowdown from what its neighbours did last step
        (:mod:`.interference`)."""
        placement = node_placement(len(node.gpus))
        env = node.gpus[0].envelope
        for pod in node.pods.values():
            if pod.server is None:
                continue
            others = [p.demand for p in node.pods.values() if p.uid != pod.uid and p.demand]
            pod.server.slowdown = server_slowdown(
                pod.gpu_indices,
                others,
                placement,
                pcie_bytes_per_s=env.pcie_bytes_per_s,
                nvlink_bytes_per_s=env.nvlink_bytes_per_s,
            )

    def _step_container(self, pod: SimPod, c: SimContainer, busy: float, dt_s: float) -> None:
        cores = c.cpu_limit_cores or 2.0
        c.cpu_usage_s += dt_s * cores * (0.05 + 0.6 * busy)
        if pod.kind == "llm":
            noise = int(self.rng.normal(0, 64 * MIB))
            c.memory_bytes = max(int(20 * GIB), c.memory_bytes + noise)
        elif pod.ends_s is None:  # an idle notebook's kernel: flat, a little noise
            noise = int(self.rng.normal(0, 8 * MIB))
            c.memory_bytes = max(256 * MIB, c.memory_bytes + noise)
        else:
            c.memory_bytes += int(dt_s * self.rng.uniform(5, 40) * MIB)
        if c.memory_limit_bytes is not None and c.memory_bytes >= c.memory_limit_bytes:
            c.memory_bytes = int(c.memory_limit_bytes * 0.5)
            c.oom_kills += 1

    # -- observation ------------------------------------------------------------------

    def gpu_activity(self, node: str, index: int) -> GpuActivity:
        """The latest activity of GPU ``index`` on ``node`` (idle before the first step)."""
        with self._lock:
            gpu = self.nodes[node].gpus[index]
            return gpu.activity if gpu.activity is not None else idle_activity(gpu.envelope)

    def write_sysfs(self, node: str, sys_root: Path) -> None:
        """Lay out ``node``'s NUMA counters and GPU PCI files under ``sys_root`` (the host's
        ``/sys`` for :class:`~sits_observe.collectors.cgroup.numa.NumaCollector` and the
        topology collector's sysfs fallback)."""
        with self._lock:
            n = self.nodes[node]
            write_sysfs(sys_root, n.numa, [g.pci_bus_id for g in n.gpus], n.cpu_milli // 1000)

    def nvml(self, node: str) -> SimNvml:
        """An NVML stand-in for ``node``'s GPUs (for the topology collector)."""
        n = self.nodes[node]
        return SimNvml([(g.uuid, g.pci_bus_id, g.kind) for g in n.gpus], cpus=n.cpu_milli // 1000)

    def numa_split(self, pod: SimPod) -> tuple[float, ...]:
        """The share of ``pod``'s memory on each NUMA node (for ``memory.numa_stat``)."""
        node = self.nodes[pod.node]
        placement = node_placement(len(node.gpus))
        intended = placement[pod.gpu_indices[0]].numa_node if pod.gpu_indices else 0
        miss = numa_miss_share(pod.qos_class, pod.containers[0].cpu_limit_cores)
        split = [miss, miss]
        split[intended] = 1.0 - miss
        return tuple(split)

    def take_events(self) -> list[PodEvent]:
        """Pod events since the last call."""
        with self._lock:
            events, self.events = self.events, []
        return events

    def finished_requests(self, node: str) -> list[tuple[SimPod, RequestRecord]]:
        """Requests finished on ``node`` since the last call."""
        with self._lock:
            out: list[tuple[SimPod, RequestRecord]] = []
            for pod in self.nodes[node].pods.values():
                if pod.server is not None:
                    out.extend((pod, r) for r in pod.server.take_finished())
            return out

    def lock(self) -> threading.RLock:
        """The lock to hold while reading several fields consistently."""
        return self._lock

    def pod_of_gpu(self, node: str, index: int) -> SimPod | None:
        """The pod that holds GPU ``index`` on ``node`` (the largest user when shared)."""
        with self._lock:
            gpu = self.nodes[node].gpus[index]
            if not gpu.used_bytes:
                return None
            uid = max(gpu.used_bytes, key=lambda u: gpu.used_bytes[u])
            return self.nodes[node].pods.get(uid)
