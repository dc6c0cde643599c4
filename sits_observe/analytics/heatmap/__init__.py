"""The latency-throughput heatmap: its grid (from requests or from histograms), the knee and the
safe maximum throughput, and its JSON and PNG forms."""
