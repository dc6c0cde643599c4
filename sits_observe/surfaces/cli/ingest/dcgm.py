"""CLI: ``sits-observe ingest dcgm PATH_OR_URL --db DB [--node NAME] [--timeout-s S]``.

Reads one dcgm-exporter body (a saved ``/metrics`` file or a live ``http(s)://`` endpoint),
stores its ``gpu_samples`` rows and one ``collector_drops`` row per rejection reason in a
single batch, and prints what was stored (a table per GPU, then rows per table) and what was
rejected, with reasons. The body is parsed before the store is opened: a body with no GPU
sample in it (truncated, garbage, random bytes) exits 2 and creates no database; one with
rejected lines exits 3 (the rule of :mod:`.ingest_outcome`). This module is the composition
root of that command: it builds the HTTP client, the collector and the store from the flags.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import typer

from sits_observe.collectors.dcgm import RejectedLine
from sits_observe.collectors.dcgm_collector import DcgmCollector
from sits_observe.collectors.http import DEFAULT_TIMEOUT_S, new_client
from sits_observe.domain.collect import drops_table
from sits_observe.domain.ranges import MAX_FUTURE_SKEW_S
from sits_observe.domain.tables import COLLECTOR_DROPS, GPU_SAMPLES
from sits_observe.store import Batch, Store, prepare, utc_naive
from sits_observe.surfaces.cli.common import OutputFormat, out, print_rejected, print_rows, run_cli
from sits_observe.surfaces.cli.ingest.outcome import (
    FUTURE_SKEW_HELP,
    IngestOutcome,
    finish,
    require_rows,
)

#: GPU rows printed one by one; a bigger body gets its totals only.
MAX_GPU_LINES = 32
_GIB = float(1 << 30)


def _gib(value: int | None) -> str | None:
    return None if value is None else f"{value / _GIB:.2f}"


def _percent(ratio: float | None) -> str | None:
    return None if ratio is None else f"{100 * ratio:.0f}%"


def gpu_lines(samples: pa.Table) -> list[dict[str, Any]]:
    """The stored rows in short, human units (GiB, %, W, C) for the terminal."""
    return [
        {
            "node": r["node"],
            "gpu": r["gpu_index"],
            "mig": None
            if r["mig_profile"] is None
            else f"{r['mig_profile']}/{r['mig_instance_id']}",
            "pod": None if r["pod"] is None else f"{r['namespace']}/{r['pod']}",
            "fb used GiB": _gib(r["fb_used_bytes"]),
            "fb total GiB": _gib(r["fb_total_bytes"]),
            "util": _percent(r["gpu_util_ratio"]),
            "power W": None if r["power_w"] is None else f"{r['power_w']:.0f}",
            "temp C": None if r["gpu_temp_c"] is None else f"{r['gpu_temp_c']:.0f}",
        }
        for r in samples.to_pylist()
    ]


def _described(line: RejectedLine | None) -> str | None:
    return None if line is None else f"line {line.number} ({line.reason}): {line.text!r}"


def ingest_dcgm_once(
    source: str,
    db: Path,
    *,
    node: str | None,
    timeout_s: float,
    now: datetime,
    max_future_skew_s: float = MAX_FUTURE_SKEW_S,
) -> IngestOutcome:
    """Collect ``source`` once into ``db`` and print what was stored and rejected.

    Samples keep the body's own timestamps, so they go through the service's range rules
    (:mod:`sits_observe.store.intake`): one after ``now + max_future_skew_s`` is rejected as
    ``gpu_samples.ts:future``, one before 2000 as ``gpu_samples.ts:too_old``. Raises
    :class:`~sits_observe.errors.ParseError` before ``db`` is opened when the body holds no
    GPU sample.
    """
    with new_client(timeout_s) as client, DcgmCollector(source, node=node, client=client) as dcgm:
        result = dcgm.collect(now)
        first_rejected = dcgm.first_rejected
    read = result.tables[GPU_SAMPLES.name]
    nodes = sorted({n for n in read.column("node").to_pylist() if n is not None})
    drops_node = node if node is not None else (nodes[0] if len(nodes) == 1 else None)
    drops = drops_table(result.dropped, at=utc_naive(now), node=drops_node, collector=dcgm.name)
    tables = {GPU_SAMPLES.name: read, COLLECTOR_DROPS.name: drops}
    ready = prepare(Batch(tables, now, drops_node, max_future_skew_s=max_future_skew_s))
    samples = ready.tables[GPU_SAMPLES.name]
    rejected = result.dropped + Counter(ready.dropped)
    outcome = IngestOutcome(samples.num_rows, rejected, "samples", _described(first_rejected))
    require_rows(
        outcome,
        source,
        "GPU samples",
        "Is it a whole dcgm-exporter /metrics body (Prometheus text format), with sample "
        "timestamps (if any) near this host's clock?",
    )
    batch = ready.tables
    with Store.open(db) as store:
        store.ingest(ready)
    if 0 < samples.num_rows <= MAX_GPU_LINES:
        print_rows(gpu_lines(samples), OutputFormat.table, title=f"GPUs read from {source}")
    stored = {name: batch[name].num_rows for name in (GPU_SAMPLES.name, COLLECTOR_DROPS.name)}
    print_rows(
        [{"table": name, "rows": rows} for name, rows in stored.items()],
        OutputFormat.table,
        title=f"stored in {db} ({len(nodes)} node(s))",
    )
    print_rejected(rejected, title="rejected samples, by reason", column="samples")
    if result.ignored:
        ignored = ", ".join(f"{r}: {n}" for r, n in sorted(result.ignored.items()))
        out.print(f"not stored (no column for them, not an error): {ignored}")
    return outcome


def register(app: typer.Typer) -> None:
    """Add ``dcgm`` to the ``ingest`` group ``app``."""

    @app.command("dcgm")
    def ingest_dcgm(
        source: str = typer.Argument(
            ..., help="dcgm-exporter /metrics URL (http://host:9400/metrics) or a saved file"
        ),
        db: Path = typer.Option(
            ..., "--db", help="DuckDB file (created when absent; its folder must exist)"
        ),
        node: str | None = typer.Option(
            None, "--node", help="node name for every row (default: the Hostname label)"
        ),
        timeout_s: float = typer.Option(
            DEFAULT_TIMEOUT_S,
            "--timeout-s",
            min=0.1,
            max=300.0,
            help="whole-scrape timeout for a URL, in seconds (0.1-300)",
        ),
        max_future_skew_s: float = typer.Option(
            MAX_FUTURE_SKEW_S, min=0, max=86400, help=FUTURE_SKEW_HELP
        ),
    ) -> None:
        """Read one dcgm-exporter body and store its GPU samples."""
        run_cli(
            lambda: finish(
                ingest_dcgm_once(
                    source,
                    db,
                    node=node,
                    timeout_s=timeout_s,
                    now=datetime.now(UTC),
                    max_future_skew_s=max_future_skew_s,
                )
            )
        )
