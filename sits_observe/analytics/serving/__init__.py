"""Inference serving: exact latency quantiles, batching advice, capacity across node pools, tenant
isolation, and the measured step-time profiles they rest on."""
