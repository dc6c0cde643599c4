"""Per-request log importer: CSV, JSONL or Parquet files -> ``requests`` rows with EXACT latencies.

The file is read with Polars, lazily and column-pruned, and every rule below is a vectorised
Polars operation (no per-row Python), so multi-million-row logs import at columnar speed. Text
timestamps are parsed one form at a time, each form only over the rows still unparsed and the
file's majority form first, so a file written in one form pays a single parsing pass.

Column mapping: the caller names the file's columns for model, latency and, optionally,
timestamp, status, TTFT, inter-token latency and token counts. A name the file lacks raises
:class:`~sits_observe.errors.ConfigError` listing the file's columns. ``latency_unit`` ("s" or
"ms") applies to the latency, TTFT and inter-token columns alike.

Rejected rows (never stored), counted by the FIRST reason that applies, in this order:
``missing model``, ``missing latency`` (null / empty), ``non-numeric latency``,
``NaN latency``, ``infinite latency``, ``negative latency``, ``missing timestamp``,
``epoch timestamp out of range``, ``unparseable timestamp``. An invalid optional value (TTFT,
inter-token, tokens: non-numeric, NaN, infinite, negative, fractional tokens) does not reject
the row: the value is stored as NULL and counted as ``<column>: invalid value stored as NULL``.
The first rejected record (1-based, in file order) is :attr:`RequestLogResult.first_rejected`.
A file Polars cannot read raises :class:`ParseError` with one line (see :mod:`.polars_errors`).

Timestamps (stored as naive UTC, microseconds):
- ISO-8601 ``YYYY-MM-DDTHH:MM[:SS[.fffffffff]]`` (``T`` or a space between date and time) or
  ``YYYY-MM-DD``; with a zone (``Z``, ``+02:00``, ``+0200``, ``+02``) converted to UTC; without
  one taken as UTC already (this covers ``YYYY-MM-DD HH:MM:SS``); digits past the microsecond
  are truncated;
- numbers (or numeric strings) are Unix epoch: below 1e11 seconds (1e11 s is the year 5138),
  from 1e11 up to 1e14 milliseconds (1e11 ms is 1973-03-03); negative or larger values are
  rejected (microsecond or nanosecond epochs are not guessed);
- typed (Parquet) datetimes: zoned ones converted to UTC, naive ones taken as UTC; dates as
  midnight UTC;
- no timestamp column: every row is stamped with the import time ``now`` (the CLI says so).
``timestamp_marks="arrival"`` says the column holds the request start; the stored ``ts``
(completion time, see the schema) is then start + latency.

Success rule (with a status column): a request is ``ok`` when its status is empty/null (an
empty error column), a number in [200, 300) (HTTP 2xx), or one of (case-insensitive)
``ok, success, successful, succeed, succeeded, true, completed, complete, done``. Anything else
(``429``, ``error``, ``FAILED``, ``PENDING``, ``false``, ``0`` ...) is a failure, stored with
``ok = false`` so analytics keep it out of latency quantiles. Without a status column every
stored row is ``ok``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Literal, NamedTuple, get_args

import polars as pl

from sits_observe.collectors.inference.request_times import SECONDS_PER_UNIT, parse_timestamps
from sits_observe.collectors.polars_errors import first_line, ragged_csv_line
from sits_observe.domain.collect import CollectResult
from sits_observe.domain.tables import REQUESTS, conform
from sits_observe.domain.times import utc_naive
from sits_observe.errors import CollectorError, ConfigError, ParseError

LogFormat = Literal["csv", "jsonl", "parquet"]
LatencyUnit = Literal["s", "ms"]
TimestampMarks = Literal["completion", "arrival"]

SUFFIX_FORMATS: dict[str, LogFormat] = {
    ".csv": "csv",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".parquet": "parquet",
    ".pq": "parquet",
}
SUCCESS_WORDS = (
    "",
    "ok",
    "success",
    "successful",
    "succeed",
    "succeeded",
    "true",
    "completed",
    "complete",
    "done",
)


@dataclass(frozen=True)
class ColumnMap:
    """Which file column feeds which ``requests`` column (None = not in the file)."""

    model: str
    latency: str
    timestamp: str | None = None
    status: str | None = None
    ttft: str | None = None
    inter_token: str | None = None
    prompt_tokens: str | None = None
    output_tokens: str | None = None
    namespace: str | None = None
    pod: str | None = None
    node: str | None = None

    def named(self) -> dict[str, str]:
        """role -> file column, for the roles that are mapped."""
        return {role: col for role, col in vars(self).items() if col is not None}


class RejectedRecord(NamedTuple):
    """The first record of a log that was not stored: 1-based number in file order, reason."""

    number: int
    reason: str


@dataclass(frozen=True)
class RequestLogResult(CollectResult):
    """A :class:`CollectResult` that also says which record was rejected first."""

    first_rejected: RejectedRecord | None = None


def detect_format(path: Path, file_format: str | None = None) -> LogFormat:
    """The log format: ``file_format`` when given, else from the file name's extension."""
    if file_format is not None:
        if file_format not in get_args(LogFormat):
            raise ConfigError(
                f"unknown request-log format {file_format!r}; valid: csv, jsonl, parquet"
            )
        return file_format  # type: ignore[return-value]
    suffix = path.suffix.lower()
    if suffix not in SUFFIX_FORMATS:
        raise ConfigError(
            f"cannot tell the format of {path.name!r} from its extension {suffix!r}; "
            f"use one of {', '.join(SUFFIX_FORMATS)} or pass the format (csv, jsonl, parquet)"
        )
    return SUFFIX_FORMATS[suffix]


def read_request_log(
    path: Path,
    *,
    model_column: str,
    latency_column: str,
    timestamp_column: str | None = None,
    latency_unit: LatencyUnit = "s",
    status_column: str | None = None,
    ttft_column: str | None = None,
    inter_token_column: str | None = None,
    prompt_tokens_column: str | None = None,
    output_tokens_column: str | None = None,
    timestamp_marks: TimestampMarks = "completion",
    file_format: LogFormat | None = None,
    source: str | None = None,
    now: datetime | None = None,
) -> RequestLogResult:
    """Read a request log into a ``requests`` table; see the module docstring for the rules.

    ``source`` defaults to the file name; ``now`` (default: the current UTC time) stamps rows
    when there is no timestamp column. Raises :class:`ConfigError` for an unknown column,
    format or unit, :class:`CollectorError` when the file cannot be opened and
    :class:`ParseError` when it is not valid CSV / JSON lines / Parquet.
    """
    columns = ColumnMap(
        model=model_column,
        latency=latency_column,
        timestamp=timestamp_column,
        status=status_column,
        ttft=ttft_column,
        inter_token=inter_token_column,
        prompt_tokens=prompt_tokens_column,
        output_tokens=output_tokens_column,
    )
    fmt = detect_format(path, file_format)
    try:
        return requests_from_frame(
            _scan(path, fmt),
            columns,
            label=f"{fmt} file {path}",
            latency_unit=latency_unit,
            timestamp_marks=timestamp_marks,
            source=source if source is not None else path.name,
            now=now,
        )
    except ParseError as exc:
        ragged = ragged_csv_line(path) if fmt == "csv" else None
        if ragged is None:
            raise
        raise ParseError(f"cannot read csv file {path}: {ragged}") from exc


def requests_from_frame(
    frame: pl.LazyFrame,
    columns: ColumnMap,
    *,
    label: str,
    source: str,
    latency_unit: LatencyUnit = "s",
    timestamp_marks: TimestampMarks = "completion",
    now: datetime | None = None,
) -> RequestLogResult:
    """Turn request records already opened as a frame into a ``requests`` table.

    The shared core of :func:`read_request_log` and the log tailer: ``label`` names the
    input in messages, ``source`` fills the ``source`` column.
    """
    if latency_unit not in SECONDS_PER_UNIT:
        raise ConfigError(f"unknown latency unit {latency_unit!r}; valid: s, ms")
    schema = _schema(frame, label)
    missing = [c for c in dict.fromkeys(columns.named().values()) if c not in schema]
    if missing:
        raise ConfigError(
            f"{label} has no column(s) {', '.join(map(repr, missing))}; "
            f"its columns are: {', '.join(schema.names())}"
        )
    stamp = utc_naive(now if now is not None else datetime.now().astimezone())
    scale = SECONDS_PER_UNIT[latency_unit]
    try:
        raw = frame.select(pl.col(c).alias(role) for role, c in columns.named().items()).collect()
    except (pl.exceptions.PolarsError, OSError) as exc:
        raise ParseError(f"cannot read {label}: {first_line(exc)}") from exc
    if columns.timestamp is not None:
        ts, out_of_range = parse_timestamps(raw.get_column("timestamp"))
        raw = raw.with_columns(ts.alias("_ts"), out_of_range.alias("_ts_out_of_range"))
    labels = [
        (_text(role, raw.schema[role]) if role in raw.schema else pl.lit(None, pl.String)).alias(
            role
        )
        for role in ("namespace", "pod", "node")
    ]
    table = raw.select([*_expressions(columns, raw.schema, scale, stamp, timestamp_marks), *labels])
    dropped = _count(table.get_column("_reason"))
    first = _first_rejected(table.get_column("_reason")) if dropped else None
    kept = table.filter(pl.col("_reason").is_null())
    kept, nulled = _null_invalid_optionals(kept, columns)
    dropped.update(nulled)
    out = kept.select(
        pl.col("ts"),
        pl.col("model"),
        pl.col("latency_s"),
        *[pl.col(c) for c in ("ttft_s", "inter_token_s", "prompt_tokens", "output_tokens")],
        pl.col("ok"),
        pl.col("status"),
        pl.col("namespace"),
        pl.col("pod"),
        pl.col("node"),
        pl.lit(source, pl.String).alias("source"),
    )
    table = conform(REQUESTS.name, out.to_arrow())
    return RequestLogResult({REQUESTS.name: table}, dropped, first_rejected=first)


# -- reading ----------------------------------------------------------------------------


def _scan(path: Path, fmt: LogFormat) -> pl.LazyFrame:
    if not path.is_file():
        raise CollectorError(f"request log {path} does not exist or is not a file")
    try:
        if fmt == "csv":
            # Everything as text: types are decided per column below, so one odd value late in
            # the file never aborts the read (it is rejected and counted instead).
            return pl.scan_csv(path, infer_schema=False)
        if fmt == "jsonl":
            return pl.scan_ndjson(path, infer_schema_length=None)
        return pl.scan_parquet(path)
    except (pl.exceptions.PolarsError, OSError) as exc:
        raise ParseError(f"cannot read {fmt} file {path}: {first_line(exc)}") from exc


def _schema(frame: pl.LazyFrame, label: str) -> pl.Schema:
    try:
        return frame.collect_schema()
    except (pl.exceptions.PolarsError, OSError) as exc:
        raise ParseError(f"cannot read the columns of {label}: {first_line(exc)}") from exc


def _count(reasons: pl.Series) -> Counter[str]:
    counts = reasons.drop_nulls().value_counts()
    return Counter(dict(zip(counts[reasons.name], counts["count"], strict=True)))


def _first_rejected(reasons: pl.Series) -> RejectedRecord | None:
    rejected = reasons.is_not_null().arg_true()
    if rejected.len() == 0:
        return None
    row = int(rejected[0])
    return RejectedRecord(row + 1, str(reasons[row]))


# -- per-column expressions ---------------------------------------------------------------


def _text(column: str, dtype: pl.DataType) -> pl.Expr:
    """The column as stripped text; empty text becomes null."""
    expr = pl.col(column)
    if dtype != pl.String:
        expr = expr.cast(pl.String, strict=False)
    expr = expr.str.strip_chars()
    return pl.when(expr == "").then(None).otherwise(expr)


def _number(column: str, dtype: pl.DataType) -> pl.Expr:
    """The column as Float64 (null where it is not a number)."""
    if dtype.is_numeric():
        return pl.col(column).cast(pl.Float64)
    if dtype == pl.String:
        return pl.col(column).str.strip_chars().cast(pl.Float64, strict=False)
    return pl.lit(None, pl.Float64)


def _blank(column: str, dtype: pl.DataType) -> pl.Expr:
    """True where the column holds nothing (null, or only whitespace)."""
    if dtype == pl.String:
        return pl.col(column).is_null() | (pl.col(column).str.strip_chars() == "")
    return pl.col(column).is_null()


def _ok(status: pl.Expr) -> pl.Expr:
    code = status.cast(pl.Float64, strict=False)
    return (
        status.is_null()
        | status.str.to_lowercase().is_in(SUCCESS_WORDS)
        | ((code >= 200) & (code < 300)).fill_null(False)
    )


def _expressions(
    columns: ColumnMap,
    schema: pl.Schema,
    scale: float,
    stamp: datetime,
    marks: TimestampMarks,
) -> list[pl.Expr]:
    """Output columns and the rejection reason, over the frame whose columns are role names."""
    latency = _number("latency", schema["latency"])
    model = _text("model", schema["model"])
    reason = (
        pl.when(model.is_null())
        .then(pl.lit("missing model"))
        .when(_blank("latency", schema["latency"]))
        .then(pl.lit("missing latency"))
        .when(latency.is_null())
        .then(pl.lit("non-numeric latency"))
        .when(latency.is_nan())
        .then(pl.lit("NaN latency"))
        .when(latency.is_infinite())
        .then(pl.lit("infinite latency"))
        .when(latency < 0)
        .then(pl.lit("negative latency"))
    )
    latency_s = latency * scale
    if columns.timestamp is None:
        ts = pl.lit(stamp, pl.Datetime("us"))
    else:
        ts = pl.col("_ts")
        reason = (
            reason.when(_blank("timestamp", schema["timestamp"]))
            .then(pl.lit("missing timestamp"))
            .when(pl.col("_ts_out_of_range"))
            .then(pl.lit("epoch timestamp out of range"))
            .when(ts.is_null())
            .then(pl.lit("unparseable timestamp"))
        )
        if marks == "arrival":
            ts = ts + pl.duration(microseconds=(latency_s * 1e6).round(0).cast(pl.Int64))
    if columns.status is None:
        status, ok = pl.lit(None, pl.String), pl.lit(True)
    else:
        status = _text("status", schema["status"])
        ok = _ok(status)
    exprs = [
        ts.alias("ts"),
        model.alias("model"),
        latency_s.alias("latency_s"),
        ok.alias("ok"),
        status.alias("status"),
        reason.otherwise(None).alias("_reason"),
    ]
    optional = {
        "ttft": ("ttft_s", scale),
        "inter_token": ("inter_token_s", scale),
        "prompt_tokens": ("prompt_tokens", 1.0),
        "output_tokens": ("output_tokens", 1.0),
    }
    for role, (out, factor) in optional.items():
        if role in schema:
            value = _number(role, schema[role]) * factor
            given = ~_blank(role, schema[role])
        else:
            value, given = pl.lit(None, pl.Float64), pl.lit(False)
        exprs += [value.alias(out), given.alias(f"_{out}_given")]
    return exprs


def _null_invalid_optionals(
    frame: pl.DataFrame, columns: ColumnMap
) -> tuple[pl.DataFrame, Counter[str]]:
    """NULL out invalid optional values of kept rows, counting them per file column."""
    nulled: Counter[str] = Counter()
    fixes: list[pl.Expr] = []
    checks = {
        "ttft_s": (columns.ttft, False),
        "inter_token_s": (columns.inter_token, False),
        "prompt_tokens": (columns.prompt_tokens, True),
        "output_tokens": (columns.output_tokens, True),
    }
    for out, (column, integral) in checks.items():
        value = pl.col(out)
        valid = value.is_not_null() & value.is_finite() & (value >= 0)
        if integral:
            valid = valid & (value == value.floor())
        bad = frame.select((pl.col(f"_{out}_given") & ~valid.fill_null(False)).sum()).item()
        if column is not None and bad:
            nulled[f"{column}: invalid value stored as NULL"] = int(bad)
        fixed = pl.when(valid).then(value).otherwise(None)
        fixes.append((fixed.cast(pl.Int64) if integral else fixed).alias(out))
    return frame.with_columns(fixes), nulled
