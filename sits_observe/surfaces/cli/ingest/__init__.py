"""``sits-observe ingest``: load samples into a DuckDB store once, from dcgm-exporter text,
a cgroup tree, the Kubernetes API or request logs, each screened by the service's rules."""
