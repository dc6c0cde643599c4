"""Two tenants with GPU quotas of their own, on top of the workloads' mix: the situation the
controller's namespace quota rule is for.

``team-a`` holds quota it does not use, ``team-b`` submits sweeps of single-GPU Jobs beyond
its quota (:class:`TenantScenario`). They come only where the inference servers leave at least
:data:`TENANT_MIN_SPARE_GPUS` GPUs, and their pods come out of a generator of their own, at
fixed times, so the workloads' draws are the same with or without them.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import numpy as np

from sits_observe.analytics.serving.step_profiles import GIB
from sits_observe.lab.cluster.pods.specs import SAFE_ALPHABET, WHOLE_GPU_PERCENT, Owner, PodSpec

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
