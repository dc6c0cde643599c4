"""The simulated cluster's state: GPUs, containers, pods, nodes and pod events.

Plain mutable records that :class:`~.cluster.SimulatedCluster` advances step by step (see
:mod:`.cluster` for what each step does to them). A GPU's framebuffer is accounted in bytes
(``used_bytes`` per pod; used + free + reserved = the card's total); its activity, clocks,
power and temperature are the last step's :class:`~.activity.GpuActivity`, inside its
model's :class:`~.gpu_models.GpuEnvelope`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from sits_observe.analytics.placement.device_plugin import MILLI_PER_GPU
from sits_observe.analytics.serving.step_profiles import (
    GIB,
    GPU_FB_RESERVED_MIB,
    GPU_FB_TOTAL_MIB,
    MIB,
)
from sits_observe.lab.cluster.activity import GpuActivity, PodDemand
from sits_observe.lab.cluster.gpu_models import GpuEnvelope, envelope
from sits_observe.lab.cluster.node_topology import NumaCounters
from sits_observe.lab.cluster.serving.server import InferenceServer


@dataclass
class SimGpu:
    """One physical GPU: memory in use and the shares the device plugin assigned."""

    node: str
    index: int
    uuid: str
    kind: str
    pci_bus_id: str
    used_bytes: dict[str, int] = field(default_factory=dict)  # pod uid -> bytes
    share_milli: dict[str, int] = field(default_factory=dict)  # pod uid -> milli-GPU
    util_ratio: float = 0.0
    #: The step's activity counters, clocks, power and temperature (:mod:`.activity`).
    activity: GpuActivity | None = None

    @property
    def envelope(self) -> GpuEnvelope:
        """The card's physical limits (:mod:`.gpu_models`)."""
        return envelope(self.kind)

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

    @property
    def free_milli(self) -> int:
        """Share of the GPU no pod holds, milli-GPU."""
        return MILLI_PER_GPU - sum(self.share_milli.values())


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
    gpu_milli: int = MILLI_PER_GPU
    workload: str = ""
    #: The main container's arguments (an inference server's vLLM command line).
    args: tuple[str, ...] = ()
    #: What the pod asked of each GPU it holds in the last step (:mod:`.activity`).
    demand: dict[int, PodDemand] = field(default_factory=dict)
    #: Prompt tokens submitted to its server in the current step.
    prompt_tokens_step: int = 0
    #: The server's busy seconds and steps at the end of the last step.
    busy_s_seen: float = 0.0
    steps_seen: int = 0

    @property
    def workload_key(self) -> str:
        """``namespace/workload``, the key of the controller's per-workload time slices."""
        return f"{self.namespace}/{self.workload}"


@dataclass
class SimNode:
    """One GPU node."""

    name: str
    kind: str
    gpus: list[SimGpu]
    cpu_milli: int = 128_000
    memory_bytes: int = 1024 * GIB
    pods: dict[str, SimPod] = field(default_factory=dict)
    #: The node's ``numastat`` counters (:mod:`.node_topology`).
    numa: NumaCounters = field(default_factory=NumaCounters)

    def device_state(self) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
        """Free milli-GPU and pods per GPU, and the GPUs' UUIDs (the device plugin's view)."""
        free = np.array([g.free_milli for g in self.gpus], dtype=np.int64)
        pods = np.array([len(g.share_milli) for g in self.gpus], dtype=np.int64)
        return free, pods, tuple(g.uuid for g in self.gpus)


@dataclass(frozen=True)
class PodEvent:
    """A pod started (``added``) or went away (``deleted``; ``completed`` when it ended by
    itself, as a Job's pod does, rather than being stopped)."""

    kind: str
    pod: SimPod
    at_s: float
    completed: bool = False
