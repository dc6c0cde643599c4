"""``experiment``'s progress: plain lines every 10 % off a terminal, a bar on one."""

from __future__ import annotations

import io

from rich.console import Console

from sits_observe.surfaces.cli.lab.experiment_progress import ExperimentProgress


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _drive(progress: ExperimentProgress, clock: _Clock) -> None:
    with progress as bar:
        bar.start("experiment: 2 run(s)")
        for arm in ("kube-default", "kube-sits"):
            for done_s in range(0, 3601, 30):
                clock.now += 1.0
                bar.progress(arm, 0, float(done_s), 3600.0)
            bar.done(arm, 0, 120.0)


def test_off_a_terminal_a_line_every_ten_per_cent_with_an_eta() -> None:
    text, clock = io.StringIO(), _Clock()
    console = Console(file=text, force_terminal=False, width=40, soft_wrap=True, highlight=False)
    _drive(ExperimentProgress(console, runs=2, run_s=3600.0, monotonic=clock), clock)
    lines = text.getvalue().splitlines()
    assert lines[0] == "experiment: 2 run(s)"
    run = [line for line in lines if line.startswith("kube-default seed 0: ")]
    assert [line.split(": ")[1].split("%")[0] for line in run[:-1]] == [
        str(p) for p in range(10, 100, 10)
    ]
    assert "left in this run" in run[0] and "in all" in run[0]
    assert run[-1] == "kube-default seed 0: 120 s wall time (1 of 2 runs done)"
    # The second run's first half took 60 clock seconds since its first report: it expects as
    # long again for its second half, which is about all the experiment has left.
    half = next(line for line in lines if line.startswith("kube-sits seed 0: 50%"))
    assert "1m00s so far, about 1m00s left in this run, 1m01s in all" in half


def test_on_a_terminal_a_bar_and_the_runs_wall_times() -> None:
    text, clock = io.StringIO(), _Clock()
    console = Console(file=text, force_terminal=True, width=30, soft_wrap=True, highlight=False)
    _drive(ExperimentProgress(console, runs=2, run_s=3600.0, monotonic=clock), clock)
    out = text.getvalue()
    assert "kube-default seed 0: 120 s wall time" in out
    assert "% simulated" not in out  # no plain progress lines next to the bar


def test_runs_in_worker_processes_report_in_turn() -> None:
    text, clock = io.StringIO(), _Clock()
    console = Console(file=text, force_terminal=False, soft_wrap=True, highlight=False)
    with ExperimentProgress(console, runs=2, run_s=100.0, monotonic=clock) as bar:
        for done_s in range(0, 101, 5):
            clock.now += 1.0
            bar.progress("kube-default", 0, float(done_s), 100.0)
            bar.progress("kube-sits", 0, float(done_s), 100.0)
        bar.done("kube-default", 0, 21.0)
        bar.done("kube-sits", 0, 21.0)
    lines = text.getvalue().splitlines()
    for arm in ("kube-default", "kube-sits"):
        steps = [line for line in lines if line.startswith(f"{arm} seed 0: ") and "%" in line]
        assert len(steps) == 9  # 10 % to 90 %, each once
    # Both runs halfway 10 s after their first reports (11 s into the experiment): half done.
    half = next(line for line in lines if line.startswith("kube-sits seed 0: 50%"))
    assert half.endswith("about 10s left in this run, 11s in all")
