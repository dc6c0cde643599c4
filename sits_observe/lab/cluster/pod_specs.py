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

Two tenants with GPU quotas of their own come on top too (:class:`TenantScenario`, where the
servers leave at least 8 GPUs): ``team-a`` holds quota it does not use, ``team-b`` submits
sweeps of single-GPU Jobs beyond its quota, the situation the controller's namespace quota
rule is for.

Everything is drawn from one seeded generator, so a seed gives the same pods in the same order.
The pods' simulated behaviour (peak GPU memory, run time) travels with the pod as container
environment variables (:data:`ENV_GPU_PEAK_BYTES`, :data:`ENV_DURATION_S`), the way a real
container's work is set by its command line: the simulated node reads them back when it starts
the pod (:mod:`.kubelet`).
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from sits_observe.analytics.serving.step_profiles import GIB, GPU_FB_TOTAL_MIB, MIB

PodKind = Literal["llm", "batch", "notebook"]

#: Arrivals of GPU Jobs and notebooks per second per GPU the inference servers leave free.
ARRIVALS_PER_SPARE_GPU_PER_S = 1 / 90
#: Share of all arrivals that are CPU-only Jobs.
CPU_ONLY_SHARE = 0.2
#: Whole-GPU share, in percent of a device (HAMi's unit for cores and memory).
WHOLE_GPU_PERCENT = 100
LLM_DEPLOYMENT = "vllm-llama2-70b"
LLM_MODEL = "llama2-70b"
#: The weights the inference servers load (served under :data:`LLM_MODEL`).
LLM_WEIGHTS = "meta-llama/Llama-2-70b-chat-hf"
IDLE_NOTEBOOK = "jupyter"
#: vLLM's flag for the share of each GPU's memory it claims up front, and vLLM's default.
VLLM_MEMORY_FLAG = "--gpu-memory-utilization"
VLLM_GPU_MEMORY_UTILIZATION = 0.9
ENV_GPU_PEAK_BYTES = "SIM_GPU_PEAK_BYTES"
ENV_DURATION_S = "SIM_DURATION_S"
#: The alphabet of k8s.io/apimachinery ``rand.SafeEncodeString`` (pod-template-hash, suffixes).
SAFE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
#: Smallest framebuffer of the simulated cards, for sizing shares before a node is known.
_FB_MIN_BYTES = min(GPU_FB_TOTAL_MIB.values()) * MIB


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


# -- tenants with quotas of their own ---------------------------------------------------------

#: A tenant that holds GPU quota it does not use, and one whose sweeps queue behind its quota.
TENANT_IDLE = "team-a"
TENANT_BURST = "team-b"
#: The tenants' ResourceQuota: the controller's opt-in name (``quota.quota_name``).
TENANT_QUOTA_NAME = "sits-quota"
#: When team-b's sweeps arrive, simulated seconds from the start (one every 20 minutes).
TENANT_SWEEPS_AT_S = (120.0, 1320.0, 2520.0)
#: How long a sweep's training runs and team-a's long run last, seconds.
TENANT_SWEEP_RUN_S = (600.0, 900.0)
TENANT_IDLE_RUN_S = 48 * 3600.0
#: When team-a's long run arrives (after the first pass of the workload controllers).
TENANT_IDLE_AT_S = 10.0
#: The tenants come only where the servers leave at least this many GPUs: below it team-a's
#: one GPU and team-b's quota are too large a part of what the Jobs and notebooks share.
TENANT_MIN_SPARE_GPUS = 8


@dataclass(frozen=True)
class TenantQuota:
    """The ``requests.nvidia.com/gpu`` a tenant's ResourceQuota starts at."""

    namespace: str
    gpus: int


class TenantScenario:
    """Two tenants, each with a ResourceQuota ``sits-quota`` on GPUs: the situation KAI's and
    Kueue's users ask idle-quota reclaim for.

    - ``team-a`` is granted a GPU per node and runs one long single-GPU Job (two days): most
      of its quota stays idle;
    - ``team-b`` is granted a GPU per four nodes (at least one) and submits a hyperparameter
      sweep of one single-GPU Job per node at each of :data:`TENANT_SWEEPS_AT_S`, each
      running 10-15 minutes: beyond its quota its Jobs are refused at creation and retried,
      whatever room the cluster has.

    The namespace quota rule of the controller sizes both from their measured daily peaks
    (docs/controller.md): it lends team-b quota and takes back team-a's. The pods come out of
    their own generator (``seed + 11``), at fixed times, in ``arrivals``' order.
    """

    def __init__(self, *, nodes: int, seed: int) -> None:
        self.rng = np.random.default_rng(seed + 11)
        self.quotas = (
            TenantQuota(TENANT_IDLE, max(2, nodes)),
            TenantQuota(TENANT_BURST, max(1, nodes // 4)),
        )
        schedule = [(TENANT_IDLE_AT_S, self._job(TENANT_IDLE, "finetune-1", TENANT_IDLE_RUN_S))]
        for sweep, at_s in enumerate(TENANT_SWEEPS_AT_S):
            for trial in range(nodes):
                run_s = float(self.rng.uniform(*TENANT_SWEEP_RUN_S))
                name = f"sweep-{sweep + 1}-trial-{trial + 1}"
                schedule.append((at_s, self._job(TENANT_BURST, name, run_s)))
        self.schedule = tuple(schedule)

    def arrivals(self, start_s: float, end_s: float) -> list[PodSpec]:
        """The tenants' pods due in ``[start_s, end_s)``."""
        return [spec for at_s, spec in self.schedule if start_s <= at_s < end_s]

    def _job(self, namespace: str, name: str, run_s: float) -> PodSpec:
        memory = 16 * GIB
        return PodSpec(
            kind="batch",
            namespace=namespace,
            name=f"{name}-{self._safe(5)}",
            uid=self._uuid(),
            owner=Owner("batch/v1", "Job", name, self._uuid()),
            workload=name,
            container="main",
            num_gpu=1,
            gpu_percent=WHOLE_GPU_PERCENT,
            cpu_request_milli=2000,
            memory_request_bytes=memory,
            memory_limit_bytes=memory,
            cpu_limit_cores=2.0,
            qos_class="Guaranteed",
            priority_class="batch-low",
            gpu_peak_bytes=int(self.rng.uniform(12, 30) * GIB),
            duration_s=run_s,
        )

    def _uuid(self) -> str:
        return str(uuid.UUID(bytes=self.rng.bytes(16), version=4))

    def _safe(self, length: int) -> str:
        picks = self.rng.integers(len(SAFE_ALPHABET), size=length)
        return "".join(SAFE_ALPHABET[int(i)] for i in picks)
