"""Inference servers: vLLM and Triton metrics collectors, and per-request logs (files, and a
follower of a growing JSON-lines log)."""
