"""Prints the tables of docs/evidence/simulated-gpu-telemetry.md from the simulated cluster.

``python -m sits_observe.lab.cluster.telemetry_table [--seconds S]``: per GPU model, the
activity, power, SM clock and temperature of an idle card, an idle notebook, a training Job
and an LLM server (means over the run after a 30 s warm-up); then one H100 server's P95
latency for the same seeded request stream alone and with a training Job time-sliced onto its
first GPU (:mod:`.interference`).
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable

import numpy as np

from sits_observe.lab.cluster.activity import GpuActivity
from sits_observe.lab.cluster.cluster import SimulatedCluster
from sits_observe.lab.cluster.pods.specs import PodSpec

_NODES = {"h100": "gpu-node-1", "a100": "gpu-node-2"}


def _training(c: SimulatedCluster) -> PodSpec:
    while True:
        spec = c.workloads.next_pod()
        if spec.kind == "batch" and spec.num_gpu >= 1 and spec.gpu_percent == 100:
            return dataclasses.replace(spec, num_gpu=1, duration_s=1e9)


def activity_rows(seconds: int, seed: int) -> list[str]:
    """One markdown row per model and pod kind (see the module docstring)."""
    c = SimulatedCluster(nodes=2, gpus_per_node=8, seed=seed, standalone=False, idle_notebooks=2)
    owners = c.workloads.idle_notebook_owners
    for i, (node, deployment) in enumerate(
        zip(_NODES.values(), c.workloads.deployments, strict=True)
    ):
        c.start_pod(c.workloads.llm_replica(deployment), node, [0, 1, 2, 3])
        train = _training(c)
        c.start_pod(train, node, [4])
        c.start_pod(c.workloads.idle_notebook(owners[i]), node, [5])
    kinds = {0: "LLM server (TP 4)", 4: "training Job", 5: "idle notebook", 7: "no process"}
    seen: dict[tuple[str, int], list[GpuActivity]] = {}
    for t in range(seconds):
        c.step(1.0)
        if t < 30:
            continue
        for node in _NODES.values():
            for g in kinds:
                seen.setdefault((node, g), []).append(c.gpu_activity(node, g))
    rows = []
    for kind, node in _NODES.items():
        for g, what in kinds.items():
            xs = seen[(node, g)]

            def mean(f: Callable[[GpuActivity], float], xs: list[GpuActivity] = xs) -> float:
                return float(np.mean([f(a) for a in xs]))

            rows.append(
                f"| {kind} | {what} | {mean(lambda a: a.util_ratio):.2f} "
                f"| {mean(lambda a: a.tensor_active_ratio):.2f} "
                f"| {mean(lambda a: a.dram_active_ratio):.2f} "
                f"| {mean(lambda a: a.power_w):.0f} "
                f"({min(a.power_w for a in xs):.0f}-{max(a.power_w for a in xs):.0f}) "
                f"| {mean(lambda a: a.sm_clock_mhz):.0f} | {mean(lambda a: a.temp_c):.0f} |"
            )
    return rows


def interference_rows(seconds: int, seed: int) -> list[str]:
    """The H100 server's latency alone and with a training Job on its first GPU."""
    rows = []
    for neighbour in (False, True):
        c = SimulatedCluster(nodes=1, gpus_per_node=8, seed=seed, standalone=False)
        pod = c.start_pod(c.workloads.llm_replica(), "gpu-node-1", [0, 1, 2, 3])
        job = _training(c)
        if neighbour:
            c.start_pod(job, "gpu-node-1", [0])
        slow = []
        for _ in range(seconds):
            c.step(1.0)
            assert pod.server is not None
            slow.append(pod.server.slowdown)
        lat = [r.latency_s for _, r in c.finished_requests("gpu-node-1")]
        what = "training Job time-sliced onto GPU 0" if neighbour else "alone"
        rows.append(
            f"| {what} | {np.mean(slow):.2f} | {len(lat)} | {np.percentile(lat, 50):.2f} "
            f"| {np.percentile(lat, 95):.2f} |"
        )
    return rows


def main(argv: list[str] | None = None) -> None:
    """Print both tables (markdown)."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=int, default=300, help="simulated seconds per run")
    parser.add_argument("--seed", type=int, default=5, help="the cluster's seed")
    args = parser.parse_args(argv)
    print("| model | GPU runs | util | tensor | DRAM | power W mean (min-max) | SM MHz | C |")
    print("|---|---|---|---|---|---|---|---|")
    print("\n".join(activity_rows(args.seconds, args.seed)))
    print()
    print("| H100 server | mean slowdown | requests | P50 s | P95 s |")
    print("|---|---|---|---|---|")
    print("\n".join(interference_rows(args.seconds, args.seed)))


if __name__ == "__main__":
    main()
