"""Reports on inference serving: latency (exact and estimated), the latency-throughput heatmap,
batching advice, capacity and tenant isolation."""
