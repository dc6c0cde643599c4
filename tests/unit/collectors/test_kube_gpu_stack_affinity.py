"""``pods.gpu_stack_json`` keeps a GPU pod's ``sits.io/model`` / ``sits.io/precision`` (the
device affinity report's inputs), as written, and :func:`affinity_keys` reads them back."""

from __future__ import annotations

import json
from typing import Any

from sits_observe.analytics.rightsizing.forms import detect_stack
from sits_observe.collectors.kube.gpu_stack import affinity_keys, gpu_stack_json, gpu_stack_spec


def pod(gpus: int, labels: dict[str, str], annotations: dict[str, str]) -> dict[str, Any]:
    resources = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}
    return {
        "metadata": {
            "name": "vllm-0",
            "namespace": "serve",
            "labels": {"app": "vllm", **labels},
            "annotations": {"other": "x", **annotations},
        },
        "spec": {"containers": [{"name": "vllm", "resources": resources}]},
    }


def test_gpu_pod_keeps_the_keys_as_written() -> None:
    whole = pod(2, {"sits.io/precision": "BF16"}, {"sits.io/model": "llama-70b-instruct"})
    pruned = gpu_stack_spec(whole)
    assert pruned == {
        "metadata": {
            "annotations": {"sits.io/model": "llama-70b-instruct"},
            "labels": {"sits.io/precision": "BF16"},
        },
        "spec": {"containers": [{"resources": {"requests": {"nvidia.com/gpu": "2"}}}]},
    }
    assert affinity_keys(pruned["metadata"]) == ("llama-70b-instruct", "bf16")
    # The stack reader sees the same stack in the pruned pod as in the whole one.
    assert detect_stack(pruned) == detect_stack(whole)
    text = gpu_stack_json(whole)
    assert text is not None and json.loads(text) == pruned


def test_cpu_pod_keeps_nothing() -> None:
    assert gpu_stack_spec(pod(0, {"sits.io/precision": "fp16"}, {"sits.io/model": "m"})) is None


def test_gpu_pod_without_keys_has_no_metadata() -> None:
    assert "metadata" not in (gpu_stack_spec(pod(1, {}, {})) or {})


def test_annotation_wins_and_blank_is_absent() -> None:
    meta = {
        "labels": {"sits.io/model": "from-label", "sits.io/precision": "int8"},
        "annotations": {"sits.io/model": "from-annotation", "sits.io/precision": "  "},
    }
    assert affinity_keys(meta) == ("from-annotation", "int8")
    assert affinity_keys({}) == (None, None)
