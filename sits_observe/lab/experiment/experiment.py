"""``sits-observe experiment``: the same seeded workload under each arm, measured.

Composition root of the experiment (as :mod:`.demo` is of the demo): it validates the
settings, runs every (arm, seed) through :func:`~.experiment_run.run_one` (in this process, or
in worker processes, one per core by default: each run has its own emulator, store and files,
so they are independent and the result does not depend on ``jobs``), and assembles the
:class:`ExperimentResult`: per arm the mean and min-max over seeds of every measure
(:mod:`sits_observe.lab.experiment.measures`), per seed the target for each sits
arm against ``kube-default``, the allocation and fragmentation over time (mean over seeds) for
the PNG, whether every arm of a seed got the same arrivals, and, with ``kube-sits`` and
ablation arms (``kube-sits-no-*``, one module off each), what each module is worth.

The result is deterministic for the settings: no wall time, path or random id is in it (the
wall time of each run goes to the progress output and :attr:`ExperimentResult.wall_s`).

Settings and their defaults: :mod:`.experiment_settings`.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from queue import Empty
from typing import Any

import numpy as np

from sits_observe.lab.experiment.measures import (
    MEASURES,
    RunMeasures,
    RunTimeline,
    Series,
    Spread,
    TargetCheck,
    check_target,
    differences,
    finite_or_none,
    run_measures,
    series,
    spread,
    target_workload,
)
from sits_observe.lab.experiment.parts import find_arm
from sits_observe.lab.experiment.run import Progress, RunResult, run_one
from sits_observe.lab.experiment.settings import (
    ABLATIONS,
    BASELINE,
    FULL,
    RULES_ON,
    ExperimentSettings,
)

#: Where scratch folders go when none is given: tmpfs when there is one (the simulated nodes'
#: cgroup trees are rewritten at every collection: an atomic replace costs about 3 ms on this
#: machine's disk and 30 us on tmpfs).
_SCRATCH = Path("/dev/shm")


@dataclass(frozen=True)
class ArmResult:
    """One arm: its measures per seed, their spread, and its mean series over seeds."""

    arm: str
    runs: tuple[tuple[int, RunMeasures], ...]
    timelines: tuple[RunTimeline, ...]
    spread: dict[str, Spread]
    series: Series

    @property
    def applied(self) -> dict[str, int]:
        """Controller decisions applied over every seed, by action."""
        totals: dict[str, int] = {}
        for timeline in self.timelines:
            for action, n in timeline.controller_applied:
                totals[action] = totals.get(action, 0) + n
        return dict(sorted(totals.items()))


@dataclass(frozen=True)
class ModuleWorth:
    """Ablation: what one module is worth, per measure ``kube-sits`` minus the arm without it
    (for an arm that switches on a rule that is off by default: the arm minus ``kube-sits``),
    seed by seed (mean and min-max of the differences)."""

    arm: str
    module: str
    worth: dict[str, Spread]


@dataclass(frozen=True)
class ExperimentResult:
    """Everything ``experiment`` prints (see the module docstring)."""

    settings: ExperimentSettings
    arms: tuple[ArmResult, ...]
    targets: tuple[tuple[str, TargetCheck], ...]
    same_workload: bool
    wall_s: tuple[tuple[str, int, float], ...]
    ablation: tuple[ModuleWorth, ...] = ()


#: The environment the worker processes start with. One polars thread: a run is one core's
#: work, and polars' pool (one thread per core) spins between the controller's and the agents'
#: many small frames; in a quarter hour of ``kube-sits`` its threads were preempted 242,000
#: times while working 0.65 s, and the run took about 7 % more CPU (docs/benchmarks.md).
WORKER_ENV: Mapping[str, str] = {"POLARS_MAX_THREADS": "1"}

#: Called after each run: (arm, seed, wall seconds).
RunDone = Callable[[str, int, float], None]


def run_experiment(
    settings: ExperimentSettings,
    *,
    on_run: RunDone | None = None,
    progress: Progress | None = None,
) -> ExperimentResult:
    """Run every arm on every seed and measure them. ``on_run`` is told of each run as it
    ends; ``progress`` of each run's simulated time as it goes (from worker processes through
    a queue when more than one runs at once)."""
    jobs = job_order(settings)
    results: dict[tuple[str, int], RunResult] = {}
    if settings.workers == 1:
        for arm, seed in jobs:
            results[(arm, seed)] = run_job(settings, arm, seed, progress)
            if on_run is not None:
                on_run(arm, seed, results[(arm, seed)].wall_s)
    else:
        context = multiprocessing.get_context("spawn")
        with contextlib.ExitStack() as stack:
            stack.enter_context(worker_environment())  # read by the workers as they start
            pool = stack.enter_context(
                ProcessPoolExecutor(max_workers=settings.workers, mp_context=context)
            )
            queue = None
            if progress is not None:
                queue = stack.enter_context(context.Manager()).Queue()
            futures = {pool.submit(_run_reporting, settings, *job, queue): job for job in jobs}
            pending = set(futures)
            while pending:
                done, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
                _relay(queue, progress)
                for future in done:
                    job = futures[future]
                    results[job] = future.result()
                    if on_run is not None:
                        on_run(job[0], job[1], results[job].wall_s)
    return assemble(settings, results)


@contextlib.contextmanager
def worker_environment(values: Mapping[str, str] = WORKER_ENV) -> Iterator[None]:
    """``values`` in ``os.environ`` (a value the user set wins), as they were afterwards."""
    before = {name: os.environ.get(name) for name in values}
    for name, value in values.items():
        os.environ.setdefault(name, value)
    try:
        yield
    finally:
        for name, was in before.items():
            if was is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = was


def job_order(settings: ExperimentSettings) -> list[tuple[str, int]]:
    """Every (arm, seed) in the order the runs start: seed by seed, or, side by side, the
    costliest arms first (:func:`run_cost`; seed order within a cost)."""
    jobs = [(arm, seed) for seed in settings.seed_list for arm in settings.arms]
    if settings.workers > 1:
        jobs.sort(key=lambda job: -run_cost(job[0]))
    return jobs


def run_cost(arm: str) -> float:
    """A run's relative CPU cost: its extender calls and controller passes add about half
    to the cluster it shares with every arm (docs/benchmarks.md, "Experiment speed"). Runs
    side by side start the costliest first, so the last to finish is a short one (longest
    processing time first: one core no longer idles through a long run's tail)."""
    found = find_arm(arm)
    return 1.0 + 0.3 * found.extender + 0.2 * found.controller


def _run_reporting(
    settings: ExperimentSettings, arm: str, seed: int, queue: Any | None
) -> RunResult:
    """:func:`run_job` in a worker process, its progress put on ``queue`` (a manager's)."""
    report = None if queue is None else lambda *done: queue.put(done)
    return run_job(settings, arm, seed, report)


def _relay(queue: Any | None, progress: Progress | None) -> None:
    """Hand the workers' progress reports waiting on ``queue`` to ``progress``."""
    if queue is None or progress is None:
        return
    while True:
        try:
            arm, seed, done_s, total_s = queue.get_nowait()
        except Empty:
            return
        progress(arm, seed, done_s, total_s)


def run_job(
    settings: ExperimentSettings, arm: str, seed: int, progress: Progress | None = None
) -> RunResult:
    """One run of ``arm`` with ``seed`` in a scratch folder of its own (kept under
    ``workdir`` when given)."""
    if settings.workdir is not None:
        return _run_in(settings, arm, seed, settings.workdir / f"{arm}-seed{seed}", progress)
    base = _SCRATCH if _SCRATCH.is_dir() and _writable(_SCRATCH) else None
    scratch = Path(tempfile.mkdtemp(prefix=f"sits-experiment-{arm}-{seed}-", dir=base))
    try:
        return _run_in(settings, arm, seed, scratch, progress)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _run_in(
    settings: ExperimentSettings, arm: str, seed: int, folder: Path, progress: Progress | None
) -> RunResult:
    if folder.exists():
        shutil.rmtree(folder)
    return run_one(
        find_arm(arm),
        seed=seed,
        hours=settings.hours,
        nodes=settings.nodes,
        gpus_per_node=settings.gpus_per_node,
        cadence=settings.cadence,
        scheduler_config=settings.scheduler_config,
        workdir=folder,
        progress=progress,
    )


def _writable(folder: Path) -> bool:
    try:
        with tempfile.TemporaryFile(dir=folder):
            return True
    except OSError:
        return False


def assemble(
    settings: ExperimentSettings, results: dict[tuple[str, int], RunResult]
) -> ExperimentResult:
    """The result of every (arm, seed) run of ``settings``."""
    seeds = settings.seed_list
    measures: dict[tuple[str, int], RunMeasures] = {}
    arms: list[ArmResult] = []
    for arm in settings.arms:
        per_seed: list[tuple[int, RunMeasures]] = []
        curves: list[Series] = []
        for seed in seeds:
            timeline = results[(arm, seed)].timeline
            workload = target_workload(timeline.pods)
            measures[(arm, seed)] = run_measures(timeline, workload)
            per_seed.append((seed, measures[(arm, seed)]))
            curves.append(series(timeline, workload))
        arms.append(
            ArmResult(
                arm,
                tuple(per_seed),
                tuple(results[(arm, seed)].timeline for seed in seeds),
                spread([m for _, m in per_seed]),
                _mean_series(curves),
            )
        )
    targets: list[tuple[str, TargetCheck]] = []
    if BASELINE in settings.arms:
        for arm in settings.arms:
            if arm != BASELINE:
                targets.extend(
                    (arm, check_target(s, measures[(BASELINE, s)], measures[(arm, s)]))
                    for s in seeds
                )
    same = all(len({results[(arm, seed)].arrivals for arm in settings.arms}) == 1 for seed in seeds)
    wall = tuple(
        (arm, seed, results[(arm, seed)].wall_s) for seed in seeds for arm in settings.arms
    )
    ablation: list[ModuleWorth] = []
    if FULL in settings.arms:
        full = [measures[(FULL, s)] for s in seeds]
        for arm in settings.arms:
            if arm in ABLATIONS:
                without = [measures[(arm, s)] for s in seeds]
                ablation.append(ModuleWorth(arm, ABLATIONS[arm], differences(full, without)))
            elif arm in RULES_ON:  # a rule off by default: the arm with it on minus kube-sits
                with_rule = [measures[(arm, s)] for s in seeds]
                module = f"the controller's {RULES_ON[arm][0]} rule, switched on"
                ablation.append(ModuleWorth(arm, module, differences(with_rule, full)))
    return ExperimentResult(settings, tuple(arms), tuple(targets), same, wall, tuple(ablation))


def _mean_series(curves: Sequence[Series]) -> Series:
    """The mean over seeds at each sample (runs of one settings share their sample times)."""
    length = min(c.t_s.shape[0] for c in curves)

    def mean(name: str) -> np.ndarray:
        stacked = np.stack([getattr(c, name)[:length] for c in curves])
        with np.errstate(invalid="ignore"):
            return np.asarray(np.nanmean(stacked, axis=0), dtype=np.float64)

    return Series(
        curves[0].t_s[:length], mean("allocation_ratio"), mean("frag_ratio"), mean("frag_gpus")
    )


# -- the JSON document -------------------------------------------------------------------------


def result_document(result: ExperimentResult) -> dict[str, Any]:
    """The JSON document (keys in docs/experiment.md); NaN becomes null."""
    s = result.settings
    arms: dict[str, Any] = {}
    for arm in result.arms:
        arms[arm.arm] = {
            "mean": {m: finite_or_none(arm.spread[m].mean) for m in MEASURES},
            "min": {m: finite_or_none(arm.spread[m].low) for m in MEASURES},
            "max": {m: finite_or_none(arm.spread[m].high) for m in MEASURES},
            "runs": [
                {
                    "seed": seed,
                    **{k: finite_or_none(v) for k, v in m.values().items()},
                    "controller_applied_by_action": dict(timeline.controller_applied),
                    "scheduled_by_path": dict(timeline.scheduled_by_path),
                    "extender_calls": dict(timeline.extender_calls),
                }
                for (seed, m), timeline in zip(arm.runs, arm.timelines, strict=True)
            ],
        }
    return {
        "settings": {
            "arms": list(s.arms),
            "seeds": list(s.seed_list),
            "hours": s.hours,
            "nodes": s.nodes,
            "gpus_per_node": s.gpus_per_node,
            "step_s": s.step_s,
            "collect_every_s": s.collect_every_s,
            "inventory_every_s": s.inventory_every_s,
            "controller_every_s": s.controller_every_s,
            "sample_every_s": s.sample_every_s,
            "scheduler_config": s.scheduler_config.name,
        },
        "same_workload": result.same_workload,
        "arms": arms,
        "targets": [
            {
                "arm": arm,
                "against": BASELINE,
                "seed": check.seed,
                "frag_lower": check.frag_lower,
                "waiting_lower": check.waiting_lower,
                "p95_no_worse": check.p95_no_worse,
                "met": check.met,
            }
            for arm, check in result.targets
        ],
        "ablation": [
            {
                "arm": m.arm,
                "module": m.module,
                "against": FULL,
                "worth": {
                    name: {
                        "mean": finite_or_none(v.mean),
                        "min": finite_or_none(v.low),
                        "max": finite_or_none(v.high),
                    }
                    for name, v in m.worth.items()
                },
            }
            for m in result.ablation
        ],
    }
