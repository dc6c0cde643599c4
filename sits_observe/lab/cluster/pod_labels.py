"""The model and precision labels a simulated pod declares, for the device affinity rules.

The device affinity report and the extender's affinity rules read our ``sits.io/model`` and
``sits.io/precision`` pod labels (:data:`~sits_observe.collectors.kube.gpu_stack.MODEL_KEY`,
:data:`~sits_observe.collectors.kube.gpu_stack.PRECISION_KEY`; docs/extender.md "Device
affinity"). :func:`affinity_labels` gives them for a :class:`~.pods.specs.PodSpec`:

- an inference replica serves :data:`~.pods.generator.LLM_MODEL` in fp16 (the weights the servers
  load, Llama-2-70b-chat-hf, are published in fp16, and the KV cache sizing assumes fp16:
  :mod:`sits_observe.analytics.serving.step_profiles`);
- a training Job (whole GPUs) trains in bf16 (mixed precision, the default of current
  training stacks on A100 / H100), an evaluation run (a share) runs fp16 inference; both
  name the model they fine-tune / evaluate;
- notebooks and CPU-only Jobs declare nothing (a user's notebook has no declared precision).

The pod's manifest carries them as labels; the Kubernetes side that writes the manifest
(``lab/kube/publish.py``) merges them into the pod's labels.
"""

from __future__ import annotations

from sits_observe.collectors.kube.gpu_stack import MODEL_KEY, PRECISION_KEY
from sits_observe.lab.cluster.pods.generator import LLM_MODEL
from sits_observe.lab.cluster.pods.specs import WHOLE_GPU_PERCENT, PodSpec

SERVING_PRECISION = "fp16"
TRAINING_PRECISION = "bf16"


def affinity_labels(spec: PodSpec) -> dict[str, str]:
    """``{sits.io/model: ..., sits.io/precision: ...}`` of ``spec`` (empty when it declares
    none; see the module docstring)."""
    if spec.kind == "llm":
        return {MODEL_KEY: LLM_MODEL, PRECISION_KEY: SERVING_PRECISION}
    if spec.kind == "batch" and spec.num_gpu > 0:
        training = spec.gpu_percent >= WHOLE_GPU_PERCENT
        return {
            MODEL_KEY: LLM_MODEL,
            PRECISION_KEY: TRAINING_PRECISION if training else SERVING_PRECISION,
        }
    return {}
