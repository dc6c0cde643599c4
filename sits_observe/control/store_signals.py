"""Adapter: the latest signals in the store -> :class:`~sits_observe.control.inputs.Signals`.

This is the one place where the controller decides *what is measured how*; the rules never
see the store. Where an analytics function exists it is used (FGD node fragmentation,
the interference report); the rest is plain SQL over the sample tables:

- subjects: nodes of the latest ``nodes`` snapshot; pods of the latest ``pods`` snapshot that
  are bound to a node and not finished;
- ``fragmentation_ratio``: FGD's F_n(M) / R_n per node (:mod:`sits_observe.analytics.fgd`)
  over the live cluster (:func:`~sits_observe.analytics.fgd_live.live_cluster`); 0 for a node
  with no idle GPU; null when the store has no inventory to build it from;
- ``interference_score``: :func:`~sits_observe.analytics.interference.interference_report`
  over ``window_s`` of ``gpu_samples``; sync delays are not measured yet, so the best-effort
  fallback never fires from the store;
- ``peak_gpu_memory_bytes``: the largest ``fb_used_bytes`` of a GPU attributed to the pod over
  ``peak_window_s`` (dcgm-exporter's pod labels), else the largest per-pod sum of
  ``gpu_processes.used_memory_bytes`` (NVML);
- latency: exact P95 / P99 of the pod's ``requests`` over ``window_s`` (failed requests count
  as violations, not latencies), else the mean of ``server_windows`` estimates; the sequence
  length is the P95 of prompt + output tokens; the SLA is the namespace's P99 SLA
  (``ClassSettings.namespace_sla_p99_s``) and the violation rate the share of requests above
  it (or failed);
- elastic inputs: mean GPU utilisation and link saturation (traffic / the product's
  bidirectional NVLink or PCIe capacity) of the pod's GPUs over the last
  ``elastic_window_s`` (5 s) of samples;
- namespace peaks: per day, the largest sum of the namespace's pod requests (GPUs,
  milli-CPU, bytes) over any one inventory snapshot, for ``history_days``; namespaces that
  never requested a GPU get no quota advice unless ``gpu_namespaces_only`` is off.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta

import polars as pl
from pydantic import BaseModel, ConfigDict, Field

from sits_observe.analytics.fgd import fragmentation
from sits_observe.analytics.fgd_live import live_cluster
from sits_observe.analytics.fgd_workload import typical_pods
from sits_observe.analytics.interference import interference_report, load_gpu_samples
from sits_observe.analytics.settings import find_link_capacity
from sits_observe.control.inputs import CurrentState, Signals
from sits_observe.control.model import ACTIONS, Action
from sits_observe.control.settings import QUOTA_CPU, QUOTA_GPU, QUOTA_MEMORY, ControllerSettings
from sits_observe.errors import StoreError
from sits_observe.store.duck import Store, utc_naive

log = logging.getLogger(__name__)

_DONE = ("Succeeded", "Failed")


class StoreSignalSettings(BaseModel):
    """Windows the store adapter measures over."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    window_s: float = Field(
        300.0, gt=0, le=86_400, description="seconds of latency and interference samples used"
    )
    peak_window_s: float = Field(
        86_400.0, gt=0, le=30 * 86_400, description="seconds over which GPU memory peaks count"
    )
    fgd_since_s: float = Field(
        86_400.0, gt=0, description="seconds of pods the FGD typical workload is built from"
    )
    gpu_namespaces_only: bool = Field(
        True, description="give quota advice only to namespaces that requested a GPU"
    )


def _frame(store: Store, sql: str, params: list[object]) -> pl.DataFrame:
    return pl.DataFrame(store.query(sql, params))


_FRAG_SCHEMA = {"node": pl.String(), "fragmentation_ratio": pl.Float64()}
_INTERFERENCE_SCHEMA = {
    "node": pl.String(),
    "interference_score": pl.Float64(),
    "interference_partial": pl.Boolean(),
}


def _guarded(
    what: str, compute: Callable[[], pl.DataFrame], schema: dict[str, pl.DataType]
) -> pl.DataFrame:
    """``compute()``, or an empty frame when it fails: one broken signal family must not
    stop every other recommendation. The failure is logged with its traceback."""
    try:
        return compute()
    except (StoreError, ValueError):
        log.info("no %s signal: not enough data in the store", what)
    except Exception:  # an analytics bug: log it loudly, keep the other signals
        log.exception("computing the %s signal failed", what)
    return pl.DataFrame(schema=schema)


def _fragmentation(store: Store, window: StoreSignalSettings) -> pl.DataFrame:
    live = live_cluster(store, since_s=window.fgd_since_s)
    report = fragmentation(live.state, typical_pods(live.shapes))
    idle = report.node_idle_milli
    ratio = [
        float(f / i) if i > 0 else 0.0 for f, i in zip(report.node_frag_milli, idle, strict=True)
    ]
    return pl.DataFrame(
        {"node": list(live.state.node_names), "fragmentation_ratio": ratio}, schema=_FRAG_SCHEMA
    )


def _interference(
    store: Store, settings: ControllerSettings, at: datetime, window: StoreSignalSettings
) -> pl.DataFrame:
    samples = load_gpu_samples(store, at - timedelta(seconds=window.window_s), at)
    report = interference_report(samples, settings.interference)
    return pl.DataFrame(
        {
            "node": [n.node for n in report.nodes],
            "interference_score": [n.score.score for n in report.nodes],
            "interference_partial": [n.score.partial for n in report.nodes],
        },
        schema=_INTERFERENCE_SCHEMA,
    )


def _nodes(
    store: Store, settings: ControllerSettings, at: datetime, window: StoreSignalSettings
) -> pl.DataFrame:
    nodes = _frame(
        store,
        "SELECT DISTINCT node FROM nodes WHERE ts = (SELECT max(ts) FROM nodes WHERE ts <= ?) "
        "AND node IS NOT NULL ORDER BY node",
        [at],
    )
    if nodes.height == 0:
        return pl.DataFrame(schema={"node": pl.String()})
    frag = _guarded("fragmentation", lambda: _fragmentation(store, window), _FRAG_SCHEMA)
    scores = _guarded(
        "interference",
        lambda: _interference(store, settings, at, window),
        _INTERFERENCE_SCHEMA,
    )
    return nodes.join(frag, on="node", how="left").join(scores, on="node", how="left")


_PODS_SQL = """
SELECT namespace, pod, workload, node, priority_class, pod_uid
FROM pods
WHERE ts = (SELECT max(ts) FROM pods WHERE ts <= ?)
  AND node IS NOT NULL AND namespace IS NOT NULL AND pod IS NOT NULL
  AND coalesce(phase, '') NOT IN (?, ?)
"""

_PEAK_SQL = """
WITH dcgm AS (
    SELECT namespace, pod, max(fb_used_bytes) AS peak
    FROM gpu_samples WHERE ts > ? AND ts <= ? AND pod IS NOT NULL AND namespace IS NOT NULL
    GROUP BY ALL
), per_ts AS (
    SELECT pod_uid, ts, sum(used_memory_bytes) AS used
    FROM gpu_processes WHERE ts > ? AND ts <= ? AND pod_uid IS NOT NULL GROUP BY ALL
)
SELECT 'dcgm' AS src, namespace, pod, NULL AS pod_uid, peak FROM dcgm
UNION ALL
SELECT 'nvml', NULL, NULL, pod_uid, max(used) FROM per_ts GROUP BY pod_uid
"""

_LATENCY_SQL = """
SELECT namespace, pod,
       quantile_cont(latency_s, 0.95) FILTER (WHERE ok IS NOT FALSE) AS p95,
       quantile_cont(latency_s, 0.99) FILTER (WHERE ok IS NOT FALSE) AS p99,
       quantile_cont(coalesce(prompt_tokens, 0) + coalesce(output_tokens, 0), 0.95)
           FILTER (WHERE prompt_tokens IS NOT NULL OR output_tokens IS NOT NULL) AS seq,
       count(*) AS n,
       list(latency_s) FILTER (WHERE ok IS NOT FALSE) AS latencies,
       count(*) FILTER (WHERE ok IS FALSE) AS failed
FROM requests WHERE ts > ? AND ts <= ? AND pod IS NOT NULL AND namespace IS NOT NULL
GROUP BY ALL
"""

_WINDOWS_SQL = """
SELECT namespace, pod, avg(latency_p95_s) AS w_p95, avg(latency_p99_s) AS w_p99,
       list(latency_p99_s) AS w_p99s
FROM server_windows WHERE ts > ? AND ts <= ? AND pod IS NOT NULL AND namespace IS NOT NULL
GROUP BY ALL
"""

_ELASTIC_SQL = """
WITH last AS (SELECT gpu_uuid, max(ts) AS end_ts FROM gpu_samples
              WHERE ts > ? AND ts <= ? AND pod IS NOT NULL GROUP BY gpu_uuid)
SELECT s.namespace, s.pod, s.gpu_uuid, any_value(s.model_name) AS model_name,
       avg(s.gpu_util_ratio) AS util,
       avg(coalesce(s.nvlink_tx_bytes_per_s, 0) + coalesce(s.nvlink_rx_bytes_per_s, 0)) AS nv,
       bool_or(s.nvlink_tx_bytes_per_s IS NOT NULL OR s.nvlink_rx_bytes_per_s IS NOT NULL)
           AS has_nv,
       avg(coalesce(s.pcie_tx_bytes_per_s, 0) + coalesce(s.pcie_rx_bytes_per_s, 0)) AS pcie,
       bool_or(s.pcie_tx_bytes_per_s IS NOT NULL OR s.pcie_rx_bytes_per_s IS NOT NULL)
           AS has_pcie
FROM gpu_samples s JOIN last USING (gpu_uuid)
WHERE s.ts > last.end_ts - to_microseconds(?) AND s.ts <= last.end_ts
  AND s.pod IS NOT NULL AND s.namespace IS NOT NULL
GROUP BY s.namespace, s.pod, s.gpu_uuid
"""


def _elastic(
    store: Store, settings: ControllerSettings, at: datetime, window: StoreSignalSettings
) -> pl.DataFrame:
    window_us = int(settings.classes.elastic_window_s * 1e6)
    rows = _frame(store, _ELASTIC_SQL, [at - timedelta(seconds=window.window_s), at, window_us])
    schema = {
        "namespace": pl.String(),
        "pod": pl.String(),
        "gpu_util_ratio": pl.Float64(),
        "link_saturation_ratio": pl.Float64(),
        "link_capacity_bytes_per_s": pl.Float64(),
    }
    if rows.height == 0:
        return pl.DataFrame(schema=schema)
    sat: list[float | None] = []
    cap: list[float | None] = []
    for r in rows.iter_rows(named=True):
        link = find_link_capacity(settings.interference.links, r["model_name"])
        if link is None:
            sat.append(None)
            cap.append(None)
            continue
        ratios = []
        if r["has_pcie"]:
            ratios.append(r["pcie"] / link.pcie_bytes_per_s)
        if r["has_nv"] and link.nvlink_bytes_per_s > 0:
            ratios.append(r["nv"] / link.nvlink_bytes_per_s)
        sat.append(min(1.0, max(ratios)) if ratios else None)
        cap.append(link.nvlink_bytes_per_s or link.pcie_bytes_per_s)
    rows = rows.with_columns(
        pl.Series("link_saturation_ratio", sat, dtype=pl.Float64()),
        pl.Series("link_capacity_bytes_per_s", cap, dtype=pl.Float64()),
    )
    # A pod on several GPUs: its busiest GPU decides.
    return (
        rows.group_by("namespace", "pod")
        .agg(
            pl.col("util").max().alias("gpu_util_ratio"),
            pl.col("link_saturation_ratio").max(),
            pl.col("link_capacity_bytes_per_s").min(),
        )
        .cast(schema)  # type: ignore[arg-type]
    )


def _pods(
    store: Store, settings: ControllerSettings, at: datetime, window: StoreSignalSettings
) -> pl.DataFrame:
    pods = _frame(store, _PODS_SQL, [at, *_DONE])
    if pods.height == 0:
        return pods.drop("pod_uid")
    peak_from = at - timedelta(seconds=window.peak_window_s)
    peaks = _frame(store, _PEAK_SQL, [peak_from, at, peak_from, at])
    dcgm = peaks.filter(pl.col("src") == "dcgm").select(
        "namespace", "pod", pl.col("peak").alias("_dcgm")
    )
    nvml = peaks.filter(pl.col("src") == "nvml").select("pod_uid", pl.col("peak").alias("_nvml"))
    pods = pods.join(dcgm, on=["namespace", "pod"], how="left").join(nvml, on="pod_uid", how="left")
    since = at - timedelta(seconds=window.window_s)
    lat = _frame(store, _LATENCY_SQL, [since, at])
    win = _frame(store, _WINDOWS_SQL, [since, at])
    slas = settings.classes.namespace_sla_p99_s
    pods = (
        pods.join(lat, on=["namespace", "pod"], how="left")
        .join(win, on=["namespace", "pod"], how="left")
        .with_columns(
            pl.col("namespace")
            .replace_strict(slas, default=None, return_dtype=pl.Float64)
            .alias("sla_p99_s")
        )
    )
    rates: list[float | None] = []
    for r in pods.select("sla_p99_s", "latencies", "failed", "w_p99s").iter_rows(named=True):
        sla = r["sla_p99_s"]
        if sla is None:
            rates.append(None)
        elif r["latencies"] is not None or r["failed"]:
            values = r["latencies"] or []
            total = len(values) + int(r["failed"] or 0)
            bad = sum(1 for v in values if v is not None and v > sla) + int(r["failed"] or 0)
            rates.append(bad / total if total else None)
        elif r["w_p99s"]:
            windows = [v for v in r["w_p99s"] if v is not None]
            rates.append(sum(1 for v in windows if v > sla) / len(windows) if windows else None)
        else:
            rates.append(None)
    pods = pods.with_columns(
        pl.coalesce("_dcgm", "_nvml").cast(pl.Int64).alias("peak_gpu_memory_bytes"),
        pl.coalesce("p95", "w_p95").alias("p95_latency_s"),
        pl.coalesce("p99", "w_p99").alias("p99_latency_s"),
        pl.col("seq").cast(pl.Float64).alias("sequence_tokens"),
        pl.Series("sla_violation_ratio", rates, dtype=pl.Float64()),
    )
    pods = pods.join(_elastic(store, settings, at, window), on=["namespace", "pod"], how="left")
    return pods.select(
        "namespace",
        "pod",
        "workload",
        "node",
        "priority_class",
        "peak_gpu_memory_bytes",
        "p95_latency_s",
        "p99_latency_s",
        "sequence_tokens",
        "sla_p99_s",
        "sla_violation_ratio",
        "gpu_util_ratio",
        "link_saturation_ratio",
        "link_capacity_bytes_per_s",
    )


_PEAKS_SQL = """
WITH snap AS (
    SELECT namespace, ts,
           sum(coalesce(gpu_request, 0))::DOUBLE AS gpu,
           sum(coalesce(cpu_request_milli, 0))::DOUBLE AS cpu,
           sum(coalesce(memory_request_bytes, 0))::DOUBLE AS mem
    FROM pods
    WHERE ts > ? AND ts <= ? AND namespace IS NOT NULL AND coalesce(phase, '') NOT IN (?, ?)
    GROUP BY namespace, ts
), daily AS (
    SELECT namespace, date_trunc('day', ts) AS day, max(gpu) AS gpu, max(cpu) AS cpu,
           max(mem) AS mem
    FROM snap GROUP BY ALL
)
SELECT namespace, list(gpu ORDER BY day) AS gpu, list(cpu ORDER BY day) AS cpu,
       list(mem ORDER BY day) AS mem, max(gpu) AS max_gpu
FROM daily GROUP BY namespace ORDER BY namespace
"""


def _namespaces(
    store: Store, settings: ControllerSettings, at: datetime, window: StoreSignalSettings
) -> pl.DataFrame:
    since = at - timedelta(days=settings.quota.history_days)
    rows = _frame(store, _PEAKS_SQL, [since, at, *_DONE])
    if rows.height == 0:
        return pl.DataFrame()
    if window.gpu_namespaces_only:
        rows = rows.filter(pl.col("max_gpu") > 0)
    parts = [
        rows.select(
            "namespace", pl.lit(resource).alias("resource"), pl.col(column).alias("daily_peaks")
        )
        for resource, column in ((QUOTA_GPU, "gpu"), (QUOTA_CPU, "cpu"), (QUOTA_MEMORY, "mem"))
    ]
    return pl.concat(parts)


def signals_from_store(
    store: Store,
    at: datetime,
    settings: ControllerSettings,
    window: StoreSignalSettings | None = None,
) -> Signals:
    """The signals of one pass, measured from ``store`` as of ``at`` (see the docstring)."""
    window = window or StoreSignalSettings()
    naive = utc_naive(at)
    nodes = _nodes(store, settings, naive, window)
    pods = _pods(store, settings, naive, window)
    namespaces = _namespaces(store, settings, naive, window)
    return Signals.of(
        at,
        nodes=nodes if nodes.height else None,
        pods=pods if pods.height else None,
        namespaces=namespaces if namespaces.height else None,
    )


def state_from_store(store: Store, at: datetime) -> CurrentState:
    """What the store knows of the cluster, for offline ``recommend``: the latest node
    labels (so an applied ``sits.io/fragmentation`` label counts as current) and each pod's
    priority class. Object lists are incomplete (``complete=False``): nothing is skipped as
    gone or opted out."""
    naive = utc_naive(at)
    label = ACTIONS[Action.FRAGMENTATION].key
    nodes = _frame(
        store,
        "SELECT node AS name, json_extract_string(labels_json, ?) AS current FROM nodes "
        "WHERE ts = (SELECT max(ts) FROM nodes WHERE ts <= ?) AND node IS NOT NULL",
        [f'$."{label}"', naive],
    )
    pods = _frame(
        store,
        "SELECT namespace, pod AS name, priority_class AS current FROM pods "
        "WHERE ts = (SELECT max(ts) FROM pods WHERE ts <= ?) AND pod IS NOT NULL",
        [naive],
    )
    parts = []
    if nodes.height:
        parts.append(
            nodes.select(
                pl.lit("Node").alias("kind"),
                pl.lit(None, pl.String()).alias("namespace"),
                "name",
                pl.lit(str(Action.FRAGMENTATION)).alias("action"),
                "current",
            )
        )
    if pods.height:
        parts.append(
            pods.select(
                pl.lit("Pod").alias("kind"),
                "namespace",
                "name",
                pl.lit(str(Action.PRIORITY_CLASS)).alias("action"),
                "current",
            )
        )
    values = (
        pl.concat(parts, how="vertical_relaxed").filter(pl.col("current").is_not_null())
        if parts
        else None
    )
    return CurrentState.of(values=values, complete=False)


def latest_data_at(store: Store) -> datetime | None:
    """The newest sample or snapshot time in the store (naive UTC), or None when empty.

    ``recommend`` measures as of this time, so a store recorded earlier (a demo, a copy from
    production) still yields its recommendations.
    """
    tables = ("gpu_samples", "requests", "server_windows", "pods", "nodes")
    latest = [store.scalar(f"SELECT max(ts) FROM {table}") for table in tables]
    found = [t for t in latest if isinstance(t, datetime)]
    return max(found) if found else None
