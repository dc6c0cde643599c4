"""CLI: ``sits-observe latency`` (quantiles per group) and ``sits-observe heatmap``.

The composition root of both commands: it opens the store read-only, builds the selection and
settings from the flags, calls :mod:`sits_observe.analytics.latency` /
:mod:`sits_observe.analytics.heatmap` and prints. Data goes to stdout (or ``--out``),
diagnostics to stderr; every package error ends as one line and exit code 2.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
import sys
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import Any

import typer
from rich.text import Text

from sits_observe.analytics.heatmap import (
    Heatmap,
    HeatmapSettings,
    compute_heatmaps,
    heatmap_settings,
)
from sits_observe.analytics.heatmap_json import heatmap_json, iso_utc
from sits_observe.analytics.heatmap_png import render_png
from sits_observe.analytics.latency import (
    ESTIMATE_GROUPS,
    GroupBy,
    Metric,
    RequestSelection,
    estimate_windows,
    exact_quantiles,
    explain_empty,
    groups_with_only_estimates,
    known_values,
)
from sits_observe.analytics.source import SnapshotServerWindows, estimate_windows_from
from sits_observe.errors import ConfigError
from sits_observe.store import Store
from sits_observe.store.promql_source import PromQLServerSource
from sits_observe.surfaces.cli.common import (
    OutputFormat,
    err,
    out,
    parse_duration_s,
    print_rows,
    run_cli,
)
from sits_observe.surfaces.cli.console import data_table, note, styled
from sits_observe.surfaces.cli.promql import (
    PROMQL_MATCHERS,
    PROMQL_STEP_S,
    PROMQL_URL,
    check_db_or_url,
    open_promql,
    promql_window,
)

_MAX_GRID_COLUMNS = 30
_MAX_GRID_ROWS = 60


class GroupKey(StrEnum):
    """What to group requests by."""

    model = "model"
    pod = "pod"
    node = "node"
    gpu_uuid = "gpu_uuid"


_GROUPS: dict[GroupKey, GroupBy] = {
    GroupKey.model: "model",
    GroupKey.pod: "pod",
    GroupKey.node: "node",
    GroupKey.gpu_uuid: "gpu_uuid",
}


class Source(StrEnum):
    """Where latencies come from."""

    exact = "exact"
    estimate = "estimate"


class MetricName(StrEnum):
    """Which latency of a request."""

    e2e = "e2e"
    ttft = "ttft"
    inter_token = "inter_token"


_METRICS: dict[MetricName, Metric] = {
    MetricName.e2e: "latency_s",
    MetricName.ttft: "ttft_s",
    MetricName.inter_token: "inter_token_s",
}


class HeatmapFormat(StrEnum):
    """How ``heatmap`` prints."""

    table = "table"
    json = "json"
    csv = "csv"
    png = "png"


class CsvPart(StrEnum):
    """Which table ``heatmap --format csv`` writes."""

    cells = "cells"
    windows = "windows"
    bins = "bins"


def parse_duration(text: str) -> timedelta:
    """``15m``, ``2h``, ``7d``, ``30s``, ``1w``, ``1.5h`` -> a duration (> 0)."""
    return timedelta(seconds=parse_duration_s(text))


def _selection(
    model: str | None, since: str | None, include_failed: bool, now: datetime
) -> RequestSelection:
    start = None if since is None else now - parse_duration(since)
    return RequestSelection(model=model, since=start, include_failed=include_failed)


def _open(db: Path) -> Store:
    if not db.exists():
        raise ConfigError(f"database {db} does not exist; give the --db of an ingest or serve")
    return Store.open(db, read_only=True)


# -- latency ----------------------------------------------------------------------------


def latency_rows(
    store: Store,
    *,
    by: GroupBy,
    selection: RequestSelection,
    source: Source,
    metric: Metric = "latency_s",
) -> list[dict[str, Any]]:
    """The rows ``sits-observe latency`` prints; notes about missing data go to stderr."""
    if source is Source.estimate:
        if by not in ESTIMATE_GROUPS:
            raise ConfigError(
                f"histogram estimates do not know the GPU: --by {by} needs --source exact; "
                f"with --source estimate use --by {', '.join(ESTIMATE_GROUPS)}"
            )
        if metric != "latency_s":
            raise ConfigError("--source estimate has end-to-end latency only (--metric e2e)")
        windows = estimate_windows(store, by=by, selection=selection)
        if windows.num_rows == 0:
            models = known_values(store, "model", "server_windows")
            raise ConfigError(
                "no histogram estimates (server_windows) match the selection; models with "
                f"estimates: {', '.join(models) or 'none'}"
            )
        return [{**row, "window_end": iso_utc(row["window_end"])} for row in windows.to_pylist()]
    table = exact_quantiles(store, by=by, selection=selection, metric=metric)
    if table.num_rows == 0:
        raise ConfigError(explain_empty(store, selection, metric))
    only_estimates = groups_with_only_estimates(
        store, by=by, selection=selection, exact_groups=table.column(by).to_pylist()
    )
    if only_estimates:
        note(
            f"no exact latencies for {by} {', '.join(only_estimates)}: only "
            "histogram estimates exist for them; see them with --source estimate"
        )
    rows: list[dict[str, Any]] = table.to_pylist()
    return rows


def promql_estimate_rows(
    url: str,
    *,
    by: GroupBy,
    selection: RequestSelection,
    source: Source,
    since: str | None,
    step_s: float | None,
    matchers: str,
) -> list[dict[str, Any]]:
    """``latency --source estimate`` rows from vLLM histograms in a PromQL store."""
    if source is not Source.estimate:
        raise ConfigError(
            "--promql-url has histogram estimates only (exact latencies live in the DuckDB "
            "requests table): add --source estimate"
        )
    if by not in ESTIMATE_GROUPS:
        raise ConfigError(f"histogram estimates group by {', '.join(ESTIMATE_GROUPS)} only")
    lo, hi = promql_window(since)
    with open_promql(url) as client:
        snapshots = PromQLServerSource(client, matchers=matchers)
        windows = SnapshotServerWindows(snapshots, step_s=step_s).server_windows(lo, hi)
    table = estimate_windows_from(windows, by=by, selection=selection)
    if table.num_rows == 0:
        raise ConfigError("no vLLM histogram windows in the PromQL store for the selection")
    return [{**row, "window_end": iso_utc(row["window_end"])} for row in table.to_pylist()]


def _print_latency(rows: list[dict[str, Any]], fmt: OutputFormat, title: str, by: GroupBy) -> None:
    if any(row[by] is None for row in rows):
        note(f"requests without a recorded {by} form one group ({by} null)")
    if fmt is OutputFormat.table:
        rows = [
            {k: "(not recorded)" if k == by and v is None else _short(v) for k, v in row.items()}
            for row in rows
        ]
    elif fmt is OutputFormat.json:
        # JSON has no infinity: an unbounded estimate error (+Inf bucket) becomes null
        rows = [
            {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in r.items()}
            for r in rows
        ]
    print_rows(rows, fmt, title=title)


def _short(value: Any) -> Any:
    return f"{value:.6g}" if isinstance(value, float) else value


# -- heatmap ----------------------------------------------------------------------------


def heatmap_output(
    maps: Sequence[Heatmap], fmt: HeatmapFormat, grouped: bool, part: CsvPart
) -> str:
    """The text of ``--format json`` or ``csv`` for ``maps``."""
    if fmt is HeatmapFormat.json:
        objects = [heatmap_json(h) for h in maps]
        return json.dumps(objects if grouped else objects[0], indent=2) + "\n"
    buffer = io.StringIO()
    writer: csv.DictWriter[str] | None = None
    for h in maps:
        for row in _csv_rows(h, part):
            full = {str(h.by): h.group, **row} if grouped else row
            if writer is None:
                writer = csv.DictWriter(buffer, fieldnames=list(full), lineterminator="\n")
                writer.writeheader()
            writer.writerow(full)
    return buffer.getvalue()


def _csv_rows(h: Heatmap, part: CsvPart) -> list[dict[str, Any]]:
    data = heatmap_json(h)
    if part is CsvPart.cells:
        return [dict(c) for c in data["cells"]]
    if part is CsvPart.windows:
        return [dict(w) for w in data["windows"]]
    return [dict(b) for b in data["throughput_bins"]]


def _print_heatmap_table(h: Heatmap) -> None:
    s = h.settings
    head = "every selected request" if h.by is None else f"{h.by} = {h.group}"
    out.print(
        styled(
            (head, "bold"),
            f": {h.requests} requests in {h.windows.num_rows} windows of "
            f"{s.window_s:g} s (windows without requests do not appear)",
        )
    )
    data = heatmap_json(h)
    table = data_table(title="P95 per throughput bin (exact; the evidence for knee and safe max)")
    for column in ("throughput rps", "windows", "requests", "p50 s", "p95 s", "p99 s", "used"):
        table.add_column(column, justify="right")
    if s.slo_ms is not None:
        table.add_column(f"P95 <= {s.slo_ms:g} ms", justify="right")
    for b in data["throughput_bins"]:
        cells: list[str | Text] = [
            f"{b['throughput_lo_rps']:g}-{b['throughput_hi_rps']:g}",
            str(b["windows"]),
            str(b["requests"]),
            f"{b['p50_s']:.4g}",
            f"{b['p95_s']:.4g}",
            f"{b['p99_s']:.4g}",
            "yes" if b["used"] else f"no (< {s.min_bin_requests})",
        ]
        if b["within_slo"] is not None:
            cells.append("yes" if b["within_slo"] else Text("no", style="red"))
        table.add_row(*cells)
    out.print(table)
    for text in data["notes"]:
        out.print(f"- {text}")
    _print_grid(h)


def _print_grid(h: Heatmap) -> None:
    cells = h.cells.to_pylist()
    lat_bins = sorted({c["latency_bin"] for c in cells})
    thr_bins = sorted({c["throughput_bin"] for c in cells})
    rows = lat_bins[-1] - lat_bins[0] + 1
    cols = thr_bins[-1] - thr_bins[0] + 1
    max_columns = max(3, min(_MAX_GRID_COLUMNS, (out.width - 10) // 7))
    if cols > max_columns or rows > _MAX_GRID_ROWS:
        out.print(
            f"(grid of {cols} throughput x {rows} latency bins is too large for a terminal; "
            "use --format png or csv, or wider bins)"
        )
        return
    count = {(c["latency_bin"], c["throughput_bin"]): c["count"] for c in cells}
    lat_lo = {c["latency_bin"]: c["latency_lo_ms"] for c in cells}
    thr_lo = {c["throughput_bin"]: c["throughput_lo_rps"] for c in cells}
    s = h.settings
    table = data_table(title="requests per cell: latency (ms, rows) x window throughput (rps)")
    table.add_column("ms \\ rps", justify="right")
    for j in range(thr_bins[0], thr_bins[-1] + 1):
        table.add_column(f"{thr_lo.get(j, j * s.throughput_bin_rps):g}", justify="right")
    for i in range(lat_bins[-1], lat_bins[0] - 1, -1):
        label = f"{lat_lo.get(i, i * s.latency_bin_ms):g}"
        table.add_row(
            label, *(_compact(count.get((i, j))) for j in range(thr_bins[0], thr_bins[-1] + 1))
        )
    out.print(table)


def _compact(count: int | None) -> str:
    """A cell count in at most 4 characters: 7, 950, 9.5k, 12k, 3.1M."""
    if count is None:
        return ""
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if count >= limit * 10:
            return f"{count / limit:.0f}{suffix}"
        if count >= limit:
            return f"{count / limit:.1f}{suffix}"
    return str(count)


def _png_paths(out_path: Path, maps: Sequence[Heatmap]) -> list[Path]:
    if len(maps) == 1:
        return [out_path]
    safe = [re.sub(r"[^A-Za-z0-9_.-]+", "_", str(h.group)) for h in maps]
    return [out_path.with_name(f"{out_path.stem}-{name}{out_path.suffix}") for name in safe]


def run_heatmap(
    db: Path,
    *,
    settings: HeatmapSettings,
    selection: RequestSelection,
    by: GroupBy | None,
    fmt: HeatmapFormat,
    out_path: Path | None,
    part: CsvPart,
) -> None:
    """Compute and print (or write) the heatmaps of ``sits-observe heatmap``."""
    if fmt is HeatmapFormat.png and out_path is None:
        raise ConfigError("--format png needs --out FILE.png")
    if fmt is HeatmapFormat.table and out_path is not None:
        raise ConfigError("--out works with --format json, csv or png")
    with _open(db) as store:
        maps = compute_heatmaps(store, settings, selection=selection, by=by)
        if not maps:
            raise ConfigError(explain_empty(store, selection))
        if by is None and selection.model is None:
            models = known_values(store, "model")
            if len(models) > 1:
                note(
                    f"one heatmap over {len(models)} models "
                    f"({', '.join(models[:5])}{' ...' if len(models) > 5 else ''}); "
                    "pick one with --model, or --by model for one each"
                )
    if fmt is HeatmapFormat.png:
        assert out_path is not None
        for h, path in zip(maps, _png_paths(out_path, maps), strict=True):
            path.write_bytes(render_png(h))
            err.print(f"wrote {path} ({h.requests} requests)")
        return
    if fmt is HeatmapFormat.table:
        for h in maps:
            _print_heatmap_table(h)
        return
    text = heatmap_output(maps, fmt, by is not None, part)
    if out_path is None:
        sys.stdout.write(text)
    else:
        out_path.write_text(text)
        err.print(f"wrote {out_path}")


def _help(field: str) -> str:
    info = HeatmapSettings.model_fields[field]
    bounds = [
        f"{symbol} {getattr(m, attr)}"
        for m in info.metadata
        for attr, symbol in {"gt": ">", "ge": ">=", "le": "<="}.items()
        if hasattr(m, attr)
    ]
    return f"{info.description}; {', '.join(bounds)}" if bounds else str(info.description)


def register(app: typer.Typer) -> None:
    """Add ``latency`` and ``heatmap`` to ``app``."""

    @app.command("latency")
    def latency(
        *,
        db: Path | None = typer.Option(None, "--db", help="DuckDB file (or --promql-url)"),
        promql_url: str | None = PROMQL_URL,
        promql_step_s: float | None = PROMQL_STEP_S,
        promql_matchers: str = PROMQL_MATCHERS,
        by: GroupKey = typer.Option(GroupKey.model, "--by", help="group requests by"),
        model: str | None = typer.Option(None, "--model", help="only this model"),
        since: str | None = typer.Option(
            None, "--since", help="only requests completed in the last DUR (15m, 2h, 7d)"
        ),
        include_failed: bool = typer.Option(
            False, "--include-failed", help="count failed requests (ok = false) too"
        ),
        source: Source = typer.Option(
            Source.exact,
            "--source",
            help="exact: per-request latencies; estimate: per-window histogram estimates",
        ),
        metric: MetricName = typer.Option(
            MetricName.e2e, "--metric", help="end-to-end, time to first token or inter-token"
        ),
        fmt: OutputFormat = typer.Option(OutputFormat.table, "--format"),
    ) -> None:
        """Latency quantiles (P50, P95, P99, seconds) per model, pod, node or GPU."""

        def go() -> None:
            selection = _selection(model, since, include_failed, datetime.now(UTC))
            check_db_or_url(db, promql_url)
            if promql_url is not None:
                rows = promql_estimate_rows(
                    promql_url,
                    by=_GROUPS[by],
                    selection=selection,
                    source=source,
                    since=since,
                    step_s=promql_step_s,
                    matchers=promql_matchers,
                )
                title = "latency ESTIMATES from histogram buckets (PromQL), per window, s"
                _print_latency(rows, fmt, title, _GROUPS[by])
                return
            assert db is not None
            with _open(db) as store:
                rows = latency_rows(
                    store,
                    by=_GROUPS[by],
                    selection=selection,
                    source=source,
                    metric=_METRICS[metric],
                )
            title = (
                f"{metric.value} latency, EXACT (linear interpolation), s"
                if source is Source.exact
                else "latency ESTIMATES from histogram buckets, per window, s"
            )
            _print_latency(rows, fmt, title, _GROUPS[by])

        run_cli(go)

    @app.command("heatmap")
    def heatmap(
        *,
        db: Path = typer.Option(..., "--db", help="DuckDB file"),
        model: str | None = typer.Option(None, "--model", help="only this model"),
        by: GroupKey | None = typer.Option(
            None, "--by", help="one heatmap per model, pod, node or GPU (JSON: a list)"
        ),
        window_s: float = typer.Option(1.0, "--window-s", help=_help("window_s")),
        latency_bin_ms: float = typer.Option(
            100.0, "--latency-bin-ms", help=_help("latency_bin_ms")
        ),
        throughput_bin_rps: float = typer.Option(
            10.0, "--throughput-bin-rps", help=_help("throughput_bin_rps")
        ),
        slo_ms: float | None = typer.Option(None, "--slo-ms", help=_help("slo_ms")),
        min_bin_requests: int = typer.Option(
            20, "--min-bin-requests", help=_help("min_bin_requests")
        ),
        since: str | None = typer.Option(
            None, "--since", help="only requests completed in the last DUR (15m, 2h, 7d)"
        ),
        include_failed: bool = typer.Option(
            False, "--include-failed", help="count failed requests (ok = false) too"
        ),
        fmt: HeatmapFormat = typer.Option(HeatmapFormat.table, "--format"),
        out_path: Path | None = typer.Option(
            None, "--out", help="write json / csv / png here (png: required)"
        ),
        csv_of: CsvPart = typer.Option(
            CsvPart.cells, "--csv-of", help="which table --format csv writes"
        ),
    ) -> None:
        """Latency-throughput heatmap with per-window P50/P95/P99, knee and safe maximum."""

        def go() -> None:
            settings = heatmap_settings(
                window_s=window_s,
                latency_bin_ms=latency_bin_ms,
                throughput_bin_rps=throughput_bin_rps,
                slo_ms=slo_ms,
                min_bin_requests=min_bin_requests,
            )
            selection = _selection(model, since, include_failed, datetime.now(UTC))
            group = None if by is None else _GROUPS[by]
            run_heatmap(
                db,
                settings=settings,
                selection=selection,
                by=group,
                fmt=fmt,
                out_path=out_path,
                part=csv_of,
            )

        run_cli(go)
