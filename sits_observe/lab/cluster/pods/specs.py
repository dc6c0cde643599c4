"""What a simulated pod is: :class:`PodSpec`, its identity, owner, requests and simulated work,
and the :class:`Owner` its ``ownerReferences`` name (an inference Deployment's chain of two:
:class:`InferenceDeployment`).

The pods' simulated behaviour (peak GPU memory, run time) travels with the pod as container
environment variables (:data:`ENV_GPU_PEAK_BYTES`, :data:`ENV_DURATION_S`), the way a real
container's work is set by its command line: the simulated node reads them back when it starts
the pod (:mod:`sits_observe.lab.cluster.kubelet`). The pods come from the workloads' mix
(:mod:`sits_observe.lab.cluster.pods.generator`) and the tenants
(:mod:`sits_observe.lab.cluster.pods.tenants`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

PodKind = Literal["llm", "batch", "notebook"]

#: Whole-GPU share, in percent of a device (HAMi's unit for cores and memory).
WHOLE_GPU_PERCENT = 100
#: vLLM's flag for the share of each GPU's memory it claims up front, and vLLM's default.
VLLM_MEMORY_FLAG = "--gpu-memory-utilization"
VLLM_GPU_MEMORY_UTILIZATION = 0.9
ENV_GPU_PEAK_BYTES = "SIM_GPU_PEAK_BYTES"
ENV_DURATION_S = "SIM_DURATION_S"
#: The alphabet of k8s.io/apimachinery ``rand.SafeEncodeString`` (pod-template-hash, suffixes).
SAFE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


@dataclass(frozen=True)
class Owner:
    """The controller object a pod belongs to (its ``ownerReferences`` entry)."""

    api_version: str
    kind: str
    name: str
    uid: str


@dataclass(frozen=True)
class InferenceDeployment:
    """One inference Deployment: its owner chain, the product it runs on, its replicas."""

    deployment: Owner
    replica_set: Owner
    template_hash: str
    product: str
    replicas: int

    @property
    def name(self) -> str:
        """The Deployment's name (the workload the controller's time slices key on)."""
        return self.deployment.name


@dataclass(frozen=True)
class PodSpec:
    """One pod a workload creates: identity, owner, requests and its simulated work.

    ``gpu_percent`` is the share of each GPU (100 = whole GPUs; below 100 only with
    ``num_gpu == 1``, written as HAMi resources). ``gpu_peak_bytes`` 0 means vLLM's claim on
    the node it lands on; ``duration_s`` None runs until deleted. ``args`` are the main
    container's arguments (the inference server's command line).
    """

    kind: PodKind
    namespace: str
    name: str
    uid: str
    owner: Owner
    workload: str
    container: str
    num_gpu: int
    gpu_percent: int
    cpu_request_milli: int
    memory_request_bytes: int
    memory_limit_bytes: int | None
    cpu_limit_cores: float | None
    qos_class: str
    priority_class: str
    gpu_peak_bytes: int
    duration_s: float | None
    template_hash: str = ""
    gpu_types: tuple[str, ...] = ()
    args: tuple[str, ...] = ()

    @property
    def gpu_memory_utilization(self) -> float:
        """The share of each GPU's memory a vLLM server with these ``args`` claims: the value
        after :data:`VLLM_MEMORY_FLAG` (or ``--flag=value``), else vLLM's default."""
        for i, arg in enumerate(self.args):
            raw = None
            if arg.startswith(VLLM_MEMORY_FLAG + "="):
                raw = arg.split("=", 1)[1]
            elif arg == VLLM_MEMORY_FLAG and i + 1 < len(self.args):
                raw = self.args[i + 1]
            try:
                value = float(raw) if raw is not None else 0.0
            except ValueError:
                continue
            if 0 < value <= 1:
                return value
        return VLLM_GPU_MEMORY_UTILIZATION

    @property
    def shared(self) -> bool:
        """A HAMi share of one GPU rather than whole GPUs."""
        return self.num_gpu == 1 and self.gpu_percent < WHOLE_GPU_PERCENT
