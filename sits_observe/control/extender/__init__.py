"""The kube-scheduler extender: its wire format, request handling, the cluster view it scores
over (DuckDB or PromQL), the ``sits`` score and ranking, and the ``bind`` verb."""
