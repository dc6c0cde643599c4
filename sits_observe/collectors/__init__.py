"""Collectors: read vendor formats (dcgm-exporter text, NVML, cgroup v2, inference-server
metrics, request logs, the Kubernetes API) and turn them into the domain's Arrow tables."""
