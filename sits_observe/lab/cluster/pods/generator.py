"""The simulated cluster's workloads: which pods they create, what each asks for and then does.

Three kinds, each with its own namespace, owner and requests (the priority classes are the
spec's, see ``analytics.settings``):

- ``llm``: one Deployment per GPU product in ``inference`` (``vllm-llama2-70b-h100``,
  ``vllm-llama2-70b-a100``: a model server is configured and benchmarked per accelerator, so
  clusters deploy it per product), each pinned to its product by required node affinity on
  ``nvidia.com/gpu.product`` and with one replica per node of that product. A replica holds
  ``tensor_parallel`` whole GPUs (half the node's, at most 4: TP 4 is what the latency
  calibration measured), 16 CPUs and 64 GiB, Guaranteed, ``inference-critical``; it runs for
  ever and claims the share of each GPU's memory its container's vLLM arguments set
  (``--gpu-memory-utilization 0.9``, vLLM's default, written out as deployments do).
- ``batch``: Jobs in ``training``, one pod each. Training runs (``train-<n>``) take one whole
  GPU, or two in 15 % of them where a node has room for two; evaluation runs (``eval-<n>``)
  take a share of one GPU written as HAMi resources (``nvidia.com/gpucores`` =
  ``nvidia.com/gpumem-percentage`` = 25 or 50 %). Peak GPU memory spans the spec's memory
  classes L1 / L2 / L3 (< 2 GiB, 2-8 GiB, > 8 GiB; a share caps it at 90 % of its part of the
  device) and grows linearly to the peak; 4 CPUs, Burstable or Guaranteed, ``batch-low``;
  they run 30-180 s.
- ``notebook``: one-replica StatefulSets in ``research`` (``notebook-<n>``, pod
  ``notebook-<n>-0``) with a HAMi share of 10, 20 or 30 % of one GPU, 0.5-3 GiB of GPU memory,
  BestEffort (no CPU or memory request), also 30-180 s;
- idle notebooks (``idle_notebooks``, none unless asked; the demo keeps one): one-replica
  StatefulSets in ``research`` (``jupyter-<n>``, pod ``jupyter-<n>-0``) holding a whole GPU,
  created once and kept like the Deployments' replicas, with a model of 2-14 GiB loaded and
  no kernel running: the GPU a user reserved and walked away from, which idle-GPU detection
  is for. They come out of the spare GPUs the arrivals are sized on;
- CPU-only Jobs (kind ``batch``, ``prep-<n>`` in ``training``): data preparation with 2-8
  CPUs and 4-16 GiB and no GPU, 30-180 s. With the shipped scheduler configuration they
  reach the extender's filter and prioritize too (its FGD measure counts CPU), and
  kube-scheduler's own binder binds them (the bind verb is for GPU pods only).

GPU Jobs and notebooks arrive as one Poisson process over the cluster at
:data:`ARRIVALS_PER_SPARE_GPU_PER_S` per GPU the inference servers leave free (one every 90 s
per spare GPU: about 80 % of the spare GPUs busy on average, so pods sometimes wait and the
scheduler's FailedScheduling events show), in the mix 50 % training, 20 % evaluation, 30 %
notebooks; CPU-only Jobs come on top, one for every four GPU arrivals (a fifth of all).

Two tenants with GPU quotas of their own come on top too
(:class:`~sits_observe.lab.cluster.pods.tenants.TenantScenario`, where the servers leave at
least 8 GPUs): ``team-a`` holds quota it does not use, ``team-b`` submits sweeps of single-GPU
Jobs beyond its quota, the situation the controller's namespace quota rule is for.

Everything is drawn from one seeded generator, so a seed gives the same pods in the same order
(:class:`WorkloadGenerator`; what a pod is: :mod:`sits_observe.lab.cluster.pods.specs`).
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Sequence

import numpy as np

from sits_observe.analytics.serving.step_profiles import GIB, GPU_FB_TOTAL_MIB, MIB
from sits_observe.lab.cluster.pods.specs import (
    SAFE_ALPHABET,
    VLLM_GPU_MEMORY_UTILIZATION,
    VLLM_MEMORY_FLAG,
    WHOLE_GPU_PERCENT,
    InferenceDeployment,
    Owner,
    PodSpec,
)
from sits_observe.lab.cluster.pods.tenants import TENANT_MIN_SPARE_GPUS, TenantScenario

#: Arrivals of GPU Jobs and notebooks per second per GPU the inference servers leave free.
ARRIVALS_PER_SPARE_GPU_PER_S = 1 / 90
#: Share of all arrivals that are CPU-only Jobs.
CPU_ONLY_SHARE = 0.2
LLM_DEPLOYMENT = "vllm-llama2-70b"
LLM_MODEL = "llama2-70b"
#: The weights the inference servers load (served under :data:`LLM_MODEL`).
LLM_WEIGHTS = "meta-llama/Llama-2-70b-chat-hf"
IDLE_NOTEBOOK = "jupyter"
#: Smallest framebuffer of the simulated cards, for sizing shares before a node is known.
_FB_MIN_BYTES = min(GPU_FB_TOTAL_MIB.values()) * MIB


def tensor_parallel(gpus_per_node: int) -> int:
    """GPUs per inference server: half the node's, at least 1, at most 4."""
    return max(1, min(4, gpus_per_node // 2))


class WorkloadGenerator:
    """Draws the workloads' pods from one seeded generator (see the module docstring).

    ``products`` is each node's ``nvidia.com/gpu.product`` label, in node order.
    """

    def __init__(
        self,
        *,
        products: Sequence[str],
        gpus_per_node: int,
        seed: int,
        idle_notebooks: int = 0,
        tenants: bool = True,
    ) -> None:
        if not products or gpus_per_node < 1:
            raise ValueError("workloads need at least one node and one GPU per node")
        if idle_notebooks < 0:
            raise ValueError(f"idle_notebooks must be >= 0, not {idle_notebooks}")
        self.nodes = len(products)
        self.gpus_per_node = gpus_per_node
        self.tensor_parallel = tensor_parallel(gpus_per_node)
        self.rng = np.random.default_rng(seed + 2)
        self._sequence = 0
        counts = Counter(products)
        self.deployments = tuple(
            self._deployment(product, counts[product]) for product in dict.fromkeys(products)
        )
        # Drawn after the Deployments, only when asked: without them a seed draws as before.
        self.idle_notebook_owners = tuple(
            Owner("apps/v1", "StatefulSet", f"{IDLE_NOTEBOOK}-{n + 1}", self._uuid())
            for n in range(idle_notebooks)
        )
        self._idle_peaks = tuple(
            int(self.rng.uniform(2, 14) * GIB) for _ in self.idle_notebook_owners
        )
        #: The tenants with a quota of their own (:class:`TenantScenario`; its own generator,
        #: so the draws above and the arrivals below are the same with or without it; none
        #: in a cluster with fewer than :data:`TENANT_MIN_SPARE_GPUS` spare GPUs).
        self.tenants = (
            TenantScenario(nodes=self.nodes, seed=seed)
            if tenants and self.spare_gpus >= TENANT_MIN_SPARE_GPUS
            else None
        )

    def _deployment(self, product: str, replicas: int) -> InferenceDeployment:
        short = product.split("-")[1].lower() if "-" in product else product.lower()
        name = f"{LLM_DEPLOYMENT}-{short}"
        uid = self._uuid()
        template_hash = self._safe(10)
        return InferenceDeployment(
            Owner("apps/v1", "Deployment", name, uid),
            Owner("apps/v1", "ReplicaSet", f"{name}-{template_hash}", uid[::-1]),
            template_hash,
            product,
            replicas,
        )

    @property
    def spare_gpus(self) -> int:
        """GPUs the inference servers (one per node) and the idle notebooks leave free."""
        spare = self.nodes * (self.gpus_per_node - self.tensor_parallel)
        return max(spare - len(self.idle_notebook_owners), 0)

    # -- pods -------------------------------------------------------------------------

    def llm_replica(self, deployment: InferenceDeployment | None = None) -> PodSpec:
        """One more replica of an inference Deployment (the first one by default)."""
        d = deployment or self.deployments[0]
        return PodSpec(
            kind="llm",
            namespace="inference",
            name=f"{d.replica_set.name}-{self._safe(5)}",
            uid=self._uuid(),
            owner=d.replica_set,
            workload=d.name,
            container="vllm",
            num_gpu=self.tensor_parallel,
            gpu_percent=WHOLE_GPU_PERCENT,
            cpu_request_milli=16_000,
            memory_request_bytes=64 * GIB,
            memory_limit_bytes=64 * GIB,
            cpu_limit_cores=16.0,
            qos_class="Guaranteed",
            priority_class="inference-critical",
            gpu_peak_bytes=0,
            duration_s=None,
            template_hash=d.template_hash,
            gpu_types=(d.product,),
            # As a Deployment runs vLLM's OpenAI server (vllm/vllm-openai image arguments).
            args=(
                "--model",
                LLM_WEIGHTS,
                "--served-model-name",
                LLM_MODEL,
                "--tensor-parallel-size",
                str(self.tensor_parallel),
                VLLM_MEMORY_FLAG,
                f"{VLLM_GPU_MEMORY_UTILIZATION:g}",
                "--port",
                "8000",
            ),
        )

    def idle_notebook(self, owner: Owner) -> PodSpec:
        """The pod of one idle notebook's StatefulSet (a new one each call: a fresh UID)."""
        index = self.idle_notebook_owners.index(owner)
        return PodSpec(
            kind="notebook",
            namespace="research",
            name=f"{owner.name}-0",
            uid=self._uuid(),
            owner=owner,
            workload=owner.name,
            container="notebook",
            num_gpu=1,
            gpu_percent=WHOLE_GPU_PERCENT,
            cpu_request_milli=0,
            memory_request_bytes=0,
            memory_limit_bytes=None,
            cpu_limit_cores=None,
            qos_class="BestEffort",
            priority_class="batch-low",
            gpu_peak_bytes=self._idle_peaks[index],
            duration_s=None,
        )

    def arrivals(self, start_s: float, end_s: float) -> list[PodSpec]:
        """Jobs and notebooks arriving in ``[start_s, end_s)``, in arrival order."""
        span = end_s - start_s
        # The tenants' pods too (none where the servers leave no GPU).
        scheduled = (
            self.tenants.arrivals(start_s, end_s)
            if self.tenants is not None and self.spare_gpus
            else []
        )
        if span <= 0 or self.spare_gpus == 0:
            return scheduled
        rate = self.spare_gpus * ARRIVALS_PER_SPARE_GPU_PER_S / (1 - CPU_ONLY_SHARE)
        count = int(self.rng.poisson(rate * span))
        return [self.next_pod() for _ in range(count)] + scheduled

    def next_pod(self) -> PodSpec:
        """One Job or notebook pod, drawn by the module's mix."""
        self._sequence += 1
        if float(self.rng.random()) < CPU_ONLY_SHARE:
            return self.cpu_job()
        draw = float(self.rng.random())
        if draw < 0.3:
            return self._notebook()
        return self._job(evaluation=draw < 0.5)

    def cpu_job(self) -> PodSpec:
        """A CPU-only data-preparation Job's pod."""
        name = f"prep-{self._sequence}"
        cpus = int(self.rng.integers(2, 9))
        memory = int(self.rng.uniform(4, 16) * GIB)
        return PodSpec(
            kind="batch",
            namespace="training",
            name=f"{name}-{self._safe(5)}",
            uid=self._uuid(),
            owner=Owner("batch/v1", "Job", name, self._uuid()),
            workload=name,
            container="main",
            num_gpu=0,
            gpu_percent=WHOLE_GPU_PERCENT,
            cpu_request_milli=cpus * 1000,
            memory_request_bytes=memory,
            memory_limit_bytes=memory,
            cpu_limit_cores=float(cpus),
            qos_class="Guaranteed",
            priority_class="batch-low",
            gpu_peak_bytes=0,
            duration_s=float(self.rng.uniform(30, 180)),
        )

    def _job(self, *, evaluation: bool) -> PodSpec:
        seq = self._sequence
        name = f"{'eval' if evaluation else 'train'}-{seq}"
        percent = int(self.rng.choice([25, 50])) if evaluation else WHOLE_GPU_PERCENT
        spare_per_node = self.gpus_per_node - self.tensor_parallel
        two = not evaluation and spare_per_node >= 2 and float(self.rng.random()) < 0.15
        # Peak GPU memory spans the L1 / L2 / L3 classes (< 2 GiB, 2-8 GiB, > 8 GiB).
        peak = int(
            self.rng.choice(
                [self.rng.uniform(1, 2), self.rng.uniform(2, 8), self.rng.uniform(8, 30)]
            )
            * GIB
        )
        if percent < WHOLE_GPU_PERCENT:
            peak = min(peak, int(_FB_MIN_BYTES * percent / 100 * 0.9))
        qos = str(self.rng.choice(["Burstable", "Guaranteed"]))
        limit = int(self.rng.uniform(4, 16) * GIB)
        job = Owner("batch/v1", "Job", name, self._uuid())
        return PodSpec(
            kind="batch",
            namespace="training",
            name=f"{name}-{self._safe(5)}",
            uid=self._uuid(),
            owner=job,
            workload=name,
            container="main",
            num_gpu=2 if two else 1,
            gpu_percent=percent,
            cpu_request_milli=4000,
            memory_request_bytes=limit,
            memory_limit_bytes=limit,
            cpu_limit_cores=4.0 if qos == "Guaranteed" else 8.0,
            qos_class=qos,
            priority_class="batch-low",
            gpu_peak_bytes=peak,
            duration_s=float(self.rng.uniform(30, 180)),
        )

    def _notebook(self) -> PodSpec:
        name = f"notebook-{self._sequence}"
        owner = Owner("apps/v1", "StatefulSet", name, self._uuid())
        return PodSpec(
            kind="notebook",
            namespace="research",
            name=f"{name}-0",
            uid=self._uuid(),
            owner=owner,
            workload=name,
            container="main",
            num_gpu=1,
            gpu_percent=int(self.rng.choice([10, 20, 30])),
            cpu_request_milli=0,
            memory_request_bytes=0,
            memory_limit_bytes=None,
            cpu_limit_cores=None,
            qos_class="BestEffort",
            priority_class="batch-low",
            gpu_peak_bytes=int(self.rng.uniform(0.5, 3.0) * GIB),
            duration_s=float(self.rng.uniform(30, 180)),
        )

    # -- identity helpers -------------------------------------------------------------

    def _uuid(self) -> str:
        return str(uuid.UUID(bytes=self.rng.bytes(16), version=4))

    def _safe(self, length: int) -> str:
        picks = self.rng.integers(len(SAFE_ALPHABET), size=length)
        return "".join(SAFE_ALPHABET[int(i)] for i in picks)
