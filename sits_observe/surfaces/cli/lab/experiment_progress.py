"""``experiment``'s progress on stderr: simulated time done over the total, with an ETA.

A run reports its simulated seconds as it goes (every allocation sample, 30 simulated seconds
at the defaults), so the display moves from the first seconds of a run, never only at its end.
Two renderings of the same numbers:

- On a terminal, a Rich bar redrawn in place: the current arm and seed, the whole experiment's
  share done, its elapsed time and the time left. Rich fits the bar to any terminal width.
- Anywhere else (a pipe, a file, a CI log), plain lines that are never redrawn: one when the
  experiment starts, one each time a run passes another ``every_pct`` per cent of its simulated
  time, and one when a run ends. Each line carries the run's share done and the ETA of the run
  and of the whole experiment.

The ETA is the wall time so far scaled by the simulated time left over the simulated time done
(runs of one experiment simulate the same hours on the same cluster, so their costs are alike).
With ``--jobs`` above 1 the runs in worker processes report through a queue, in turn.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType

from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    TaskID,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


def _duration(seconds: float) -> str:
    """``seconds`` as ``1h02m``, ``3m05s`` or ``42s``."""
    s = max(0, round(seconds))
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s}s"


class ExperimentProgress:
    """The progress of ``runs`` runs of ``run_s`` simulated seconds each (see the module
    docstring); a context manager whose :meth:`progress` and :meth:`done` are the callbacks
    of :func:`~sits_observe.lab.experiment.experiment.run_experiment`."""

    def __init__(
        self,
        console: Console,
        *,
        runs: int,
        run_s: float,
        every_pct: int = 10,
        live: bool | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.console = console
        self.runs = runs
        self.run_s = run_s
        self.every_pct = every_pct
        self.live = console.is_terminal if live is None else live
        self.monotonic = monotonic
        self.started = monotonic()
        self.finished = 0
        #: Runs under way: simulated seconds done, wall start, per cent last printed.
        self._runs: dict[tuple[str, int], _Run] = {}
        self._bar: Progress | None = None
        self._task = TaskID(0)

    def __enter__(self) -> ExperimentProgress:
        self.started = self.monotonic()
        if self.live:
            self._bar = Progress(
                TextColumn("{task.description}", markup=False),
                BarColumn(),
                TaskProgressColumn(),
                TimeElapsedColumn(),
                TextColumn("left"),
                TimeRemainingColumn(),
                console=self.console,
                transient=True,
            )
            self._bar.start()
            self._task = self._bar.add_task("starting", total=self.runs * self.run_s)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._bar is not None:
            self._bar.stop()

    def start(self, text: str) -> None:
        """Say what runs, before the first run starts."""
        self.console.print(text)

    def progress(self, arm: str, seed: int, done_s: float, total_s: float) -> None:
        """A run of ``arm`` and ``seed`` has simulated ``done_s`` of its ``total_s`` (runs in
        worker processes report in turn)."""
        now = self.monotonic()
        run = self._runs.setdefault((arm, seed), _Run(now))
        share = min(1.0, done_s / total_s) if total_s > 0 else 1.0
        run.share = share
        overall = (self.finished + sum(r.share for r in self._runs.values())) * self.run_s
        if self._bar is not None:
            self._bar.update(
                self._task, completed=overall, description=f"{arm} seed {seed} {share:.0%}"
            )
            return
        pct = int(share * 100) // self.every_pct * self.every_pct
        if pct <= run.reported_pct or pct >= 100:
            return
        run.reported_pct = pct
        run_left = (now - run.started) * (1 - share) / share
        all_left = (now - self.started) * (self.runs * self.run_s - overall) / overall
        self.console.print(
            f"{arm} seed {seed}: {pct}% simulated ({done_s:.0f} of {total_s:.0f} s), "
            f"{_duration(now - run.started)} so far, about {_duration(run_left)} left "
            f"in this run, {_duration(all_left)} in all"
        )

    def done(self, arm: str, seed: int, wall_s: float) -> None:
        """A run ended after ``wall_s`` wall seconds."""
        self.finished += 1
        self._runs.pop((arm, seed), None)
        if self._bar is not None:
            overall = (self.finished + sum(r.share for r in self._runs.values())) * self.run_s
            self._bar.update(self._task, completed=overall)
            self._bar.console.print(f"{arm} seed {seed}: {wall_s:.0f} s wall time")
        else:
            self.console.print(
                f"{arm} seed {seed}: {wall_s:.0f} s wall time "
                f"({self.finished} of {self.runs} runs done)"
            )


@dataclass
class _Run:
    """A run under way: when it first reported, its share done, the per cent last printed."""

    started: float
    share: float = 0.0
    reported_pct: int = 0
