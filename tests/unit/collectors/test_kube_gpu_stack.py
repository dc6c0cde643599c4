"""Pod JSON -> ``pods.gpu_stack_json``: the few pod-spec facts a GPU stack is read from.

The pruned pod must read as the whole pod does: :func:`detect_stack` gives the same stack and
the same problems from either (checked on real-looking pods and on generated ones).
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from sits_observe.analytics.rightsizing.forms import detect_stack
from sits_observe.collectors.kube.gpu_stack import gpu_stack_json, gpu_stack_spec
from sits_observe.collectors.kube.pods import pod_row


def kai_pod(annotations: dict[str, str]) -> dict[str, Any]:
    """A pod sharing a GPU through the KAI scheduler (its docs' gpu-sharing example): no
    ``nvidia.com/gpu`` resource, the share in an annotation."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "gpu-sharing",
            "namespace": "team-a",
            "uid": "9b2e4c61-1d3f-4a8e-b7c2-5f0a9d8e6c14",
            "labels": {"kai.scheduler/queue": "team-a", "runai/queue": "team-a"},
            "annotations": {
                **annotations,
                "kubectl.kubernetes.io/last-applied-configuration": "{}",
            },
        },
        "spec": {
            "schedulerName": "kai-scheduler",
            "nodeName": "gpu-node-2",
            "containers": [
                {
                    "name": "ubuntu",
                    "image": "ubuntu",
                    "args": ["sleep", "infinity"],
                    "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}},
                }
            ],
        },
        "status": {"phase": "Running", "qosClass": "Burstable"},
    }


def vllm_shell_pod() -> dict[str, Any]:
    """A vLLM server started by a shell line, as Helm charts often write it."""
    return {
        "metadata": {"name": "llama-0", "namespace": "serving", "uid": "u-2"},
        "spec": {
            "containers": [
                {
                    "name": "vllm",
                    "image": "vllm/vllm-openai:v0.6.3",
                    "command": ["/bin/sh", "-c"],
                    "args": [
                        "vllm serve meta-llama/Llama-3.1-8B-Instruct --port 8000 "
                        "--gpu-memory-utilization 0.6 --max-model-len 8192"
                    ],
                    "resources": {
                        "requests": {"cpu": "4", "memory": "24Gi", "nvidia.com/gpu": "1"},
                        "limits": {"memory": "24Gi", "nvidia.com/gpu": "1"},
                    },
                },
                {"name": "exporter", "image": "x", "args": ["--port", "9400"]},
            ]
        },
        "status": {"phase": "Running"},
    }


def test_a_kai_fraction_pod_keeps_only_its_annotation() -> None:
    row = pod_row(kai_pod({"gpu-fraction": "0.5"}), Counter())
    assert row["gpu_stack_json"] == '{"metadata":{"annotations":{"gpu-fraction":"0.5"}},"spec":{}}'
    stack = detect_stack(json.loads(row["gpu_stack_json"]))
    assert (stack.kind, stack.kai_fraction_ratio, stack.current) == (
        "kai",
        0.5,
        "gpu-fraction: 0.5",
    )


def test_a_kai_memory_pod_keeps_its_mib() -> None:
    row = pod_row(kai_pod({"gpu-memory": "20000"}), Counter())
    assert row["gpu_stack_json"] == '{"metadata":{"annotations":{"gpu-memory":"20000"}},"spec":{}}'
    stack = detect_stack(json.loads(row["gpu_stack_json"]))
    assert (stack.kind, stack.kai_memory_mib) == ("kai", 20_000)


def test_a_vllm_shell_line_keeps_the_flag_and_its_value() -> None:
    assert gpu_stack_spec(vllm_shell_pod()) == {
        "spec": {
            "containers": [
                {
                    "args": ["--gpu-memory-utilization", "0.6"],
                    "resources": {"requests": {"nvidia.com/gpu": "1"}},
                }
            ]
        }
    }
    stack = detect_stack(json.loads(gpu_stack_json(vllm_shell_pod()) or "{}"))
    assert (stack.kind, stack.num_gpu, stack.vllm_utilization_ratio) == ("vllm", 1, 0.6)


def test_a_cpu_only_pod_has_no_facts() -> None:
    pod = kai_pod({})
    assert gpu_stack_spec(pod) is None
    assert pod_row(pod, Counter())["gpu_stack_json"] is None


def test_hami_and_mig_resources_and_a_gpu_sidecar_are_kept() -> None:
    pod = {
        "metadata": {"name": "p", "namespace": "ml", "uid": "u"},
        "spec": {
            "initContainers": [
                {"name": "warm", "resources": {"limits": {"cpu": "1", "nvidia.com/gpu": "1"}}},
                {"name": "log", "restartPolicy": "Always", "resources": {}},
            ],
            "containers": [
                {
                    "name": "a",
                    "resources": {
                        "limits": {"nvidia.com/gpumem": "8000", "nvidia.com/gpucores": "30"},
                        "requests": {"nvidia.com/gpucores": "20", "memory": "1Gi"},
                    },
                },
                {"name": "b", "resources": {"limits": {"nvidia.com/mig-1g.10gb": "1"}}},
            ],
        },
    }
    assert gpu_stack_spec(pod) == {
        "spec": {
            "containers": [
                # The request where given (cores 20), else the limit (memory 8000 MiB).
                {
                    "resources": {
                        "requests": {"nvidia.com/gpucores": "20", "nvidia.com/gpumem": "8000"}
                    }
                },
                {"resources": {"requests": {"nvidia.com/mig-1g.10gb": "1"}}},
            ],
            "initContainers": [{"resources": {"requests": {"nvidia.com/gpu": "1"}}}],
        }
    }


# -- the pruned pod reads as the whole pod ---------------------------------------------------

_KEYS = st.sampled_from(
    [
        "nvidia.com/gpu",
        "nvidia.com/gpumem",
        "nvidia.com/gpumem-percentage",
        "nvidia.com/gpucores",
        "nvidia.com/gpu.shared",
        "nvidia.com/mig-3g.40gb",
        "nvidia.com/mig-1g.10gb",
        "cpu",
        "memory",
        "example.com/fpga",
    ]
)
_VALUES = st.sampled_from(["1", "2", "25", "4000", "0.5", "500m", "x", "-3", "101"])
_RESOURCES = st.dictionaries(_KEYS, _VALUES, max_size=4)
_TOKENS = st.sampled_from(
    [
        "vllm",
        "serve",
        "model",
        "--port",
        "8000",
        "--gpu-memory-utilization",
        "--gpu-memory-utilization=0.8",
        "--gpu-memory-utilization=abc",
        "0.9",
        "1.5",
        "0",
        "--gpu-memory-utilization 0.7",
    ]
)
_WORDS = st.lists(_TOKENS, max_size=6)


@st.composite
def containers(draw: st.DrawFn, *, init: bool) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "c",
        "resources": {"requests": draw(_RESOURCES), "limits": draw(_RESOURCES)},
    }
    if draw(st.booleans()):
        container["command"] = draw(_WORDS)
    if draw(st.booleans()):
        container["args"] = [" ".join(draw(_WORDS))] if draw(st.booleans()) else draw(_WORDS)
    if init and draw(st.booleans()):
        container["restartPolicy"] = "Always"
    return container


@st.composite
def pods(draw: st.DrawFn) -> dict[str, Any]:
    annotations = draw(
        st.dictionaries(
            st.sampled_from(["gpu-memory", "gpu-fraction", "other"]),
            st.sampled_from(["0.5", "1", "4096", "abc", "0", "1.5"]),
        )
    )
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u", "annotations": annotations},
        "spec": {
            "containers": draw(st.lists(containers(init=False), max_size=3)),
            "initContainers": draw(st.lists(containers(init=True), max_size=2)),
        },
    }


@settings(max_examples=300, deadline=None)
@given(pods(), st.sampled_from([{}, {"nvidia.com/gpu.replicas": "4"}]))
def test_the_pruned_pod_reads_as_the_whole_pod(pod: dict[str, Any], labels: dict[str, str]) -> None:
    stored = gpu_stack_json(pod)
    pruned = {} if stored is None else json.loads(stored)
    assert detect_stack(pruned, labels) == detect_stack(pod, labels)
