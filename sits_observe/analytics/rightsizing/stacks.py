"""Each workload's GPU stack as the store knows it, and its memory proposal in that stack's form.

The right-sizing target of a workload (:func:`.rightsizing_inputs.workload_memory`: bytes per
GPU, VPA's method) is actionable only in the knob its stack reads
(:func:`.rightsizing_forms.propose`). The stack is read, first match wins, from:

1. **MIG** measured: a sample of the workload names a MIG profile (``gpu_samples.mig_profile``,
   DCGM ``GPU_I_PROFILE``; also the device plugin's ``single`` strategy, where the pod asks
   for ``nvidia.com/gpu`` and gets an instance);
2. **the pod spec**: the workload's newest pod snapshot keeps the pod-spec facts of its stack
   (``pods.gpu_stack_json``, a pruned pod, :mod:`sits_observe.collectors.kube.gpu_stack`),
   read by :func:`~.rightsizing_forms.detect_stack` with its node's
   ``nvidia.com/gpu.replicas`` label: MIG, HAMi, KAI ``gpu-memory`` / ``gpu-fraction``,
   vLLM ``--gpu-memory-utilization``, time-slicing or whole GPUs;
3. without it (a CPU-only pod's row, rows stored before schema version 5), the columns:
   **a shared GPU** when a pod holds less than a whole device (``pods.gpu_milli`` < 1000:
   HAMi's ``nvidia.com/gpucores`` / ``nvidia.com/gpumem-percentage`` or the ``gpu-milli``
   annotation, :mod:`sits_observe.collectors.kube.gpu`), HAMi's form with the share read as
   ``nvidia.com/gpumem-percentage``; **time-slicing** when its node's label
   ``nvidia.com/gpu.replicas`` is above 1 (GPU feature discovery); otherwise **whole GPUs**
   (``pods.gpu_request``). KAI and vLLM settings live only in the pod spec: from the columns
   such a workload reads as whole GPUs.

``reserved_bytes`` is what the workload holds per GPU now, what the target is compared with:
the MIG instance's framebuffer (the profile's figure when no sample measured it); HAMi's
``gpumem`` MiB, else its percentage (or the share) x the device's framebuffer, else the whole
device (HAMi's default); KAI's ``gpu-memory`` MiB or ``gpu-fraction`` x the device; vLLM's
utilisation x the device (what it pre-allocates); the device's framebuffer over the
time-slicing replicas (what each replica can count on); the device's framebuffer.
``compute_ratio`` (the P95 of the samples' ``gpu_util_ratio`` as a share of one whole GPU)
sizes MIG compute slices; it is left out on a shared or time-sliced GPU, whose utilisation is
the whole device's. The workload key is the one :mod:`.rightsizing_inputs` uses (the pod's
latest ``pods`` row), so the two reads agree on every workload.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sits_observe.analytics.fragmentation.mig_profiles import mig_product, product_of_profile
from sits_observe.analytics.rightsizing.forms import (
    COMPUTE_SLICES,
    MIB,
    MIG_PREFIX,
    REPLICAS_LABEL,
    GpuStack,
    StackProposal,
    detect_stack,
    propose,
)
from sits_observe.analytics.rightsizing.inputs import workload_memory
from sits_observe.analytics.rightsizing.memory import MemoryRecommendation, RightsizingSettings
from sits_observe.collectors.kube.gpu import GPU_RESOURCE, MILLI_PER_GPU
from sits_observe.collectors.kube.gpu import HAMI_MEMORY_PERCENT_RESOURCE as HAMI_PERCENT
from sits_observe.domain.times import utc_naive
from sits_observe.store.duck import Store

REPLICAS_LABEL_PATH = '$."nvidia.com/gpu.replicas"'
#: Percentile of the samples' utilisation read as the workload's compute use.
COMPUTE_PERCENTILE = 0.95

_STACK_SQL = """
WITH pods AS (
    SELECT namespace, pod, workload, gpu_request, gpu_milli, gpu_stack_json, ts FROM pods
    WHERE pod IS NOT NULL
    QUALIFY row_number() OVER (PARTITION BY namespace, pod ORDER BY ts DESC) = 1
), nodes AS (
    SELECT node, gpu_product, gpu_memory_bytes,
           TRY_CAST(json_extract_string(labels_json, ?) AS INTEGER) AS replicas
    FROM nodes WHERE node IS NOT NULL AND ts >= ? AND ts < ?
    QUALIFY row_number() OVER (PARTITION BY node ORDER BY ts DESC) = 1
)
SELECT s.namespace, coalesce(p.workload, s.pod) AS workload,
       max(p.gpu_request) AS gpu_request, min(p.gpu_milli) AS gpu_milli,
       arg_max(p.gpu_stack_json, p.ts) AS gpu_stack_json,
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


def stack_of(row: Mapping[str, Any]) -> tuple[GpuStack, int | None, float | None]:
    """The stack of one workload's inventory row (``gpu_request``, ``gpu_milli``,
    ``gpu_stack_json``, ``mig_profile``, ``device_bytes``, ``instance_bytes``,
    ``node_gpu_bytes``, ``gpu_product``, ``replicas``, ``util_ratio``; any may be missing),
    the bytes it reserves per GPU and its compute share (see the module docstring)."""
    device = _int(row.get("device_bytes")) or _int(row.get("node_gpu_bytes"))
    util = row.get("util_ratio")
    compute = None if util is None else min(max(float(util), 0.0), 1.0)
    profile = row.get("mig_profile")
    if profile:
        stack = GpuStack("mig", 1, f"{MIG_PREFIX}{profile}: 1", mig_profile=str(profile))
        return stack, _int(row.get("instance_bytes")), _mig_compute(str(profile), compute)
    replicas = _int(row.get("replicas"))
    spec = _pod_spec(row.get("gpu_stack_json"))
    if spec is not None:
        labels = {} if replicas is None else {REPLICAS_LABEL: str(replicas)}
        stack = detect_stack(spec, labels)
        return stack, *_spec_reserved(stack, row, device, compute)
    gpus = max(int(row.get("gpu_request") or 0), 1)
    milli = row.get("gpu_milli")
    if milli is not None and 0 < int(milli) < MILLI_PER_GPU:
        percent = math.ceil(int(milli) * 100 / MILLI_PER_GPU)
        stack = GpuStack("hami", 1, f"{HAMI_PERCENT}: {percent}", hami_memory_percent=percent)
        reserved = None if device is None else math.ceil(device * int(milli) / MILLI_PER_GPU)
        return stack, reserved, None
    if replicas is not None and replicas > 1:
        stack = GpuStack(
            "time-slicing",
            gpus,
            f"time-slicing, {replicas} replicas",
            time_slicing_replicas=replicas,
        )
        return stack, None if device is None else device // replicas, None
    return GpuStack("whole-gpu", gpus, f"{GPU_RESOURCE}: {gpus}"), device, compute


def _spec_reserved(
    stack: GpuStack, row: Mapping[str, Any], device: int | None, compute: float | None
) -> tuple[int | None, float | None]:
    """Bytes reserved per GPU and compute share of a stack read from the pod spec."""
    if stack.kind == "mig" and stack.mig_profile is not None:
        reserved = _int(row.get("instance_bytes")) or _profile_bytes(
            stack.mig_profile, row.get("gpu_product")
        )
        return reserved, _mig_compute(stack.mig_profile, compute)
    if stack.kind == "hami":
        if stack.hami_memory_mib is not None:
            return stack.hami_memory_mib * MIB, None
        percent = stack.hami_memory_percent
        return _share_of(device, None if percent is None else percent / 100), None
    if stack.kind == "kai":
        if stack.kai_memory_mib is not None:
            return stack.kai_memory_mib * MIB, None
        return _share_of(device, stack.kai_fraction_ratio), None
    if stack.kind == "vllm":
        return _share_of(device, stack.vllm_utilization_ratio), compute
    if stack.kind == "time-slicing":
        replicas = stack.time_slicing_replicas
        return (None if device is None or not replicas else device // replicas), None
    return device, compute


def _share_of(device: int | None, share: float | None) -> int | None:
    """``share`` of the device's bytes, rounded up; the whole device when no share is set."""
    if device is None:
        return None
    return device if share is None else math.ceil(device * share)


def _mig_compute(profile: str, compute: float | None) -> float | None:
    """The instance's utilisation as a share of a whole GPU (``3g`` = 3 of 7 slices)."""
    slices = re.match(r"^(\d+)g", profile)
    share = int(slices.group(1)) / COMPUTE_SLICES if slices else 1.0
    return None if compute is None else compute * share


def _profile_bytes(profile: str, gpu_product: object) -> int | None:
    """The framebuffer a MIG profile's name promises on the product (mig_profiles)."""
    product = mig_product(str(gpu_product) if gpu_product else None)
    products = (product,) if product is not None else product_of_profile(profile)
    sizes = {p.memory_bytes for m in products for p in m.profiles if p.name == profile}
    return min(sizes) if sizes else None


def _pod_spec(raw: object) -> dict[str, Any] | None:
    """The pruned pod of ``pods.gpu_stack_json``; None when absent or not a JSON object."""
    if not isinstance(raw, str):
        return None
    try:
        spec = json.loads(raw)
    except json.JSONDecodeError:
        return None
    return spec if isinstance(spec, dict) else None


def _int(value: object) -> int | None:
    if not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        return None
    return int(value)
