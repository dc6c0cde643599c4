"""Replay policies that schedule as a cluster does: kube-scheduler, its extenders, a device plugin.

The ATC'23 policies (:mod:`.policies`) are score plugins in the authors' patched scheduler;
these run the scheduler model (:mod:`sits_observe.lab.scheduler.model`) a user's cluster runs
instead:

- ``kube-default``: kube-scheduler with its default profile and no extender (NodeResourcesFit
  LeastAllocated + BalancedAllocation over CPU and memory, adaptive
  ``percentageOfNodesToScore``, random ties), the NVIDIA device plugin for whole GPUs and a
  HAMi-style plugin with its default ``spread`` policy for shared GPUs;
- other names (``kube-sits``, ...) are the same with extenders and options given by the caller
  (the control layer builds them with the service's own extender handler in the loop).

Each trace pod becomes a ``v1.Pod`` manifest, the form extenders receive: ``requests`` for
``cpu``, ``memory`` and ``nvidia.com/gpu``; a share of one GPU as the trace's own annotations
(``alibabacloud.com/gpu-milli``, ``alibabacloud.com/gpu-count``: the convention of the
authors' simulator, exact to the milli); allowed GPU models as required node affinity on
``nvidia.com/gpu.product``.

:meth:`KubePolicy.choose` decides *and assumes*: like kube-scheduler it accounts the pod in
its cache before the bind completes, and the replay always places what a policy returns. The
device plugin reads the pod's ``nvidia.com/use-gpuuuid`` hint, which a binding extender may
have written through the :class:`PodStore` (the replay's stand-in for the API server). With a
:class:`DeviceStep` (DRA-shaped nodes, :mod:`sits_observe.lab.replay.dra`) the devices are
its choice instead, and nodes where it cannot allocate the pod's claim are filtered out, as
kube-scheduler's DynamicResources filter plugin does.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from sits_observe.analytics.placement.device_plugin import (
    GPU_HINT_ANNOTATION,
    DeviceAllocationError,
    GpuPolicy,
    allocate_gpus,
    parse_hint,
)
from sits_observe.domain.quantity import format_quantity
from sits_observe.lab.replay.engine.policies import Choice
from sits_observe.lab.replay.engine.state import SimPod, SimState
from sits_observe.lab.scheduler.config import SchedulerConfig
from sits_observe.lab.scheduler.kube_nodes import GPU_PRODUCT_LABEL, MIB, NodeInfos, SchedPod
from sits_observe.lab.scheduler.model import Decision, Extender, KubeScheduler

#: The trace's GPU-share annotations (hkust-adsl/kubernetes-scheduler-simulator).
GPU_MILLI_ANNOTATION = "alibabacloud.com/gpu-milli"
GPU_COUNT_ANNOTATION = "alibabacloud.com/gpu-count"
REPLAY_NAMESPACE = "replay"


class PodStore:
    """The replay's stand-in for the API server's pods: manifests by name, annotated in place.

    A binding extender writes its GPU hint here (as the service patches the pod through the
    Kubernetes API), and the device plugin reads it back before choosing the GPUs.
    """

    def __init__(self) -> None:
        self._manifests: dict[tuple[str, str], dict[str, object]] = {}

    def add(self, pod: SchedPod) -> None:
        """Make ``pod`` known (a created, Pending pod)."""
        self._manifests[(pod.namespace, pod.name)] = pod.manifest

    def annotate(self, namespace: str, name: str, key: str, value: str) -> None:
        """Set one annotation of a known pod; ``KeyError`` naming an unknown one."""
        try:
            manifest = self._manifests[(namespace, name)]
        except KeyError:
            raise KeyError(f"no pod {namespace}/{name} in the replay") from None
        metadata = manifest.setdefault("metadata", {})
        assert isinstance(metadata, dict)
        annotations = metadata.setdefault("annotations", {})
        assert isinstance(annotations, dict)
        annotations[key] = value

    def annotations(self, pod: SchedPod) -> dict[str, str]:
        """The pod's annotations as stored now."""
        manifest = self._manifests.get((pod.namespace, pod.name), pod.manifest)
        metadata = manifest.get("metadata")
        found = metadata.get("annotations") if isinstance(metadata, dict) else None
        return {str(k): str(v) for k, v in found.items()} if isinstance(found, dict) else {}

    def forget(self, pod: SchedPod) -> None:
        """Drop a pod that is placed or failed (the replay never looks at it again)."""
        self._manifests.pop((pod.namespace, pod.name), None)


class PlacementObserver(Protocol):
    """Told of every placement (the extender's view of bound pods, as a pod watch would)."""

    def placed(self, pod: SchedPod, node: str, gpus: Sequence[int]) -> None:
        """``pod`` now runs on ``node`` holding device indices ``gpus``."""
        ...


class DeviceStep(Protocol):
    """Chooses a pod's devices on a node in place of the device plugin (DRA's allocator)."""

    def reset(self) -> None:
        """Forget every allocation (a new replay starts on an empty cluster)."""
        ...

    def feasible(self, node: str, pod: SchedPod) -> bool:
        """Whether the pod's devices can be allocated on ``node`` now."""
        ...

    def allocate(self, node: str, pod: SchedPod) -> tuple[int, ...] | None:
        """Allocate the pod's devices on ``node``; the GPU indices, None when they do not fit."""
        ...


def trace_pod(pod: SimPod, number: int) -> SchedPod:
    """The scheduler's pod for a trace pod, with its ``v1.Pod`` manifest."""
    shape = pod.shape
    name = f"trace-pod-{number:06d}"
    requests = {
        "cpu": format_quantity(shape.cpu_milli, "millicores"),
        "memory": format_quantity(pod.memory_mib * MIB, "bytes"),
    }
    annotations: dict[str, str] = {}
    if shape.num_gpu:
        requests["nvidia.com/gpu"] = str(shape.num_gpu)
        if shape.gpu_milli < 1000:
            annotations[GPU_MILLI_ANNOTATION] = str(shape.gpu_milli)
            annotations[GPU_COUNT_ANNOTATION] = str(shape.num_gpu)
    spec: dict[str, object] = {
        "schedulerName": "default-scheduler",
        "containers": [{"name": "main", "resources": {"requests": requests, "limits": {}}}],
    }
    if shape.num_gpu and shape.gpu_types:
        term = {"key": GPU_PRODUCT_LABEL, "operator": "In", "values": list(shape.gpu_types)}
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [term]}]
                }
            }
        }
    uid = f"uid-{name}"
    manifest: dict[str, object] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": REPLAY_NAMESPACE,
            "uid": uid,
            "annotations": annotations,
        },
        "spec": spec,
        "status": {"phase": "Pending"},
    }
    return SchedPod(
        REPLAY_NAMESPACE,
        name,
        uid,
        shape.cpu_milli,
        pod.memory_mib * MIB,
        shape.num_gpu,
        shape.gpu_milli if shape.num_gpu else 0,
        shape.gpu_types,
        manifest,
    )


def nodes_of(sim: SimState) -> NodeInfos:
    """kube-scheduler's cache of the replay's (empty) cluster."""
    cluster = sim.cluster
    models = [cluster.gpu_models[m] if m >= 0 else "" for m in cluster.gpu_model_id.tolist()]
    return NodeInfos.empty(
        cluster.node_names,
        cpu_milli=cluster.cpu_capacity_milli,
        memory_bytes=sim.memory_free_mib * MIB,
        gpu_count=cluster.gpu_count,
        gpu_model=models,
    )


class KubePolicy:
    """A replay policy running the kube-scheduler model (see the module docstring)."""

    def __init__(
        self,
        name: str = "kube-default",
        config: SchedulerConfig | None = None,
        extenders: Sequence[Extender] = (),
        *,
        gpu_policy: GpuPolicy = "spread",
        observers: Sequence[PlacementObserver] = (),
        pods: PodStore | None = None,
        devices: DeviceStep | None = None,
    ) -> None:
        self.name = name
        self.config = config or SchedulerConfig()
        self.scheduler = KubeScheduler(self.config, extenders)
        self.gpu_policy: GpuPolicy = gpu_policy
        self.observers = list(observers)
        #: The pods' manifests, where a binding extender leaves its GPU hint.
        self.pods = pods or PodStore()
        #: DRA's device choice in place of the device plugin's; None = the device plugin.
        self.devices = devices
        self.nodes: NodeInfos | None = None
        self._sim: SimState | None = None
        self._arrived = 0
        #: What happened in the current replay, by outcome (scheduled, unschedulable,
        #: admission_failed) and calls.
        self.counts: Counter[str] = Counter()

    def choose(self, sim: SimState, pod: SimPod, rng: np.random.Generator) -> Choice | None:
        """Schedule ``pod``; the node and device plugin's GPUs, or None (it stays Pending)."""
        if self._sim is not sim:
            # A new replay (the next seed in the same process): kube-scheduler starts again
            # with an empty cache and its rotating start at 0. Without this the second seed
            # began on the first one's full cluster.
            self._sim = sim
            self.nodes = nodes_of(sim)
            self.scheduler.next_start = 0
            self._arrived = 0
            self.counts = Counter()
            if self.devices is not None:
                self.devices.reset()
        self._arrived += 1
        sched_pod = trace_pod(pod, self._arrived)
        self.pods.add(sched_pod)
        try:
            return self._schedule(sched_pod, rng)
        finally:
            self.pods.forget(sched_pod)

    def _schedule(self, sched_pod: SchedPod, rng: np.random.Generator) -> Choice | None:
        assert self.nodes is not None
        decision = self._cycle(sched_pod, rng)
        self.counts.update({f"calls_{verb}": n for verb, n in decision.calls.items()})
        if decision.node is None or decision.node_name is None:
            self.counts["unschedulable"] += 1
            return None
        gpus = self._devices(decision.node, sched_pod)
        if gpus is None:
            self.counts["admission_failed"] += 1
            return None
        self.nodes.assume(decision.node, sched_pod, gpus)
        for observer in self.observers:
            observer.placed(sched_pod, decision.node_name, gpus)
        self.counts["scheduled"] += 1
        if decision.bound_by:
            self.counts["bound_by_extender"] += 1
        return Choice(decision.node, gpus if sched_pod.num_gpu else None)

    def _cycle(self, pod: SchedPod, rng: np.random.Generator) -> Decision:
        """One scheduling cycle; with a device step, the nodes where the pod's devices cannot
        be allocated fail the filter (their GPUs look full for the cycle)."""
        assert self.nodes is not None
        if self.devices is None or not pod.num_gpu:
            return self.scheduler.schedule(self.nodes, pod, rng)
        free = self.nodes.gpu_free_milli
        blocked = [
            i for i, name in enumerate(self.nodes.names) if not self.devices.feasible(name, pod)
        ]
        saved = free[blocked].copy()
        free[blocked] = -1
        try:
            return self.scheduler.schedule(self.nodes, pod, rng)
        finally:
            free[blocked] = saved

    def _devices(self, node: int, pod: SchedPod) -> tuple[int, ...] | None:
        assert self.nodes is not None
        if not pod.num_gpu:
            return ()
        if self.devices is not None:
            return self.devices.allocate(self.nodes.names[node], pod)
        hint = parse_hint(self.pods.annotations(pod).get(GPU_HINT_ANNOTATION))
        try:
            return allocate_gpus(
                self.nodes.gpu_free_milli[node],
                self.nodes.gpu_pods[node],
                self.nodes.gpu_uuids[node],
                num_gpu=pod.num_gpu,
                gpu_milli=pod.gpu_milli,
                hint=hint,
                policy=self.gpu_policy,
            )
        except DeviceAllocationError:
            return None
