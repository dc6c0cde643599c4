"""Inference servers: the serving-engine mapping table (:mod:`.engines`: vLLM, Triton, SGLang,
TensorRT-LLM, Dynamo, the llm-d endpoint picker, OpenTelemetry GenAI), the collectors that
read it (:mod:`.engine`, :mod:`.vllm`, :mod:`.triton`), and per-request logs (files, and a
follower of a growing JSON-lines log)."""
