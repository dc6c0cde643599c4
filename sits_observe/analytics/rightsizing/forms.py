"""A GPU memory proposal in the form the workload's GPU stack takes, detected from its pod spec.

A right-sizing target in bytes (:mod:`.rightsizing`) is only actionable in the knob the
workload's stack reads. :func:`detect_stack` reads the pod (``v1.Pod`` JSON) for, in order:

1. **MIG** (NVIDIA device plugin, mixed strategy): a ``nvidia.com/mig-<profile>`` resource;
2. **HAMi**: ``nvidia.com/gpumem`` (MiB) or ``nvidia.com/gpumem-percentage`` and
   ``nvidia.com/gpucores`` (percent of the device) resources (HAMi's README);
3. **KAI scheduler** GPU sharing: the pod annotations ``gpu-memory`` (MiB) or
   ``gpu-fraction`` (share of one device, 0-1);
4. **vLLM**: a container argument ``--gpu-memory-utilization`` (share of the device vLLM
   pre-allocates; vLLM's default is 0.9);
5. **time-slicing** (NVIDIA device plugin ``sharing.timeSlicing``): a ``nvidia.com/gpu.shared``
   resource (``renameByDefault``), or a node label ``nvidia.com/gpu.replicas`` above 1 (GPU
   feature discovery), which also gives the replica count;
6. otherwise **whole GPUs** (``nvidia.com/gpu``, counted as
   :func:`sits_observe.collectors.kube.pods.pod_requests` does).

:func:`propose` turns a per-GPU target into that form: the smallest MIG profile that fits
(:mod:`.mig_profiles`), HAMi ``gpumem`` MiB (or percent) and ``gpucores``, KAI ``gpu-memory``
MiB or ``gpu-fraction``, vLLM ``--gpu-memory-utilization`` (rounded up to 0.01; kept when that
is at or above the current setting, see below), the number of
time-slicing replicas whose memory fits on one GPU, or whole GPUs with the shared forms that
would fit as alternatives. Values are rounded up, never down, so a proposal holds the target.

For vLLM the framebuffer in use is what vLLM pre-allocated (weights + the KV-cache pool it was
told to fill), so a target measured under ``--gpu-memory-utilization`` cannot fall below it by
construction, and with the margin it always lands above it: the proposal keeps the setting
and says so, rather than shrinking it or raising it to the margin.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Literal

from sits_observe.analytics.fragmentation.mig_profiles import (
    mig_product,
    product_of_profile,
    smallest_fitting,
)
from sits_observe.collectors.kube.gpu import GPU_RESOURCE, HAMI_CORES_RESOURCE
from sits_observe.collectors.kube.gpu import HAMI_MEMORY_PERCENT_RESOURCE as HAMI_PERCENT
from sits_observe.collectors.kube.gpu_stack import (
    HAMI_MEMORY_RESOURCE,
    KAI_FRACTION_ANNOTATION,
    KAI_MEMORY_ANNOTATION,
    MIG_RESOURCE_PREFIX,
    SHARED_GPU_RESOURCE,
    VLLM_MEMORY_FLAG,
)
from sits_observe.collectors.kube.pods import pod_requests
from sits_observe.domain.quantity import parse_quantity
from sits_observe.errors import ParseError

StackKind = Literal["mig", "hami", "kai", "vllm", "time-slicing", "whole-gpu"]

MIB = 1 << 20
# The pod-spec names this reader reads, shared with the inventory's copy of them
# (:mod:`sits_observe.collectors.kube.gpu_stack`, ``pods.gpu_stack_json``).
MIG_PREFIX = MIG_RESOURCE_PREFIX
HAMI_MEMORY = HAMI_MEMORY_RESOURCE
KAI_MEMORY = KAI_MEMORY_ANNOTATION
KAI_FRACTION = KAI_FRACTION_ANNOTATION
VLLM_FLAG = VLLM_MEMORY_FLAG
SHARED_RESOURCE = SHARED_GPU_RESOURCE
REPLICAS_LABEL = "nvidia.com/gpu.replicas"
#: MIG compute slices of a whole GPU (A100 / H100 / H200: 7).
COMPUTE_SLICES = 7


@dataclass(frozen=True)
class GpuStack:
    """How a pod asks for GPU memory today (see the module docstring); units in the names."""

    kind: StackKind
    num_gpu: int
    current: str
    mig_profile: str | None = None
    hami_memory_mib: int | None = None
    hami_memory_percent: int | None = None
    hami_cores_percent: int | None = None
    kai_memory_mib: int | None = None
    kai_fraction_ratio: float | None = None
    vllm_utilization_ratio: float | None = None
    time_slicing_replicas: int | None = None
    problems: tuple[str, ...] = ()


@dataclass(frozen=True)
class StackProposal:
    """The target in the stack's form: what is set now, what to set, and why."""

    kind: StackKind
    current: str
    proposed: str
    fits: bool
    note: str
    alternatives: tuple[str, ...] = ()


def detect_stack(pod: Mapping[str, Any], node_labels: Mapping[str, str] | None = None) -> GpuStack:
    """The GPU stack of ``pod`` (``v1.Pod`` JSON); ``node_labels`` of its node, if known.

    Malformed values never raise: they are skipped and named in :attr:`GpuStack.problems`.
    """
    spec = _mapping(pod.get("spec"))
    annotations = _mapping(_mapping(pod.get("metadata")).get("annotations"))
    containers = [_mapping(c) for c in _list(spec.get("containers"))]
    problems: list[str] = []
    resources = _resources(containers, problems)
    totals, _bad = pod_requests(
        containers, [_mapping(c) for c in _list(spec.get("initContainers"))]
    )
    num_gpu = int(totals.get(GPU_RESOURCE, Decimal(0)))
    mig = sorted(k for k in resources if k.startswith(MIG_PREFIX))
    if mig:
        profile = mig[0].removeprefix(MIG_PREFIX)
        count = int(resources[mig[0]])
        return GpuStack(
            "mig", count, f"{mig[0]}: {count}", mig_profile=profile, problems=tuple(problems)
        )
    if HAMI_MEMORY in resources or HAMI_PERCENT in resources or HAMI_CORES_RESOURCE in resources:
        return _hami(resources, num_gpu, problems)
    kai = _kai(annotations, num_gpu, problems)
    if kai is not None:
        return kai
    utilization = _vllm(containers, problems)
    if utilization is not None:
        current = f"{VLLM_FLAG} {utilization:g}"
        return GpuStack(
            "vllm",
            max(num_gpu, 1),
            current,
            vllm_utilization_ratio=utilization,
            problems=tuple(problems),
        )
    replicas = _replicas(node_labels or {}, problems)
    if SHARED_RESOURCE in resources or (replicas is not None and replicas > 1):
        shared = int(resources.get(SHARED_RESOURCE, Decimal(num_gpu or 1)))
        current = f"time-slicing, {replicas if replicas is not None else 'unknown'} replicas"
        return GpuStack(
            "time-slicing",
            shared,
            current,
            time_slicing_replicas=replicas,
            problems=tuple(problems),
        )
    return GpuStack("whole-gpu", num_gpu, f"{GPU_RESOURCE}: {num_gpu}", problems=tuple(problems))


def propose(
    stack: GpuStack,
    target_bytes: int,
    *,
    gpu_memory_bytes: int | None,
    gpu_product: str | None = None,
    compute_ratio: float | None = None,
) -> StackProposal:
    """``target_bytes`` (per GPU) in ``stack``'s form. ``gpu_memory_bytes``: the device's
    framebuffer; ``compute_ratio``: the workload's measured compute use as a share of one
    whole GPU (0-1), which sizes MIG compute slices and HAMi ``gpucores`` when given."""
    if stack.kind == "mig":
        return _mig(stack, target_bytes, gpu_product, compute_ratio)
    if stack.kind == "hami":
        return _hami_form(stack, target_bytes, gpu_memory_bytes, compute_ratio)
    if stack.kind == "kai":
        return _kai_form(stack, target_bytes, gpu_memory_bytes)
    if gpu_memory_bytes is None or gpu_memory_bytes <= 0:
        return StackProposal(
            stack.kind,
            stack.current,
            stack.current,
            True,
            "GPU memory of the node unknown: no proposal in this form",
        )
    share = target_bytes / gpu_memory_bytes
    if stack.kind == "vllm":
        return _vllm_form(stack, share)
    if stack.kind == "time-slicing":
        replicas = max(int(gpu_memory_bytes // max(target_bytes, 1)), 1)
        note = (
            f"{replicas} pod(s) of {_gib(target_bytes)} fit in one GPU's {_gib(gpu_memory_bytes)}"
        )
        return StackProposal(
            "time-slicing", stack.current, f"time-slicing, {replicas} replicas", share <= 1, note
        )
    return _whole(stack, target_bytes, gpu_memory_bytes, gpu_product, compute_ratio)


# -- detection ---------------------------------------------------------------------------------


def _resources(containers: list[Mapping[str, Any]], problems: list[str]) -> dict[str, Decimal]:
    """Per extended resource, the sum over app containers of request (else limit)."""
    out: dict[str, Decimal] = {}
    for container in containers:
        resources = _mapping(container.get("resources"))
        requests, limits = _mapping(resources.get("requests")), _mapping(resources.get("limits"))
        for key in sorted({*requests, *limits}):  # problems in a stable order
            if not (key.startswith(MIG_PREFIX) or key in _SHARED_KEYS):
                continue
            raw = requests.get(key, limits.get(key))
            try:
                out[key] = out.get(key, Decimal(0)) + parse_quantity(raw)
            except ParseError:
                problems.append(f"{key}={raw!r} is not a quantity")
    return out


_SHARED_KEYS = {HAMI_MEMORY, HAMI_PERCENT, HAMI_CORES_RESOURCE, SHARED_RESOURCE}


def _hami(resources: dict[str, Decimal], num_gpu: int, problems: list[str]) -> GpuStack:
    mem = resources.get(HAMI_MEMORY)
    pct = resources.get(HAMI_PERCENT)
    cores = resources.get(HAMI_CORES_RESOURCE)
    parts = [
        f"{k}: {int(v)}"
        for k, v in ((HAMI_MEMORY, mem), (HAMI_PERCENT, pct), (HAMI_CORES_RESOURCE, cores))
        if v is not None
    ]
    return GpuStack(
        "hami",
        max(num_gpu, 1),
        ", ".join(parts),
        hami_memory_mib=None if mem is None else int(mem),
        hami_memory_percent=None if pct is None else int(pct),
        hami_cores_percent=None if cores is None else int(cores),
        problems=tuple(problems),
    )


def _kai(annotations: Mapping[str, Any], num_gpu: int, problems: list[str]) -> GpuStack | None:
    memory, fraction = annotations.get(KAI_MEMORY), annotations.get(KAI_FRACTION)
    if memory is not None:
        text = str(memory).strip()
        if text.isdigit() and int(text) > 0:
            return GpuStack(
                "kai",
                max(num_gpu, 1),
                f"{KAI_MEMORY}: {text}",
                kai_memory_mib=int(text),
                problems=tuple(problems),
            )
        problems.append(f"{KAI_MEMORY}={memory!r} is not a whole number of MiB")
    if fraction is not None:
        try:
            value = float(str(fraction))
        except ValueError:
            value = -1.0
        if 0 < value <= 1:
            return GpuStack(
                "kai",
                max(num_gpu, 1),
                f"{KAI_FRACTION}: {value:g}",
                kai_fraction_ratio=value,
                problems=tuple(problems),
            )
        problems.append(f"{KAI_FRACTION}={fraction!r} is not a share in (0, 1]")
    return None


def _vllm(containers: list[Mapping[str, Any]], problems: list[str]) -> float | None:
    for container in containers:
        words = [str(w) for w in (*_list(container.get("command")), *_list(container.get("args")))]
        tokens = [t for w in words for t in w.split()]  # "vllm serve m --flag 0.9" in one string
        for i, token in enumerate(tokens):
            if token.startswith(VLLM_FLAG + "="):
                raw: str | None = token.split("=", 1)[1]
            elif token == VLLM_FLAG:
                raw = tokens[i + 1] if i + 1 < len(tokens) else None
            else:
                continue
            try:
                value = float(raw) if raw is not None else -1.0
            except ValueError:
                value = -1.0
            if 0 < value <= 1:
                return value
            problems.append(f"{VLLM_FLAG} {raw!r} is not a share in (0, 1]")
    return None


def _replicas(labels: Mapping[str, str], problems: list[str]) -> int | None:
    raw = labels.get(REPLICAS_LABEL)
    if raw is None:
        return None
    if str(raw).isdigit() and int(raw) >= 1:
        return int(raw)
    problems.append(f"node label {REPLICAS_LABEL}={raw!r} is not a replica count")
    return None


# -- proposals ---------------------------------------------------------------------------------


def _slices(compute_ratio: float | None) -> int:
    if compute_ratio is None:
        return 1
    return min(max(math.ceil(compute_ratio * COMPUTE_SLICES - 1e-9), 1), COMPUTE_SLICES)


def _mig(
    stack: GpuStack, target_bytes: int, gpu_product: str | None, compute_ratio: float | None
) -> StackProposal:
    product = mig_product(gpu_product)
    if product is None and stack.mig_profile is not None:
        product = next(iter(product_of_profile(stack.mig_profile)), None)
    if product is None:
        return StackProposal(
            "mig",
            stack.current,
            stack.current,
            True,
            f"no MIG table for {gpu_product or stack.mig_profile!r}",
        )
    slices = _slices(compute_ratio)
    profile = smallest_fitting(product, target_bytes, slices)
    if profile is None:
        return StackProposal(
            "mig",
            stack.current,
            f"{GPU_RESOURCE}: 1",
            False,
            f"no {product.product} profile holds {_gib(target_bytes)}: a whole GPU",
        )
    note = (
        f"smallest {product.product} profile with >= {_gib(target_bytes)} and >= {slices} of "
        f"{COMPUTE_SLICES} compute slices"
    )
    return StackProposal("mig", stack.current, f"{MIG_PREFIX}{profile.name}: 1", True, note)


def _hami_form(
    stack: GpuStack, target_bytes: int, gpu_memory_bytes: int | None, compute_ratio: float | None
) -> StackProposal:
    parts = []
    if stack.hami_memory_percent is not None and gpu_memory_bytes:
        percent = min(math.ceil(100 * target_bytes / gpu_memory_bytes - 1e-9), 100)
        parts.append(f"{HAMI_PERCENT}: {percent}")
    else:
        parts.append(f"{HAMI_MEMORY}: {math.ceil(target_bytes / MIB)}")
    if compute_ratio is not None:
        parts.append(f"{HAMI_CORES_RESOURCE}: {min(max(math.ceil(compute_ratio * 100), 1), 100)}")
    elif stack.hami_cores_percent is not None:
        parts.append(f"{HAMI_CORES_RESOURCE}: {stack.hami_cores_percent}")
    fits = gpu_memory_bytes is None or target_bytes <= gpu_memory_bytes
    return StackProposal(
        "hami",
        stack.current,
        ", ".join(parts),
        fits,
        f"HAMi memory in MiB (2^20 bytes) covering {_gib(target_bytes)}",
    )


def _vllm_form(stack: GpuStack, share: float) -> StackProposal:
    """The target's share of the GPU, rounded up to 0.01; never above the current setting."""
    ratio = min(math.ceil(share * 100 - 1e-9) / 100, 1.0)
    current = stack.vllm_utilization_ratio
    if current is not None and ratio >= current:
        # What vLLM pre-allocated (weights + the KV-cache pool) is what the framebuffer shows,
        # so a target measured under the flag lands at or above it by the margin: it says the
        # setting is used, not that more is needed (vLLM never takes more than it is told).
        note = (
            f"{share:.0%} of the GPU covers the target, at or above the {current:g} vLLM was "
            "told to pre-allocate: the framebuffer measured is that pre-allocation, so keep it "
            "(vLLM's KV-cache use, vllm:gpu_cache_usage_perc, says whether less would do)"
        )
        return StackProposal("vllm", stack.current, stack.current, True, note)
    note = (
        f"{share:.0%} of the GPU covers the target; the framebuffer measured under vLLM is "
        "its own pre-allocation, so the target cannot fall below the current setting"
    )
    return StackProposal("vllm", stack.current, f"{VLLM_FLAG} {ratio:g}", share <= 1, note)


def _kai_form(stack: GpuStack, target_bytes: int, gpu_memory_bytes: int | None) -> StackProposal:
    if stack.kai_fraction_ratio is not None and gpu_memory_bytes:
        fraction = min(math.ceil(100 * target_bytes / gpu_memory_bytes - 1e-9) / 100, 1.0)
        return StackProposal(
            "kai",
            stack.current,
            f"{KAI_FRACTION}: {fraction:g}",
            target_bytes <= gpu_memory_bytes,
            f"share of the GPU's {_gib(gpu_memory_bytes)} covering {_gib(target_bytes)}",
        )
    return StackProposal(
        "kai",
        stack.current,
        f"{KAI_MEMORY}: {math.ceil(target_bytes / MIB)}",
        gpu_memory_bytes is None or target_bytes <= gpu_memory_bytes,
        f"KAI gpu-memory in MiB covering {_gib(target_bytes)}",
    )


def _whole(
    stack: GpuStack,
    target_bytes: int,
    gpu_memory_bytes: int,
    gpu_product: str | None,
    compute_ratio: float | None,
) -> StackProposal:
    share = target_bytes / gpu_memory_bytes
    alternatives = [f"{HAMI_MEMORY}: {math.ceil(target_bytes / MIB)}"]
    product = mig_product(gpu_product)
    if product is not None:
        profile = smallest_fitting(product, target_bytes, _slices(compute_ratio))
        if profile is not None and profile.memory_slices < 8:
            alternatives.insert(0, f"{MIG_PREFIX}{profile.name}: 1")
    note = f"uses {share:.0%} of each GPU ({_gib(target_bytes)} of {_gib(gpu_memory_bytes)})"
    if share > 0.5:
        return StackProposal("whole-gpu", stack.current, stack.current, share <= 1, note)
    return StackProposal(
        "whole-gpu",
        stack.current,
        stack.current,
        True,
        note + "; a shared form would free the rest",
        tuple(alternatives),
    )


def _gib(value: float) -> str:
    return f"{value / (1 << 30):.1f} GiB"


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []
