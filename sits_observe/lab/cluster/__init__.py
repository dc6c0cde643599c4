"""Simulated GPU nodes on a simulated clock: DCGM exposition, cgroup v2 files, kubelets and
inference servers, driven by seeded workloads."""
