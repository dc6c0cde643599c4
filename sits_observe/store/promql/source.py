"""GPU samples and inference-server histograms read back from a Prometheus-compatible store.

This is the PromQL adapter of the large-fleet path (docs/scaling.md): dcgm-exporter (or the
node agent's ``/metrics``, which uses the same names) is scraped by Prometheus / vmagent into
VictoriaMetrics, Thanos or Mimir, and the analytics read the series back here instead of from
one DuckDB file. The output tables have the domain's columns and units, so an analysis cannot
tell which store it read.

GPU samples (:class:`PromQLGpuSource`): one query per needed column over the dcgm-exporter
family (and its 1.x alias), pivoted into ``gpu_samples`` rows keyed by (time, GPU / MIG
instance, pod). The family -> column table, unit scales and physical ranges are the
collector's own (:mod:`sits_observe.domain.schema.dcgm_fields`). Values outside the range or
non-finite become NULL, as the collector drops them.

Two read modes:

- ``step_s=None``: RAW samples with their own timestamps (instant query of ``m[window]`` at
  ``until`` - 1 ms, i.e. samples in ``[since, until)`` at millisecond resolution). Exactly what
  was scraped; the volume grows with the scrape rate.
- ``step_s=s``: ``query_range`` of ``last_over_time(m[s])`` on the grid ``since + k * s``; each
  point is the newest sample in the step ending at the grid point (a bare selector would
  repeat a vanished series, e.g. a GPU's previous pod label, for the whole 5 min look-back).
  When ``s`` equals the scrape interval and the grid lands on the scrape times the rows are
  the raw ones; otherwise each row's ``ts`` is the grid time, up to one step after the
  sample's own time, and a sample may be repeated or skipped: that is the step-alignment
  error docs/scaling.md quantifies.

Histograms (:class:`PromQLServerSource`): vLLM's cumulative ``_bucket`` / ``_sum`` / ``_count``
series (label ``model_name``, summed over ``engine`` and ``finished_reason``) per scrape, as a
long table the analytics turn into ``server_windows`` with the same maths as the collector.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

import numpy as np
import polars as pl
import pyarrow as pa

from sits_observe.domain.histogram_bounds import parse_le
from sits_observe.domain.schema import container_fields
from sits_observe.domain.schema.dcgm_fields import FIELDS
from sits_observe.domain.schema.table_spec import TS
from sits_observe.domain.tables import CONTAINER_SAMPLES, GPU_SAMPLES, conform
from sits_observe.errors import StoreError
from sits_observe.store.promql.client import PromQLClient, PromSeries

#: One millisecond: the resolution of Prometheus timestamps.
_MS = timedelta(milliseconds=1)


_FAMILY_OF = {f.column: f for f in FIELDS}
_FB_PARTS = ("fb_used_bytes", "fb_free_bytes", "fb_reserved_bytes")

#: gpu_samples column <- dcgm-exporter labels, first present wins (1.x names second).
IDENTITY_LABELS: dict[str, tuple[str, ...]] = {
    "node": ("Hostname", "hostname", "node"),
    "gpu_uuid": ("UUID", "uuid"),
    "gpu_index": ("gpu",),
    "device": ("device",),
    "model_name": ("modelName",),
    "pci_bus_id": ("pci_bus_id",),
    "driver_version": ("DCGM_FI_DRIVER_VERSION",),
    "mig_profile": ("GPU_I_PROFILE",),
    "mig_instance_id": ("GPU_I_ID",),
    "namespace": ("namespace", "pod_namespace"),
    "pod": ("pod", "pod_name"),
    "container": ("container", "container_name"),
}


def _label(labels: dict[str, str] | object, names: tuple[str, ...]) -> str | None:
    assert isinstance(labels, dict)
    for name in names:
        value = labels.get(name)
        if value:
            return str(value)
    return None


def _selector(families: Sequence[str], matchers: str) -> str:
    names = "|".join(families)
    extra = f",{matchers}" if matchers else ""
    return f'{{__name__=~"{names}"{extra}}}'


def _fetch(
    client: PromQLClient,
    selector: str,
    since: datetime,
    until: datetime,
    step_s: float | None,
) -> list[PromSeries]:
    """Raw samples in ``[since, until)`` (``step_s`` None) or the ``query_range`` grid."""
    if until <= since:
        raise StoreError(f"empty time range: since {since} is not before until {until}")
    if step_s is None:
        window_ms = max(1, round((until - since) / _MS))
        return client.query(f"{selector}[{window_ms}ms]", until - _MS)
    # last_over_time over one step, not the bare selector: a bare selector repeats a series
    # for the whole look-back (5 min) after it ended, e.g. the old pod label of a GPU.
    step_ms = max(1, round(step_s * 1000))
    return client.query_range(
        f"last_over_time({selector}[{step_ms}ms])", since, until - _MS, step_s
    )


def _long(
    series: list[PromSeries], label_columns: dict[str, tuple[str, ...]], value_name: str
) -> pl.DataFrame:
    """Series -> one row per point: ``t_ms``, the label columns and ``value_name``.

    Built column-wise in one frame (label values repeated per point by series index), not
    a frame per series: a fleet answer has thousands of short series.
    """
    kept = [s for s in series if s.values.size]
    lengths = np.fromiter((s.values.size for s in kept), np.int64, len(kept))
    codes = np.repeat(np.arange(len(kept)), lengths)
    data: dict[str, object] = {
        "t_ms": np.rint(np.concatenate([s.t_s for s in kept]) * 1000).astype(np.int64)
        if kept
        else np.zeros(0, np.int64),
    }
    for column, names in label_columns.items():
        per_series = pl.Series([_label(dict(s.labels), names) for s in kept], dtype=pl.Utf8)
        data[column] = per_series.gather(codes) if kept else per_series
    data[value_name] = np.concatenate([s.values for s in kept]) if kept else np.zeros(0)
    return pl.DataFrame(data, schema_overrides={"t_ms": pl.Int64, value_name: pl.Float64})


class PromQLGpuSource:
    """``gpu_samples`` rows from dcgm-exporter series in a Prometheus-compatible store.

    ``matchers`` are extra PromQL label matchers added to every selector (e.g.
    ``job="dcgm-exporter"`` to read one scrape job only; without it a GPU scraped by two jobs
    gives duplicate rows, of which the first is kept).
    """

    name = "promql"

    def __init__(self, client: PromQLClient, *, matchers: str = "") -> None:
        self._client = client
        self._matchers = matchers

    def gpu_samples(
        self,
        since: datetime,
        until: datetime,
        *,
        step_s: float | None = None,
        columns: Sequence[str] | None = None,
    ) -> pa.Table:
        """``gpu_samples`` rows in ``[since, until)`` (naive = UTC); see the module docstring.

        ``columns`` limits the value columns read (identity columns always come); ``fb_total_bytes``
        falls back to free + used + reserved like the collector.
        """
        wanted = list(columns) if columns is not None else [f.column for f in FIELDS]
        unknown = [
            c for c in wanted if c not in _FAMILY_OF and GPU_SAMPLES.schema.get_field_index(c) < 0
        ]
        if unknown:
            raise StoreError(f"unknown gpu_samples column(s) {unknown}")
        fields = [c for c in wanted if c in _FAMILY_OF]
        if "fb_total_bytes" in fields:
            fields += [c for c in _FB_PARTS if c not in fields]
        value = pl.col("value")
        reads = []
        for column in fields:
            spec = _FAMILY_OF[column]
            ok = value.is_finite() & (value >= spec.low) & (value <= spec.high)
            kept = pl.when(ok).then(value * spec.scale).otherwise(None)
            reads.append((column, _selector(spec.families, self._matchers), kept))
        wide = _wide(self._client, reads, IDENTITY_LABELS, (since, until), step_s)
        return GPU_SAMPLES.schema.empty_table() if wide is None else _gpu_table(wide, wanted)


def _wide(
    client: PromQLClient,
    reads: Sequence[tuple[str, str, pl.Expr]],
    labels: dict[str, tuple[str, ...]],
    window: tuple[datetime, datetime],
    step_s: float | None,
) -> pl.DataFrame | None:
    """One range read per column (``(column, selector, the value kept: NULL where
    invalid)``) as one wide frame keyed by time and ``labels``; None when no series came."""
    since, until = window
    frames = []
    for column, selector, kept in reads:
        frame = _long(_fetch(client, selector, since, until, step_s), labels, "value")
        if frame.height:
            frames.append(frame.with_columns(column=pl.lit(column), value=kept))
    if not frames:
        return None
    return pl.concat(frames).pivot(
        on="column", index=["t_ms", *labels], values="value", aggregate_function="first"
    )


def _gpu_table(wide: pl.DataFrame, wanted: list[str]) -> pa.Table:
    if "fb_total_bytes" in wanted:
        parts = [pl.col(c) for c in _FB_PARTS if c in wide.columns]
        summed = pl.sum_horizontal(parts) if parts else pl.lit(None, pl.Float64)
        total = pl.col("fb_total_bytes") if "fb_total_bytes" in wide.columns else pl.lit(None)
        wide = wide.with_columns(fb_total_bytes=pl.coalesce(total, summed))
    for spec in FIELDS:
        if spec.integer and spec.column in wide.columns:
            wide = wide.with_columns(pl.col(spec.column).round(0).cast(pl.Int64))
    wide = wide.with_columns(
        ts=pl.from_epoch("t_ms", time_unit="ms").cast(pl.Datetime("us")),
        gpu_index=pl.col("gpu_index").cast(pl.Int16, strict=False),
        mig_instance_id=pl.col("mig_instance_id").cast(pl.Int32, strict=False),
        source=pl.lit("promql"),
    ).drop("t_ms")
    keep = [c for c in wide.columns if c in GPU_SAMPLES.schema.names]
    keep = [c for c in keep if c not in _FAMILY_OF or c in wanted]
    table = wide.select(keep).sort("ts", "node", "gpu_uuid", nulls_last=True).to_arrow()
    return conform("gpu_samples", table.cast(pa.schema([_field(table, n) for n in keep])))


def _field(table: pa.Table, name: str) -> pa.Field:
    if name == "ts":
        return pa.field(name, TS)
    target = GPU_SAMPLES.schema.field(name).type
    return pa.field(name, target)


# -- container (cgroup) samples -----------------------------------------------------------

_CONTAINER_FAMILY_OF = {f.column: f for f in container_fields.FAMILIES}

#: container_samples column <- labels (the agent's first; kube-state-metrics style second).
CONTAINER_LABELS: dict[str, tuple[str, ...]] = {
    column: (label,) for label, column in container_fields.LABELS
}

#: kube-state-metrics' container info series: namespace, pod, container, container_id.
KSM_CONTAINER_INFO = "kube_pod_container_info"


class PromQLContainerSource:
    """``container_samples`` rows from the node agent's cgroup families (module docstring).

    ``matchers`` are added to every container selector (e.g. ``job="sits-agent"``); the
    ``kube_pod_container_info`` look-up uses ``info_matchers`` instead (kube-state-metrics is
    another job).
    """

    name = "promql"

    def __init__(
        self, client: PromQLClient, *, matchers: str = "", info_matchers: str = ""
    ) -> None:
        self._client = client
        self._matchers = matchers
        self._info_matchers = info_matchers

    def container_samples(
        self,
        since: datetime,
        until: datetime,
        *,
        step_s: float | None = None,
        columns: Sequence[str] | None = None,
    ) -> pa.Table:
        """``container_samples`` rows in ``[since, until)`` (naive = UTC); ``columns`` limits
        the value columns read (identity columns always come)."""
        wanted = list(columns) if columns is not None else list(_CONTAINER_FAMILY_OF)
        unknown = [c for c in wanted if CONTAINER_SAMPLES.schema.get_field_index(c) < 0]
        if unknown:
            raise StoreError(f"unknown container_samples column(s) {unknown}")
        extra = 'container_id!=""' + (f",{self._matchers}" if self._matchers else "")
        value = pl.col("value")
        reads = []
        for column in [c for c in wanted if c in _CONTAINER_FAMILY_OF]:
            spec = _CONTAINER_FAMILY_OF[column]
            ok = value.is_finite() & ~(pl.lit(spec.zero_is_null) & (value == 0))
            reads.append((column, _selector([spec.name], extra), pl.when(ok).then(value)))
        wide = _wide(self._client, reads, CONTAINER_LABELS, (since, until), step_s)
        if wide is None:
            return CONTAINER_SAMPLES.schema.empty_table()
        wide = self._attribute(wide, since, until)
        return _container_table(wide, wanted)

    def _attribute(self, wide: pl.DataFrame, since: datetime, until: datetime) -> pl.DataFrame:
        """Fill NULL namespace / pod / container from ``kube_pod_container_info`` (a series of
        each container id in the window; runtime prefix ``containerd://`` stripped). Values a
        row already has are kept, as the service's attribution keeps them."""
        if wide.filter(pl.col("pod").is_null()).height == 0:
            return wide
        selector = _selector([KSM_CONTAINER_INFO], self._info_matchers)
        # One point per info series (its newest in the window), not every scrape of it.
        window_ms = max(1, round((until - since) / _MS))
        series = self._client.query(f"last_over_time({selector}[{window_ms}ms])", until - _MS)
        info = _long(series, {"container_id": ("container_id",), **_KSM_NAMES}, "value")
        if info.height == 0:
            return wide
        names = (
            info.filter(pl.col("container_id").is_not_null())
            .with_columns(pl.col("container_id").str.replace(r"^[a-z0-9-]+://", ""))
            .group_by("container_id")
            .first()
            .select("container_id", *(pl.col(c).alias(f"_{c}") for c in _KSM_NAMES))
        )
        wide = wide.join(names, on="container_id", how="left")
        return wide.with_columns(pl.coalesce(c, f"_{c}").alias(c) for c in _KSM_NAMES).drop(
            [f"_{c}" for c in _KSM_NAMES]
        )


_KSM_NAMES: dict[str, tuple[str, ...]] = {
    "namespace": ("namespace",),
    "pod": ("pod",),
    "container": ("container",),
}


def _container_table(wide: pl.DataFrame, wanted: list[str]) -> pa.Table:
    wide = wide.with_columns(ts=pl.from_epoch("t_ms", time_unit="ms").cast(pl.Datetime("us")))
    for spec in container_fields.FAMILIES:
        if spec.integer and spec.column in wide.columns:
            wide = wide.with_columns(pl.col(spec.column).round(0).cast(pl.Int64))
    keep = [
        c
        for c in CONTAINER_SAMPLES.schema.names
        if c in wide.columns and (c not in _CONTAINER_FAMILY_OF or c in wanted)
    ]
    table = wide.select(keep).sort("ts", "node", "container_id", nulls_last=True).to_arrow()
    schema = pa.schema(
        [pa.field(n, TS if n == "ts" else CONTAINER_SAMPLES.schema.field(n).type) for n in keep]
    )
    return conform("container_samples", table.cast(schema))


# -- inference-server histograms -----------------------------------------------------------

#: vLLM families (vllm/v1/metrics/loggers.py); see sits_observe.collectors.inference.vllm.
VLLM_E2E = "vllm:e2e_request_latency_seconds"
VLLM_RUNNING = "vllm:num_requests_running"
VLLM_WAITING = "vllm:num_requests_waiting"
VLLM_KV = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")

#: Snapshot group column <- labels (first present wins).
SERVER_LABELS: dict[str, tuple[str, ...]] = {
    "model": ("model_name",),
    "namespace": ("namespace", "kubernetes_namespace"),
    "pod": ("pod", "kubernetes_pod_name"),
    "node": ("node", "kubernetes_node"),
}
_GROUP = list(SERVER_LABELS)

#: Columns of :meth:`PromQLServerSource.histogram_snapshots`.
SNAPSHOT_SCHEMA = pa.schema(
    [
        ("ts", TS),
        ("server", pa.string()),
        ("model", pa.string()),
        ("namespace", pa.string()),
        ("pod", pa.string()),
        ("node", pa.string()),
        ("le", pa.float64()),
        ("cumulative", pa.float64()),
        ("sum_s", pa.float64()),
        ("count", pa.float64()),
        ("requests_running", pa.float64()),
        ("requests_waiting", pa.float64()),
        ("kv_cache_usage_ratio", pa.float64()),
    ]
)


class PromQLServerSource:
    """Cumulative vLLM end-to-end latency histograms per scrape (or per step), per model/pod.

    Series of several engines of one server (label ``engine``) are summed, as the collector
    does; gauges are summed (running, waiting) or averaged (KV-cache usage).
    """

    name = "promql"

    def __init__(self, client: PromQLClient, *, matchers: str = "") -> None:
        self._client = client
        self._matchers = matchers

    def histogram_snapshots(
        self, since: datetime, until: datetime, *, step_s: float | None = None
    ) -> pa.Table:
        """One row per (time, group, bucket) in :data:`SNAPSHOT_SCHEMA`, sorted."""
        labels = {**SERVER_LABELS, "le": ("le",)}
        buckets = self._read(
            f"{VLLM_E2E}_bucket", since, until, step_s, labels=labels, value_name="cumulative"
        )
        if buckets.height == 0:
            return SNAPSHOT_SCHEMA.empty_table()
        buckets = (
            buckets.with_columns(pl.col("le").map_elements(parse_le, return_dtype=pl.Float64))
            .filter(pl.col("le").is_not_null())
            .group_by("t_ms", *_GROUP, "le")
            .agg(pl.col("cumulative").sum())
        )
        out = buckets
        extra = [
            (f"{VLLM_E2E}_sum", "sum_s", "sum"),
            (f"{VLLM_E2E}_count", "count", "sum"),
            (VLLM_RUNNING, "requests_running", "sum"),
            (VLLM_WAITING, "requests_waiting", "sum"),
        ]
        for family, column, _how in extra:
            part = self._read(family, since, until, step_s, labels=SERVER_LABELS, value_name=column)
            part = part.group_by("t_ms", *_GROUP).agg(pl.col(column).sum())
            out = out.join(part, on=["t_ms", *_GROUP], how="left", nulls_equal=True)
        kv = self._read(
            "|".join(VLLM_KV), since, until, step_s, labels=SERVER_LABELS, value_name="kv"
        )
        kv = kv.group_by("t_ms", *_GROUP).agg(pl.col("kv").mean().alias("kv_cache_usage_ratio"))
        out = out.join(kv, on=["t_ms", *_GROUP], how="left", nulls_equal=True)
        out = out.with_columns(
            ts=pl.from_epoch("t_ms", time_unit="ms").cast(pl.Datetime("us")),
            server=pl.lit("vllm"),
        ).sort([*_GROUP, "t_ms", "le"], nulls_last=True)
        return out.select(SNAPSHOT_SCHEMA.names).to_arrow().cast(SNAPSHOT_SCHEMA)

    def _read(
        self,
        family: str,
        since: datetime,
        until: datetime,
        step_s: float | None,
        *,
        labels: dict[str, tuple[str, ...]],
        value_name: str,
    ) -> pl.DataFrame:
        selector = _selector(family.split("|"), self._matchers)
        frame = _long(_fetch(self._client, selector, since, until, step_s), labels, value_name)
        return frame.filter(pl.col(value_name).is_finite())
