"""CLI: ``sits-observe smf`` (the SMF fragmentation rate) and ``sits-observe trends``
(fragmentation trend clustering).

This module is the composition root of both commands: it opens the store read-only, picks
the time window, calls the pure analytics functions and prints. ``--since DUR`` counts back
from the newest GPU sample in the store (not from the wall clock), so a database copied off a
cluster yesterday answers the same as it did then.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import typer

from sits_observe.analytics.smf import (
    SmfAlignment,
    SmfGrouping,
    SmfSettings,
    align_smf,
    read_smf_inputs,
    summarize_smf,
)
from sits_observe.analytics.source import OCCUPANCY_COLUMNS, occupancy_from_samples
from sits_observe.analytics.trends import TrendClusters, TrendSettings, cluster_trends
from sits_observe.analytics.trends_series import TrendLevel, read_occupancy_series
from sits_observe.errors import ConfigError
from sits_observe.store import Store
from sits_observe.store.promql_source import PromQLGpuSource
from sits_observe.surfaces.cli.common import (
    OutputFormat,
    err,
    parse_duration_s,
    print_rows,
    run_cli,
)
from sits_observe.surfaces.cli.promql import (
    PROMQL_MATCHERS,
    PROMQL_STEP_S,
    PROMQL_URL,
    check_db_or_url,
    open_promql,
    promql_window,
)

_NEWEST = """
SELECT max(t) FROM (SELECT max(ts) AS t FROM gpu_samples
                    UNION ALL SELECT max(minute) FROM gpu_samples_1m)
"""


def window_start(store: Store, since: str | None) -> datetime | None:
    """Start of the window: ``since`` before the newest GPU sample (None = everything)."""
    if since is None:
        return None
    seconds = parse_duration_s(since)
    newest = store.scalar(_NEWEST)
    if newest is None:
        return None
    start: datetime = newest - timedelta(seconds=seconds)
    err.print(f"window: {start.isoformat(sep=' ')} .. {newest.isoformat(sep=' ')} UTC")
    return start


# -- smf ------------------------------------------------------------------------------


def _short(value: str | None, width: int) -> str | None:
    return value if value is None or len(value) <= width else value[:width] + "…"


def _num(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


def smf_summary_rows(
    alignment: SmfAlignment, by: SmfGrouping, *, table: bool
) -> list[dict[str, Any]]:
    """The summary as plain rows (shortened ids and rounded values when ``table``)."""
    rows: list[dict[str, Any]] = []
    for s in summarize_smf(alignment, by):
        row: dict[str, Any] = {"node": s.node}
        if by is not SmfGrouping.gpu:
            cid = _short(s.container_id, 12) if table else s.container_id
            row |= {"container_id": cid, "namespace": s.namespace, "pod": s.pod}
            row["container"] = s.container
        if by is SmfGrouping.container:
            row["gpus"] = len(s.gpu_uuids) if table else list(s.gpu_uuids)
        else:
            row["gpu_uuid"] = _short(s.gpu_uuid, 12) if table else s.gpu_uuid
        if by is SmfGrouping.gpu:
            row["containers"] = len(s.container_ids) if table else list(s.container_ids)
        row |= {
            "latest_at": s.latest_at,
            "latest_smf": _num(s.latest_smf) if table else s.latest_smf,
            "mean_smf": _num(s.mean_smf) if table else s.mean_smf,
            "max_smf": _num(s.max_smf) if table else s.max_smf,
            "samples": s.samples,
            "unmatched_samples": s.unmatched_samples,
        }
        rows.append(row)
    return rows


def _print_smf(alignment: SmfAlignment, by: SmfGrouping, raw: bool, fmt: OutputFormat) -> None:
    unlinked = alignment.unlinked_gpus.to_pylist()
    if raw:
        rows = alignment.rows.to_pylist()
    else:
        rows = smf_summary_rows(alignment, by, table=fmt is OutputFormat.table)
    if fmt is OutputFormat.json:
        doc = {
            "metric": "SMF fragmentation rate",
            "by": "sample" if raw else by.value,
            "max_skew_s": alignment.settings.max_skew_s,
            "rows": rows,
            "unmatched_samples": alignment.unmatched_samples,
            "unmatched": alignment.unmatched.to_pylist(),
            "unlinked_gpus": unlinked,
            "linked_containers": alignment.linked_containers,
            "unlinked_containers": alignment.unlinked_containers,
            "skipped": dict(alignment.skipped),
        }
        sys.stdout.write(json.dumps(doc, default=str, indent=2) + "\n")
        return
    if rows:
        title = "SMF fragmentation rate, " + ("aligned samples" if raw else f"by {by.value}")
        print_rows(rows, fmt, title=title)
    else:
        err.print(
            "no SMF samples: no cgroup sample of a GPU-linked container had a GPU sample within "
            f"{alignment.settings.max_skew_s:g} s before it"
        )
    _notes(alignment, unlinked, fmt)


def _notes(alignment: SmfAlignment, unlinked: list[dict[str, Any]], fmt: OutputFormat) -> None:
    """Diagnostics on stderr; the unlinked GPU list as a table on stderr too."""
    skew = alignment.settings.max_skew_s
    if alignment.unmatched_samples:
        err.print(
            f"note: {alignment.unmatched_samples} cgroup samples (per linked GPU) had no GPU "
            f"sample within {skew:g} s before them and are counted as unmatched, not guessed"
        )
    if unlinked:
        err.print(
            f"note: {len(unlinked)} GPU(s) have no cgroup match, so no SMF (the formula needs "
            "the memory.current of the container using the GPU):"
        )
        if fmt is not OutputFormat.csv:
            for g in unlinked:
                label = f" [labelled {g['labelled_as']}]" if g["labelled_as"] else ""
                err.print(f"  {g['node']} {g['gpu_uuid']}{label}: {g['reason']}")
    if alignment.unlinked_containers:
        err.print(
            f"note: {alignment.unlinked_containers} container(s) use no GPU that the samples "
            "show (no DCGM pod label and no NVML process row): left out"
        )
    for reason, count in sorted(alignment.skipped.items()):
        err.print(f"note: skipped {count} {reason.replace('_', ' ')}")


# -- trends ---------------------------------------------------------------------------


def trends_document(result: TrendClusters) -> dict[str, Any]:
    """The clustering as a JSON-ready document."""

    def cluster(c: Any) -> dict[str, Any]:
        return {
            "label": c.label,
            "words": list(c.words),
            "description": c.description,
            "size": len(c.members),
            "centroid": c.centroid,
            "members": [asdict(m) for m in c.members],
        }

    return {
        "signal": "fb_used_ratio (framebuffer occupancy, bucket mean)",
        "level": result.level.value,
        "bucket_s": result.bucket_s,
        "n_series": result.n_series,
        "eps": result.eps.eps,
        "eps_source": result.eps.source,
        "k": result.eps.k,
        "min_samples": result.min_samples,
        "clusters": [cluster(c) for c in result.clusters],
        "noise": [
            {
                "key": c.members[0].key,
                "node": c.members[0].node,
                "words": list(c.words),
                "description": c.description,
                "features": c.centroid,
            }
            for c in result.noise
        ],
        "dropped": result.dropped,
        "dropped_keys": list(result.dropped_keys),
        "notes": list(result.notes),
    }


def _member_name(key: str, node: str, level: TrendLevel) -> str:
    return key if level is TrendLevel.node else f"{node}/{_short(key, 12)}"


def _print_trends(result: TrendClusters, fmt: OutputFormat) -> None:
    if fmt is OutputFormat.json:
        sys.stdout.write(json.dumps(trends_document(result), default=str, indent=2) + "\n")
        return
    rows: list[dict[str, Any]] = []
    for c in result.clusters:
        names = [_member_name(m.key, m.node, result.level) for m in c.members]
        shown = ", ".join(names[:6]) + (f", … (+{len(names) - 6})" if len(names) > 6 else "")
        rows.append(
            {
                "cluster": c.label,
                "size": len(c.members),
                "pattern": ", ".join(c.words),
                "centroid": c.description.split(": ", 1)[1],
                "members": shown,
            }
        )
    for c in result.noise:
        m = c.members[0]
        rows.append(
            {
                "cluster": "noise",
                "size": 1,
                "pattern": ", ".join(c.words),
                "centroid": c.description.split(": ", 1)[1],
                "members": _member_name(m.key, m.node, result.level),
            }
        )
    err.print(
        f"{result.n_series} {result.level.value} series, {result.bucket_s} s buckets; "
        f"eps {result.eps.eps:.4g} ({result.eps.source}), min_samples {result.min_samples}"
    )
    for note in result.notes:
        err.print(f"note: {note}")
    if rows:
        print_rows(rows, fmt, title=f"fragmentation trends by {result.level.value}")


def register(app: typer.Typer) -> None:
    """Add ``smf`` and ``trends`` to ``app``."""
    skew_help = SmfSettings.model_fields["max_skew_s"].description
    fields = TrendSettings.model_fields

    @app.command("smf")
    def smf(
        *,
        db: Path = typer.Option(..., "--db", help="DuckDB file"),
        since: str | None = typer.Option(
            None, "--since", help="only the last DUR before the newest sample, e.g. 15m, 2h, 7d"
        ),
        max_skew_s: float = typer.Option(SmfSettings().max_skew_s, "--max-skew-s", help=skew_help),
        by: SmfGrouping = typer.Option(
            SmfGrouping.container, "--by", help="one row per container, GPU or (container, GPU)"
        ),
        raw: bool = typer.Option(False, "--raw", help="every aligned sample instead of a summary"),
        fmt: OutputFormat = typer.Option(OutputFormat.table, "--format"),
    ) -> None:
        """SMF fragmentation rate per container and GPU, on aligned DCGM / cgroup samples."""

        def go() -> None:
            try:
                settings = SmfSettings(max_skew_s=max_skew_s)
            except ValueError as exc:
                raise ConfigError(f"--max-skew-s {max_skew_s}: {exc}") from exc
            with Store.open(db, read_only=True) as store:
                start = window_start(store, since)
                inputs = read_smf_inputs(store, since=start, settings=settings)
            alignment = align_smf(
                inputs.gpu_samples,
                inputs.container_samples,
                inputs.gpu_processes,
                settings=settings,
            )
            _print_smf(alignment, by, raw, fmt)

        run_cli(go)

    @app.command("trends")
    def trends(
        *,
        db: Path | None = typer.Option(None, "--db", help="DuckDB file (or --promql-url)"),
        promql_url: str | None = PROMQL_URL,
        promql_step_s: float | None = PROMQL_STEP_S,
        promql_matchers: str = PROMQL_MATCHERS,
        since: str | None = typer.Option(
            None, "--since", help="only the last DUR before the newest sample, e.g. 15m, 2h, 7d"
        ),
        level: TrendLevel = typer.Option(
            TrendLevel.gpu, "--level", help="one series per GPU or per node"
        ),
        eps: float | None = typer.Option(None, "--eps", help=fields["eps"].description),
        min_samples: int | None = typer.Option(
            None, "--min-samples", help=fields["min_samples"].description
        ),
        bucket_s: int | None = typer.Option(
            None,
            "--bucket-s",
            help="bucket width in seconds (1-86400); none = about 240 points, 1-60 s",
        ),
        fmt: OutputFormat = typer.Option(OutputFormat.table, "--format", help="table or json"),
    ) -> None:
        """Cluster GPUs (or nodes) by the trend of their framebuffer occupancy (DBSCAN)."""

        def go() -> None:
            if fmt is OutputFormat.csv:
                raise ConfigError("--format csv is not offered for trends; use table or json")
            try:
                settings = TrendSettings(eps=eps, min_samples=min_samples)
            except ValueError as exc:
                raise ConfigError(f"invalid clustering option: {exc}") from exc
            check_db_or_url(db, promql_url)
            if promql_url is not None:
                lo, hi = promql_window(since)
                with open_promql(promql_url) as client:
                    samples = PromQLGpuSource(client, matchers=promql_matchers).gpu_samples(
                        lo, hi, step_s=promql_step_s, columns=list(OCCUPANCY_COLUMNS)
                    )
                series = occupancy_from_samples(samples, level=level, bucket_s=bucket_s)
                _print_trends(cluster_trends(series, settings), fmt)
                return
            assert db is not None
            with Store.open(db, read_only=True) as store:
                start = window_start(store, since)
                series = read_occupancy_series(store, since=start, level=level, bucket_s=bucket_s)
            _print_trends(cluster_trends(series, settings), fmt)

        run_cli(go)
