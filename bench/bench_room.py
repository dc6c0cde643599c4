"""Where the GPUs a replay leaves idle at 130 % are: how much room a better policy has.

For the default workload and each study variant, ``fgd`` against ``sits`` (and ``kube-sits``
with ``--kube``: the extender's path), ``--seeds`` seeds, node-order ties: at the end of each
replay, the idle GPUs split into whole idle GPUs and the remnants beside shares, the part of
those on GPUs holding a single share, the share set that leaves the most, and a hindsight
reference: the same shares repacked best-fit decreasing
(:mod:`sits_observe.lab.replay.engine.room`). Means over the seeds, in GPUs.

The replays are :func:`sits_observe.lab.replay.engine.replay.replay` itself (the ledger only watches
its placements), so their allocation is the replay table's. Prints a markdown table; nothing is
recorded automatically (docs/evidence/sits-tie-levels.md quotes it).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import platform
import statistics
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

from bench_schedsim import TRACE, load_trace

from sits_observe.analytics.traces.variants import STUDY_VARIANTS, make_variant
from sits_observe.lab.replay.engine import replay as schedsim
from sits_observe.lab.replay.engine.policies import Policy
from sits_observe.lab.replay.engine.room import RoomLeft, ShareLedger
from sits_observe.lab.replay.extender import KUBE_SITS, replay_policies


def one(trace: str, workload: str, policy: str, seed: int) -> RoomLeft:
    """One replay of ``policy`` on ``workload`` and where its idle GPUs are at the end."""
    nodes, base = load_trace(Path(trace))
    pods = make_variant(base, nodes, workload)
    chooser: str | Policy = replay_policies(pods)[KUBE_SITS]() if policy == KUBE_SITS else policy
    ledger = ShareLedger()
    schedsim.replay(nodes, pods, chooser, seed, on_place=ledger)
    return ledger.room()


def row(workload: str, policy: str, rooms: list[RoomLeft]) -> str:
    """The table row of ``policy`` over its seeds."""

    def mean(name: str) -> float:
        return statistics.mean(float(getattr(r, name)) for r in rooms)

    top: Counter[tuple[int, ...]] = Counter()
    for r in rooms:
        top.update(r.remnant_by_shares)
    sizes, total = top.most_common(1)[0] if top else ((), 0.0)
    shares = "+".join(str(m) for m in sizes) or "-"
    return (
        f"| {workload} | {policy} | {mean('idle_gpus'):.1f} | {mean('whole_idle_gpus'):.1f} "
        f"| {mean('share_remnant_gpus'):.1f} | {mean('lone_share_remnant_gpus'):.1f} "
        f"| {shares}: {total / len(rooms):.1f} | {mean('repacked_remnant_gpus'):.1f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default=str(TRACE), help="folder with the two CSV files")
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--kube", action="store_true", help="also kube-sits (the extender)")
    parser.add_argument(
        "--workloads", default="", help="only these workloads (comma-separated; all)"
    )
    args = parser.parse_args()
    if args.seeds < 1:
        raise SystemExit("--seeds: at least one seed is needed")
    known = ("default", *STUDY_VARIANTS)
    asked = args.workloads.split(",") if args.workloads else list(known)
    if unknown := sorted(set(asked) - set(known)):
        raise SystemExit(f"--workloads: unknown {', '.join(unknown)}; known: {', '.join(known)}")
    workloads = [w for w in known if w in asked]
    policies = ["fgd", "sits", *([KUBE_SITS] if args.kube else [])]
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    jobs = [(w, p, s) for w in workloads for p in policies for s in seeds]
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    context = multiprocessing.get_context("forkserver")
    with ProcessPoolExecutor(args.workers, mp_context=context) as pool:
        futures = {job: pool.submit(one, args.trace, *job) for job in jobs}
        rooms = {job: future.result() for job, future in futures.items()}
    elapsed = time.perf_counter() - started
    print(
        f"Date {datetime.now(UTC):%Y-%m-%d}; {platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, {args.workers} worker processes; 1-minute load "
        f"average {load_before:.1f} at the start. Seeds {seeds[0]} to {seeds[-1]}, 130% "
        "arrived, node-order ties; means over the seeds, GPUs.\n"
    )
    print(
        "| workload | policy | idle | whole idle GPUs | share remnants | beside a lone share "
        "| share set leaving most | repacked with hindsight |"
    )
    print("|---|---|---:|---:|---:|---:|---|---:|")
    for w in workloads:
        for p in policies:
            print(row(w, p, [rooms[(w, p, s)] for s in seeds]))
    print(
        f"\nCommand: `.venv/bin/python bench/bench_room.py --seeds {args.seeds}"
        + (f" --first-seed {args.first_seed}" if args.first_seed else "")
        + (" --kube" if args.kube else "")
        + (f" --workloads {args.workloads}" if args.workloads else "")
        + f" --workers {args.workers}` ({elapsed / 60:.0f} min)."
    )


if __name__ == "__main__":
    main()
