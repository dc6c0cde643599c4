"""How long one ``sits-observe experiment`` run takes: wall and CPU seconds per arm and seed.

Each (arm, seed) runs in a child process exactly as the command runs it
(:func:`sits_observe.lab.experiment.experiment.run_job`: the emulator, the store, the service,
the agents, the kube-scheduler model calling the extender, the controller's plan and apply),
so its CPU seconds (user + system of the child and all its threads, from ``getrusage``) are
its own. CPU seconds are the figure to compare on a shared machine; wall seconds depend on
what else runs (the load average before each run is printed with it).

Settings (``--size``, repeatable): ``default`` is the command's defaults (8 nodes x 8 GPUs,
one simulated hour); ``large`` is 50 nodes x 8 GPUs, 6 simulated hours; ``NxGxH`` any other
(``4x8x0.1``). ``--against TREE`` runs every setting a second time with the package of another
checkout (a ``git worktree`` of the code before a change), alternating the two per run so the
machine's load falls on both alike, and prints the ratio. ``--together`` also runs every arm
and seed of each setting as the command does (``run_experiment``, runs side by side in worker
processes, one per core by default) and prints the elapsed time per arm and seed: what a user
waits for.

    python bench/bench_experiment_speed.py                       # default, both arms
    python bench/bench_experiment_speed.py --size large --arms kube-sits
    python bench/bench_experiment_speed.py --size 8x8x0.25 --against /tmp/before
    python bench/bench_experiment_speed.py --together --seeds 2
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SIZES = {"default": (8, 8, 1.0), "large": (50, 8, 6.0)}

#: Run by the child: one (arm, seed) of the experiment, the figures on stdout as JSON.
_CHILD = """
import json, sys, time
from sits_observe.lab.experiment.experiment import run_job
from sits_observe.lab.experiment.settings import ExperimentSettings
arm, seed, nodes, gpus = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
settings = ExperimentSettings(
    seeds=1, first_seed=seed, nodes=nodes, gpus_per_node=gpus, hours=float(sys.argv[5])
)
started = time.perf_counter()
result = run_job(settings, arm, seed)
print(json.dumps({"wall_s": time.perf_counter() - started, "run_wall_s": result.wall_s}))
"""

#: Run by the child with ``--together``: every arm and seed as ``sits-observe experiment`` runs
#: them (its default ``jobs``), the elapsed seconds on stdout as JSON.
_TOGETHER = """
import json, sys, time
from sits_observe.lab.experiment.experiment import run_experiment
from sits_observe.lab.experiment.settings import ExperimentSettings
arms = tuple(sys.argv[1].split(","))
seeds, nodes, gpus = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
settings = ExperimentSettings(
    arms=arms, seeds=seeds, nodes=nodes, gpus_per_node=gpus, hours=float(sys.argv[5])
)
started = time.perf_counter()
run_experiment(settings)
print(json.dumps({"wall_s": time.perf_counter() - started, "workers": settings.workers}))
"""


@dataclass(frozen=True)
class Timing:
    """One run: which tree, setting and arm, its wall and CPU seconds, the load before it."""

    tree: str
    size: str
    arm: str
    seed: int
    wall_s: float
    cpu_s: float
    load_1m: float


def parse_size(text: str) -> tuple[int, int, float]:
    """``default``, ``large`` or ``NODESxGPUSxHOURS``."""
    if text in SIZES:
        return SIZES[text]
    try:
        nodes, gpus, hours = text.split("x")
        return int(nodes), int(gpus), float(hours)
    except ValueError:
        raise SystemExit(f"--size {text!r}: use default, large or NODESxGPUSxHOURS") from None


def run_child(
    tree: Path, arm: str, seed: int, size: tuple[int, int, float], script: str = _CHILD
) -> tuple[float, float]:
    """Wall and CPU seconds of one run with the package of ``tree`` (with ``_TOGETHER``:
    ``arm`` is the comma-separated arms, ``seed`` the number of seeds; the CPU seconds count
    the worker processes too)."""
    # The environment the command's worker processes start with (one polars thread), for
    # both trees alike: a tree from before it existed is measured on the same terms.
    from sits_observe.lab.experiment.experiment import WORKER_ENV

    env = {**WORKER_ENV, **os.environ, "PYTHONPATH": str(tree), "PYTHONWARNINGS": "ignore"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", script, arm, str(seed), *(str(x) for x in size)],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    wall_s = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"the run of {arm} in {tree} failed:\n{done.stderr[-4000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall_s, cpu_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", action="append", help="default, large or NxGxH (repeatable)")
    parser.add_argument("--arms", default="kube-default,kube-sits")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=1, help="runs per arm and tree")
    parser.add_argument("--against", type=Path, help="another checkout to compare with")
    parser.add_argument(
        "--together", action="store_true", help="also every arm and seed as the command runs them"
    )
    parser.add_argument("--seeds", type=int, default=1, help="seeds with --together")
    args = parser.parse_args()
    sizes = args.size or ["default"]
    trees = [("this", ROOT)] + ([("against", args.against.resolve())] if args.against else [])
    print(
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {platform.node()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}",
        flush=True,
    )
    timings: list[Timing] = []
    for size in sizes:
        shape = parse_size(size)
        for _ in range(args.repeat):
            for arm in args.arms.split(","):
                for name, tree in trees:
                    load = os.getloadavg()[0]
                    wall_s, cpu_s = run_child(tree, arm, args.seed, shape)
                    timing = Timing(name, size, arm, args.seed, wall_s, cpu_s, load)
                    timings.append(timing)
                    print(json.dumps(timing.__dict__), flush=True)
    report(timings, sizes, [name for name, _ in trees])
    if args.together:
        together(args.arms, args.seeds, sizes, trees)


def together(arms: str, seeds: int, sizes: list[str], trees: list[tuple[str, Path]]) -> None:
    """Every arm and seed of each setting as ``sits-observe experiment`` runs them."""
    runs = len(arms.split(",")) * seeds
    print()
    print(
        f"{runs} runs at once as the command runs them ({os.cpu_count()} cores, its default jobs)"
    )
    print("| setting | code | elapsed s | elapsed s per arm and seed | CPU s | load 1 min |")
    print("|---|---|---:|---:|---:|---:|")
    for size in sizes:
        for name, tree in trees:
            load = os.getloadavg()[0]
            wall_s, cpu_s = run_child(tree, arms, seeds, parse_size(size), _TOGETHER)
            print(
                f"| {size} | {name} | {wall_s:.1f} | {wall_s / runs:.1f} | {cpu_s:.1f} | "
                f"{load:.1f} |",
                flush=True,
            )


def report(timings: list[Timing], sizes: list[str], trees: list[str]) -> None:
    """The markdown table: median wall and CPU seconds per setting, arm and tree."""
    print()
    print("| setting | arm | code | wall s (median) | CPU s (median) | load 1 min | runs |")
    print("|---|---|---|---:|---:|---:|---:|")
    medians: dict[tuple[str, str, str], tuple[float, float]] = {}
    for size in sizes:
        for arm in dict.fromkeys(t.arm for t in timings):
            for tree in trees:
                runs = [t for t in timings if (t.size, t.arm, t.tree) == (size, arm, tree)]
                if not runs:
                    continue
                wall = statistics.median(t.wall_s for t in runs)
                cpu = statistics.median(t.cpu_s for t in runs)
                load = statistics.median(t.load_1m for t in runs)
                medians[(size, arm, tree)] = (wall, cpu)
                print(
                    f"| {size} | {arm} | {tree} | {wall:.1f} | {cpu:.1f} | {load:.1f} | "
                    f"{len(runs)} |"
                )
    if "against" in trees:
        print()
        for (size, arm, tree), (wall, cpu) in medians.items():
            if tree == "this" and (size, arm, "against") in medians:
                old_wall, old_cpu = medians[(size, arm, "against")]
                print(
                    f"{size} {arm}: {old_wall / wall:.2f}x faster in wall time, "
                    f"{old_cpu / cpu:.2f}x less CPU"
                )


if __name__ == "__main__":
    main()
