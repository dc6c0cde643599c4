"""kube-scheduler's picture of the cluster for the scheduler model: requests per node, GPU devices.

What kube-scheduler's cache (``framework.NodeInfo``) holds for each node, as numpy arrays so
the model scores thousands of nodes per pod cheaply, plus the per-device GPU state the device
plugin (and a device-aware filter) work on:

- ``cpu_alloc_milli``, ``memory_alloc_bytes``: the node's allocatable;
- ``cpu_requested_milli``, ``memory_requested_bytes``: sum of the bound pods' requests
  (``NodeInfo.Requested``, what NodeResourcesFit's filter and BalancedAllocation use);
- ``cpu_nonzero_milli``, ``memory_nonzero_bytes``: the same with a pod's missing request
  counted as 100 m CPU / 200 MiB (``NodeInfo.NonZeroRequested``, ``schedutil``'s
  ``DefaultMilliCPURequest`` / ``DefaultMemoryRequest``; LeastAllocated and MostAllocated use
  it);
- ``gpu_count[N]``, ``gpu_free_milli[N, G]`` (0-1000 per device) and ``gpu_pods[N, G]``
  (pods sharing each device, HAMi's slot count), ``gpu_model[N]`` (the
  ``nvidia.com/gpu.product`` label) and ``gpu_uuids`` per node;
- ``gpu_requested[N]``: GPUs requested, in whole devices (a share counts its fraction), for a
  profile that scores ``nvidia.com/gpu``.

One mutation path, :meth:`NodeInfos.assume` / :meth:`NodeInfos.forget`, keeps the arrays
consistent (kube-scheduler assumes a pod on its node before the bind completes).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from sits_observe.analytics.traces.cluster_trace import NodeList

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

MIB = 1 << 20
MILLI_PER_GPU = 1000
#: schedutil.DefaultMilliCPURequest / DefaultMemoryRequest (pkg/scheduler/util/pod_resources.go).
DEFAULT_CPU_MILLI = 100
DEFAULT_MEMORY_BYTES = 200 * MIB
#: The label the NVIDIA GPU feature discovery puts on GPU nodes.
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"


@dataclass(frozen=True)
class SchedPod:
    """A pod as the scheduler model sees it: its requests and, for the wire, its manifest.

    ``gpu_milli`` is the share of each GPU (1000 = whole GPUs; a share below 1000 only with
    ``num_gpu == 1``); ``gpu_types`` the GPU products it may run on (empty = any);
    ``manifest`` the ``v1.Pod`` JSON the extenders receive.
    """

    namespace: str
    name: str
    uid: str
    cpu_milli: int
    memory_bytes: int
    num_gpu: int
    gpu_milli: int
    gpu_types: tuple[str, ...]
    manifest: dict[str, object] = field(compare=False, repr=False)

    @property
    def resource_names(self) -> frozenset[str]:
        """Resources the pod requests or limits (for an extender's ``managedResources``)."""
        names = {"cpu", "memory"}
        if self.num_gpu:
            names.add("nvidia.com/gpu")
        return frozenset(names)

    @property
    def shared(self) -> bool:
        """A share of one GPU rather than whole GPUs."""
        return self.num_gpu == 1 and self.gpu_milli < MILLI_PER_GPU


@dataclass(eq=False)
class NodeInfos:
    """Per-node allocatable, requests and GPU devices (see the module docstring)."""

    names: tuple[str, ...]
    cpu_alloc_milli: IntArray
    memory_alloc_bytes: IntArray
    gpu_count: IntArray
    gpu_model: tuple[str, ...]
    gpu_uuids: tuple[tuple[str, ...], ...]
    cpu_requested_milli: IntArray = field(init=False)
    cpu_nonzero_milli: IntArray = field(init=False)
    memory_requested_bytes: IntArray = field(init=False)
    memory_nonzero_bytes: IntArray = field(init=False)
    gpu_free_milli: IntArray = field(init=False)
    gpu_pods: IntArray = field(init=False)
    gpu_requested: FloatArray = field(init=False)
    index: dict[str, int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        n = len(self.names)
        if not (
            len(self.cpu_alloc_milli)
            == len(self.memory_alloc_bytes)
            == len(self.gpu_count)
            == len(self.gpu_model)
            == len(self.gpu_uuids)
            == n
        ):
            raise ValueError("every per-node sequence must have one entry per node")
        width = max(int(self.gpu_count.max(initial=0)), 1)
        self.cpu_requested_milli = np.zeros(n, dtype=np.int64)
        self.cpu_nonzero_milli = np.zeros(n, dtype=np.int64)
        self.memory_requested_bytes = np.zeros(n, dtype=np.int64)
        self.memory_nonzero_bytes = np.zeros(n, dtype=np.int64)
        slots = np.arange(width)[None, :] < self.gpu_count[:, None]
        self.gpu_free_milli = np.where(slots, MILLI_PER_GPU, 0).astype(np.int64)
        self.gpu_pods = np.zeros((n, width), dtype=np.int64)
        self.gpu_requested = np.zeros(n, dtype=np.float64)
        self.index = {name: i for i, name in enumerate(self.names)}

    @classmethod
    def empty(
        cls,
        names: Sequence[str],
        *,
        cpu_milli: Sequence[int] | IntArray,
        memory_bytes: Sequence[int] | IntArray,
        gpu_count: Sequence[int] | IntArray,
        gpu_model: Sequence[str],
        gpu_uuids: Sequence[Sequence[str]] | None = None,
    ) -> NodeInfos:
        """Nodes with nothing bound. UUIDs default to ``GPU-<node>-<index>``."""
        counts = np.asarray(gpu_count, dtype=np.int64)
        uuids = (
            tuple(tuple(u) for u in gpu_uuids)
            if gpu_uuids is not None
            else tuple(
                tuple(f"GPU-{name}-{g}" for g in range(int(c)))
                for name, c in zip(names, counts, strict=True)
            )
        )
        return cls(
            tuple(names),
            np.asarray(cpu_milli, dtype=np.int64),
            np.asarray(memory_bytes, dtype=np.int64),
            counts,
            tuple(gpu_model),
            uuids,
        )

    @classmethod
    def from_node_list(cls, nodes: NodeList) -> NodeInfos:
        """The empty cluster of a trace's node list."""
        return cls.empty(
            nodes.names,
            cpu_milli=nodes.cpu_milli,
            memory_bytes=nodes.memory_mib * MIB,
            gpu_count=nodes.gpu_count,
            gpu_model=nodes.gpu_model,
        )

    def __len__(self) -> int:
        return len(self.names)

    # -- changes ------------------------------------------------------------------------

    def assume(self, node: int, pod: SchedPod, gpus: Sequence[int]) -> None:
        """Account ``pod`` on ``node`` holding ``gpus`` (device indices)."""
        self._apply(node, pod, gpus, +1)

    def forget(self, node: int, pod: SchedPod, gpus: Sequence[int]) -> None:
        """Undo :meth:`assume` (the pod ended or its binding failed)."""
        self._apply(node, pod, gpus, -1)

    def _apply(self, node: int, pod: SchedPod, gpus: Sequence[int], sign: int) -> None:
        if len(gpus) != pod.num_gpu:
            raise ValueError(f"pod {pod.name} needs {pod.num_gpu} GPU(s), got indices {gpus}")
        self.cpu_requested_milli[node] += sign * pod.cpu_milli
        self.cpu_nonzero_milli[node] += sign * (pod.cpu_milli or DEFAULT_CPU_MILLI)
        self.memory_requested_bytes[node] += sign * pod.memory_bytes
        self.memory_nonzero_bytes[node] += sign * (pod.memory_bytes or DEFAULT_MEMORY_BYTES)
        share = pod.gpu_milli if pod.num_gpu else 0
        for g in gpus:
            self.gpu_free_milli[node, g] -= sign * share
            self.gpu_pods[node, g] += sign
        self.gpu_requested[node] += sign * pod.num_gpu * share / MILLI_PER_GPU

    # -- reading ------------------------------------------------------------------------

    def node_of(self, name: str) -> int:
        """Row of node ``name``; ``KeyError`` naming it."""
        try:
            return self.index[name]
        except KeyError:
            raise KeyError(f"no node {name!r} in the scheduler's cache") from None

    def gpus_fitting(self, pod: SchedPod, split_count: int) -> IntArray:
        """Per node: devices that could take one of the pod's GPUs."""
        if pod.shared:
            ok = (self.gpu_free_milli >= pod.gpu_milli) & (self.gpu_pods < split_count)
        else:
            ok = self.gpu_free_milli >= MILLI_PER_GPU
        return np.asarray(ok.sum(axis=1), dtype=np.int64)

    def model_allowed(self, gpu_types: tuple[str, ...]) -> BoolArray:
        """Per node: its GPU product is one of ``gpu_types`` (all True when empty)."""
        if not gpu_types:
            return np.ones(len(self), dtype=np.bool_)
        wanted = set(gpu_types)
        return np.array([m in wanted for m in self.gpu_model], dtype=np.bool_)
