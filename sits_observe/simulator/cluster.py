"""The simulated GPU cluster: nodes, GPUs, pods that come and go, and their memory.

Every node runs one LLM inference server (a vLLM-like pod holding ``tensor_parallel`` GPUs,
see :mod:`.server`); the node's other GPUs take batch jobs and notebooks that arrive and
leave at random. A batch job's GPU memory grows linearly to its peak and is freed when it
ends; notebooks share a GPU with small, flat allocations. That churn leaves free memory
scattered over GPUs, which is what the fragmentation analytics measure, and pushes container
memory towards its cgroup limits, which is what the memory-pressure signals show.

The model is deterministic for a seed and advances in explicit steps (:meth:`step`); the
runtime (:mod:`.runtime`) maps it to wall time and serves it in the real formats.
"""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass, field

import numpy as np

from sits_observe.simulator.calibration import (
    GIB,
    GPU_FB_RESERVED_MIB,
    GPU_FB_TOTAL_MIB,
    KV_BYTES_PER_TOKEN,
    MIB,
    PROFILES,
    WEIGHT_BYTES,
)
from sits_observe.simulator.server import InferenceServer, RequestRecord
from sits_observe.simulator.workload import ArrivalGenerator, LoadProfile

#: vLLM's default --gpu-memory-utilization: the share of each GPU it claims up front.
VLLM_GPU_MEMORY_UTILIZATION = 0.9


@dataclass
class SimGpu:
    """One physical GPU."""

    node: str
    index: int
    uuid: str
    kind: str
    pci_bus_id: str
    used_bytes: dict[str, int] = field(default_factory=dict)  # pod uid -> bytes
    util_ratio: float = 0.0

    @property
    def total_bytes(self) -> int:
        return GPU_FB_TOTAL_MIB[self.kind] * MIB

    @property
    def reserved_bytes(self) -> int:
        return GPU_FB_RESERVED_MIB[self.kind] * MIB

    @property
    def fb_used_bytes(self) -> int:
        return min(sum(self.used_bytes.values()), self.total_bytes - self.reserved_bytes)

    @property
    def fb_free_bytes(self) -> int:
        return self.total_bytes - self.reserved_bytes - self.fb_used_bytes


@dataclass
class SimContainer:
    """One container of a pod: its cgroup values."""

    name: str
    container_id: str
    memory_bytes: int
    memory_limit_bytes: int | None
    cpu_limit_cores: float | None
    cpu_usage_s: float = 0.0
    oom_kills: int = 0


@dataclass
class SimPod:
    """One pod, on one node."""

    uid: str
    name: str
    namespace: str
    kind: str  # llm | batch | notebook
    node: str
    qos_class: str
    gpu_indices: list[int]
    containers: list[SimContainer]
    created_s: float
    ends_s: float | None
    gpu_peak_bytes: int = 0
    gpu_request: int = 0
    cpu_request_milli: int = 0
    memory_request_bytes: int = 0
    owner: str = ""
    server: InferenceServer | None = None


@dataclass
class SimNode:
    """One GPU node."""

    name: str
    kind: str
    gpus: list[SimGpu]
    cpu_milli: int = 128_000
    memory_bytes: int = 1024 * GIB
    pods: dict[str, SimPod] = field(default_factory=dict)


@dataclass(frozen=True)
class PodEvent:
    """A pod appeared (``added``) or went away (``deleted``)."""

    kind: str
    pod: SimPod
    at_s: float


class SimulatedCluster:
    """The whole cluster model (see module docstring). Thread-safe."""

    def __init__(
        self,
        *,
        nodes: int = 2,
        gpus_per_node: int = 4,
        seed: int = 7,
        load: LoadProfile | None = None,
    ) -> None:
        if nodes < 1 or gpus_per_node < 1:
            raise ValueError("a simulated cluster needs at least one node and one GPU per node")
        self.rng = np.random.default_rng(seed)
        self._uuid_rng = np.random.default_rng(seed + 1)
        self.now_s = 0.0
        self.nodes: dict[str, SimNode] = {}
        self.events: list[PodEvent] = []
        self._lock = threading.RLock()
        self._arrivals = ArrivalGenerator(load or LoadProfile(), self.rng)
        for n in range(nodes):
            kind = "h100" if n % 2 == 0 else "a100"
            name = f"gpu-node-{n + 1}"
            gpus = [
                SimGpu(name, i, f"GPU-{self._uuid()}", kind, f"00000000:{0x18 + 0x11 * i:02X}:00.0")
                for i in range(gpus_per_node)
            ]
            self.nodes[name] = SimNode(name, kind, gpus)
        for node in self.nodes.values():
            self._start_llm_server(node)

    # -- identity helpers -------------------------------------------------------------

    def _uuid(self) -> str:
        return str(uuid.UUID(bytes=self._uuid_rng.bytes(16), version=4))

    def _container_id(self) -> str:
        return self._uuid_rng.bytes(32).hex()

    # -- pod life cycle ---------------------------------------------------------------

    def _start_llm_server(self, node: SimNode) -> None:
        tp = max(1, min(4, len(node.gpus) // 2))  # leave GPUs for batch jobs and notebooks
        profile = PROFILES[node.kind]
        per_gpu_claim = int(node.gpus[0].total_bytes * VLLM_GPU_MEMORY_UTILIZATION)
        kv_capacity = max(per_gpu_claim * tp - WEIGHT_BYTES, 64 * KV_BYTES_PER_TOKEN * 1024)
        model = "llama2-70b"
        pod = SimPod(
            uid=self._uuid(),
            name=f"vllm-{node.name}-0",
            namespace="inference",
            kind="llm",
            node=node.name,
            qos_class="Guaranteed",
            gpu_indices=list(range(tp)),
            containers=[
                SimContainer("vllm", self._container_id(), 24 * GIB, 64 * GIB, 16.0),
            ],
            created_s=self.now_s,
            ends_s=None,
            gpu_peak_bytes=per_gpu_claim,
            gpu_request=tp,
            cpu_request_milli=16_000,
            memory_request_bytes=64 * GIB,
            owner="vllm-" + node.name,
            server=InferenceServer(
                model, profile, tensor_parallel=tp, kv_capacity_bytes=kv_capacity
            ),
        )
        for i in pod.gpu_indices:
            node.gpus[i].used_bytes[pod.uid] = per_gpu_claim
        self._add(node, pod)

    def _add(self, node: SimNode, pod: SimPod) -> None:
        node.pods[pod.uid] = pod
        self.events.append(PodEvent("added", pod, self.now_s))

    def _remove(self, node: SimNode, pod: SimPod) -> None:
        for gpu in node.gpus:
            gpu.used_bytes.pop(pod.uid, None)
        del node.pods[pod.uid]
        self.events.append(PodEvent("deleted", pod, self.now_s))

    def _maybe_start_job(self, node: SimNode, dt_s: float) -> None:
        """Batch jobs and notebooks arrive on the node's spare GPUs (Poisson, ~1 per 20 s)."""
        spare = [
            g
            for g in node.gpus
            if not any(node.pods[uid].kind == "llm" for uid in g.used_bytes if uid in node.pods)
        ]
        if not spare or self.rng.random() > dt_s / 20.0:
            return
        gpu = spare[int(self.rng.integers(len(spare)))]
        notebook = self.rng.random() < 0.4
        # Peak GPU memory spans the L1 / L2 / L3 classes (< 2 GiB, 2-8 GiB, > 8 GiB).
        peak = int(
            (
                self.rng.uniform(0.5, 3.0)
                if notebook
                else self.rng.choice(
                    [self.rng.uniform(1, 2), self.rng.uniform(2, 8), self.rng.uniform(8, 30)]
                )
            )
            * GIB
        )
        if gpu.fb_free_bytes < peak:
            return
        kind = "notebook" if notebook else "batch"
        qos = "BestEffort" if notebook else str(self.rng.choice(["Burstable", "Guaranteed"]))
        limit = None if qos == "BestEffort" else int(self.rng.uniform(4, 16) * GIB)
        seq = sum(1 for _ in node.pods) + len(self.events)
        pod = SimPod(
            uid=self._uuid(),
            name=f"{kind}-{node.name}-{seq}",
            namespace="research" if notebook else "training",
            kind=kind,
            node=node.name,
            qos_class=qos,
            gpu_indices=[gpu.index],
            containers=[
                SimContainer(
                    "main",
                    self._container_id(),
                    int(0.5 * GIB),
                    limit,
                    None if qos == "BestEffort" else 4.0,
                )
            ],
            created_s=self.now_s,
            ends_s=self.now_s + float(self.rng.uniform(30, 180)),
            gpu_peak_bytes=peak,
            gpu_request=0 if notebook else 1,
            cpu_request_milli=0 if qos == "BestEffort" else 4000,
            memory_request_bytes=0 if limit is None else limit,
            owner=f"{kind}-{seq}",
        )
        gpu.used_bytes[pod.uid] = int(peak * 0.1)
        self._add(node, pod)

    # -- time -------------------------------------------------------------------------

    def step(self, dt_s: float) -> None:
        """Advance the cluster by ``dt_s`` simulated seconds."""
        with self._lock:
            start = self.now_s
            self.now_s += dt_s
            servers = [p.server for n in self.nodes.values() for p in n.pods.values() if p.server]
            for server in servers:
                for arrival in self._arrivals.between(start, self.now_s):
                    server.submit(arrival.at_s, arrival.prompt_tokens, arrival.output_tokens)
            for node in self.nodes.values():
                self._step_node(node, dt_s)

    def _step_node(self, node: SimNode, dt_s: float) -> None:
        for pod in list(node.pods.values()):
            if pod.ends_s is not None and self.now_s >= pod.ends_s:
                self._remove(node, pod)
                continue
            busy = 0.0
            if pod.server is not None:
                pod.server.advance(self.now_s, dt_s)
                busy = min(1.0, 0.15 + pod.server.running / 48) if pod.server.running else 0.0
            elif pod.ends_s is not None:
                life = (self.now_s - pod.created_s) / (pod.ends_s - pod.created_s)
                grown = int(pod.gpu_peak_bytes * min(1.0, 0.1 + 0.9 * life))
                for i in pod.gpu_indices:
                    node.gpus[i].used_bytes[pod.uid] = grown
                busy = 0.9 if pod.kind == "batch" else 0.05
            for c in pod.containers:
                self._step_container(pod, c, busy, dt_s)
            for i in pod.gpu_indices:
                node.gpus[i].util_ratio = busy
        for gpu in node.gpus:
            if not gpu.used_bytes:
                gpu.util_ratio = 0.0
        self._maybe_start_job(node, dt_s)

    def _step_container(self, pod: SimPod, c: SimContainer, busy: float, dt_s: float) -> None:
        cores = c.cpu_limit_cores or 2.0
        c.cpu_usage_s += dt_s * cores * (0.05 + 0.6 * busy)
        if pod.kind == "llm":
            noise = int(self.rng.normal(0, 64 * MIB))
            c.memory_bytes = max(int(20 * GIB), c.memory_bytes + noise)
        else:
            c.memory_bytes += int(dt_s * self.rng.uniform(5, 40) * MIB)
        if c.memory_limit_bytes is not None and c.memory_bytes >= c.memory_limit_bytes:
            c.memory_bytes = int(c.memory_limit_bytes * 0.5)
            c.oom_kills += 1

    # -- observation ------------------------------------------------------------------

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
