"""Simulated pods declare the model and precision the device affinity rules read, and the
real pod-spec reader (collectors.kube.gpu_stack) keeps and reads them."""

from __future__ import annotations

from sits_observe.analytics.serving.step_profiles import GPU_PRODUCTS
from sits_observe.collectors.kube.gpu_stack import affinity_keys, gpu_stack_spec
from sits_observe.lab.cluster.pod_labels import affinity_labels
from sits_observe.lab.cluster.pods.generator import LLM_MODEL, WorkloadGenerator
from sits_observe.lab.kube.publish import pending_pod_body


def test_gpu_pods_declare_model_and_precision_as_the_collector_reads_them() -> None:
    w = WorkloadGenerator(
        products=[GPU_PRODUCTS["h100"], GPU_PRODUCTS["a100"]], gpus_per_node=8, seed=2
    )
    seen: dict[str, set[str | None]] = {}
    for spec in [w.llm_replica(), *(w.next_pod() for _ in range(60))]:
        body = pending_pod_body(spec)
        body["metadata"]["labels"] |= affinity_labels(spec)  # the publisher's merge
        pruned = gpu_stack_spec(body)
        if spec.num_gpu == 0:
            assert pruned is None and affinity_labels(spec) == {}
            continue
        assert pruned is not None
        model, precision = affinity_keys(pruned.get("metadata", {}))
        kind: str = spec.kind
        if spec.kind == "batch":
            kind = "train" if spec.gpu_percent == 100 else "eval"
        seen.setdefault(kind, set()).add(precision)
        if spec.kind != "notebook":
            assert model == LLM_MODEL
    assert seen["llm"] == {"fp16"}
    assert seen["train"] == {"bf16"}
    assert seen["eval"] == {"fp16"}
    assert seen["notebook"] == {None}
