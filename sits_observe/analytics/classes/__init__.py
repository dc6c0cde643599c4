"""Workload classes: memory sensitivity, compute intensity, precision and burstiness, from the
spec's rules (written once, vectorised) over pods or workloads read from the store."""
