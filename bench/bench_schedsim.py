"""Scheduling simulator on the Alibaba default trace: speed per policy, total, a naive peer.

Timed:

- ``all``: :func:`sits_observe.analytics.schedsim.simulate` with every policy (7) x ``--seeds``
  seeds on the 1,213-node / 8,152-pod trace inflated to 130% (about 10,800 arrivals per
  replay), in ``--workers`` processes; wall time of the whole call (loading the CSVs not
  included). Per policy: the median over seeds of *decisions per second* of one replay
  (arrivals / replay time; a failed pod is a decision too), measured inside the worker.
- ``naive``: FGD written the plain way, a Python loop over nodes and GPUs that computes each
  node's F_n(M) before and after the pod (the authors' plugin structure) with the same
  integer score and tie-break, for the first ``--naive-pods`` arrivals of seed 0; against the
  vectorised FGD policy on the same arrivals. Both must choose the same node and GPU for
  every pod (checked).

The allocation and fragmentation the replays reach are printed next to the published ATC'23
numbers (SPEC table). ``--record`` writes the figures into docs/benchmarks.md between the
schedsim-bench markers (appending the section at the end when absent).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from sits_observe.analytics import schedsim
from sits_observe.analytics.fgd_model import MILLI_PER_GPU
from sits_observe.analytics.fgd_workload import TargetWorkload
from sits_observe.analytics.schedsim_policies import Choice, FgdPolicy, fgd_score, is_partial
from sits_observe.analytics.schedsim_state import SimPod, SimState
from sits_observe.analytics.traces import load_node_list, load_pod_list

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "benchmarks.md"
TRACE = ROOT.parent / "shared" / "data" / "traces" / "alibaba-gpu-v2023"
BEGIN, END = "<!-- schedsim-bench:begin -->", "<!-- schedsim-bench:end -->"
SECTION = "## Scheduling simulator"

PUBLISHED = {  # SPEC: means of the authors' 10 seeds, default workload, 130% arrived
    "random": (0.8747, 778),
    "dotprod": (0.9085, 569),
    "clustering": (0.9188, 505),
    "packing": (0.9200, 497),
    "bestfit": (0.9308, 430),
    "fgd": (0.9539, 286),
}


# -- the naive peer --------------------------------------------------------------------------


def node_frag(cpu_free: int, gpus: list[int], workload: TargetWorkload) -> float:
    """F_n(M) of one node, the plain way (per typical pod, per GPU)."""
    idle = sum(gpus)
    total = 0.0
    for typical in workload.pods:
        shape, weight = typical.shape, typical.weight
        if shape.num_gpu == 0:
            total += weight * idle
            continue
        enough = sum(1 for g in gpus if g >= shape.gpu_milli)
        if enough >= shape.num_gpu and cpu_free >= shape.cpu_milli:
            total += weight * sum(g for g in gpus if g < shape.gpu_milli)
        else:
            total += weight * idle
    return total


def naive_fgd(sim: SimState, pod: SimPod, workload: TargetWorkload) -> Choice | None:
    """FGD with a Python loop over nodes (and GPUs for a partial-GPU pod)."""
    shape = pod.shape
    best: tuple[int, int, int, int] | None = None  # (score, -rank, node, gpu)
    for n in range(len(sim)):
        cpu = int(sim.cluster.cpu_free_milli[n])
        count = int(sim.cluster.gpu_count[n])
        gpus = [int(g) for g in sim.gpu_free_milli[n, :count]]
        if cpu < shape.cpu_milli or int(sim.memory_free_mib[n]) < pod.memory_mib:
            continue
        if shape.num_gpu and sum(1 for g in gpus if g >= shape.gpu_milli) < shape.num_gpu:
            continue
        before = node_frag(cpu, gpus, workload)
        if is_partial(pod):
            candidates = [g for g in range(count) if gpus[g] >= shape.gpu_milli]
        else:
            candidates = [-1]
        for g in candidates:
            after_gpus = list(gpus)
            if g >= 0:
                after_gpus[g] -= shape.gpu_milli
            else:
                taken = 0
                for i in range(count):
                    if taken < shape.num_gpu and after_gpus[i] == MILLI_PER_GPU:
                        after_gpus[i] = 0
                        taken += 1
            delta = node_frag(cpu - shape.cpu_milli, after_gpus, workload) - before
            score = int(fgd_score(np.array([delta]))[0])
            key = (score, -int(sim.tie_rank[n]), n, -g)
            if best is None or key > best:
                best = key
    if best is None:
        return None
    node, gpu = best[2], -best[3]
    return Choice(node, (gpu,) if gpu >= 0 else None)


def naive_vs_vectorised(trace: Path, count: int) -> tuple[float, float, bool]:
    """Seconds per decision, naive and vectorised, over the first ``count`` arrivals of seed 0."""
    nodes = load_node_list(trace / "openb_node_list_gpu_node.csv")
    pods = load_pod_list(trace / "openb_pod_list_default.csv")
    settings = schedsim.SimulationSettings()
    workload = schedsim.target_workload(pods, settings)
    arriving = schedsim.sim_pods(pods)
    arrival_rng = np.random.default_rng(np.random.SeedSequence(0).spawn(2)[0])
    capacity = int(nodes.gpu_count.sum()) * MILLI_PER_GPU
    order = schedsim.arrival_order(pods, capacity, settings.load_ratio, arrival_rng)[:count]
    ranks = arrival_rng.permutation(len(nodes)).astype(np.int64)
    results: list[list[Choice | None]] = []
    seconds: list[float] = []
    policy = FgdPolicy()
    for naive in (True, False):
        sim = SimState.from_node_list(nodes, workload)
        sim.tie_rank = ranks.copy()
        chosen: list[Choice | None] = []
        started = time.perf_counter()
        for i in order:
            pod = arriving[int(i)]
            if naive:
                choice = naive_fgd(sim, pod, workload)
            else:
                choice = policy.choose(sim, pod, np.random.default_rng(0))
            if choice is not None:
                sim.place(choice.node, pod, choice.gpus)
            chosen.append(choice)
        seconds.append((time.perf_counter() - started) / len(order))
        results.append(chosen)
    return seconds[0], seconds[1], results[0] == results[1]


# -- the full run ----------------------------------------------------------------------------


def run(args: argparse.Namespace) -> str:
    trace = Path(args.trace)
    nodes = load_node_list(trace / "openb_node_list_gpu_node.csv")
    pods = load_pod_list(trace / "openb_pod_list_default.csv")
    seeds = list(range(args.seeds))
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    results = schedsim.simulate(nodes, pods, schedsim.policy_names(), seeds, workers=args.workers)
    total_s = time.perf_counter() - started
    naive_s, vector_s, same = naive_vs_vectorised(trace, args.naive_pods)
    load_after = os.getloadavg()[0]
    lines = [
        f"Date {datetime.now(UTC):%Y-%m-%d}; machine: {platform.machine()}, {os.cpu_count()} "
        f"cores, Python {platform.python_version()}, numpy {np.__version__}; 1-minute load "
        f"average {load_before:.1f} before and {load_after:.1f} after (shared machine).",
        f"Input: {len(nodes):,} nodes ({int(nodes.gpu_count.sum()):,} GPUs), {len(pods):,} pods "
        f"(`openb_pod_list_default.csv`) inflated to 130% of GPU capacity: "
        f"{results[0].replays[0].pods_arrived:,} arrivals in seed 0.",
        "",
        f"**All 7 policies x {len(seeds)} seeds: {total_s:.1f} s** on {args.workers} worker "
        "processes (wall time of `simulate()`, trace loading excluded).",
        "",
        "| policy | decisions/s (median of seeds) | GPU alloc at 130% | paper | unallocated GPUs "
        "| paper | first failure (arrived) | frag ratio at 90% |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        rates = [x.pods_arrived / x.elapsed_s for x in r.replays]
        alloc, unalloc = PUBLISHED.get(r.policy, (None, None))
        failure = r.first_failure_arrived
        lines.append(
            f"| {r.policy} | {statistics.median(rates):,.0f} | {r.final_alloc_ratio.mean:.2%} "
            f"| {'-' if alloc is None else f'{alloc:.2%}'} | {r.unallocated_gpus.mean:,.0f} "
            f"| {'-' if unalloc is None else unalloc} "
            f"| {'none' if failure is None else f'{failure.mean:.1%}'} "
            f"| {r.frag_ratio[0, 90]:.1%} |"
        )
    lines += [
        "",
        f"Naive peer (FGD as a Python loop over nodes and GPUs, same score and tie-break), first "
        f"{args.naive_pods} arrivals of seed 0: {naive_s * 1000:,.1f} ms per decision vs "
        f"{vector_s * 1000:.2f} ms for the vectorised policy: **{naive_s / vector_s:,.0f}x**; "
        f"same node and GPU for every pod: {'yes' if same else 'NO'}.",
        "",
        "What is timed: each replay builds the empty cluster, the arrival order (shuffle + "
        "inflation) and runs every arrival through the policy (filters, scores over all "
        "feasible nodes, tie-break, placement, F(M) bookkeeping, curve points). FGD and sits "
        "score every (node, distinct GPU share) candidate through the incremental "
        "`FragmentationIndex`, the other policies a few numpy expressions per pod. Method, "
        "policies and the calibration against the paper: docs/analytics/simulator.md.",
        "",
        f"Command: `.venv/bin/python bench/bench_schedsim.py --seeds {len(seeds)} "
        f"--workers {args.workers} --naive-pods {args.naive_pods}"
        f"{' --record' if args.record else ''}`.",
    ]
    return "\n".join(lines)


def record(body: str) -> None:
    """Replace the text between the markers in docs/benchmarks.md, or append the section."""
    text = DOCS.read_text()
    block = f"{BEGIN}\n{body}\n{END}"
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        tail = rest.split(END, 1)[1]
        DOCS.write_text(head + block + tail)
    else:
        DOCS.write_text(text.rstrip("\n") + f"\n\n{SECTION}\n\n{block}\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default=str(TRACE), help="folder with the two CSV files")
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--naive-pods", type=int, default=100)
    parser.add_argument("--record", action="store_true", help="write into docs/benchmarks.md")
    args = parser.parse_args()
    body = run(args)
    print(body)
    if args.record:
        record(body)


if __name__ == "__main__":
    main()
