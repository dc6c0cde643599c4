"""Adapter: the latest signals in the store ->
:class:`~sits_observe.control.controller.planning.inputs.Signals`.

:class:`DuckSignalSource` is the DuckDB implementation of the controller's signal seam
(:class:`~sits_observe.control.signals.source.SignalSource`; the PromQL one is
:mod:`.promql`). This is where the controller decides *what is measured how*
from the DuckDB store; the rules never see the store. Where an analytics function exists it
is used (FGD node fragmentation, the interference report); the rest is plain SQL over the
sample tables:

- subjects: nodes of the latest ``nodes`` snapshot; pods of the latest ``pods`` snapshot that
  are bound to a node and not finished;
- ``fragmentation_ratio``: FGD's F_n(M) / R_n per node
  (:mod:`sits_observe.analytics.fragmentation.fgd.measure`) over the live cluster
  (:func:`~sits_observe.analytics.fragmentation.fgd_live.live_cluster`); 0 for a node with no idle
  GPU; null when the store has no inventory to build it from;
- ``interference_score``: :func:`~sits_observe.analytics.topology.interference.interference_report`
  over ``window_s`` of ``gpu_samples``, with the node's measured NUMA miss ratio
  (``numa_samples``, :mod:`sits_observe.analytics.topology.numa`) where the store has one;
  ``sync_delay_breached``: the SPEC's consecutive slow syncs among the node's ``sync_delays``
  of ``window_s`` (null for a node without any);
- ``peak_gpu_memory_bytes``: the largest ``fb_used_bytes`` of a GPU attributed to the pod over
  ``peak_window_s`` (dcgm-exporter's pod labels), else the largest per-pod sum of
  ``gpu_processes.used_memory_bytes`` (NVML);
- latency: exact P95 / P99 of the pod's ``requests`` over ``window_s`` (failed requests count
  as violations, not latencies), else the mean of ``server_windows`` estimates; the sequence
  length is the P95 of prompt + output tokens; the SLA is the namespace's P99 SLA
  (``ClassSettings.namespace_sla_p99_s``) and the violation rate
  :func:`~sits_observe.analytics.classes.rules.sla_violation_ratio` of the requests (the
  class report's definition), else the share of ``server_windows`` whose P99 is above it;
- elastic inputs: :func:`~sits_observe.analytics.rightsizing.elastic.elastic_inputs` (the same
  numbers as ``classes --view elastic``) of every GPU with samples in ``window_s``, per pod its
  busiest GPU (:func:`~sits_observe.analytics.rightsizing.elastic.pod_elastic_inputs`);
- tenants (:mod:`sits_observe.analytics.serving.tenants`): over ``tenant_window_s``, each tenant
  with an SLA pushed out of it by another tenant's load on its nodes, with the evidence, and
  the GPUs the offender's non-critical pods request in the latest ``pods`` snapshot
  (priority below ``tenant_noncritical_below_priority``; no class counts as 0, a class
  the settings do not name is not counted);
- namespace peaks: per day, the largest sum of the namespace's pod requests (GPUs,
  milli-CPU, bytes) over any one inventory snapshot, for ``history_days``; namespaces that
  never requested a GPU get no quota advice unless ``gpu_namespaces_only`` is off; with the
  cluster's allocatable of each resource (latest node snapshot) the rule holds quotas under,
  what the namespace's pods request in the latest snapshot (``running``: no quota below it)
  and the seconds from its first snapshot to the latest (``history_s``: VPA's confidence).

The node signal families (fragmentation, interference) and the tenants are computed each
under a guard (:func:`~sits_observe.control.signals.source.guarded`): a family without
enough data (``NoDataError``; ``StoreError`` from
:func:`~sits_observe.analytics.fragmentation.fgd_live.live_cluster`, which signals an empty
inventory that way) is logged at info and left null; any other failure is logged with its traceback
and counted in ``sits_controller_signal_errors_total{signal}`` (:class:`SignalMetrics`), and the
other signals are still measured.

What the store knows of the cluster's current state (labels, priority classes, owners), for
offline ``recommend``, is read by :mod:`.store_state`.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import polars as pl

from sits_observe.analytics.cluster_allocatable import cluster_allocatable
from sits_observe.analytics.fragmentation.fgd_live import live_cluster
from sits_observe.analytics.rightsizing.elastic import (
    elastic_inputs,
    load_elastic_samples,
    pod_elastic_inputs,
)
from sits_observe.analytics.serving.tenants import tenant_report
from sits_observe.analytics.topology.interference import (
    gpu_sample_rows,
    interference_report,
    sync_delay_breached,
)
from sits_observe.analytics.topology.numa import measured_inputs
from sits_observe.control.controller.planning.inputs import TENANT_SIGNALS, Signals
from sits_observe.control.controller.quota_settings import QUOTA_CPU, QUOTA_GPU, QUOTA_MEMORY
from sits_observe.control.controller.settings import ControllerSettings
from sits_observe.control.signals.source import (
    INTERFERENCE_SCHEMA,
    SignalMetrics,
    StoreSignalSettings,
    fragmentation_frame,
    pod_signals,
    signals_of,
)
from sits_observe.errors import NoDataError, StoreError
from sits_observe.store.duck import Store

_DONE = ("Succeeded", "Failed")
#: The store's timestamp resolution: ``(a, b]`` is ``[a + 1 µs, b + 1 µs)``.
_TICK = timedelta(microseconds=1)


def _floor(since: datetime | None) -> datetime:
    """``since`` as a SQL lower bound (``ts >= ?``); none = every row."""
    return datetime.min if since is None else since


def _frame(store: Store, sql: str, params: list[object]) -> pl.DataFrame:
    return pl.DataFrame(store.query(sql, params))


def _start(at: datetime, seconds: float, since: datetime | None) -> datetime:
    """The (exclusive) start of a look-back of ``seconds`` ending at ``at``, never before the
    caller's ``since`` (a report's window: ``since <= ts``)."""
    start = at - timedelta(seconds=seconds)
    return start if since is None else max(start, since - timedelta(microseconds=1))


def _fragmentation(
    store: Store, at: datetime, window: StoreSignalSettings, since: datetime | None = None
) -> pl.DataFrame:
    live = live_cluster(
        store, since_s=window.fgd_since_s, since=since, until=at + timedelta(microseconds=1)
    )
    return fragmentation_frame(live)


def _interference(
    store: Store,
    settings: ControllerSettings,
    at: datetime,
    window: StoreSignalSettings,
    since: datetime | None = None,
) -> pl.DataFrame:
    start = _start(at, window.window_s, since)
    samples = gpu_sample_rows(store, start, at)
    measured = measured_inputs(store, start, at)
    report = interference_report(
        samples,
        settings.interference,
        numa_miss_ratio=measured.numa_miss_ratio,
        sync_delays_s=measured.sync_delays_s,
    )
    scores = {n.node: n.score for n in report.nodes if n.node is not None}
    delays = measured.sync_delays_s
    names = sorted(scores.keys() | delays.keys())
    return pl.DataFrame(
        {
            "node": names,
            "interference_score": [scores[n].score if n in scores else None for n in names],
            "interference_partial": [scores[n].partial if n in scores else None for n in names],
            "sync_delay_breached": [
                sync_delay_breached(delays[n], settings.interference) if n in delays else None
                for n in names
            ],
        },
        schema=INTERFERENCE_SCHEMA,
    )


_PODS_SQL = """
SELECT namespace, pod, workload, node, priority_class, pod_uid
FROM pods
WHERE ts = (SELECT max(ts) FROM pod_snapshots WHERE ts <= ? AND ts >= ?)
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


def _elastic(
    store: Store,
    settings: ControllerSettings,
    at: datetime,
    window: StoreSignalSettings,
    since: datetime | None = None,
) -> pl.DataFrame:
    # (start, at] as the reader's [since, until): the store keeps microseconds.
    start = _start(at, window.window_s, since) + _TICK
    samples = load_elastic_samples(store, start, at + _TICK, settings.classes)
    inputs = elastic_inputs(samples, settings.classes, settings.interference.links)
    return pod_elastic_inputs(inputs)


def _pods(
    store: Store,
    settings: ControllerSettings,
    at: datetime,
    window: StoreSignalSettings,
    since: datetime | None = None,
) -> pl.DataFrame:
    pods = _frame(store, _PODS_SQL, [at, _floor(since), *_DONE])
    if pods.height == 0:
        return pods.drop("pod_uid")
    peak_from = _start(at, window.peak_window_s, since)
    peaks = _frame(store, _PEAK_SQL, [peak_from, at, peak_from, at])
    dcgm = peaks.filter(pl.col("src") == "dcgm").select(
        "namespace", "pod", pl.col("peak").alias("_dcgm")
    )
    nvml = peaks.filter(pl.col("src") == "nvml").select("pod_uid", pl.col("peak").alias("_nvml"))
    start = _start(at, window.window_s, since)
    lat = _frame(store, _LATENCY_SQL, [start, at])
    win = _frame(store, _WINDOWS_SQL, [start, at])
    return pod_signals(
        pods,
        settings,
        dcgm=dcgm,
        nvml=nvml,
        latency=lat,
        windows=win,
        elastic=_elastic(store, settings, at, window, since),
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
           max(mem) AS mem, min(ts) AS first_ts
    FROM snap GROUP BY ALL
), newest AS (
    SELECT max(ts) AS ts FROM snap
), latest AS (
    SELECT namespace, gpu, cpu, mem FROM snap WHERE ts = (SELECT ts FROM newest)
)
SELECT d.namespace, list(d.gpu ORDER BY d.day) AS gpu, list(d.cpu ORDER BY d.day) AS cpu,
       list(d.mem ORDER BY d.day) AS mem, max(d.gpu) AS max_gpu,
       coalesce(any_value(n.gpu), 0) AS gpu_now, coalesce(any_value(n.cpu), 0) AS cpu_now,
       coalesce(any_value(n.mem), 0) AS mem_now,
       (epoch_us((SELECT ts FROM newest)) - epoch_us(min(d.first_ts))) / 1e6 AS history_s
FROM daily d LEFT JOIN latest n USING (namespace)
GROUP BY d.namespace ORDER BY d.namespace
"""


def _namespaces(
    store: Store,
    settings: ControllerSettings,
    at: datetime,
    window: StoreSignalSettings,
    since: datetime | None = None,
) -> pl.DataFrame:
    start = _start(at, settings.quota.history_days * 86_400.0, since)
    rows = _frame(store, _PEAKS_SQL, [start, at, *_DONE])
    if rows.height == 0:
        return pl.DataFrame()
    if window.gpu_namespaces_only:
        rows = rows.filter(pl.col("max_gpu") > 0)
    # What the cluster holds at ``at``: the latest node snapshot of the look-back.
    held = cluster_allocatable(store, start, at + _TICK)
    totals = {
        QUOTA_GPU: None if held is None else held.gpus,
        QUOTA_CPU: None if held is None else held.cpu_milli,
        QUOTA_MEMORY: None if held is None else held.memory_bytes,
    }
    parts = [
        rows.select(
            "namespace",
            pl.lit(resource).alias("resource"),
            pl.col(column).alias("daily_peaks"),
            pl.lit(totals[resource], pl.Float64).alias("allocatable"),
            pl.col(f"{column}_now").cast(pl.Float64).alias("running"),
            pl.col("history_s").cast(pl.Float64),
        )
        for resource, column in ((QUOTA_GPU, "gpu"), (QUOTA_CPU, "cpu"), (QUOTA_MEMORY, "mem"))
    ]
    return pl.concat(parts)


_TENANT_PODS_SQL = """
SELECT namespace, priority_class, sum(coalesce(gpu_request, 0))::DOUBLE AS gpus
FROM pods
WHERE ts = (SELECT max(ts) FROM pod_snapshots WHERE ts <= ? AND ts >= ?)
  AND namespace IS NOT NULL AND coalesce(phase, '') NOT IN (?, ?)
GROUP BY ALL
"""


def _tenants(
    store: Store, settings: ControllerSettings, at: datetime, since: datetime | None = None
) -> pl.DataFrame:
    slas = settings.classes.namespace_sla_p99_s
    if not slas:
        return pl.DataFrame(schema=TENANT_SIGNALS)
    start = _start(at, settings.tenant_window_s, since) + _TICK
    report = tenant_report(store, start, at + _TICK, slas, settings.tenants)
    if not report.findings:
        return pl.DataFrame(schema=TENANT_SIGNALS)
    values = {p.name: p.value for p in settings.classes.priority_classes}
    below = settings.tenant_noncritical_below_priority
    pods = _frame(store, _TENANT_PODS_SQL, [at, _floor(since), *_DONE])
    # No class is priority 0 (Kubernetes' default); a class the settings do not name is not
    # counted (its value is unknown).
    noncritical: dict[str, float] = {}
    for r in pods.iter_rows(named=True) if pods.height else ():
        value = 0 if r["priority_class"] is None else values.get(r["priority_class"])
        if value is not None and value < below:
            noncritical[r["namespace"]] = noncritical.get(r["namespace"], 0.0) + r["gpus"]
    known = pods.height > 0
    rows = [
        {
            "namespace": f.aggressor,
            "victim": f.victim,
            "sla_p99_s": f.sla_p99_s,
            "victim_p99_high_s": f.victim_p99_high_s,
            "victim_p99_low_s": f.victim_p99_low_s,
            "load": f.load,
            "load_high": f.load_high,
            "load_low": f.load_low,
            "correlation": f.correlation,
            "bins_high": f.bins_high,
            "bins_low": f.bins_low,
            "breach_high_ratio": f.breach_high_ratio,
            "noncritical_gpus": noncritical.get(f.aggressor, 0.0) if known else None,
        }
        for f in report.findings
    ]
    return pl.DataFrame(rows, schema=TENANT_SIGNALS)


class DuckSignalSource:
    """The signals' reads from the service's DuckDB store (the module docstring's SQL and
    analytics); :class:`~sits_observe.control.signals.source.SignalSource`."""

    name = "duckdb"
    #: ``StoreError`` is how :func:`~sits_observe.analytics.fragmentation.fgd_live.live_cluster`
    #: signals an empty inventory.
    no_data: tuple[type[Exception], ...] = (NoDataError, StoreError)

    def __init__(self, store: Store) -> None:
        self.store = store

    def nodes(
        self, at: datetime, window: StoreSignalSettings, since: datetime | None
    ) -> pl.DataFrame:
        """The nodes of the latest ``nodes`` snapshot at ``at``."""
        return _frame(
            self.store,
            "SELECT DISTINCT node FROM nodes WHERE ts = (SELECT max(ts) FROM node_snapshots "
            "WHERE ts <= ? AND ts >= ?) AND node IS NOT NULL ORDER BY node",
            [at, _floor(since)],
        )

    def fragmentation(
        self, at: datetime, window: StoreSignalSettings, since: datetime | None
    ) -> pl.DataFrame:
        """FGD over the live cluster of the inventory."""
        return _fragmentation(self.store, at, window, since)

    def interference(
        self,
        at: datetime,
        settings: ControllerSettings,
        window: StoreSignalSettings,
        since: datetime | None,
    ) -> pl.DataFrame:
        """The interference report over ``gpu_samples``, NUMA and sync delays."""
        return _interference(self.store, settings, at, window, since)

    def pods(
        self,
        at: datetime,
        settings: ControllerSettings,
        window: StoreSignalSettings,
        since: datetime | None,
    ) -> pl.DataFrame:
        """The latest ``pods`` snapshot's bound pods and their signals."""
        return _pods(self.store, settings, at, window, since)

    def namespaces(
        self,
        at: datetime,
        settings: ControllerSettings,
        window: StoreSignalSettings,
        since: datetime | None,
    ) -> pl.DataFrame:
        """Daily request peaks over the inventory snapshots."""
        return _namespaces(self.store, settings, at, window, since)

    def tenants(
        self, at: datetime, settings: ControllerSettings, since: datetime | None
    ) -> pl.DataFrame:
        """The tenant report over ``requests`` and ``gpu_samples``."""
        return _tenants(self.store, settings, at, since)


def signals_from_store(
    store: Store,
    at: datetime,
    settings: ControllerSettings,
    window: StoreSignalSettings | None = None,
    *,
    since: datetime | None = None,
    metrics: SignalMetrics | None = None,
) -> Signals:
    """The signals of one pass, measured from ``store`` as of ``at`` (see the docstring);
    ``since`` (a report's window) cuts every look-back so no row before it is read;
    ``metrics`` counts the signal families that failed for a reason other than missing data
    (None: they are only logged)."""
    return signals_of(DuckSignalSource(store), at, settings, window, since=since, metrics=metrics)
