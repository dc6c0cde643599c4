"""``sits-observe experiment`` at its documented size: wall time of one run and the table.

Runs every arm on every seed exactly as the command does
(:func:`sits_observe.lab.experiment.experiment.run_job` per (arm, seed), then
:func:`~sits_observe.lab.experiment.experiment.assemble`), timing each run (wall time: building the
emulator, the store, the service and the agents, stepping the simulated hours, reading the
store back; the measures are computed afterwards and not timed), and prints as markdown:

- the wall time of one run (median, min-max over runs) and of the whole experiment;
- the experiment table: per arm the mean and min-max over seeds of every measure;
- per seed the three numbers the target is about and whether it was met;
- the headline in the form the SITS documents print it, measured here with its seeds.

``--cache DIR`` keeps each finished run (a pickle of its timeline), so an interrupted
benchmark resumes; ``--record`` writes the figures into docs/benchmarks.md and
docs/experiment.md (between the experiment-bench markers, appending a section when absent).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import pickle
import platform
import statistics
from concurrent.futures import ProcessPoolExecutor, as_completed
from datetime import UTC, datetime
from pathlib import Path

from _docs import write_block

from sits_observe.lab.experiment.experiment import (
    ExperimentResult,
    assemble,
    job_order,
    run_job,
    worker_environment,
)
from sits_observe.lab.experiment.measures import MEASURES
from sits_observe.lab.experiment.png import render_chart
from sits_observe.lab.experiment.run import RunResult
from sits_observe.lab.experiment.settings import BASELINE, ExperimentSettings
from sits_observe.lab.experiment.table import MEASURE_ROWS, format_cell, headline, spread_cell

ROOT = Path(__file__).resolve().parents[1]
BENCH_DOCS = ROOT / "docs" / "benchmarks.md"
EXPERIMENT_DOCS = ROOT / "docs" / "experiment.md"
BEGIN, END = "<!-- experiment-bench:begin -->", "<!-- experiment-bench:end -->"
SECTION = "## Experiment: sits on versus off"


def run_all(settings: ExperimentSettings, cache: Path | None, jobs: int = 1) -> ExperimentResult:
    """Every run (from the cache when there, with the wall time it took then), ``jobs`` at
    once in worker processes."""
    results: dict[tuple[str, int], RunResult] = {}
    todo: list[tuple[str, int]] = []
    for arm, seed in job_order(settings.model_copy(update={"jobs": jobs})):
        path = cache / f"{arm}-seed{seed}.pickle" if cache is not None else None
        if path is not None and path.is_file():
            results[(arm, seed)] = pickle.loads(path.read_bytes())  # our own cache
        else:
            todo.append((arm, seed))

    def keep(arm: str, seed: int, result: RunResult) -> None:
        print(f"{arm} seed {seed}: {result.wall_s:.0f} s", flush=True)
        results[(arm, seed)] = result
        if cache is not None:
            cache.mkdir(parents=True, exist_ok=True)
            (cache / f"{arm}-seed{seed}.pickle").write_bytes(pickle.dumps(result))

    if jobs == 1:
        for arm, seed in todo:
            keep(arm, seed, run_job(settings, arm, seed))
    else:
        context = multiprocessing.get_context("spawn")
        with (
            worker_environment(),  # as the command's workers start
            ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool,
        ):
            futures = {pool.submit(run_job, settings, arm, seed): (arm, seed) for arm, seed in todo}
            for future in as_completed(futures):
                keep(*futures[future], future.result())
    return assemble(settings, results)


def markdown(result: ExperimentResult, command: str, jobs: int = 1) -> str:
    """The recorded section (see the module docstring)."""
    s = result.settings
    seeds = ", ".join(str(x) for x in s.seed_list)
    walls = [w for _, _, w in result.wall_s]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    lines = [
        f"Date {datetime.now(UTC):%Y-%m-%d}; machine: {platform.machine()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}; 1-minute load average "
        f"{load:.1f} at the end (shared machine).",
        f"Size: {s.nodes} nodes x {s.gpus_per_node} GPUs, {s.hours:g} simulated hour(s), "
        f"step {s.step_s:g} s, agents every {s.collect_every_s:g} s, inventory every "
        f"{s.inventory_every_s:g} s, controller every {s.controller_every_s:g} s; seeds {seeds}.",
        "",
        f"**Wall time of one run: {statistics.median(walls):.0f} s** (median of {len(walls)} "
        f"runs, {min(walls):.0f}-{max(walls):.0f} s; {sum(walls) / 60:.0f} min of run time in "
        f"all, {jobs} run(s) at once on the machine's {os.cpu_count()} cores).",
        "",
        "| measure | " + " | ".join(a.arm for a in result.arms) + " |",
        "|---|" + "---:|" * len(result.arms),
    ]
    for name, label, kind in MEASURE_ROWS:
        cells = [spread_cell(arm.spread[name], kind) for arm in result.arms]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += ["", "Mean (min-max) over the seeds. Per seed:", ""]
    lines += _per_seed(result)
    lines.append("")
    for arm in result.arms:
        applied = ", ".join(f"{a} {n}" for a, n in arm.applied.items()) or "nothing"
        lines.append(f"- controller decisions applied ({arm.arm}, all seeds): {applied}")
    lines.append("")
    lines.append("The SITS documents' table, measured here (seeds " + seeds + "):")
    lines.append("")
    lines += [f"- {arm.arm}: {headline(arm)}" for arm in result.arms]
    lines += ["", f"Command: `{command}`."]
    assert set(MEASURES) >= {name for name, _, _ in MEASURE_ROWS}
    return "\n".join(lines)


def _per_seed(result: ExperimentResult) -> list[str]:
    arms = {a.arm: dict(a.runs) for a in result.arms}
    head = "| seed | arm | frag ratio | waited + unscheduled GPU pods | P95 latency, s | target |"
    rows = [head, "|---:|---|---:|---:|---:|---|"]
    checks = {(arm, c.seed): c for arm, c in result.targets}
    for seed in result.settings.seed_list:
        for arm, runs in arms.items():
            m = runs[seed]
            check = checks.get((arm, seed))
            verdict = (
                ""
                if check is None
                else _verdict(check.frag_lower, check.waiting_lower, check.p95_no_worse)
            )
            rows.append(
                f"| {seed} | {arm} | {format_cell(m.frag_ratio, 'pct')} | "
                f"{m.gpu_pods_waited + m.gpu_pods_unscheduled} | "
                f"{format_cell(m.latency_p95_s, 'num')} | {verdict} |"
            )
    met = sum(c.met for _, c in result.targets)
    if result.targets:
        rows += [
            "",
            f"Target met (all three, against {BASELINE}) on {met} of "
            f"{len(result.targets)} seed(s).",
        ]
    return rows


def _verdict(frag: bool, waiting: bool, p95: bool) -> str:
    parts = [
        "frag lower" if frag else "frag NOT lower",
        "waiting lower" if waiting else "waiting NOT lower",
        "P95 no worse" if p95 else "P95 worse",
    ]
    return ", ".join(parts)


def record(body: str, path: Path) -> None:
    """Replace the text between the markers in ``path``, or append the section."""
    write_block(path, BEGIN, END, body, SECTION)


def main() -> None:
    defaults = ExperimentSettings()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arms", default=",".join(defaults.arms))
    parser.add_argument("--seeds", type=int, default=defaults.seeds)
    parser.add_argument("--hours", type=float, default=defaults.hours)
    parser.add_argument("--nodes", type=int, default=defaults.nodes)
    parser.add_argument("--gpus-per-node", type=int, default=defaults.gpus_per_node)
    parser.add_argument("--cache", default="", help="folder keeping finished runs")
    parser.add_argument("--jobs", type=int, default=1, help="runs at once (worker processes)")
    parser.add_argument("--record", action="store_true", help="write into the docs")
    parser.add_argument("--png", default="", help="also write the chart here")
    args = parser.parse_args()
    settings = ExperimentSettings(
        arms=tuple(args.arms.split(",")),
        seeds=args.seeds,
        hours=args.hours,
        nodes=args.nodes,
        gpus_per_node=args.gpus_per_node,
    )
    result = run_all(settings, Path(args.cache) if args.cache else None, args.jobs)
    command = (
        f".venv/bin/python bench/bench_experiment.py --arms {args.arms} --seeds {args.seeds} "
        f"--hours {args.hours:g} --nodes {args.nodes} --gpus-per-node {args.gpus_per_node} "
        f"--jobs {args.jobs}" + (" --record" if args.record else "")
    )
    body = markdown(result, command, args.jobs)
    if args.png:
        chart = render_chart([(a.arm, a.series) for a in result.arms], settings.hours * 3600.0)
        Path(args.png).write_bytes(chart)
    print(body)
    if args.record:
        record(body, BENCH_DOCS)
        record(body, EXPERIMENT_DOCS)


if __name__ == "__main__":
    main()
