"""The controller's signals read from a Prometheus-compatible store: no DuckDB data needed.

A :class:`~sits_observe.control.signals.source.SignalSource` over the series a GPU cluster's
Prometheus / VictoriaMetrics already holds (docs/controller.md, "Signals from a PromQL
store"); every family is measured by the code the DuckDB source runs, on rows read back in
the DuckDB tables' shapes:

- **subjects**: kube-state-metrics' newest scrape within ``promql_ksm_lookback_s``
  (:class:`~sits_observe.store.promql.kube.PromQLKubeSource`, read once a pass): its nodes,
  and its pods bound to a node and not finished (the workload is the collector's rule,
  ``collectors.kube_pods.workload_of``, over KSM's ``created_by_kind`` / ``_name``);
- **fragmentation**: FGD over :func:`~sits_observe.analytics.fragmentation.fgd_live.live_cluster_of`
  of that inventory, M every pod seen in the ``fgd_since_s`` before the pass (as
  ``fragmentation --promql-url``; no node-affinity products, no assigned GPUs);
- **interference**: :func:`~sits_observe.analytics.topology.interference.interference_report` over
  ``window_s`` of raw dcgm-exporter samples (:class:`~sits_observe.store.promql.source.
  PromQLGpuSource`), without NUMA miss ratios (every score ``partial``, lower than DuckDB's by
  at most ``numa_weight`` x the node's miss ratio) and without sync delays
  (``sync_delay_breached`` null: the best-effort proposal never fires);
- **pods**: the GPU memory peak over ``peak_window_s`` from ``DCGM_FI_DEV_FB_USED`` by pod
  label, reduced by the store (:class:`~sits_observe.store.promql.signals.PromQLSignalReads`;
  no NVML fallback: ``gpu_processes`` is not exported); latency P95 / P99 and the SLA
  violation share as the means and shares of vLLM histogram windows
  (:class:`~sits_observe.analytics.source.SnapshotServerWindows`, the DuckDB source's
  ``server_windows`` fallback; the histogram scrapes of ``promql_histogram_prime_s`` before
  the window prime it, so its first window is whole). Exact per-request latencies and the
  sequence length (``requests``) have no series: ``sequence_tokens`` is null, and the rules
  that need it do not fire; the elastic inputs from the same dcgm-exporter samples;
- **namespaces**: daily request peaks from KSM for ``quota.history_days``, one subquery a day,
  each finished day read once and kept
  (:meth:`~sits_observe.store.promql.signals.PromQLSignalReads.namespace_daily_peaks`; app
  containers only), the allocatable from the KSM snapshot's nodes;
- **tenants**: the tenant report reads exact per-request latencies, which no series carries:
  left empty as "not enough data" (logged at info, not counted as an error).

A read the store refuses (``StoreError``) is an error, not missing data: in a guarded family
it is counted in ``sits_controller_signal_errors_total{signal}``; the KSM inventory read is
not guarded (no subjects, no pass: the loop counts the pass as failed).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

import polars as pl
from pydantic import BaseModel, ConfigDict, Field, field_validator

from sits_observe.analytics.fragmentation.fgd_live import InventoryTables, live_cluster_of
from sits_observe.analytics.rightsizing import elastic
from sits_observe.analytics.source import SnapshotServerWindows
from sits_observe.analytics.topology.interference import SAMPLE_COLUMNS, interference_report
from sits_observe.collectors.kube.pods import workload_of
from sits_observe.control.controller.planning.inputs import TENANT_SIGNALS
from sits_observe.control.controller.quota_settings import QUOTA_CPU, QUOTA_GPU, QUOTA_MEMORY
from sits_observe.control.controller.settings import ControllerSettings
from sits_observe.control.signals.source import (
    DCGM_PEAKS_SCHEMA,
    INTERFERENCE_SCHEMA,
    LATENCY_SCHEMA,
    NVML_PEAKS_SCHEMA,
    POD_SUBJECTS,
    WINDOWS_SCHEMA,
    SignalMetrics,
    StoreSignalSettings,
    fragmentation_frame,
    guarded,
    pod_signals,
)
from sits_observe.domain.validation import check_promql_url
from sits_observe.errors import NoDataError
from sits_observe.store.promql.client import PromQLClient
from sits_observe.store.promql.kube import KsmInventory, PromQLKubeSource
from sits_observe.store.promql.signals import PromQLSignalReads
from sits_observe.store.promql.source import PromQLGpuSource, PromQLServerSource

_MS = timedelta(milliseconds=1)
_DONE = ("Succeeded", "Failed")
#: KSM resource -> the quota key it sizes.
_QUOTA_OF = {"nvidia_com_gpu": QUOTA_GPU, "cpu": QUOTA_CPU, "memory": QUOTA_MEMORY}


class PromQLSignalSettings(BaseModel):
    """Where the controller reads its signals when not from the DuckDB file."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    promql_url: str | None = Field(
        None,
        description="read the signals from kube-state-metrics, dcgm-exporter and vLLM series "
        "at this Prometheus-compatible query URL instead of the DuckDB file (docs/controller.md)",
    )
    promql_ksm_matchers: str = Field(
        "",
        description="with promql_url: extra label matchers for the kube-state-metrics series, "
        'e.g. job="kube-state-metrics"',
    )
    promql_gpu_matchers: str = Field(
        "",
        description="with promql_url: extra label matchers for the dcgm-exporter series, "
        'e.g. job="dcgm-exporter"',
    )
    promql_server_matchers: str = Field(
        "",
        description='with promql_url: extra label matchers for the vLLM series, e.g. job="vllm"',
    )
    promql_ksm_lookback_s: float = Field(
        300.0,
        gt=0,
        le=86_400,
        description="with promql_url: seconds before a pass the newest kube-state-metrics "
        "scrape may be",
    )
    promql_ksm_step_s: float = Field(
        30.0,
        gt=0,
        le=3600,
        description="with promql_url: seconds between kube-state-metrics scrapes, the grid "
        "of the namespaces' daily request peaks",
    )
    promql_histogram_prime_s: float = Field(
        300.0,
        ge=0,
        le=3600,
        description="with promql_url: seconds of vLLM histogram scrapes read before the "
        "latency window, so its first window is whole",
    )

    _check_url = field_validator("promql_url")(check_promql_url)


class PromQLSignalSource:
    """The controller's signal reads from KSM, dcgm-exporter and vLLM series (module
    docstring); ``metrics`` counts the pod and namespace reads that failed."""

    name = "promql"
    no_data: tuple[type[Exception], ...] = (NoDataError,)

    def __init__(
        self,
        client: PromQLClient,
        settings: PromQLSignalSettings | None = None,
        *,
        metrics: SignalMetrics | None = None,
    ) -> None:
        self.client = client
        self.settings = settings = settings or PromQLSignalSettings()
        self.metrics = metrics
        self._kube = PromQLKubeSource(client, matchers=settings.promql_ksm_matchers)
        self._gpus = PromQLGpuSource(client, matchers=settings.promql_gpu_matchers)
        servers = PromQLServerSource(client, matchers=settings.promql_server_matchers)
        self._windows = SnapshotServerWindows(servers)
        self._reads = PromQLSignalReads(
            client,
            gpu_matchers=settings.promql_gpu_matchers,
            ksm_matchers=settings.promql_ksm_matchers,
        )
        self._inventory: tuple[tuple[datetime, datetime | None, float], KsmInventory] | None = None

    # -- the inventory, once a pass ---------------------------------------------------------

    def _ksm(
        self, at: datetime, window: StoreSignalSettings, since: datetime | None
    ) -> KsmInventory:
        key = (at, since, window.fgd_since_s)
        if self._inventory is not None and self._inventory[0] == key:
            return self._inventory[1]
        start = at - timedelta(seconds=window.fgd_since_s)
        start = start if since is None else max(start, since)
        ksm = self._kube.inventory(start, at + _MS, lookback_s=self.settings.promql_ksm_lookback_s)
        self._inventory = (key, ksm)
        return ksm

    def nodes(
        self, at: datetime, window: StoreSignalSettings, since: datetime | None
    ) -> pl.DataFrame:
        """The nodes of the newest KSM scrape (``SignalSource``)."""
        ksm = self._ksm(at, window, since)
        names = {r["node"] for r in ksm.nodes.select(["node"]).to_pylist() if r["node"]}
        return pl.DataFrame({"node": sorted(names)}, schema={"node": pl.String()})

    def fragmentation(
        self, at: datetime, window: StoreSignalSettings, since: datetime | None
    ) -> pl.DataFrame:
        """FGD over the KSM inventory (``SignalSource``)."""
        ksm = self._ksm(at, window, since)
        if ksm.nodes_at is None or ksm.pods_at is None:
            raise NoDataError(
                f"no kube_pod_info series within {self.settings.promql_ksm_lookback_s:g} s "
                f"before {at} at {self.client.base_url}: no FGD target workload"
            )
        tables = InventoryTables(ksm.nodes, ksm.nodes_at, ksm.pods, ksm.pods_at, ksm.workload)
        live = live_cluster_of(tables)
        if not live.shapes:
            raise NoDataError(f"no pod in the {window.fgd_since_s:g} s before {at}")
        return fragmentation_frame(live)

    def interference(
        self,
        at: datetime,
        settings: ControllerSettings,
        window: StoreSignalSettings,
        since: datetime | None,
    ) -> pl.DataFrame:
        """Interference over raw dcgm-exporter samples, no NUMA or sync delays."""
        start = _start(at, window.window_s, since)
        samples = self._samples(start, at, SAMPLE_COLUMNS[1:])
        report = interference_report(samples.select(SAMPLE_COLUMNS), settings.interference)
        scores = {n.node: n.score for n in report.nodes if n.node is not None}
        names = sorted(scores)
        return pl.DataFrame(
            {
                "node": names,
                "interference_score": [scores[n].score for n in names],
                "interference_partial": [scores[n].partial for n in names],
                "sync_delay_breached": [None] * len(names),
            },
            schema=INTERFERENCE_SCHEMA,
        )

    def pods(
        self,
        at: datetime,
        settings: ControllerSettings,
        window: StoreSignalSettings,
        since: datetime | None,
    ) -> pl.DataFrame:
        """The KSM snapshot's bound pods with peaks, estimates and elastic inputs."""
        pods = _pod_subjects(self._ksm(at, window, since))
        if pods.height == 0:
            return pods.drop("pod_uid")
        peak_from = _start(at, window.peak_window_s, since)
        span_s = (at - peak_from).total_seconds()
        dcgm = self._guarded(
            "memory_peaks",
            lambda: self._reads.pod_memory_peaks(at, span_s).rename({"peak_bytes": "_dcgm"}),
            DCGM_PEAKS_SCHEMA,
        )
        start = _start(at, window.window_s, since)
        windows = self._guarded(
            "latency", lambda: self._window_estimates(start, at), WINDOWS_SCHEMA
        )
        inputs = self._guarded(
            "elastic",
            lambda: self._elastic(settings, start, at),
            elastic.POD_SCHEMA,
        )
        return pod_signals(
            pods,
            settings,
            dcgm=dcgm,
            nvml=pl.DataFrame(schema=NVML_PEAKS_SCHEMA),
            latency=pl.DataFrame(schema=LATENCY_SCHEMA),
            windows=windows,
            elastic=inputs,
        )

    def namespaces(
        self,
        at: datetime,
        settings: ControllerSettings,
        window: StoreSignalSettings,
        since: datetime | None,
    ) -> pl.DataFrame:
        """Daily request peaks from KSM series, the allocatable of the KSM snapshot."""
        start = _start(at, settings.quota.history_days * 86_400.0, since)
        daily = self._guarded(
            "namespaces",
            lambda: self._reads.namespace_daily_peaks(start, at, self.settings.promql_ksm_step_s),
            {"namespace": pl.String()},
        )
        if daily.height == 0:
            return pl.DataFrame()
        # A day a namespace held pods has a value for every resource (0 where none asked).
        days = daily.select("namespace", "day").unique()
        resources = pl.DataFrame({"resource": list(_QUOTA_OF)})
        full = (
            days.join(resources, how="cross")
            .join(daily, on=["namespace", "resource", "day"], how="left")
            .with_columns(pl.col("peak").fill_null(0.0))
        )
        if window.gpu_namespaces_only:
            gpu = full.filter((pl.col("resource") == "nvidia_com_gpu") & (pl.col("peak") > 0))
            full = full.join(gpu.select("namespace").unique(), on="namespace", how="semi")
        ksm = self._ksm(at, window, since)
        totals = _allocatable(ksm)
        first = self._guarded(
            "namespaces",
            lambda: self._reads.namespace_first_seen(start, at, self.settings.promql_ksm_step_s),
            {"namespace": pl.String(), "first_at": pl.Datetime("us")},
        )
        newest = pl.lit(ksm.pods_at, pl.Datetime("us"))
        history = first.select(
            "namespace",
            ((newest - pl.col("first_at")).dt.total_microseconds() / 1e6).alias("history_s"),
        )
        return (
            full.sort("day")
            .group_by("namespace", "resource", maintain_order=True)
            .agg(pl.col("peak").alias("daily_peaks"))
            .join(_running(ksm), on=["namespace", "resource"], how="left")
            .join(history, on="namespace", how="left")
            .select(
                "namespace",
                pl.col("resource").replace_strict(_QUOTA_OF),
                "daily_peaks",
                pl.col("resource")
                .replace_strict(totals, return_dtype=pl.Float64)
                .alias("allocatable"),
                pl.col("running").fill_null(0.0),
                pl.col("history_s").cast(pl.Float64),
            )
            .sort("resource", "namespace")
        )

    def tenants(
        self, at: datetime, settings: ControllerSettings, since: datetime | None
    ) -> pl.DataFrame:
        """None: the tenant report needs exact per-request latencies (module docstring)."""
        if not settings.classes.namespace_sla_p99_s:
            return pl.DataFrame(schema=TENANT_SIGNALS)
        raise NoDataError(
            "tenant isolation needs exact per-request latencies (the requests table of the "
            "DuckDB store); no PromQL series carries them"
        )

    # -- reads --------------------------------------------------------------------------------

    def _guarded(
        self, what: str, compute: Callable[[], pl.DataFrame], schema: dict[str, pl.DataType]
    ) -> pl.DataFrame:
        return guarded(what, compute, schema, self.metrics, self.no_data)

    def _samples(self, since: datetime, until: datetime, columns: Sequence[str]) -> pl.DataFrame:
        frame = pl.from_arrow(self._gpus.gpu_samples(since, until, columns=list(columns)))
        assert isinstance(frame, pl.DataFrame)
        return frame

    def _window_estimates(self, start: datetime, at: datetime) -> pl.DataFrame:
        """Windows ending in ``(start, at]`` per pod, as the DuckDB source's ``_WINDOWS_SQL``."""
        prime = timedelta(seconds=self.settings.promql_histogram_prime_s)
        table = self._windows.server_windows(start - prime, at + _MS)
        frame = pl.from_arrow(table)
        assert isinstance(frame, pl.DataFrame)
        return (
            frame.filter(
                (pl.col("ts") > start)
                & (pl.col("ts") <= at)
                & pl.col("pod").is_not_null()
                & pl.col("namespace").is_not_null()
            )
            .group_by("namespace", "pod")
            .agg(
                pl.col("latency_p95_s").mean().alias("w_p95"),
                pl.col("latency_p99_s").mean().alias("w_p99"),
                pl.col("latency_p99_s").alias("w_p99s"),
            )
            .cast(WINDOWS_SCHEMA)  # type: ignore[arg-type]
        )

    def _elastic(self, settings: ControllerSettings, start: datetime, at: datetime) -> pl.DataFrame:
        """The elastic inputs per pod over ``(start, at]``, as the DuckDB source's."""
        columns = elastic.SAMPLE_COLUMNS
        samples = self._samples(start + _MS, at + _MS, [c for c in columns if c != "ts"])
        inputs = elastic.elastic_inputs(
            samples.select(columns), settings.classes, settings.interference.links
        )
        return elastic.pod_elastic_inputs(inputs)


def _start(at: datetime, seconds: float, since: datetime | None) -> datetime:
    """The look-back of ``seconds`` ending at ``at``, never before ``since``."""
    start = at - timedelta(seconds=seconds)
    return start if since is None else max(start, since - _MS)


def _pod_subjects(ksm: KsmInventory) -> pl.DataFrame:
    """The snapshot's pods bound to a node and not finished (:data:`POD_SUBJECTS`)."""
    rows = [
        {
            "namespace": r["namespace"],
            "pod": r["pod"],
            "workload": workload_of(r["owner_kind"], r["owner_name"], {}, str(r["pod"])),
            "node": r["node"],
            "priority_class": r["priority_class"],
            "pod_uid": r["pod_uid"],
        }
        for r in ksm.pods.to_pylist()
        if r["node"] and r["namespace"] and r["pod"] and (r["phase"] or "") not in _DONE
    ]
    return pl.DataFrame(rows, schema=POD_SUBJECTS)


def _running(ksm: KsmInventory) -> pl.DataFrame:
    """What each namespace's pods that are not Succeeded / Failed request in the KSM
    snapshot, by KSM resource name (the DuckDB source's latest inventory snapshot)."""
    pods = pl.from_arrow(ksm.pods)
    assert isinstance(pods, pl.DataFrame)
    columns = {"nvidia_com_gpu": "gpu_request", "cpu": "cpu_request_milli"}
    columns["memory"] = "memory_request_bytes"
    if pods.height == 0:
        return pl.DataFrame(
            schema={"namespace": pl.String(), "resource": pl.String(), "running": pl.Float64()}
        )
    live = pods.filter(
        pl.col("namespace").is_not_null()
        & ~pl.col("phase").fill_null("").is_in(["Succeeded", "Failed"])
    )
    return pl.concat(
        [
            live.group_by("namespace").agg(
                pl.lit(resource).alias("resource"),
                pl.col(column).fill_null(0).sum().cast(pl.Float64).alias("running"),
            )
            for resource, column in columns.items()
        ]
    )


def _allocatable(ksm: KsmInventory) -> dict[str, float | None]:
    """The KSM snapshot's allocatable totals by KSM resource name (None: no node has it)."""
    nodes = pl.from_arrow(ksm.nodes)
    assert isinstance(nodes, pl.DataFrame)
    nodes = nodes.filter(pl.col("node").is_not_null())

    def total(column: str) -> float | None:
        if nodes.height == 0 or nodes.get_column(column).null_count() == nodes.height:
            return None
        return float(nodes.get_column(column).sum())

    return {
        "nvidia_com_gpu": total("gpu_allocatable"),
        "cpu": total("cpu_allocatable_milli"),
        "memory": total("memory_allocatable_bytes"),
    }
