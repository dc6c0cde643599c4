"""Each workload's GPU stack as the store knows it, and its memory proposal in that stack's form.

The right-sizing target of a workload (:func:`.rightsizing_inputs.workload_memory`: bytes per
GPU, VPA's method) is actionable only in the knob its stack reads
(:func:`.rightsizing_forms.propose`). :func:`~.rightsizing_forms.detect_stack` reads that
from a pod spec; the store keeps no pod spec, so here the stack is read from what the
inventory and the GPU samples hold, first match wins:

1. **MIG**: a sample of the workload names a MIG profile (``gpu_samples.mig_profile``, DCGM
   ``GPU_I_PROFILE``);
2. **a shared GPU**: a pod holds less than a whole device (``pods.gpu_milli`` < 1000: HAMi's
   ``nvidia.com/gpucores`` / ``nvidia.com/gpumem-percentage`` or the ``gpu-milli``
   annotation, :mod:`sits_observe.collectors.kube_gpu`): HAMi's form, the share read as
   ``nvidia.com/gpumem-percentage``;
3. **time-slicing**: its node's label ``nvidia.com/gpu.replicas`` above 1 (GPU feature
   discovery);
4. otherwise **whole GPUs** (``pods.gpu_request``).

KAI's ``gpu-memory`` / ``gpu-fraction`` annotations and vLLM's ``--gpu-memory-utilization``
live only in the pod spec: from the store such a workload reads as whole GPUs.

``reserved_bytes`` is what the workload holds per GPU now, what the target is compared with:
the MIG instance's framebuffer; the share x the device's framebuffer; the device's framebuffer
over the time-slicing replicas (what each replica can count on); the device's framebuffer.
``compute_ratio`` (the P95 of the samples' ``gpu_util_ratio`` as a share of one whole GPU)
sizes MIG compute slices; it is left out on a shared or time-sliced GPU, whose utilisation is
the whole device's. The workload key is the one :mod:`.rightsizing_inputs` uses (the pod's
latest ``pods`` row), so the two reads agree on every workload.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sits_observe.analytics.rightsizing import MemoryRecommendation, RightsizingSettings
from sits_observe.analytics.rightsizing_forms import (
    COMPUTE_SLICES,
    MIG_PREFIX,
    GpuStack,
    StackProposal,
    propose,
)
from sits_observe.analytics.rightsizing_inputs import workload_memory
from sits_observe.collectors.kube_gpu import GPU_RESOURCE, MILLI_PER_GPU
from sits_observe.collectors.kube_gpu import HAMI_MEMORY_PERCENT_RESOURCE as HAMI_PERCENT
from sits_observe.domain.times import utc_naive
from sits_observe.store.duck import Store

REPLICAS_LABEL_PATH = '$."nvidia.com/gpu.replicas"'
#: Percentile of the samples' utilisation read as the workload's compute use.
COMPUTE_PERCENTILE = 0.95

_STACK_SQL = """
WITH pods AS (
    SELECT namespace, pod, workload, gpu_request, gpu_milli FROM pods WHERE pod IS NOT NULL
    QUALIFY row_number() OVER (PARTITION BY namespace, pod ORDER BY ts DESC) = 1
), nodes AS (
    SELECT node, gpu_product, gpu_memory_bytes,
           TRY_CAST(json_extract_string(labels_json, ?) AS INTEGER) AS replicas
    FROM nodes WHERE node IS NOT NULL AND ts >= ? AND ts < ?
    QUALIFY row_number() OVER (PARTITION BY node ORDER BY ts DESC) = 1
)
SELECT s.namespace, coalesce(p.workload, s.pod) AS workload,
       max(p.gpu_request) AS gpu_request, min(p.gpu_milli) AS gpu_milli,
       min(s.mig_profile) AS mig_profile,
       max(CASE WHEN s.mig_profile IS NULL THEN s.fb_total_bytes END) AS device_bytes,
       max(CASE WHEN s.mig_profile IS NOT NULL THEN s.fb_total_bytes END) AS instance_bytes,
       max(n.gpu_memory_bytes) AS node_gpu_bytes,
       min(coalesce(s.model_name, n.gpu_product)) AS gpu_product,
       max(n.replicas) AS replicas,
       quantile_cont(s.gpu_util_ratio, ?) AS util_ratio
FROM gpu_samples s
LEFT JOIN pods p ON p.namespace IS NOT DISTINCT FROM s.namespace AND p.pod = s.pod
LEFT JOIN nodes n ON n.node = s.node
WHERE s.ts >= ? AND s.ts < ? AND s.pod IS NOT NULL AND s.fb_used_bytes IS NOT NULL
GROUP BY ALL
"""


@dataclass(frozen=True)
class WorkloadSizing:
    """One workload's memory recommendation, its stack and the proposal in the stack's form
    (None when there is not enough data); bytes per GPU."""

    namespace: str | None
    workload: str
    memory: MemoryRecommendation
    stack: GpuStack
    gpu_product: str | None
    gpu_memory_bytes: int | None
    reserved_bytes: int | None
    compute_ratio: float | None
    proposal: StackProposal | None


def workload_sizings(
    store: Store, since: datetime, until: datetime, settings: RightsizingSettings
) -> tuple[WorkloadSizing, ...]:
    """One sizing per (namespace, workload) with framebuffer samples in ``[since, until)``,
    sorted as :func:`~.rightsizing_inputs.workload_memory` sorts them."""
    memory = workload_memory(store, since, until, settings)
    if not memory:
        return ()
    lo, hi = utc_naive(since), utc_naive(until)
    rows = store.query(
        _STACK_SQL, [REPLICAS_LABEL_PATH, lo, hi, COMPUTE_PERCENTILE, lo, hi]
    ).to_pylist()
    inventory = {(r["namespace"], r["workload"]): r for r in rows}
    return tuple(_sizing(m, inventory.get((m.key[0], m.key[1]), {})) for m in memory)


def _sizing(memory: MemoryRecommendation, row: dict[str, Any]) -> WorkloadSizing:
    stack, reserved, compute = stack_of(row)
    device = _int(row.get("device_bytes")) or _int(row.get("node_gpu_bytes"))
    product = None if row.get("gpu_product") is None else str(row["gpu_product"])
    proposal = None
    if memory.target_bytes is not None:
        proposal = propose(
            stack,
            memory.target_bytes,
            gpu_memory_bytes=device,
            gpu_product=product,
            compute_ratio=compute,
        )
    namespace, workload = memory.key[0], str(memory.key[1])
    return WorkloadSizing(
        namespace, workload, memory, stack, product, device, reserved, compute, proposal
    )


def stack_of(row: dict[str, Any]) -> tuple[GpuStack, int | None, float | None]:
    """The stack of one workload's inventory row (``gpu_request``, ``gpu_milli``,
    ``mig_profile``, ``device_bytes``, ``instance_bytes``, ``node_gpu_bytes``, ``replicas``,
    ``util_ratio``; any may be missing), the bytes it reserves per GPU and its compute share
    (see the module docstring)."""
    device = _int(row.get("device_bytes")) or _int(row.get("node_gpu_bytes"))
    util = row.get("util_ratio")
    compute = None if util is None else min(max(float(util), 0.0), 1.0)
    profile = row.get("mig_profile")
    if profile:
        slices = re.match(r"^(\d+)g", str(profile))
        share = int(slices.group(1)) / COMPUTE_SLICES if slices else 1.0
        stack = GpuStack("mig", 1, f"{MIG_PREFIX}{profile}: 1", mig_profile=str(profile))
        reserved = _int(row.get("instance_bytes"))
        return stack, reserved, None if compute is None else compute * share
    gpus = max(int(row.get("gpu_request") or 0), 1)
    milli = row.get("gpu_milli")
    if milli is not None and 0 < int(milli) < MILLI_PER_GPU:
        percent = math.ceil(int(milli) * 100 / MILLI_PER_GPU)
        stack = GpuStack("hami", 1, f"{HAMI_PERCENT}: {percent}", hami_memory_percent=percent)
        reserved = None if device is None else math.ceil(device * int(milli) / MILLI_PER_GPU)
        return stack, reserved, None
    replicas = row.get("replicas")
    if replicas is not None and int(replicas) > 1:
        count = int(replicas)
        stack = GpuStack(
            "time-slicing", gpus, f"time-slicing, {count} replicas", time_slicing_replicas=count
        )
        return stack, None if device is None else device // count, None
    return GpuStack("whole-gpu", gpus, f"{GPU_RESOURCE}: {gpus}"), device, compute


def _int(value: object) -> int | None:
    if not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        return None
    return int(value)
