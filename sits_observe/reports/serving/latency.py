"""Report ``latency``: P50 / P95 / P99 per model, pod, node or GPU, EXACT or ESTIMATES.

Exact quantiles come from the ``requests`` table (one row per request, DuckDB
``quantile_cont``: linear interpolation between order statistics, numpy's default);
estimates from ``server_windows`` (per scrape window, interpolated inside vLLM / Triton
histogram buckets, with the window's error bound), or, with ``--promql-url``, from the same
vLLM histograms in a Prometheus-compatible store (docs/scaling.md). The two are never mixed:
quantiles of different windows cannot be merged, so estimates are listed one row per window
(docs/analytics/latency.md). Times in seconds.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field

from sits_observe.analytics.serving.latency import (
    DEFAULT_QUANTILES,
    ESTIMATE_GROUPS,
    GroupBy,
    Metric,
    RequestSelection,
    explain_empty,
    groups_with_only_estimates,
    known_values,
)
from sits_observe.analytics.source import SnapshotServerWindows, estimate_windows_from
from sits_observe.domain.units import Unit
from sits_observe.errors import ConfigError, NoDataError
from sits_observe.reports.inventory.names import gpu_labels
from sits_observe.reports.result import Column, Report, col, table_of
from sits_observe.reports.serving.request_latency import exact_latency, latency_estimates, selection
from sits_observe.reports.spec import PromQLReader, ReportSpec, require_rows
from sits_observe.reports.window import Window
from sits_observe.store import Store
from sits_observe.store.promql.source import PromQLServerSource

FILLED_BY = {
    "requests": "`sits-observe ingest requests`, the node agent following a request log "
    "or `sits-observe demo`",
    "server_windows": "`sits-observe ingest <engine>` (vllm, sglang, ...) or the node agent",
}


class LatencyGroup(StrEnum):
    """What one row of ``latency`` covers."""

    model = "model"
    pod = "pod"
    node = "node"
    gpu = "gpu"


class LatencySource(StrEnum):
    """Where the latencies come from."""

    exact = "exact"
    estimate = "estimate"


class LatencyMetric(StrEnum):
    """Which latency of a request."""

    e2e = "e2e"
    ttft = "ttft"
    inter_token = "inter_token"


#: The group columns of the analytics (``requests`` / ``server_windows``) per ``--by``.
GROUP_COLUMNS: dict[LatencyGroup, GroupBy] = {
    LatencyGroup.model: "model",
    LatencyGroup.pod: "pod",
    LatencyGroup.node: "node",
    LatencyGroup.gpu: "gpu_uuid",
}
_METRICS: dict[LatencyMetric, Metric] = {
    LatencyMetric.e2e: "latency_s",
    LatencyMetric.ttft: "ttft_s",
    LatencyMetric.inter_token: "inter_token_s",
}


class LatencyQuery(BaseModel):
    """Settings of the ``latency`` report."""

    model_config = ConfigDict(frozen=True)

    by: LatencyGroup = Field(LatencyGroup.model, description="one row per model, pod, node or GPU")
    model: str | None = Field(None, description="only this model")
    include_failed: bool = Field(False, description="count failed requests (ok = false) too")
    source: LatencySource = Field(
        LatencySource.exact,
        description="exact: per-request latencies; estimate: per-window histogram estimates",
    )
    metric: LatencyMetric = Field(
        LatencyMetric.e2e, description="end-to-end, time to first token or inter-token latency"
    )

    def selection(self, window: Window) -> RequestSelection:
        """The requests (or windows) of ``window`` these settings select."""
        return selection(window, model=self.model, include_failed=self.include_failed)


def _key_columns(by: LatencyGroup) -> tuple[Column, ...]:
    if by is LatencyGroup.gpu:
        return (col("gpu", "GPU"), col("gpu_uuid", "GPU UUID", wide=True))
    return (col(by.value, by.value),)


def _exact_columns(by: LatencyGroup) -> tuple[Column, ...]:
    return (
        *_key_columns(by),
        col("count", "requests", Unit.integer),
        col("p50_s", "P50", Unit.seconds),
        col("p95_s", "P95", Unit.seconds),
        col("p99_s", "P99", Unit.seconds),
    )


def _estimate_columns(by: LatencyGroup) -> tuple[Column, ...]:
    return (
        *_key_columns(by),
        col("window_end", "window end", Unit.time),
        col("window_s", "window", Unit.seconds, wide=True),
        col("count", "requests", Unit.integer),
        col("p50_s", "P50 est", Unit.seconds),
        col("p95_s", "P95 est", Unit.seconds),
        col("p99_s", "P99 est", Unit.seconds),
        col("error_bound_s", "error +-", Unit.seconds),
        col("estimate", "estimate", Unit.flag, wide=True),
    )


def build(store: Store, window: Window, query: LatencyQuery) -> Report:
    """The ``latency`` report over ``window`` from the DuckDB store."""
    if query.source is LatencySource.estimate:
        return _estimates_report(window, query, _store_estimates(store, window, query), "duckdb")
    by = GROUP_COLUMNS[query.by]
    metric = _METRICS[query.metric]
    selection = query.selection(window)
    table = exact_latency(
        store,
        window,
        by=by,
        model=query.model,
        include_failed=query.include_failed,
        metric=metric,
    )
    if table.num_rows == 0:
        require_rows(store, window, "requests", FILLED_BY["requests"])
        raise NoDataError(explain_empty(store, selection, metric))
    only_estimates = groups_with_only_estimates(
        store, by=by, selection=selection, exact_groups=table.column(by).to_pylist()
    )
    notes = _null_group_note(table, query.by)
    if only_estimates:
        notes.append(
            f"no exact latencies for {query.by.value} {', '.join(only_estimates)}: only "
            "histogram estimates exist for them; see them with --source estimate"
        )
    if query.by is LatencyGroup.gpu:
        table = _with_gpu_labels(table, gpu_labels(store, window))
    title = f"{query.metric.value} latency, EXACT (linear interpolation) by {query.by.value}"
    main = table_of(query.by.value, title, table, _exact_columns(query.by))
    return Report("latency", window, main, (), tuple(notes), _facts(query, "duckdb"))


def build_promql(reader: PromQLReader, window: Window, query: LatencyQuery) -> Report:
    """The ``latency`` report from vLLM histogram series in a PromQL store (estimates only)."""
    if query.source is not LatencySource.estimate:
        raise ConfigError(
            "--promql-url has histogram estimates only (exact latencies live in the DuckDB "
            "requests table): add --source estimate"
        )
    by = _estimate_group(query)
    assert window.since is not None  # run_promql_report requires --since
    snapshots = PromQLServerSource(reader.client, matchers=reader.matchers)
    windows = SnapshotServerWindows(snapshots, step_s=reader.step_s).server_windows(
        window.since, window.until
    )
    table = estimate_windows_from(windows, by=by, selection=query.selection(window))
    if table.num_rows == 0:
        raise NoDataError(
            f"no vLLM histogram windows in the PromQL store for the selection in the window "
            f"{window.describe()}; check --promql-url, --promql-matchers and --since"
        )
    return _estimates_report(window, query, table, "promql")


def _estimate_group(query: LatencyQuery) -> GroupBy:
    by = GROUP_COLUMNS[query.by]
    if by not in ESTIMATE_GROUPS:
        allowed = ", ".join("gpu" if g == "gpu_uuid" else g for g in ESTIMATE_GROUPS)
        raise ConfigError(
            f"histogram estimates do not know the GPU: --by {query.by.value} needs --source "
            f"exact; with --source estimate use --by {allowed}"
        )
    if query.metric is not LatencyMetric.e2e:
        raise ConfigError("--source estimate has end-to-end latency only (--metric e2e)")
    return by


def _store_estimates(store: Store, window: Window, query: LatencyQuery) -> pa.Table:
    by = _estimate_group(query)
    table = latency_estimates(
        store, window, by=by, model=query.model, include_failed=query.include_failed
    )
    if table.num_rows == 0:
        require_rows(store, window, "server_windows", FILLED_BY["server_windows"])
        models = known_values(store, "model", "server_windows")
        raise NoDataError(
            "no histogram estimates (server_windows) match the selection; models with "
            f"estimates: {', '.join(models) or 'none'}"
        )
    return table


def _estimates_report(window: Window, query: LatencyQuery, table: pa.Table, store: str) -> Report:
    title = f"latency ESTIMATES from histogram buckets, per window, by {query.by.value}"
    main = table_of(query.by.value, title, table, _estimate_columns(query.by))
    notes = _null_group_note(table, query.by)
    notes.append(
        "estimates: the true window quantile lies within error +- of the value (inf: the "
        "rank fell in the +Inf bucket); windows in which nothing completed are left out"
    )
    return Report("latency", window, main, (), tuple(notes), _facts(query, store))


def _with_gpu_labels(table: pa.Table, labels: Mapping[str, str]) -> pa.Table:
    uuids = table.column("gpu_uuid").to_pylist()
    gpus = [None if u is None else labels.get(u, u) for u in uuids]
    return table.append_column("gpu", pa.array(gpus, pa.string()))


def _null_group_note(table: pa.Table, by: LatencyGroup) -> list[str]:
    if table.column(GROUP_COLUMNS[by]).null_count:
        return [f"requests without a recorded {by.value} form one group (its {by.value} empty)"]
    return []


def _facts(query: LatencyQuery, store: str) -> dict[str, Any]:
    return {
        "by": query.by.value,
        "source": query.source.value,
        "metric": query.metric.value,
        "model": query.model,
        "include_failed": query.include_failed,
        "quantiles": list(DEFAULT_QUANTILES),
        "store": store,
    }


SPEC = ReportSpec(
    name="latency",
    summary="Latency quantiles (P50, P95, P99) per model, pod, node or GPU: exact or estimates.",
    settings=LatencyQuery,
    reads=("requests", "server_windows"),
    build=build,
    promql=build_promql,
)
