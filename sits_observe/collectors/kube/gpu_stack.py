"""The few pod-spec facts a GPU stack is read from, cut out of a Pod's JSON for the store.

A workload's GPU memory is set in the knob its stack reads (MIG, HAMi, KAI, vLLM,
time-slicing, whole GPUs: :func:`sits_observe.analytics.rightsizing.forms.detect_stack`), and
those knobs live in the pod spec, which the ``pods`` table does not keep. :func:`gpu_stack_spec`
keeps, as a pruned ``v1.Pod`` (``pods.gpu_stack_json``), exactly what that reader looks at:

- each app container's GPU resources: ``nvidia.com/gpu``, ``nvidia.com/mig-<profile>``,
  HAMi's ``nvidia.com/gpumem`` / ``nvidia.com/gpumem-percentage`` / ``nvidia.com/gpucores``
  and time-slicing's ``nvidia.com/gpu.shared``, as the request (the limit when no request is
  given: the value the reader takes), raw;
- each init container's ``nvidia.com/gpu`` and its ``restartPolicy`` (a sidecar's request
  counts with the app containers' in the pod's effective request);
- vLLM's ``--gpu-memory-utilization`` in ``command`` / ``args``: each flag token and the
  token after it, in order (``--flag=0.9`` is one token), the words split on whitespace as a
  shell line in one string (``vllm serve m --gpu-memory-utilization 0.9``) is;
- KAI scheduler's pod annotations ``gpu-memory`` (MiB) and ``gpu-fraction``;
- of a pod with any of the above, our ``sits.io/model`` and ``sits.io/precision`` labels and
  annotations (the device affinity report's inputs,
  :mod:`sits_observe.analytics.topology.affinity`).

Values are kept as written, malformed ones too, so the reader finds the same stack and the
same problems in the pruned pod as in the whole one (the invariant the tests check). A
container with none of these is left out; a pod with none of them anywhere has no facts
(None: a CPU-only pod). The JSON is compact (sorted keys, no spaces): tens of bytes per
pod snapshot, repeated across snapshots, which DuckDB's dictionary compression absorbs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from sits_observe.collectors.kube.gpu import (
    GPU_RESOURCE,
    HAMI_CORES_RESOURCE,
    HAMI_MEMORY_PERCENT_RESOURCE,
)

#: MIG devices of the NVIDIA device plugin's mixed strategy: ``nvidia.com/mig-3g.40gb``.
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
#: HAMi's device memory limit, MiB.
HAMI_MEMORY_RESOURCE = "nvidia.com/gpumem"
#: A time-sliced GPU under the device plugin's ``renameByDefault``.
SHARED_GPU_RESOURCE = "nvidia.com/gpu.shared"
#: KAI scheduler's GPU sharing annotations: device memory in MiB, or a share of one device.
KAI_MEMORY_ANNOTATION = "gpu-memory"
KAI_FRACTION_ANNOTATION = "gpu-fraction"
#: vLLM's share of each GPU's memory it pre-allocates (weights + KV cache).
VLLM_MEMORY_FLAG = "--gpu-memory-utilization"

_GPU_KEYS = frozenset(
    {
        GPU_RESOURCE,
        HAMI_MEMORY_RESOURCE,
        HAMI_MEMORY_PERCENT_RESOURCE,
        HAMI_CORES_RESOURCE,
        SHARED_GPU_RESOURCE,
    }
)
_ANNOTATIONS = (KAI_MEMORY_ANNOTATION, KAI_FRACTION_ANNOTATION)
#: Our pod label or annotation (the annotation wins) naming the model a pod serves or trains,
#: and its numeric precision (fp16, bf16, fp8, int8, ...): what the device affinity rules
#: match (docs/extender.md "Device affinity").
MODEL_KEY = "sits.io/model"
PRECISION_KEY = "sits.io/precision"
_AFFINITY_KEYS = (MODEL_KEY, PRECISION_KEY)


def gpu_stack_spec(pod: Mapping[str, Any]) -> dict[str, Any] | None:
    """The pruned ``v1.Pod`` of ``pod`` (see the module docstring); None without GPU facts."""
    meta = _mapping(pod.get("metadata"))
    spec = _mapping(pod.get("spec"))
    annotations = _mapping(meta.get("annotations"))
    kept_annotations = {k: annotations[k] for k in _ANNOTATIONS if k in annotations}
    containers = [c for c in map(_app_container, _list(spec.get("containers"))) if c]
    init = [c for c in map(_init_container, _list(spec.get("initContainers"))) if c]
    if not (kept_annotations or containers or init):
        return None
    kept_annotations.update({k: annotations[k] for k in _AFFINITY_KEYS if k in annotations})
    labels = _mapping(meta.get("labels"))
    kept_labels = {k: labels[k] for k in _AFFINITY_KEYS if k in labels}
    out: dict[str, Any] = {"spec": {}}
    if kept_annotations or kept_labels:
        out["metadata"] = {
            key: kept
            for key, kept in (("annotations", kept_annotations), ("labels", kept_labels))
            if kept
        }
    if containers:
        out["spec"]["containers"] = containers
    if init:
        out["spec"]["initContainers"] = init
    return out


def affinity_keys(metadata: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """``(model, precision)`` a pod's ``metadata`` declares (annotation, else label; the
    precision lower-cased; blank counts as absent)."""
    annotations, labels = _mapping(metadata.get("annotations")), _mapping(metadata.get("labels"))

    def value(key: str) -> str | None:
        texts = (str(m[key]).strip() for m in (annotations, labels) if m.get(key) is not None)
        return next((t for t in texts if t), None)

    precision = value(PRECISION_KEY)
    return value(MODEL_KEY), precision.lower() if precision else None


def gpu_stack_json(pod: Mapping[str, Any]) -> str | None:
    """:func:`gpu_stack_spec` as compact JSON (the ``pods.gpu_stack_json`` column)."""
    pruned = gpu_stack_spec(pod)
    if pruned is None:
        return None
    return json.dumps(pruned, sort_keys=True, separators=(",", ":"), default=str)


def _effective(container: Mapping[str, Any], wanted: Any) -> dict[str, Any]:
    """The request, else the limit, of each resource ``wanted(name)`` accepts."""
    resources = _mapping(container.get("resources"))
    requests, limits = _mapping(resources.get("requests")), _mapping(resources.get("limits"))
    return {
        k: requests.get(k, limits.get(k)) for k in sorted({*requests, *limits}) if wanted(str(k))
    }


def _app_container(raw: Any) -> dict[str, Any]:
    container = _mapping(raw)
    out: dict[str, Any] = {}
    gpu = _effective(container, lambda k: k in _GPU_KEYS or k.startswith(MIG_RESOURCE_PREFIX))
    if gpu:
        out["resources"] = {"requests": gpu}
    flags = _vllm_tokens(container)
    if flags:
        out["args"] = flags
    return out


def _init_container(raw: Any) -> dict[str, Any]:
    container = _mapping(raw)
    gpu = _effective(container, lambda k: k == GPU_RESOURCE)
    if not gpu:
        return {}
    out: dict[str, Any] = {"resources": {"requests": gpu}}
    if "restartPolicy" in container:
        out["restartPolicy"] = container["restartPolicy"]
    return out


def _vllm_tokens(container: Mapping[str, Any]) -> list[str]:
    """The flag's tokens and the token after each, in order: the reader sees each flag with
    the same value in this sub-sequence as in the whole command line."""
    words = [str(w) for w in (*_list(container.get("command")), *_list(container.get("args")))]
    tokens = [t for w in words for t in w.split()]
    keep: set[int] = set()
    for i, token in enumerate(tokens):
        if token.startswith(VLLM_MEMORY_FLAG + "="):
            keep.add(i)
        elif token == VLLM_MEMORY_FLAG:
            keep.update(j for j in (i, i + 1) if j < len(tokens))
    return [tokens[i] for i in sorted(keep)]


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []
