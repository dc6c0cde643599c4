"""Report ``baseline``: noise-isolated baselines of one metric per series, optionally run by
run (ablation).

A sample further than 2.5 sigma from the mean of the earlier samples of its series in a 60 s
sliding window is noise: excluded from the baseline and counted (docs/analytics/workloads.md).
``compare`` names runs as time ranges (``[LABEL=]START..END``); each run's baselines come side
by side, and every run after the first carries its mean's change against the first run's.
Runs are read within the report's window (``--since`` / ``--until``), like every report.
With ``--promql-url`` the series come from a Prometheus-compatible store (docs/scaling.md):
every table but ``requests``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from enum import StrEnum
from typing import Any

import polars as pl
import pyarrow as pa
from pydantic import Field, field_validator

from sits_observe.analytics.baselines import (
    DEFAULT_KEYS,
    Baseline,
    compare_runs,
    exclusion_reason,
    load_metric,
    metric_from_rows,
)
from sits_observe.analytics.settings import BaselineSettings
from sits_observe.analytics.source import SnapshotServerWindows
from sits_observe.domain.units import Unit
from sits_observe.errors import ConfigError, NoDataError, UnknownNameError
from sits_observe.reports.inventory.names import gpu_labels, gpu_labels_of
from sits_observe.reports.result import Column, Report, col, sorted_rows, table_of
from sits_observe.reports.spec import PromQLReader, ReportSpec, require_rows
from sits_observe.reports.window import Window, parse_time
from sits_observe.store import Store
from sits_observe.store.promql.source import (
    PromQLContainerSource,
    PromQLGpuSource,
    PromQLServerSource,
)


class BaselineTable(StrEnum):
    """The tables a baseline can be computed on."""

    gpu_samples = "gpu_samples"
    container_samples = "container_samples"
    requests = "requests"
    server_windows = "server_windows"


#: How each table gets filled, for the "empty table" message.
FILLED_BY = {
    BaselineTable.gpu_samples: "`sits-observe ingest dcgm`, the node agent or `sits-observe demo`",
    BaselineTable.container_samples: "`sits-observe ingest cgroup` or the node agent",
    BaselineTable.requests: "`sits-observe ingest requests` or `sits-observe demo`",
    BaselineTable.server_windows: "`sits-observe ingest <engine>` (vllm, triton, sglang, ...)",
}


def parse_run(text: str) -> tuple[str, datetime, datetime]:
    """``[LABEL=]START..END`` -> (label, start, end) as naive UTC; the label defaults to the
    range as written. A ``ValueError`` says what is wrong (the settings model reports it)."""
    head = text.split("..", maxsplit=1)[0]
    label, _, span = text.rpartition("=") if "=" in head else ("", "", text)
    start, sep, end = span.partition("..")
    if not sep:
        raise ValueError(f"{text!r}: use [LABEL=]START..END with ISO-8601 times")
    try:
        lo, hi = parse_time(start, "--compare"), parse_time(end, "--compare")
    except ConfigError as exc:  # the settings model reports it as one of its errors
        raise ValueError(str(exc)) from exc
    if hi <= lo:
        raise ValueError(f"{text!r}: the end must be after the start")
    return label or span, lo, hi


class BaselineQuery(BaselineSettings):
    """Settings of the ``baseline`` report."""

    table: BaselineTable = Field(BaselineTable.gpu_samples, description="table to read")
    metric: str = Field("gpu_util_ratio", min_length=1, description="numeric column of the table")
    by: str | None = Field(
        None,
        description="series key columns, comma-separated (default per table: gpu_samples "
        "node,gpu_uuid; container_samples namespace,pod,container; requests and "
        "server_windows model)",
    )
    compare: tuple[str, ...] = Field(
        (),
        description="[LABEL=]START..END (ISO-8601 UTC), repeat for runs side by side (ablation)",
    )

    @field_validator("compare")
    @classmethod
    def _check_runs(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for text in value:
            parse_run(text)
        return value

    def keys(self) -> tuple[str, ...]:
        """The series key columns (``by``, else the table's default)."""
        if self.by is None:
            return DEFAULT_KEYS[self.table.value]
        return tuple(k.strip() for k in self.by.split(",") if k.strip())

    def runs(self) -> list[tuple[str, datetime, datetime]]:
        """``(label, start, end)`` of every ``compare`` run."""
        return [parse_run(text) for text in self.compare]


def build(store: Store, window: Window, query: BaselineQuery) -> Report:
    """The ``baseline`` report over ``window``."""
    table, keys = query.table.value, query.keys()
    require_rows(store, window, table, FILLED_BY[query.table])

    def load(since: datetime | None, until: datetime) -> pl.DataFrame:
        return load_metric(store, table, query.metric, keys, since=since, until=until)

    labels = gpu_labels(store, window) if "gpu_uuid" in keys else {}
    return _report(window, query, load, lambda: labels)


def build_promql(reader: PromQLReader, window: Window, query: BaselineQuery) -> Report:
    """The ``baseline`` report over ``window`` of a PromQL store's series: ``gpu_samples``
    (dcgm-exporter families), ``container_samples`` (the agent's cgroup families) or
    ``server_windows`` (rebuilt from vLLM histograms); ``requests`` are DuckDB's only."""
    table, keys, metric = query.table.value, query.keys(), query.metric
    if query.table is BaselineTable.requests:
        raise ConfigError(
            "baseline --table requests needs --db or --service: exact per-request latencies "
            "are not in a PromQL store (use --table server_windows for histogram estimates)"
        )
    read = _promql_reader(reader, query.table, metric)
    seen: list[pa.Table] = []

    def load(since: datetime | None, until: datetime) -> pl.DataFrame:
        assert since is not None  # run_promql_report requires --since
        rows = read(since, until)
        seen.append(rows)
        return metric_from_rows(rows, table, metric, keys)

    def labels() -> Mapping[str, str]:
        gpu_rows = [t for t in seen if "gpu_index" in t.column_names]
        return gpu_labels_of(pa.concat_tables(gpu_rows)) if gpu_rows else {}

    return _report(window, query, load, labels)


def _promql_reader(
    reader: PromQLReader, table: BaselineTable, metric: str
) -> Callable[[datetime, datetime], pa.Table]:
    """``(since, until) -> rows`` of ``table`` from the PromQL store (every column of the
    table's schema; ``metric`` NULL where the store has no series for it)."""
    client, matchers, step_s = reader.client, reader.matchers, reader.step_s
    if table is BaselineTable.gpu_samples:
        gpus = PromQLGpuSource(client, matchers=matchers)
        return lambda lo, hi: gpus.gpu_samples(lo, hi, step_s=step_s, columns=[metric])
    if table is BaselineTable.container_samples:
        cgroups = PromQLContainerSource(client, matchers=matchers)
        return lambda lo, hi: cgroups.container_samples(lo, hi, step_s=step_s, columns=[metric])
    windows = SnapshotServerWindows(PromQLServerSource(client, matchers=matchers), step_s=step_s)
    return windows.server_windows


def _report(
    window: Window,
    query: BaselineQuery,
    load: Callable[[datetime | None, datetime], pl.DataFrame],
    labels_of: Callable[[], Mapping[str, str]],
) -> Report:
    table, keys = query.table.value, query.keys()
    notes: list[str] = []
    frames: list[tuple[str, pl.DataFrame]] = []
    try:
        if not query.compare:
            frames.append(("all", load(window.since, window.until)))
        for label, lo, hi in query.runs():
            since = lo if window.since is None else max(lo, window.since)
            until = min(hi, window.until)
            if (since, until) != (lo, hi):
                notes.append(f"run {label} is cut to the window {window.describe()}")
            frames.append((label, load(since, until)))
    except KeyError as exc:
        raise UnknownNameError(str(exc.args[0])) from exc
    if all(f.height == 0 for _, f in frames):
        where = f"the run(s) {', '.join(query.compare)}" if query.compare else "the window"
        raise NoDataError(f"no {table} rows to baseline in {where} ({window.describe()})")
    result = compare_runs(frames, query.metric, keys, query)
    labels: Mapping[str, str] = labels_of() if "gpu_uuid" in keys else {}
    # Runs in the order given, then each series by name (node, GPU, pod), numbers by value.
    order = {label: i for i, (label, _) in enumerate(frames)}
    rows = sorted(
        sorted_rows([_row(b, labels) for b in result], ("gpu", *keys)),
        key=lambda r: order.get(r["run"], len(order)),
    )
    unit = _unit(query.metric)
    main = table_of("baselines", f"baseline of {table}.{query.metric}", rows, _columns(query, unit))
    notes.append(f"excluded = {exclusion_reason(query)}")
    facts = {
        "table": table,
        "metric": query.metric,
        "keys": list(keys),
        "runs": [label for label, _ in frames],
        "sliding_window_s": query.sliding_window_s,
        "sigma_k": query.sigma_k,
        "min_window_samples": query.min_window_samples,
    }
    return Report("baseline", window, main, (), tuple(notes), facts)


def _unit(metric: str) -> Unit:
    """How the metric's values read, from its name's unit suffix."""
    for suffix, unit in (
        ("_ratio", Unit.ratio),
        ("_bytes", Unit.bytes),
        ("_bytes_per_s", Unit.bytes_per_s),
        ("_rps", Unit.rate),
        ("_s", Unit.seconds),
        ("_w", Unit.watts),
    ):
        if metric.endswith(suffix):
            return unit
    return Unit.number


def _columns(query: BaselineQuery, unit: Unit) -> list[Column]:
    keys = list(dict.fromkeys(query.keys()))
    columns: list[Column] = []
    if query.compare:
        columns.append(col("run", "run"))
    if "gpu_uuid" in keys:
        columns.append(col("gpu", "GPU"))
    for key in keys:
        hidden = key == "gpu_uuid" or (key == "node" and "gpu_uuid" in keys)
        columns.append(col(key, "GPU UUID" if key == "gpu_uuid" else key, wide=hidden))
    columns += [
        col("mean", "mean", unit),
        col("p50", "P50", unit),
        col("p95", "P95", unit),
        col("samples_kept", "kept", Unit.integer),
        col("samples_excluded", "excluded", Unit.integer),
        col("samples_unchecked", "unchecked", Unit.integer),
        col("samples_null", "null", Unit.integer, wide=True),
        col("first_ts", "first", Unit.time, wide=True),
        col("last_ts", "last", Unit.time, wide=True),
    ]
    if query.compare:
        columns.append(col("mean_change_ratio", "change", Unit.ratio))
    return columns


def _row(b: Baseline, labels: Mapping[str, str]) -> dict[str, Any]:
    group = b.group_dict()
    uuid = group.get("gpu_uuid") or ""
    return {
        "run": b.run,
        **({"gpu": labels.get(uuid, uuid) or None} if "gpu_uuid" in group else {}),
        **group,
        "metric": b.metric,
        "mean": b.mean,
        "p50": b.p50,
        "p95": b.p95,
        "samples_kept": b.samples_kept,
        "samples_excluded": b.samples_excluded,
        "samples_unchecked": b.samples_unchecked,
        "samples_null": b.samples_null,
        "exclusion_reason": b.exclusion_reason,
        "first_ts": b.first_ts,
        "last_ts": b.last_ts,
        "mean_change_ratio": b.mean_change_ratio,
    }


SPEC = ReportSpec(
    name="baseline",
    summary="Noise-isolated baselines of a metric per series (2.5 sigma of a 60 s sliding "
    "window), optionally run by run.",
    settings=BaselineQuery,
    reads=("gpu_samples", "container_samples", "requests", "server_windows"),
    build=build,
    promql=build_promql,
)
