-- Schema version 5: the pod-spec facts a pod's GPU stack is read from (docs/schema.md).
-- Frozen once released: change the schema with a new numbered file, never by editing this one.

-- A pruned v1.Pod as compact JSON: the GPU resources of each container (request, else limit),
-- vLLM's --gpu-memory-utilization tokens and KAI's gpu-memory / gpu-fraction annotations
-- (collectors/kube_gpu_stack.py). NULL for a pod with none of them, and for every row stored
-- before version 5 (its stack is then read from gpu_request, gpu_milli and the samples).
ALTER TABLE pods ADD COLUMN gpu_stack_json VARCHAR;
