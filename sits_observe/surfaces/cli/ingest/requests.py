"""CLI: ``sits-observe ingest requests FILE`` and ``ingest <engine> URL``.

``ingest requests`` imports a per-request log (CSV, JSONL, Parquet) into the ``requests``
table with exact latencies, plus one ``collector_drops`` row per rejection reason, in one
batch whose id is derived from the file's bytes and the column mapping, so importing the same
file twice stores it once. The file is read before the store is opened: no usable record
means exit 2 and no database, rejected records or NULLed values exit 3 (the rule of
:mod:`.ingest_outcome`). ``ingest vllm`` / ``ingest triton`` / ``ingest sglang`` ... (one
command per engine of the mapping table, :data:`~sits_observe.collectors.inference.engines.
ENGINES`) scrape a server N+1 times and store the N ``server_windows`` rows (estimates)
between them.

This module is the composition root of those commands: it builds the collectors and the
store from the flags. Results go to stdout, diagnostics to stderr.
"""

from __future__ import annotations

import hashlib
import socket
import threading
from collections import Counter
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Literal

import pyarrow as pa
import pyarrow.compute as pc
import typer
from pydantic import BaseModel, ConfigDict, Field

from sits_observe.collectors.inference.common import ScrapingCollector
from sits_observe.collectors.inference.engine import new_collector
from sits_observe.collectors.inference.engines import ENGINES
from sits_observe.collectors.inference.request_log import read_request_log
from sits_observe.domain.collect import drops_table
from sits_observe.domain.ranges import MAX_FUTURE_SKEW_S
from sits_observe.domain.tables import COLLECTOR_DROPS, REQUESTS, SERVER_WINDOWS
from sits_observe.errors import CollectorError
from sits_observe.store import Batch, Store, prepare
from sits_observe.surfaces.cli.common import (
    OutputFormat,
    out,
    print_rejected,
    print_rows,
    run_cli,
    settings_from_flags,
)
from sits_observe.surfaces.cli.console import note
from sits_observe.surfaces.cli.ingest.outcome import (
    FUTURE_SKEW_HELP,
    IngestOutcome,
    finish,
    require_rows,
)

_HASH_CHUNK_BYTES = 1 << 20


class LogFormat(StrEnum):
    """Request-log file formats."""

    csv = "csv"
    jsonl = "jsonl"
    parquet = "parquet"


_FORMATS: dict[LogFormat, Literal["csv", "jsonl", "parquet"]] = {
    LogFormat.csv: "csv",
    LogFormat.jsonl: "jsonl",
    LogFormat.parquet: "parquet",
}


class LatencyUnit(StrEnum):
    """Unit of the latency, TTFT and inter-token columns."""

    s = "s"
    ms = "ms"


class TimestampMarks(StrEnum):
    """What the timestamp column records."""

    completion = "completion"
    arrival = "arrival"


class ScrapeSettings(BaseModel):
    """How ``ingest <engine>`` scrapes a server."""

    model_config = ConfigDict(frozen=True)

    interval_s: float = Field(
        15.0, gt=0, le=3600, description="seconds between scrapes (the window length)"
    )
    windows: int = Field(1, ge=1, le=100_000, description="windows to store (scrapes = N+1)")
    timeout_s: float = Field(5.0, gt=0, le=300, description="seconds each scrape may take")


@dataclass(frozen=True)
class RequestLogOptions:
    """The column mapping and reading rules of one ``ingest requests`` call."""

    model_column: str
    latency_column: str
    timestamp_column: str | None = None
    latency_unit: Literal["s", "ms"] = "s"
    status_column: str | None = None
    ttft_column: str | None = None
    inter_token_column: str | None = None
    prompt_tokens_column: str | None = None
    output_tokens_column: str | None = None
    timestamp_marks: Literal["completion", "arrival"] = "completion"
    file_format: Literal["csv", "jsonl", "parquet"] | None = None


def _batch_id(path: Path, options: RequestLogOptions) -> str:
    """An id that is the same exactly when the file bytes and the options are the same."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(_HASH_CHUNK_BYTES):
            digest.update(chunk)
    digest.update(repr(sorted(asdict(options).items())).encode())
    return f"requests:{path.name}:{digest.hexdigest()[:32]}"


def ingest_requests_once(
    path: Path,
    db: Path,
    options: RequestLogOptions,
    now: datetime,
    *,
    max_future_skew_s: float = MAX_FUTURE_SKEW_S,
) -> IngestOutcome:
    """Import one request log into ``db`` and print what was stored and rejected.

    The rows go through the service's range rules (:mod:`sits_observe.store.intake`): one
    stamped after ``now + max_future_skew_s`` is rejected as ``requests.ts:future``, one
    before 2000 as ``requests.ts:too_old``, and each reason is stored as a
    ``collector_drops`` row of collector ``ingest``, as the service stores them. Raises
    :class:`~sits_observe.errors.ParseError` before ``db`` is opened when no record of the
    file is usable.
    """
    if not path.is_file():
        raise CollectorError(f"request log {path} does not exist or is not a file")
    result = read_request_log(path, **asdict(options), now=now)
    at = now.astimezone(UTC).replace(tzinfo=None)
    node = socket.gethostname()
    drops = drops_table(result.dropped, at=at, node=node, collector="request_log")
    # The service's rules (ts:future past now + max_future_skew_s, ts:too_old before 2000).
    tables = {REQUESTS.name: result.tables[REQUESTS.name], COLLECTOR_DROPS.name: drops}
    batch_id = _batch_id(path, options)
    ready = prepare(Batch(tables, now, node, batch_id, max_future_skew_s=max_future_skew_s))
    rows = ready.tables[REQUESTS.name]
    first = result.first_rejected
    rejected = result.dropped + Counter(ready.dropped)
    outcome = IngestOutcome(
        rows.num_rows,
        rejected,
        "records or values",
        None if first is None else f"record {first.number} ({first.reason})",
    )
    require_rows(
        outcome,
        str(path),
        "requests",
        "Check --model-column / --latency-column and --latency-unit against the file "
        "(and its timestamps against this host's clock).",
    )
    batch = ready.tables
    with Store.open(db) as store:
        receipt = store.ingest(ready)
    if receipt.duplicate:
        out.print(
            f"{path.name} was already imported into {db} (batch {receipt.batch_id}); nothing added"
        )
        return IngestOutcome(0, {}, "records")
    failed = int(pc.sum(pc.invert(rows.column("ok"))).as_py() or 0)
    print_rows(
        [
            {"table": REQUESTS.name, "rows": rows.num_rows, "ok": rows.num_rows - failed},
            {
                "table": COLLECTOR_DROPS.name,
                "rows": batch[COLLECTOR_DROPS.name].num_rows,
                "ok": None,
            },
        ],
        OutputFormat.table,
        title=f"stored {path.name} in {db}",
    )
    out.print(f"failed requests stored with ok=false: {failed}")
    if options.timestamp_column is None:
        out.print(
            f"no --timestamp-column: every row is stamped with the import time {at.isoformat()}Z"
        )
    print_rejected(rejected, title="rejected or nulled, by reason")
    return outcome


def scrape_windows(
    collector: ScrapingCollector, db: Path, settings: ScrapeSettings, stop: threading.Event
) -> int:
    """Scrape ``settings.windows + 1`` times and store the windows; returns rows stored.

    A failed scrape is reported on stderr and the loop carries on (the next window then spans
    the gap); only when every scrape failed is it an error.
    """
    stored = 0
    failures = 0
    dropped: Counter[str] = Counter()
    node = collector.node or socket.gethostname()
    with Store.open(db) as store:
        for attempt in range(settings.windows + 1):
            if attempt and stop.wait(settings.interval_s):
                break
            now = datetime.now(UTC)
            try:
                result = collector.collect(now)
            except CollectorError as exc:
                failures += 1
                note(str(exc), label=f"scrape {attempt + 1} failed")
                continue
            at = now.replace(tzinfo=None)
            tables = dict(result.tables)
            tables[COLLECTOR_DROPS.name] = drops_table(
                result.dropped, at=at, node=node, collector=collector.name
            )
            ready = prepare(Batch(tables, now, node))  # the rules every ingest path runs
            store.ingest(ready)
            dropped.update(result.dropped + Counter(ready.dropped))
            windows = ready.tables.get(SERVER_WINDOWS.name)
            if windows is not None:
                stored += windows.num_rows
                _print_windows(windows)
    if failures == settings.windows + 1:
        raise CollectorError(f"every scrape of {collector.url} failed; is the server up?")
    out.print(f"stored {stored} {SERVER_WINDOWS.name} rows in {db}")
    print_rejected(dropped, title="rejected or nulled, by reason")
    return stored


def _print_windows(windows: pa.Table) -> None:
    keep = [
        "ts",
        "model",
        "window_s",
        "completed",
        "throughput_rps",
        "latency_mean_s",
        "latency_p95_s",
        "latency_error_bound_s",
    ]
    rows = [
        {k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()}
        for row in windows.select(keep).to_pylist()
    ]
    print_rows(rows, OutputFormat.table, title="window (quantiles are ESTIMATES)")


def _help(field: str) -> str:
    """CLI help of a :class:`ScrapeSettings` field, from its description and bounds."""
    info = ScrapeSettings.model_fields[field]
    symbols = {"gt": ">", "ge": ">=", "lt": "<", "le": "<="}
    bounds = [
        f"{symbol} {getattr(m, attr)}"
        for m in info.metadata
        for attr, symbol in symbols.items()
        if hasattr(m, attr)
    ]
    text = str(info.description)
    return f"{text}; {', '.join(bounds)}" if bounds else text


def _settings(interval_s: float, windows: int, timeout_s: float) -> ScrapeSettings:
    return settings_from_flags(
        ScrapeSettings, "scrape", interval_s=interval_s, windows=windows, timeout_s=timeout_s
    )


def register(app: typer.Typer) -> None:
    """Add ``requests`` and one command per serving engine to the ``ingest`` group ``app``."""

    @app.command("requests")
    def ingest_requests(
        file: Path = typer.Argument(..., help="request log: .csv, .jsonl/.ndjson or .parquet"),
        *,
        db: Path = typer.Option(
            ..., "--db", help="DuckDB file (created when absent; its folder must exist)"
        ),
        model_column: str = typer.Option(..., help="column holding the model / service"),
        latency_column: str = typer.Option(..., help="column holding end-to-end latency"),
        timestamp_column: str | None = typer.Option(
            None, help="column holding the time (ISO-8601 or epoch s/ms); default: import time"
        ),
        latency_unit: LatencyUnit = typer.Option(
            LatencyUnit.s, help="unit of the latency, TTFT and inter-token columns"
        ),
        status_column: str | None = typer.Option(
            None, help="status / error column; non-success rows are stored with ok=false"
        ),
        ttft_column: str | None = typer.Option(None, help="time-to-first-token column"),
        inter_token_column: str | None = typer.Option(None, help="inter-token latency column"),
        prompt_tokens_column: str | None = typer.Option(None, help="input-token count column"),
        output_tokens_column: str | None = typer.Option(None, help="output-token count column"),
        timestamp_marks: TimestampMarks = typer.Option(
            TimestampMarks.completion,
            help="what the timestamp records; 'arrival' stores start + latency",
        ),
        file_format: LogFormat | None = typer.Option(
            None, "--format", help="file format (default: from the extension)"
        ),
        max_future_skew_s: float = typer.Option(
            MAX_FUTURE_SKEW_S, min=0, max=86400, help=FUTURE_SKEW_HELP
        ),
    ) -> None:
        """Import a per-request log (exact latencies) into the ``requests`` table."""
        options = RequestLogOptions(
            model_column=model_column,
            latency_column=latency_column,
            timestamp_column=timestamp_column,
            latency_unit="ms" if latency_unit is LatencyUnit.ms else "s",
            status_column=status_column,
            ttft_column=ttft_column,
            inter_token_column=inter_token_column,
            prompt_tokens_column=prompt_tokens_column,
            output_tokens_column=output_tokens_column,
            timestamp_marks="arrival"
            if timestamp_marks is TimestampMarks.arrival
            else "completion",
            file_format=None if file_format is None else _FORMATS[file_format],
        )
        run_cli(
            lambda: finish(
                ingest_requests_once(
                    file, db, options, datetime.now(UTC), max_future_skew_s=max_future_skew_s
                )
            )
        )

    def server_command(kind: str) -> None:
        @app.command(
            kind, help=f"Scrape one {kind} server's /metrics URL N+1 times; store N windows."
        )
        def ingest_server(
            url: str = typer.Argument(..., help=f"{kind} metrics URL, e.g. http://host/metrics"),
            *,
            db: Path = typer.Option(
                ..., "--db", help="DuckDB file (created when absent; its folder must exist)"
            ),
            interval_s: float = typer.Option(ScrapeSettings().interval_s, help=_help("interval_s")),
            windows: int = typer.Option(ScrapeSettings().windows, help=_help("windows")),
            timeout_s: float = typer.Option(ScrapeSettings().timeout_s, help=_help("timeout_s")),
            node: str | None = typer.Option(None, help="node of the server, stamped on rows"),
            namespace: str | None = typer.Option(None, help="namespace of the server's pod"),
            pod: str | None = typer.Option(None, help="the server's pod"),
        ) -> None:
            def go() -> None:
                from sits_observe.collectors.http import new_client

                settings = _settings(interval_s, windows, timeout_s)
                with new_client(settings.timeout_s) as client:
                    collector = new_collector(
                        kind, url, node=node, namespace=namespace, pod=pod, client=client
                    )
                    scrape_windows(collector, db, settings, threading.Event())

            run_cli(go)

    for engine in ENGINES:
        server_command(engine)
