"""CLI: ``sits-observe ingest cgroup ROOT --db DB [--node NAME]``.

Reads every container cgroup under a cgroup v2 mount once, stores the ``container_samples``
rows and one ``collector_drops`` row per drop reason in a single batch, and prints what was
stored and what was rejected, with reasons. The tree is read before the store is opened: no
container read means exit 2 and no database; anything dropped or left NULL means exit 3 (the
rule of :mod:`.ingest_outcome`). This module is the composition root of that command: it
builds the collector and the store from the flags.
"""

from __future__ import annotations

import socket
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import typer

from sits_observe.collectors.cgroup.collector import CgroupCollector
from sits_observe.domain.collect import drops_table
from sits_observe.domain.tables import COLLECTOR_DROPS, CONTAINER_SAMPLES
from sits_observe.store import Batch, Store, prepare, utc_naive
from sits_observe.surfaces.cli.common import OutputFormat, print_rejected, print_rows, run_cli
from sits_observe.surfaces.cli.ingest.outcome import IngestOutcome, finish, require_rows


def ingest_cgroup_once(root: Path, db: Path, node: str, now: datetime) -> IngestOutcome:
    """Collect ``root`` once into ``db`` and print the outcome (stdout).

    Raises :class:`~sits_observe.errors.ParseError` before ``db`` is opened when no container
    could be read.
    """
    collector = CgroupCollector(root, node=node)
    result = collector.collect(now)
    at = utc_naive(now)
    drops = drops_table(result.dropped, at=at, node=node, collector=collector.name)
    tables = {CONTAINER_SAMPLES.name: result.tables[CONTAINER_SAMPLES.name]}
    ready = prepare(Batch({**tables, COLLECTOR_DROPS.name: drops}, now, node))
    samples = ready.tables[CONTAINER_SAMPLES.name]
    rejected = result.dropped + Counter(ready.dropped)
    first = None if collector.first_rejected is None else f"at {collector.first_rejected}"
    outcome = IngestOutcome(samples.num_rows, rejected, "files or entries", first)
    require_rows(
        outcome,
        str(root),
        "container cgroups",
        "Does a kubelet run pods on this node (or is ROOT the right cgroup v2 mount)?",
    )
    batch = ready.tables
    with Store.open(db) as store:
        store.ingest(ready)
    print_rows(
        [{"table": name, "rows": batch[name].num_rows} for name in batch],
        OutputFormat.table,
        title=f"stored in {db} (node {node})",
    )
    print_rejected(rejected, title="rejected, by reason (row dropped or value left NULL)")
    return outcome


def register(app: typer.Typer) -> None:
    """Add ``cgroup`` to the ``ingest`` group ``app``."""

    @app.command("cgroup")
    def ingest_cgroup(
        root: Path = typer.Argument(
            ..., help="cgroup v2 mount (e.g. /sys/fs/cgroup) or a kubepods directory"
        ),
        db: Path = typer.Option(
            ..., "--db", help="DuckDB file (created when absent; its folder must exist)"
        ),
        node: str | None = typer.Option(
            None, "--node", help="node name stamped on every row (default: this host's name)"
        ),
    ) -> None:
        """Read every container cgroup under ROOT once and store the samples."""
        run_cli(
            lambda: finish(
                ingest_cgroup_once(root, db, node or socket.gethostname(), datetime.now(UTC))
            )
        )
