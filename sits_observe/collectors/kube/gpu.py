"""What GPU a pod asks for and what it was given, read from its manifest as GPU stacks write it.

One reader for the inventory collector (``pods`` rows), the scheduler extender (the pod in
``ExtenderArgs``) and the simulated cluster, so they agree on every pod:

- **how many devices**: ``nvidia.com/gpu`` in the effective requests (limits count when no
  request is given), as :func:`sits_observe.collectors.kube.inventory.pod_requests` sums them;
- **the share of each device** (milli-GPU, 1000 = a whole GPU), first of:
  the annotation ``alibabacloud.com/gpu-milli`` (the Alibaba trace and its simulator, exact to
  the milli); HAMi's container resources ``nvidia.com/gpucores`` and
  ``nvidia.com/gpumem-percentage`` (percent of the device; the larger of the two is the share
  the pod takes from the device); else a whole GPU. A share below 1000 is only meaningful for
  one device, as in HAMi and the trace;
- **which GPU products** it may run on: ``spec.nodeSelector["nvidia.com/gpu.product"]`` and
  the required node affinity's ``In`` terms on that label (every term must name the label,
  else it is unconstrained; values of the terms are united, a selector intersects them);
- **a GPU hint**: HAMi's annotation ``nvidia.com/use-gpuuuid`` (comma-separated UUIDs);
- **the GPUs it holds**: HAMi's allocation annotation ``hami.io/vgpu-devices-allocated``
  (containers separated by ``;``, devices by ``:``, fields by ``,``, the UUID first), in
  order and without repeats.

Malformed values never raise: they count as absent and are named in :attr:`GpuRequest.problems`
so callers can count them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal
from typing import Any

from sits_observe.domain.quantity import parse_quantity
from sits_observe.errors import ParseError

GPU_RESOURCE = "nvidia.com/gpu"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_MILLI_ANNOTATION = "alibabacloud.com/gpu-milli"
HAMI_CORES_RESOURCE = "nvidia.com/gpucores"
HAMI_MEMORY_PERCENT_RESOURCE = "nvidia.com/gpumem-percentage"
GPU_HINT_ANNOTATION = "nvidia.com/use-gpuuuid"
HAMI_ALLOCATED_ANNOTATION = "hami.io/vgpu-devices-allocated"
MILLI_PER_GPU = 1000


@dataclass(frozen=True)
class GpuRequest:
    """A pod's GPU request and allocation (see the module docstring). Units: devices, milli."""

    num_gpu: int
    gpu_milli: int
    gpu_types: tuple[str, ...] = ()
    hint_uuids: tuple[str, ...] = ()
    allocated_uuids: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()

    @property
    def shared(self) -> bool:
        """A share of one device rather than whole devices."""
        return self.num_gpu == 1 and self.gpu_milli < MILLI_PER_GPU


def pod_gpu_request(pod: Mapping[str, Any], num_gpu: int) -> GpuRequest:
    """The GPU request of ``pod`` (a ``v1.Pod`` as JSON) that requests ``num_gpu`` devices.

    ``num_gpu`` is the effective ``nvidia.com/gpu`` request the caller already summed with
    the Kubernetes rules (init containers, sidecars).
    """
    meta = _mapping(pod.get("metadata"))
    spec = _mapping(pod.get("spec"))
    annotations = _mapping(meta.get("annotations"))
    problems: list[str] = []
    milli = MILLI_PER_GPU
    if num_gpu > 0:
        milli = _share(annotations, spec, problems)
        if milli < MILLI_PER_GPU and num_gpu != 1:
            problems.append(f"share of {milli} milli with {num_gpu} GPUs (shares are per device)")
            milli = MILLI_PER_GPU
    return GpuRequest(
        num_gpu=max(num_gpu, 0),
        gpu_milli=milli if num_gpu > 0 else 0,
        gpu_types=_products(spec, problems) if num_gpu > 0 else (),
        hint_uuids=_uuids(annotations.get(GPU_HINT_ANNOTATION)),
        allocated_uuids=_allocated(annotations.get(HAMI_ALLOCATED_ANNOTATION)),
        problems=tuple(problems),
    )


def _share(annotations: Mapping[str, Any], spec: Mapping[str, Any], problems: list[str]) -> int:
    raw = annotations.get(GPU_MILLI_ANNOTATION)
    if raw is not None:
        text = str(raw).strip()
        if text.isdigit() and 1 <= int(text) <= MILLI_PER_GPU:
            return int(text)
        problems.append(f"{GPU_MILLI_ANNOTATION}={raw!r} is not 1-1000")
    percent = Decimal(0)
    for container in _containers(spec):
        resources = _mapping(container.get("resources"))
        for key in (HAMI_CORES_RESOURCE, HAMI_MEMORY_PERCENT_RESOURCE):
            value = _resource(resources, key, problems)
            if value is not None:
                percent = max(percent, value)
    if 0 < percent < 100:
        return int((percent * 10).to_integral_value(rounding=ROUND_CEILING))
    return MILLI_PER_GPU


def _resource(resources: Mapping[str, Any], key: str, problems: list[str]) -> Decimal | None:
    requests = _mapping(resources.get("requests"))
    limits = _mapping(resources.get("limits"))
    raw = requests.get(key, limits.get(key))
    if raw is None:
        return None
    try:
        value = parse_quantity(raw)
    except ParseError:
        problems.append(f"{key}={raw!r} is not a quantity")
        return None
    if not 0 <= value <= 100:
        problems.append(f"{key}={raw!r} is not a percentage 0-100")
        return None
    return value


def _products(spec: Mapping[str, Any], problems: list[str]) -> tuple[str, ...]:
    allowed: set[str] | None = None
    selector = _mapping(spec.get("nodeSelector")).get(GPU_PRODUCT_LABEL)
    if isinstance(selector, str) and selector:
        allowed = {selector}
    affinity = _mapping(_mapping(spec.get("affinity")).get("nodeAffinity"))
    required = _mapping(affinity.get("requiredDuringSchedulingIgnoredDuringExecution"))
    terms = required.get("nodeSelectorTerms")
    if isinstance(terms, list) and terms:
        from_terms: set[str] = set()
        for term in terms:
            values = _in_values(_mapping(term))
            if values is None:  # a term that does not name the label leaves it open
                from_terms = set()
                break
            from_terms |= values
        if from_terms:
            allowed = from_terms if allowed is None else allowed & from_terms
            if not allowed:
                problems.append("nodeSelector and node affinity allow no common GPU product")
    return tuple(sorted(allowed)) if allowed else ()


def _in_values(term: Mapping[str, Any]) -> set[str] | None:
    expressions = term.get("matchExpressions")
    found: set[str] | None = None
    for expression in expressions if isinstance(expressions, list) else ():
        e = _mapping(expression)
        if e.get("key") == GPU_PRODUCT_LABEL and e.get("operator") == "In":
            values = {str(v) for v in e.get("values") or () if str(v)}
            found = values if found is None else found & values
    return found


def _uuids(raw: Any) -> tuple[str, ...]:
    if not isinstance(raw, str):
        return ()
    return tuple(dict.fromkeys(u.strip() for u in raw.split(",") if u.strip()))


def _allocated(raw: Any) -> tuple[str, ...]:
    if not isinstance(raw, str):
        return ()
    uuids: list[str] = []
    for container in raw.split(";"):
        for device in container.split(":"):
            uuid = device.split(",", 1)[0].strip()
            if uuid:
                uuids.append(uuid)
    return tuple(dict.fromkeys(uuids))


def hami_allocation(uuids: Iterable[str], *, memory_mib: int, cores_percent: int) -> str:
    """The ``hami.io/vgpu-devices-allocated`` value for one container holding ``uuids``."""
    devices = ":".join(f"{u},NVIDIA,{memory_mib},{cores_percent}" for u in uuids)
    return f"{devices}:;"


def _containers(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    containers = spec.get("containers")
    return [_mapping(c) for c in containers] if isinstance(containers, list) else []


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}
