"""Where the controller's signals come from: the seam, and the code both sources share.

:func:`signals_of` turns one pass's reads into
:class:`~sits_observe.control.controller.planning.inputs.Signals`; a :class:`SignalSource` makes the
reads, one frame per signal family:

- ``nodes``: the subjects (a ``node`` column: the nodes of the latest inventory);
- ``fragmentation`` / ``interference``: per node (:data:`FRAG_SCHEMA`,
  :data:`INTERFERENCE_SCHEMA`), joined onto the subjects;
- ``pods``: the pod subjects with their measured values (:data:`~.inputs.POD_SIGNALS`),
  assembled by :func:`pod_signals` from the source's raw reads;
- ``namespaces``: daily peaks of requests for the quotas (:data:`~.inputs.NAMESPACE_SIGNALS`);
- ``tenants``: tenants pushing others out of their SLA (:data:`~.inputs.TENANT_SIGNALS`).

:class:`~sits_observe.control.signals.store.DuckSignalSource` reads the service's DuckDB
store (the SQL the controller has always run);
:class:`~sits_observe.control.signals.promql.PromQLSignalSource` reads
kube-state-metrics, dcgm-exporter and vLLM series from a Prometheus-compatible store, so the
controller needs no DuckDB data for its signals (docs/controller.md, "Signals from a PromQL
store").

The node families (fragmentation, interference) and the tenants are computed each under a
guard (:func:`guarded`): a family without enough data (an exception in the source's
``no_data``) is logged at info and left null; any other failure is logged with its
traceback and counted in ``sits_controller_signal_errors_total{signal}``
(:class:`SignalMetrics`), and the other signals are still measured.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import Protocol

import polars as pl
from prometheus_client import CollectorRegistry, Counter
from pydantic import BaseModel, ConfigDict, Field

from sits_observe.analytics.classes import rules as class_rules
from sits_observe.analytics.fragmentation.fgd.measure import fragmentation
from sits_observe.analytics.fragmentation.fgd.workload import typical_pods
from sits_observe.analytics.fragmentation.fgd_live import LiveCluster
from sits_observe.control.controller.planning.inputs import TENANT_SIGNALS, Signals
from sits_observe.control.controller.settings import ControllerSettings
from sits_observe.domain.times import utc_naive

log = logging.getLogger(__name__)

FRAG_SCHEMA: dict[str, pl.DataType] = {"node": pl.String(), "fragmentation_ratio": pl.Float64()}
INTERFERENCE_SCHEMA: dict[str, pl.DataType] = {
    "node": pl.String(),
    "interference_score": pl.Float64(),
    "interference_partial": pl.Boolean(),
    "sync_delay_breached": pl.Boolean(),
}
#: The pod subjects a source reads before :func:`pod_signals` adds the measurements.
POD_SUBJECTS: dict[str, pl.DataType] = {
    "namespace": pl.String(),
    "pod": pl.String(),
    "workload": pl.String(),
    "node": pl.String(),
    "priority_class": pl.String(),
    "pod_uid": pl.String(),
}
#: Exact request latencies per pod (``requests``): quantiles, the sequence length, every
#: latency of a request that did not fail, and the failures.
LATENCY_SCHEMA: dict[str, pl.DataType] = {
    "namespace": pl.String(),
    "pod": pl.String(),
    "p95": pl.Float64(),
    "p99": pl.Float64(),
    "seq": pl.Float64(),
    "n": pl.Int64(),
    "latencies": pl.List(pl.Float64()),
    "failed": pl.Int64(),
}
#: Histogram-estimate windows per pod (``server_windows``): mean P95 / P99 and every P99.
WINDOWS_SCHEMA: dict[str, pl.DataType] = {
    "namespace": pl.String(),
    "pod": pl.String(),
    "w_p95": pl.Float64(),
    "w_p99": pl.Float64(),
    "w_p99s": pl.List(pl.Float64()),
}
#: GPU memory peaks attributed by dcgm-exporter's pod labels, and by NVML processes.
DCGM_PEAKS_SCHEMA: dict[str, pl.DataType] = {
    "namespace": pl.String(),
    "pod": pl.String(),
    "_dcgm": pl.Int64(),
}
NVML_PEAKS_SCHEMA: dict[str, pl.DataType] = {"pod_uid": pl.String(), "_nvml": pl.Int64()}

_POD_COLUMNS = (
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


class StoreSignalSettings(BaseModel):
    """Windows every signal source measures over (named for the DuckDB source, the first)."""

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


class SignalMetrics:
    """The adapter's metric on an explicit ``registry``:
    ``sits_controller_signal_errors_total{signal}``, signal families that failed for a reason
    other than missing data (an analytics bug, a broken row, a store that refused a read)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.errors = Counter(
            "sits_controller_signal_errors",
            "Signal families (fragmentation, interference, tenants) that failed for a reason "
            "other than missing data, by signal",
            ["signal"],
            registry=registry,
        )


class SignalSource(Protocol):
    """The reads behind one pass's signals (module docstring). Times are naive UTC; ``since``
    (a report's window) cuts every look-back so no sample before it is read."""

    name: str
    #: Exceptions that mean "not enough data" for a family: logged at info, not counted.
    no_data: tuple[type[Exception], ...]

    def nodes(
        self, at: datetime, window: StoreSignalSettings, since: datetime | None
    ) -> pl.DataFrame:
        """The node subjects (column ``node``) of the latest inventory at ``at``."""
        ...

    def fragmentation(
        self, at: datetime, window: StoreSignalSettings, since: datetime | None
    ) -> pl.DataFrame:
        """FGD's F_n(M) / R_n per node (:data:`FRAG_SCHEMA`)."""
        ...

    def interference(
        self,
        at: datetime,
        settings: ControllerSettings,
        window: StoreSignalSettings,
        since: datetime | None,
    ) -> pl.DataFrame:
        """The interference score per node (:data:`INTERFERENCE_SCHEMA`)."""
        ...

    def pods(
        self,
        at: datetime,
        settings: ControllerSettings,
        window: StoreSignalSettings,
        since: datetime | None,
    ) -> pl.DataFrame:
        """The pod subjects and their signals (:data:`~.inputs.POD_SIGNALS` columns)."""
        ...

    def namespaces(
        self,
        at: datetime,
        settings: ControllerSettings,
        window: StoreSignalSettings,
        since: datetime | None,
    ) -> pl.DataFrame:
        """Daily request peaks per namespace and resource (:data:`~.inputs.NAMESPACE_SIGNALS`)."""
        ...

    def tenants(
        self, at: datetime, settings: ControllerSettings, since: datetime | None
    ) -> pl.DataFrame:
        """Tenants pushing others out of their SLA (:data:`~.inputs.TENANT_SIGNALS`)."""
        ...


def guarded(
    what: str,
    compute: Callable[[], pl.DataFrame],
    schema: dict[str, pl.DataType],
    metrics: SignalMetrics | None,
    no_data: tuple[type[Exception], ...],
) -> pl.DataFrame:
    """``compute()``, or an empty frame when it fails: one broken signal family must not
    stop every other recommendation. Missing data (``no_data``) is logged at info; anything
    else is logged with its traceback and counted in ``metrics``."""
    try:
        return compute()
    except no_data as exc:
        log.info("no %s signal: %s", what, exc)
    except Exception:  # not a data gap: an analytics bug, a broken row, a refused read
        log.exception("computing the %s signal failed", what)
        if metrics is not None:
            metrics.errors.labels(signal=what).inc()
    return pl.DataFrame(schema=schema)


def signals_of(
    source: SignalSource,
    at: datetime,
    settings: ControllerSettings,
    window: StoreSignalSettings | None = None,
    *,
    since: datetime | None = None,
    metrics: SignalMetrics | None = None,
) -> Signals:
    """The signals of one pass, measured by ``source`` as of ``at``; ``since`` (a report's
    window) cuts every look-back; ``metrics`` counts the families that failed for a reason
    other than missing data (None: they are only logged)."""
    window = window or StoreSignalSettings()
    naive = utc_naive(at)
    since = None if since is None else utc_naive(since)
    nodes = source.nodes(naive, window, since)
    if nodes.height:
        no_data = source.no_data
        frag = guarded(
            "fragmentation",
            lambda: source.fragmentation(naive, window, since),
            FRAG_SCHEMA,
            metrics,
            no_data,
        )
        scores = guarded(
            "interference",
            lambda: source.interference(naive, settings, window, since),
            INTERFERENCE_SCHEMA,
            metrics,
            no_data,
        )
        nodes = nodes.join(frag, on="node", how="left").join(scores, on="node", how="left")
    pods = source.pods(naive, settings, window, since)
    namespaces = source.namespaces(naive, settings, window, since)
    tenants = guarded(
        "tenants",
        lambda: source.tenants(naive, settings, since),
        TENANT_SIGNALS,
        metrics,
        source.no_data,
    )
    return Signals.of(
        at,
        nodes=nodes if nodes.height else None,
        pods=pods if pods.height else None,
        namespaces=namespaces if namespaces.height else None,
        tenants=tenants if tenants.height else None,
    )


def fragmentation_frame(live: LiveCluster) -> pl.DataFrame:
    """FGD's F_n(M) / R_n of every node of ``live`` (:data:`FRAG_SCHEMA`), M its pods'
    typical set; 0 for a node with no idle GPU."""
    report = fragmentation(live.state, typical_pods(live.shapes))
    idle = report.node_idle_milli
    ratio = [
        float(f / i) if i > 0 else 0.0 for f, i in zip(report.node_frag_milli, idle, strict=True)
    ]
    return pl.DataFrame(
        {"node": list(live.state.node_names), "fragmentation_ratio": ratio}, schema=FRAG_SCHEMA
    )


def pod_signals(
    pods: pl.DataFrame,
    settings: ControllerSettings,
    *,
    dcgm: pl.DataFrame,
    nvml: pl.DataFrame,
    latency: pl.DataFrame,
    windows: pl.DataFrame,
    elastic: pl.DataFrame,
) -> pl.DataFrame:
    """The pod signals of the ``pods`` subjects (:data:`POD_SUBJECTS`) from a source's reads:
    ``dcgm`` / ``nvml`` GPU memory peaks, exact ``latency`` (:data:`LATENCY_SCHEMA`),
    histogram ``windows`` (:data:`WINDOWS_SCHEMA`) and the ``elastic`` inputs per pod.

    The peak is dcgm-exporter's, else NVML's; latency quantiles are the exact ones, else the
    mean of the window estimates; the SLA is the namespace's P99 SLA
    (``ClassSettings.namespace_sla_p99_s``) and the violation rate the requests' (the class
    report's definition), else the share of windows whose P99 is above it.
    """
    pods = pods.join(dcgm, on=["namespace", "pod"], how="left").join(nvml, on="pod_uid", how="left")
    slas = settings.classes.namespace_sla_p99_s
    pods = (
        pods.join(latency, on=["namespace", "pod"], how="left")
        .join(windows, on=["namespace", "pod"], how="left")
        .with_columns(
            pl.col("namespace")
            .replace_strict(slas, default=None, return_dtype=pl.Float64)
            .alias("sla_p99_s")
        )
    )
    pods = pods.with_columns(
        pl.coalesce("_dcgm", "_nvml").cast(pl.Int64).alias("peak_gpu_memory_bytes"),
        pl.coalesce("p95", "w_p95").alias("p95_latency_s"),
        pl.coalesce("p99", "w_p99").alias("p99_latency_s"),
        pl.col("seq").cast(pl.Float64).alias("sequence_tokens"),
        _violation_ratios(pods),
    )
    pods = pods.join(elastic, on=["namespace", "pod"], how="left")
    return pods.select(_POD_COLUMNS)


def _violation_ratios(pods: pl.DataFrame) -> pl.Series:
    """``sla_violation_ratio`` of each row of ``pods``: of its requests where it has any (a
    ``latencies`` list or failures), else the share of its ``server_windows`` P99s above the
    SLA; null without an SLA or either source."""
    rows = pods.select("sla_p99_s", "latencies", "w_p99s", "failed").with_row_index("_row")
    sla = pl.col("sla_p99_s")

    def above_sla(column: str) -> pl.DataFrame:
        return (
            rows.select("_row", "sla_p99_s", pl.col(column).alias("_v"))
            .explode("_v")
            .group_by("_row")
            .agg(
                (pl.col("_v") > sla).sum().alias(f"{column}_slow"),
                pl.col("_v").count().alias(f"{column}_n"),
            )
        )

    failed = pl.col("failed").fill_null(0)
    ratio = (
        pl.when(sla.is_null())
        .then(pl.lit(None, pl.Float64))
        .when(pl.col("latencies").is_not_null() | (failed > 0))
        .then(
            class_rules.sla_violation_ratio(pl.col("latencies_slow"), failed, pl.col("latencies_n"))
        )
        .when(pl.col("w_p99s_n") > 0)
        .then(pl.col("w_p99s_slow") / pl.col("w_p99s_n"))
    )
    return (
        rows.join(above_sla("latencies"), on="_row", how="left")
        .join(above_sla("w_p99s"), on="_row", how="left")
        .sort("_row")
        .select(ratio.cast(pl.Float64).alias("sla_violation_ratio"))
        .to_series()
    )
