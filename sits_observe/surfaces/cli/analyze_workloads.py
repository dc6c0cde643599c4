"""CLI: ``interference``, ``baseline``, ``classes``, ``timeline`` and ``capacity``.

This module is the composition root of the workload analytics: it opens the store read-only,
picks the time window, builds the settings from flags (help texts from the settings' field
descriptions), calls the pure functions in ``sits_observe.analytics`` and prints a table, JSON
or CSV. ``--since DUR`` counts back from the newest row of the table the command reads (not
from the wall clock), so a copied database answers as it did when it was copied. An empty
table is an error that names the table and the command that fills it.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import Any

import polars as pl
import typer

from sits_observe.analytics.baselines import (
    DEFAULT_KEYS,
    compare_runs,
    exclusion_reason,
    load_metric,
)
from sits_observe.analytics.capacity import (
    load_pool_inputs,
    measured_safe_max,
    pareto_frontier,
    pool_latency,
    replica_shapes,
    size_model,
)
from sits_observe.analytics.classes import (
    class_report,
    elastic_quota,
    elastic_signals,
    load_class_inputs,
    tier_quota,
)
from sits_observe.analytics.heatmap import heatmap_settings
from sits_observe.analytics.interference import (
    SAMPLE_COLUMNS,
    interference_report,
    load_gpu_samples,
)
from sits_observe.analytics.settings import (
    BaselineSettings,
    ClassSettings,
    InterferenceSettings,
    TimelineSettings,
    find_link_capacity,
    load_price_table,
)
from sits_observe.analytics.timeline import load_pods, pod_timelines, summarize
from sits_observe.errors import ConfigError, SitsError
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

_DB = typer.Option(..., "--db", help="DuckDB file to read")
_FORMAT = typer.Option(OutputFormat.table, "--format", help="table, json or csv")
_SINCE = typer.Option(
    None, "--since", help="only the last DUR before the newest row, e.g. 90s, 15m, 2h, 7d"
)

#: How each table gets filled, for the "empty table" message.
FILLED_BY = {
    "gpu_samples": "`sits-observe ingest dcgm`, the node agent or `sits-observe demo`",
    "gpu_processes": "the node agent's NVML collector",
    "container_samples": "`sits-observe ingest cgroup` or the node agent",
    "requests": "`sits-observe ingest requests` or `sits-observe demo`",
    "server_windows": "`sits-observe ingest vllm` / `ingest triton`",
    "pods": "`sits-observe ingest k8s` (or `serve` / `demo`, which snapshot the inventory)",
    "nodes": "`sits-observe ingest k8s` (or `serve` / `demo`, which snapshot the inventory)",
}


def parse_time(text: str, flag: str) -> datetime:
    """An ISO-8601 time (``2026-01-02T03:04:05``, ``...Z`` or with an offset) as naive UTC."""
    try:
        value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError as exc:
        raise ConfigError(
            f"{flag} {text!r} is not an ISO-8601 time (2026-01-02T03:04:05Z)"
        ) from exc
    return value.astimezone(UTC).replace(tzinfo=None) if value.tzinfo else value


def parse_range(text: str) -> tuple[str, datetime, datetime]:
    """``[LABEL=]START..END`` -> (label, start, end); the label defaults to the text."""
    label, _, span = (
        text.rpartition("=") if "=" in text.split("..", maxsplit=1)[0] else ("", "", text)
    )
    start, sep, end = span.partition("..")
    if not sep:
        raise ConfigError(f"--compare {text!r}: use [LABEL=]START..END with ISO-8601 times")
    lo, hi = parse_time(start, "--compare"), parse_time(end, "--compare")
    if hi <= lo:
        raise ConfigError(f"--compare {text!r}: the end must be after the start")
    return label or span, lo, hi


def require_rows(store: Store, table: str) -> None:
    """Raise a clear error when ``table`` is empty."""
    if store.count(table) == 0:
        raise SitsError(f"table {table} in {store.path} is empty; fill it with {FILLED_BY[table]}")


def window_start(
    store: Store, table: str, since: str | None, column: str = "ts"
) -> datetime | None:
    """``since`` before the newest ``column`` of ``table`` (None = everything)."""
    if since is None:
        return None
    seconds = parse_duration_s(since)
    newest = store.scalar(f"SELECT max({column}) FROM {table}")
    if newest is None:
        return None
    start: datetime = newest - timedelta(seconds=seconds)
    err.print(f"window: {start.isoformat(sep=' ')} .. {newest.isoformat(sep=' ')} UTC")
    return start


def _key_values(items: Sequence[str], flag: str) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"{flag} {item!r}: use KEY=VALUE")
        out[key] = value
    return out


def _float(text: str, flag: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ConfigError(f"{flag}: {text!r} is not a number") from None


def _json_default(value: object) -> object:
    if isinstance(value, datetime):
        return value.isoformat() + ("Z" if value.tzinfo is None else "")
    return str(value)


def print_json(data: object) -> None:
    """Pretty JSON on stdout (times as ISO-8601 UTC)."""
    sys.stdout.write(json.dumps(data, default=_json_default, indent=2) + "\n")


def _print(
    rows: list[dict[str, Any]],
    fmt: OutputFormat,
    title: str,
    columns: Sequence[str] | None = None,
) -> None:
    """JSON and CSV carry every field; a table shows ``columns`` (default: all) to stay legible."""
    if fmt is OutputFormat.json:
        print_json(rows)
        return
    flat = _flat(rows)
    if fmt is OutputFormat.table and columns is not None:
        flat = [{c: row.get(c) for c in columns} for row in flat]
    print_rows(flat, fmt, title=title)


def _settings(model: type[Any], **values: Any) -> Any:
    """Build a settings model from flags; a ``ConfigError`` names the bad values."""
    from pydantic import ValidationError

    try:
        return model(**{k: v for k, v in values.items() if v is not None})
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'settings'}: {e['msg']}" for e in exc.errors()
        )
        raise ConfigError(problems) from exc


def _help(model: type[Any], field: str) -> str:
    return str(model.model_fields[field].description)


# -- rows --------------------------------------------------------------------------------------


def _r(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits) + 0.0  # + 0.0 turns -0.0 into 0.0


class Level(StrEnum):
    """Which rows a command prints."""

    node = "node"
    gpu = "gpu"


def register(app: typer.Typer) -> None:
    """Add the workload analytics commands to ``app``."""
    _register_interference(app)
    _register_baseline(app)
    _register_classes(app)
    _register_timeline(app)
    _register_capacity(app)


# -- interference ------------------------------------------------------------------------------


def _register_interference(app: typer.Typer) -> None:
    defaults = InterferenceSettings()

    @app.command("interference")
    def interference(
        *,
        db: Path | None = typer.Option(None, "--db", help="DuckDB file (or --promql-url)"),
        promql_url: str | None = PROMQL_URL,
        promql_step_s: float | None = PROMQL_STEP_S,
        promql_matchers: str = PROMQL_MATCHERS,
        since: str | None = _SINCE,
        node: str | None = typer.Option(None, "--node", help="one node only"),
        numa_miss: list[str] = typer.Option(
            [], "--numa-miss", help="NODE=RATIO: a NUMA miss ratio (0-1); none is collected yet"
        ),
        sync_delays: list[str] = typer.Option(
            [],
            "--sync-delays",
            help="NODE=MS,MS,...: sync delays in time order, ms; nothing measures them yet",
        ),
        scope: str = typer.Option(
            defaults.nvlink_conflict_scope,
            "--nvlink-scope",
            help=_help(InterferenceSettings, "nvlink_conflict_scope"),
        ),
        threshold: float = typer.Option(
            defaults.threshold_ratio,
            "--threshold",
            help=_help(InterferenceSettings, "threshold_ratio"),
        ),
        level: Level = typer.Option(
            Level.node, "--level", help="rows for csv: node or gpu (table and json show both)"
        ),
        fmt: OutputFormat = _FORMAT,
    ) -> None:
        """Interference score per node and GPU, and the TopologyManager recommendation."""

        def go() -> None:
            settings = _settings(
                InterferenceSettings, nvlink_conflict_scope=scope, threshold_ratio=threshold
            )
            numa = {
                k: _float(v, "--numa-miss")
                for k, v in _key_values(numa_miss, "--numa-miss").items()
            }
            delays = {
                k: [_float(x, "--sync-delays") / 1000 for x in v.split(",") if x.strip()]
                for k, v in _key_values(sync_delays, "--sync-delays").items()
            }
            check_db_or_url(db, promql_url)
            if promql_url is not None:
                samples = _promql_samples(promql_url, since, promql_step_s, promql_matchers, node)
            else:
                assert db is not None
                with Store.open(db, read_only=True) as store:
                    require_rows(store, "gpu_samples")
                    start = window_start(store, "gpu_samples", since)
                    samples = load_gpu_samples(store, start, node=node)
            if samples.height == 0:
                raise SitsError(f"no gpu_samples rows for node {node!r} in the window")
            report = interference_report(
                samples, settings, numa_miss_ratio=numa, sync_delays_s=delays
            )
            nodes = [_node_row(n) for n in report.nodes]
            gpus = [_gpu_row(g) for g in report.gpus]
            if fmt is OutputFormat.json:
                print_json({"nodes": nodes, "gpus": gpus})
            elif fmt is OutputFormat.csv:
                print_rows(_flat(nodes if level is Level.node else gpus), fmt)
            else:
                _print(nodes, fmt, "interference per node", _NODE_COLUMNS)
                _print(gpus, fmt, "interference per GPU", _GPU_COLUMNS)

        run_cli(go)


def _promql_samples(
    url: str, since: str | None, step_s: float | None, matchers: str, node: str | None
) -> pl.DataFrame:
    """The interference report's :data:`SAMPLE_COLUMNS` read through PromQL."""
    lo, hi = promql_window(since)
    with open_promql(url) as client:
        table = PromQLGpuSource(client, matchers=matchers).gpu_samples(
            lo, hi, step_s=step_s, columns=list(SAMPLE_COLUMNS[1:])
        )
    frame = pl.DataFrame(table.select(list(SAMPLE_COLUMNS)))
    return frame if node is None else frame.filter(pl.col("node") == node)


_SCORE_COLUMNS = ("score", "bandwidth_util_ratio", "nvlink_conflict_ratio", "numa_miss_ratio")
_NODE_COLUMNS = ("node", "gpus", *_SCORE_COLUMNS, "recommendation", "reason")
_GPU_COLUMNS = ("node", "gpu_uuid", "pods", "bandwidth_source", *_SCORE_COLUMNS, "missing_inputs")


def _score_fields(score: Any) -> dict[str, Any]:
    return {
        "score": _r(score.score),
        "bandwidth_util_ratio": _r(score.bandwidth_util_ratio),
        "nvlink_conflict_ratio": _r(score.nvlink_conflict_ratio),
        "numa_miss_ratio": _r(score.numa_miss_ratio),
        "missing_inputs": list(score.missing_inputs),
    }


def _node_row(n: Any) -> dict[str, Any]:
    return {
        "node": n.node,
        "gpus": n.gpus,
        **_score_fields(n.score),
        "max_gpu_score": _r(n.max_gpu_score),
        "hottest_gpu_uuid": n.hottest_gpu_uuid,
        "sync_delays_seen": n.sync_delays_seen,
        "recommendation": n.recommendation.policy,
        "partial_data": n.recommendation.partial_data,
        "reason": n.recommendation.reason,
    }


def _gpu_row(g: Any) -> dict[str, Any]:
    return {
        "node": g.node,
        "gpu_uuid": g.gpu_uuid,
        "model_name": g.model_name,
        "samples": g.samples,
        "pods": list(g.pods),
        "bandwidth_source": g.bandwidth_source,
        "nvlink_capacity_bytes_per_s": g.nvlink_capacity_bytes_per_s,
        **_score_fields(g.score),
        "first_ts": g.first_ts,
        "last_ts": g.last_ts,
    }


def _flat(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Lists joined with commas, for tables and CSV."""
    return [
        {k: ",".join(map(str, v)) if isinstance(v, list) else v for k, v in row.items()}
        for row in rows
    ]


# -- baseline ----------------------------------------------------------------------------------


def _register_baseline(app: typer.Typer) -> None:
    defaults = BaselineSettings()

    @app.command("baseline")
    def baseline(
        *,
        db: Path = _DB,
        table: str = typer.Option(
            "gpu_samples", "--table", help="gpu_samples, container_samples, requests, ..."
        ),
        metric: str = typer.Option("gpu_util_ratio", "--metric", help="numeric column"),
        by: str | None = typer.Option(
            None, "--by", help="series key columns, comma-separated (default per table)"
        ),
        since: str | None = _SINCE,
        compare: list[str] = typer.Option(
            [],
            "--compare",
            help="[LABEL=]START..END (ISO-8601 UTC), repeat for runs side by side (ablation)",
        ),
        window_s: float = typer.Option(
            defaults.window_s, "--window-s", help=_help(BaselineSettings, "window_s")
        ),
        sigma_k: float = typer.Option(
            defaults.sigma_k, "--sigma-k", help=_help(BaselineSettings, "sigma_k")
        ),
        min_window_samples: int = typer.Option(
            defaults.min_window_samples,
            "--min-window-samples",
            help=_help(BaselineSettings, "min_window_samples"),
        ),
        fmt: OutputFormat = _FORMAT,
    ) -> None:
        """Noise-isolated baselines (2.5 sigma of the 60 s window), optionally run by run."""

        def go() -> None:
            settings = _settings(
                BaselineSettings,
                window_s=window_s,
                sigma_k=sigma_k,
                min_window_samples=min_window_samples,
            )
            if table not in DEFAULT_KEYS:
                raise ConfigError(f"--table {table!r}: choose one of {', '.join(DEFAULT_KEYS)}")
            keys = (
                tuple(k.strip() for k in by.split(",") if k.strip())
                if by is not None
                else DEFAULT_KEYS[table]
            )
            if compare and since is not None:
                raise ConfigError("--since and --compare exclude each other; give one")
            runs = [parse_range(c) for c in compare]
            with Store.open(db, read_only=True) as store:
                require_rows(store, table)
                try:
                    if runs:
                        frames = [
                            (label, load_metric(store, table, metric, keys, since=lo, until=hi))
                            for label, lo, hi in runs
                        ]
                    else:
                        start = window_start(store, table, since)
                        frames = [("all", load_metric(store, table, metric, keys, since=start))]
                except KeyError as exc:
                    raise ConfigError(str(exc.args[0])) from exc
            if all(f.height == 0 for _, f in frames):
                raise SitsError(f"no {table} rows in the chosen window(s)")
            result = compare_runs(frames, metric, keys, settings)
            rows = [
                {
                    "run": b.run,
                    **b.group_dict(),
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
                for b in result
            ]
            columns = (
                "run",
                *dict.fromkeys(keys),
                "mean",
                "p50",
                "p95",
                "samples_kept",
                "samples_excluded",
                "samples_unchecked",
                "mean_change_ratio",
            )
            _print(rows, fmt, f"baseline of {table}.{metric}", columns)
            if fmt is OutputFormat.table:
                err.print(f"excluded = {exclusion_reason(settings)}")

        run_cli(go)


# -- classes -----------------------------------------------------------------------------------


class ClassView(StrEnum):
    """What ``classes`` prints."""

    classes = "classes"
    elastic = "elastic"


class ClassLevel(StrEnum):
    """Rows per pod or per workload."""

    pod = "pod"
    workload = "workload"


def _register_classes(app: typer.Typer) -> None:
    @app.command("classes")
    def classes(
        *,
        db: Path = _DB,
        by: ClassLevel = typer.Option(ClassLevel.pod, "--by", help="pod or workload"),
        since: str | None = _SINCE,
        fragmentation_ratio: float | None = typer.Option(
            None,
            "--fragmentation-ratio",
            help="cluster fragmentation (0-1, e.g. from `fragmentation --db`); decides preemption",
        ),
        view: ClassView = typer.Option(
            ClassView.classes,
            "--view",
            help="classes (memory class, time slice, QoS, priority) or elastic (per GPU, last 5 s)",
        ),
        tier: str = typer.Option(
            "silver", "--tier", help="QoS tier whose quotas --view elastic tests"
        ),
        fmt: OutputFormat = _FORMAT,
    ) -> None:
        """Workload classes: memory sensitivity, time slice, QoS sharing, priority, elastic rule."""

        def go() -> None:
            settings = ClassSettings()
            if fragmentation_ratio is not None and not 0 <= fragmentation_ratio <= 1:
                raise ConfigError(
                    f"--fragmentation-ratio {fragmentation_ratio:g}: give a ratio from 0 to 1"
                )
            with Store.open(db, read_only=True) as store:
                if view is ClassView.elastic:
                    require_rows(store, "gpu_samples")
                    rows = _elastic_rows(store, tier, settings)
                    title = f"elastic rule ({tier} tier, last {settings.elastic_window_s:g} s)"
                    _print(rows, fmt, title, _ELASTIC_COLUMNS)
                    return
                require_rows(store, "pods")
                start = window_start(store, "gpu_samples", since)
                pods, memory, requests, gpu_mem = load_class_inputs(store, since=start)
            report = class_report(
                pods,
                memory,
                requests,
                settings,
                by="workload" if by is ClassLevel.workload else "pod",
                fragmentation_ratio=fragmentation_ratio,
                gpu_memory_bytes=gpu_mem,
            )
            if not report:
                raise SitsError(
                    "no pod requests a GPU or has GPU memory measured; gpu_samples need pod "
                    "labels (dcgm-exporter with the kubelet pod-resources mount)"
                )
            _print(
                [_class_row(w) for w in report],
                fmt,
                f"workload classes per {by.value}",
                _CLASS_COLUMNS,
            )

        run_cli(go)


_CLASS_COLUMNS = (
    "namespace",
    "name",
    "peak_gpu_memory_bytes",
    "memory_class",
    "qos_class",
    "exclusive_gpu",
    "p95_latency_s",
    "time_slice_ms",
    "sla_violation_rate",
    "priority_class",
    "proposed_priority_class",
    "preemption_policy",
)


def _class_row(w: Any) -> dict[str, Any]:
    return {
        "namespace": w.namespace,
        "name": w.name,
        "pods": w.pods,
        "qos_class": w.qos_class,
        "gpu_request": w.gpu_request,
        "peak_gpu_memory_bytes": w.peak_gpu_memory_bytes,
        "memory_source": w.memory_source,
        "shared_gpu": w.shared_gpu,
        "memory_class": w.memory_class,
        "fitting_tier": w.fitting_tier,
        "exclusive_gpu": w.sharing.exclusive,
        "gpu_memory_share_ratio": w.sharing.memory_share_ratio,
        "requests": w.requests,
        "p95_latency_s": _r(w.p95_latency_s, 6),
        "sequence_p95_tokens": w.sequence_p95_tokens,
        "time_slice_ms": round(w.time_slice.slice_s * 1000, 3),
        "time_slice_rule": w.time_slice.rule,
        "sla_p99_s": w.sla_p99_s,
        "sla_violation_rate": _r(w.sla_violation_rate),
        "priority_class": w.priority.current,
        "proposed_priority_class": w.priority.proposed,
        "preemption_policy": w.priority.preemption_policy,
        "priority_reason": w.priority.reason,
    }


_ELASTIC_COLUMNS = (
    "node",
    "gpu_uuid",
    "gpu_util_ratio",
    "link_saturation_ratio",
    "triggered",
    "proposed_memory_quota_bytes",
    "proposed_bandwidth_quota_bytes_per_s",
)
_ELASTIC_SQL = (
    "SELECT ts, node, gpu_uuid, model_name, pod, gpu_util_ratio, fb_used_bytes, "
    "nvlink_tx_bytes_per_s, nvlink_rx_bytes_per_s, pcie_tx_bytes_per_s, pcie_rx_bytes_per_s "
    "FROM gpu_samples WHERE gpu_uuid IS NOT NULL "
    "AND ts > (SELECT max(ts) FROM gpu_samples) - to_microseconds(?::BIGINT)"
)


def _elastic_rows(store: Store, tier: str, settings: ClassSettings) -> list[dict[str, Any]]:
    try:
        quota = tier_quota(tier, settings)
    except KeyError as exc:
        raise ConfigError(str(exc.args[0])) from exc
    window_us = round(settings.elastic_window_s * 1_000_000)
    frame = pl.DataFrame(store.query(_ELASTIC_SQL, [window_us]))
    rows = []
    for (gpu,), part in sorted(frame.partition_by(["gpu_uuid"], as_dict=True).items()):
        series = part.group_by("ts").agg(pl.all().exclude("ts").first())
        first = series.row(0, named=True)
        link = find_link_capacity(InterferenceSettings().links, first["model_name"])
        signals = elastic_signals(series, link, settings)
        used = series.sort("ts").get_column("fb_used_bytes").drop_nulls()
        minimum = int(used[-1]) if used.len() else 0
        hw_max = (
            (link.nvlink_bytes_per_s or link.pcie_bytes_per_s)
            if link is not None
            else quota.bandwidth_bytes_per_s
        )
        decision = elastic_quota(
            quota.memory_bytes,
            quota.bandwidth_bytes_per_s,
            signals,
            settings,
            memory_minimum_bytes=minimum,
            bandwidth_maximum_bytes_per_s=hw_max,
        )
        pods = sorted(part.get_column("pod").drop_nulls().unique().to_list())
        rows.append(
            {
                "node": first["node"],
                "gpu_uuid": gpu,
                "pods": ",".join(pods),
                "tier": tier.lower(),
                "samples": signals.samples,
                "gpu_util_ratio": _r(signals.gpu_util_ratio),
                "link_saturation_ratio": _r(signals.link_saturation_ratio),
                "memory_growth_bytes_per_s": _r(signals.memory_growth_bytes_per_s, 1),
                "link_bandwidth_variance": signals.link_bandwidth_variance,
                "triggered": decision.triggered,
                "memory_quota_bytes": quota.memory_bytes,
                "proposed_memory_quota_bytes": decision.memory_quota_bytes,
                "bandwidth_quota_bytes_per_s": quota.bandwidth_bytes_per_s,
                "proposed_bandwidth_quota_bytes_per_s": decision.bandwidth_quota_bytes_per_s,
                "reason": decision.reason,
            }
        )
    return rows


# -- timeline ----------------------------------------------------------------------------------


def _register_timeline(app: typer.Typer) -> None:
    @app.command("timeline")
    def timeline(
        *,
        db: Path = _DB,
        since: str | None = typer.Option(
            None, "--since", help="pods created in the last DUR before the newest creation"
        ),
        by: str = typer.Option(
            "namespace,workload", "--by", help="summary groups: namespace, workload, node"
        ),
        pods: bool = typer.Option(False, "--pods", help="one row per pod instead of a summary"),
        fmt: OutputFormat = _FORMAT,
    ) -> None:
        """Pod start timeline: created -> scheduled -> initialized -> ready, largest gap named."""

        def go() -> None:
            keys = tuple(k.strip() for k in by.split(",") if k.strip())
            bad = [k for k in keys if k not in ("namespace", "workload", "node")]
            if bad:
                raise ConfigError(f"--by {by!r}: choose from namespace, workload, node")
            with Store.open(db, read_only=True) as store:
                require_rows(store, "pods")
                start = window_start(store, "pods", since, column="created_at")
                frame = load_pods(store, since=start)
            timelines = pod_timelines(frame)
            if pods:
                rows = [
                    {
                        **{k: v for k, v in asdict(t).items() if not k.endswith("_at")},
                        "created_at": t.created_at,
                    }
                    for t in timelines
                ]
                _print(rows, fmt, "pod start timeline", _POD_COLUMNS)
                return
            summary = summarize(timelines, TimelineSettings(), by=keys)
            rows = [
                {
                    **dict(s.group),
                    "pods": s.pods,
                    "pods_ready": s.pods_ready,
                    "start_p50_s": _r(s.start_p50_s),
                    "start_p95_s": _r(s.start_p95_s),
                    "start_max_s": _r(s.start_max_s),
                    **{f"{stage}_p95_s": _r(v) for stage, v in s.stage_p95_s},
                    "dominant_stage": s.dominant_stage,
                    "comparison": s.comparison,
                }
                for s in summary
            ]
            columns = (*keys, "pods", "pods_ready", "start_p50_s", "start_p95_s", "dominant_stage")
            _print(rows, fmt, "pod start summary", columns)
            if fmt is OutputFormat.table and summary:
                err.print(summary[0].comparison.split("(", 1)[-1].rstrip(")"))

        run_cli(go)


_POD_COLUMNS = (
    "namespace",
    "pod",
    "scheduling_s",
    "init_s",
    "containers_s",
    "readiness_s",
    "total_s",
    "largest_stage",
)


# -- capacity ----------------------------------------------------------------------------------


def _register_capacity(app: typer.Typer) -> None:
    @app.command("capacity")
    def capacity(
        *,
        db: Path = _DB,
        prices: Path | None = typer.Option(
            None, "--prices", help="price table (YAML/JSON): pools with price_usd_per_hour"
        ),
        model: str | None = typer.Option(None, "--model", help="one model only"),
        since: str | None = _SINCE,
        target_rps: float | None = typer.Option(
            None, "--target-rps", help="request rate to size for, requests/s (needs --model)"
        ),
        slo_ms: float | None = typer.Option(
            None, "--slo-ms", help="P95 SLO, ms: measure the safe maximum per replica"
        ),
        safe_max_rps: list[str] = typer.Option(
            [],
            "--safe-max-rps",
            help="[GPU_PRODUCT=]RPS: safe maximum per replica instead of measuring it",
        ),
        gpus_per_replica: int | None = typer.Option(
            None, "--gpus-per-replica", help="GPUs per replica (default: the pods' gpu_request)"
        ),
        throughput_bin_rps: float = typer.Option(
            10.0, "--throughput-bin-rps", help="heatmap throughput bin for the measured safe max"
        ),
        window_s: float = typer.Option(1.0, "--window-s", help="heatmap window, seconds"),
        fmt: OutputFormat = _FORMAT,
    ) -> None:
        """Cost-latency Pareto frontier across node pools; GPUs needed for a target rate."""

        def go() -> None:
            if prices is None and target_rps is None:
                raise ConfigError("give --prices (Pareto frontier) and/or --target-rps (sizing)")
            if prices is not None and target_rps is not None and fmt is OutputFormat.csv:
                raise ConfigError("csv prints one table: give --prices or --target-rps, not both")
            result: dict[str, Any] = {}
            with Store.open(db, read_only=True) as store:
                require_rows(store, "requests")
                start = window_start(store, "requests", since)
                if prices is not None:
                    result.update(_frontier(store, prices, model, start))
                if target_rps is not None:
                    result.update(
                        _sizing(
                            store,
                            model=model,
                            target_rps=target_rps,
                            slo_ms=slo_ms,
                            safe_max_flags=safe_max_rps,
                            gpus_per_replica=gpus_per_replica,
                            start=start,
                            heatmap_flags=(throughput_bin_rps, window_s),
                        )
                    )
            _print_capacity(result, fmt)

        run_cli(go)


def _frontier(
    store: Store, prices: Path, model: str | None, start: datetime | None
) -> dict[str, Any]:
    table = load_price_table(prices)
    require_rows(store, "nodes")
    requests, nodes = load_pool_inputs(store, since=start, model=model)
    if requests.height == 0:
        which = f"of model {model!r} " if model is not None else ""
        raise SitsError(f"no successful requests {which}in the window (table requests)")
    points, unpriced = pool_latency(requests, nodes, table)
    if not points:
        raise SitsError(
            "no successful request ran on a priced node pool; check the pools' gpu_product / "
            f"node_labels against the nodes table (unpriced nodes: {', '.join(unpriced) or 'none'})"
        )
    frontier = [
        {
            "model": p.point.model,
            "pool": p.point.pool,
            "price_usd_per_hour": p.point.price_usd_per_hour,
            "latency_p95_s": _r(p.point.latency_p95_s, 6),
            "requests": p.point.requests,
            "nodes": p.point.nodes,
            "on_frontier": p.on_frontier,
            "dominated_by": p.dominated_by,
        }
        for p in pareto_frontier(points)
    ]
    return {"frontier": frontier, "unpriced_nodes": list(unpriced)}


def _sizing(
    store: Store,
    *,
    model: str | None,
    target_rps: float,
    slo_ms: float | None,
    safe_max_flags: list[str],
    gpus_per_replica: int | None,
    start: datetime | None,
    heatmap_flags: tuple[float, float],
) -> dict[str, Any]:
    if model is None:
        raise ConfigError("--target-rps needs --model: sizing is per model")
    if not target_rps >= 0:
        raise ConfigError(f"--target-rps {target_rps:g}: give a rate >= 0")
    if gpus_per_replica is not None and gpus_per_replica < 1:
        raise ConfigError("--gpus-per-replica must be at least 1")
    shapes = replica_shapes(store, model)
    per_replica = {p: (gpus_per_replica or s.gpus_per_replica or 1) for p, s in shapes.items()}
    notes: list[str] = []
    safe: dict[str | None, float] = {}
    if safe_max_flags:
        source: str = "--safe-max-rps"
        for item in safe_max_flags:
            product, sep, value = item.rpartition("=")
            rps = _float(value, "--safe-max-rps")
            if not rps > 0:
                raise ConfigError(f"--safe-max-rps {item!r}: the rate must be > 0")
            if sep:
                safe[product] = rps
            else:  # one value for every product the model runs on (or an unnamed one)
                safe.update({p: rps for p in shapes} or {None: rps})
    else:
        if slo_ms is None:
            raise ConfigError(
                "sizing needs --slo-ms (to measure the safe maximum) or --safe-max-rps"
            )
        if not shapes:
            raise SitsError(
                f"no requests of model {model!r} name their pod; pass --safe-max-rps instead"
            )
        hm = heatmap_settings(
            throughput_bin_rps=heatmap_flags[0], window_s=heatmap_flags[1], slo_ms=slo_ms
        )
        measured = measured_safe_max(store, model, slo_ms / 1000, shapes, since=start, heatmap=hm)
        source = f"measured (heatmap safe maximum at P95 <= {slo_ms:g} ms, lowest pod)"
        for gpu, m in measured.items():
            if m.safe_max_rps is not None:
                safe[gpu] = m.safe_max_rps
            notes.append(f"{gpu or 'unknown GPU'}: {m.note}")
    sizing = [
        {
            "model": s.model,
            "gpu_product": s.gpu_product,
            "target_rps": s.target_rps,
            "safe_max_rps_per_replica": s.safe_max_rps_per_replica,
            "gpus_per_replica": s.gpus_per_replica,
            "replicas": s.replicas,
            "gpus": s.gpus,
            "source": s.source,
        }
        for s in size_model(model, target_rps, safe, per_replica, source=source)
    ]
    return {"sizing": sizing, "notes": notes}


def _print_capacity(result: dict[str, Any], fmt: OutputFormat) -> None:
    if fmt is OutputFormat.json:
        print_json(result)
        return
    if "frontier" in result:
        print_rows(result["frontier"], fmt, title="cost-latency Pareto frontier")
        if result["unpriced_nodes"]:
            err.print(f"nodes in no priced pool: {', '.join(result['unpriced_nodes'])}")
    if "sizing" in result:
        print_rows(result["sizing"], fmt, title="GPUs needed")
        for note in result["notes"]:
            err.print(note)
