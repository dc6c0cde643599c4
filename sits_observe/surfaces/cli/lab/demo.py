"""CLI: ``sits-observe demo``, the embedded default (a simulated GPU cluster, see
:mod:`sits_observe.lab.demo.demo`). Shows live progress on stderr, the service's URL and a read
token (the service owns the DuckDB file while the demo runs, so reads go through it); Ctrl-C
(or the end of ``--duration``) stops every part cleanly and leaves the DuckDB file. The
closing summary says how many pods the scheduler placed through the extender, which controller
decisions were applied in the emulator, and where to look next (docs/demo.md)."""

from __future__ import annotations

import inspect
import logging
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from sits_observe.lab.demo.settings import DemoSettings
from sits_observe.surfaces.cli.common import err, out, run_cli
from sits_observe.surfaces.cli.flags import SettingFlags, with_parameters
from sits_observe.surfaces.cli.stop_signals import stop_on_signals
from sits_observe.surfaces.cli.ui import UiServerSettings

if TYPE_CHECKING:
    from sits_observe.lab.demo.loop import LoopCounts


#: The demo's settings flags; ``--ui-port`` is the command's own, beside ``--ui / --no-ui``.
DEMO = SettingFlags(DemoSettings, skip=("ui_port",))


def register(app: typer.Typer) -> None:
    """Add ``demo`` to ``app``."""
    app.command("demo")(demo)


@with_parameters(
    [
        *DEMO.options(),
        inspect.Parameter(
            "ui_port",
            inspect.Parameter.KEYWORD_ONLY,
            default=typer.Option(
                None,
                "--ui-port",
                help="loopback port of the Streamlit app (see docs/ui.md) [default "
                f"{UiServerSettings.model_fields['port'].default}, as `sits-observe ui`]",
            ),
            annotation=int | None,
        ),
        inspect.Parameter(
            "ui",
            inspect.Parameter.KEYWORD_ONLY,
            default=typer.Option(True, "--ui/--no-ui", help="also serve the Streamlit app"),
            annotation=bool,
        ),
    ]
)
def demo(**flags: Any) -> None:
    """Start a simulated GPU cluster and the real pipeline against it (until --duration, or
    Ctrl-C)."""

    def go() -> None:
        # The settings' None means "no app"; with --ui the app gets the ui command's port.
        ui_port = (flags["ui_port"] or UiServerSettings().port) if flags["ui"] else None
        settings = DEMO.validate(flags, what="demo", ui_port=ui_port)
        logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
        stop = threading.Event()
        with stop_on_signals(stop):
            counts, loop, applied = _run(settings, stop)
        _summary(settings.db_path, settings.workdir, counts, loop, applied)

    run_cli(go)


def _run(
    settings: DemoSettings, stop: threading.Event
) -> tuple[dict[str, int], LoopCounts | None, dict[str, int]]:
    """Runs the demo until ``stop`` or its duration; returns what it stored, what the loop
    did and the decisions applied, for the summary."""
    from sits_observe.lab.demo.demo import Demo

    err.print(
        f"starting a simulated cluster: {settings.nodes} nodes x "
        f"{settings.gpus_per_node} GPUs (seed {settings.seed})"
    )
    started = time.monotonic()
    the_demo = Demo(settings).start()
    for line in the_demo.previous.lines():
        err.print(line)
    try:
        url = the_demo.service_url
        err.print(f"service on {url}  (metrics: {url}/metrics)")
        # The service owns the DuckDB file while the demo runs: reads go through it.
        err.print(
            f"read its data while it runs: sits-observe fleet --service {url} --token-file "
            f"{the_demo.read_token_file()}  (read token: {the_demo.read_token})",
            soft_wrap=True,
        )
        if the_demo.ui_url:
            err.print(f"Streamlit app on {the_demo.ui_url}")
        err.print(
            "controller: --act against the Kubernetes emulator (not a cluster): its "
            "labels, annotations, quotas and time slices are written there"
        )
        err.print(
            f"scheduler: kube-scheduler model with the extender at "
            f"{the_demo.service_url}/scheduler ({settings.scheduler_config})"
        )
        duration = settings.duration_s
        with Live(_progress(the_demo, 0.0, duration), console=err, refresh_per_second=2) as live:
            while not stop.wait(1.0):
                elapsed = time.monotonic() - started
                live.update(_progress(the_demo, elapsed, duration))
                if settings.duration_s is not None and elapsed >= settings.duration_s:
                    break
        return the_demo.counts(), the_demo.loop_counts(), the_demo.applied_decisions()
    finally:
        err.print("", "stopping: agents, inventory, service, simulation ...", sep="\n")
        the_demo.stop()


def _progress(the_demo: object, elapsed_s: float, duration_s: float | None) -> Group:
    """The live display: how long it has run (and will), the rows stored, and the status in
    short lines that no terminal cuts."""
    from sits_observe.lab.demo.demo import Demo

    assert isinstance(the_demo, Demo)
    if duration_s is None:
        title = f"sits-observe demo: {elapsed_s:.0f} s, Ctrl-C to stop"
    else:
        title = f"sits-observe demo: {elapsed_s:.0f} of {duration_s:.0f} s (Ctrl-C stops it early)"
    table = Table(title=title, title_justify="left")
    table.add_column("table")
    table.add_column("rows", justify="right")
    for name, rows in the_demo.counts().items():
        table.add_row(name, str(rows))
    cluster = the_demo.cluster
    with cluster.lock():
        pods = sum(len(n.pods) for n in cluster.nodes.values())
        waiting = sum(
            p.server.waiting for n in cluster.nodes.values() for p in n.pods.values() if p.server
        )
    loop = the_demo.loop_counts()
    # Short lines: stderr is never wrapped (a diagnostic is one line), so one long status line
    # would be cut at the terminal's edge.
    lines = [f"pods running: {pods}, queued requests: {waiting}"]
    if loop is not None:
        lines += [
            f"pods pending: {loop.pending}, quota rejections: {loop.quota_rejections}",
            f"scheduled through the extender: {loop.scheduled_via_extender}",
        ]
    return Group(table, *(Text(line) for line in lines))


def _summary(
    db: Path,
    workdir: Path,
    counts: dict[str, int],
    loop: LoopCounts | None,
    applied: dict[str, int],
) -> None:
    from sits_observe.lab.demo.demo import (
        DEMO_SLO_S,
        DEMO_TTFT_SLO_S,
        recommend_command,
    )

    out.print(f"stored in {db}:")
    for name, rows in counts.items():
        out.print(f"  {name:<18} {rows:>9} rows")
    if loop is not None:
        out.print(
            f"scheduled: {loop.scheduled_via_extender} pods through the sits extender "
            f"(filter/prioritize over HTTP; {loop.bound_by_extender} bound by its bind verb), "
            f"{loop.scheduled_default} without it; {loop.unschedulable_attempts} "
            f"FailedScheduling attempts, {loop.pending} pods still Pending; "
            f"{loop.quota_rejections} creation attempts refused by ResourceQuota (retried)"
        )
    done = ", ".join(f"{action} {n}" for action, n in applied.items()) or "none yet"
    out.print(f"controller decisions applied in the emulator: {done}")
    out.print(
        f"the demo's SLO: P95 end-to-end <= {DEMO_SLO_S:g} s, P95 time to first token <= "
        f"{DEMO_TTFT_SLO_S:g} s (Llama2-70B at its measured step times; docs/demo.md)"
    )
    out.print("where to look next:")
    out.print(f"  sits-observe tables --db {db}")
    out.print(f"  {recommend_command(db)}   # idle GPUs, GPU memory, replicas at the SLO")
    out.print(
        f"  sits-observe heatmap --db {db} --slo-ms {DEMO_SLO_S * 1000:g}   # knee, safe max "
        "at the SLO"
    )
    out.print(
        f"  sits-observe latency --db {db} --metric ttft   # TTFT P50/P95/P99 against the "
        f"{DEMO_TTFT_SLO_S:g} s SLO"
    )
    out.print(f"  sits-observe fragmentation --db {db}")
    out.print(f"  sits-observe export gpu_samples gpu.parquet --db {db}")
    out.print("  sits-observe experiment --arms kube-default,kube-sits   # sits on versus off")
    out.print(f"  simulated node files (cgroup trees, request logs): {workdir}/cluster/nodes/")
