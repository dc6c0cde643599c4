"""The elastic rule's inputs, computed once: per GPU over the last 5 s of its samples, and per
pod (its busiest GPU). ``classes --view elastic`` (:func:`elastic_rows`) and the controller's
store adapter (:mod:`sits_observe.control.signals.store`) both read them from here.

SPEC "Elastic rule": "when GPU utilisation > 90% and link saturation > 75% ... Inputs are a 5 s
sliding window (memory growth slope, bandwidth variance)". Definitions, per GPU, over the
window ``(end - elastic_window_s, end]`` with ``end`` the GPU's last sample in the rows read:

- samples: one per timestamp (a GPU shared by two pods has a row per pod at each time with
  the same device values; each column takes its first non-null value);
- ``gpu_util_ratio``: mean utilisation of the samples;
- ``link_saturation_ratio``: per sample, the busier link's traffic (tx + rx) over the
  product's bidirectional capacity (NVLink only where the product has it), capped at 1, then
  the mean over the window: the time-average of how saturated the GPU's busiest link was. A
  link whose counters a sample lacks is not measured in that sample (not zero traffic); a
  rate above capacity (a counter artefact) counts as saturated, not more. This is the
  per-sample definition the analytics layer always had; the controller's former SQL took the
  ratio of window means instead (missing counters as 0 traffic, the cap after averaging),
  which read a link that alternated between idle and over capacity as saturated throughout;
- ``memory_growth_bytes_per_s``: least-squares slope of ``fb_used_bytes`` against time;
- ``link_bandwidth_variance``: sample variance (ddof 1) of NVLink + PCIe traffic, (bytes/s)^2;
- ``link_capacity_bytes_per_s``: the product's NVLink capacity, else its PCIe capacity (the
  rule's hardware maximum for the bandwidth quota); null for an unknown product, which also
  leaves the saturation unmeasured.

Units: ratios 0-1, bytes, bytes/s, timestamps naive UTC.
"""

from __future__ import annotations

from datetime import datetime

import polars as pl
import pyarrow as pa

from sits_observe.analytics.classes import rules
from sits_observe.analytics.classes.settings import ClassSettings
from sits_observe.analytics.topology.settings import DEFAULT_LINKS, LinkCapacity, find_link_capacity
from sits_observe.domain.times import utc_naive
from sits_observe.store.duck import Store

SAMPLE_COLUMNS = (
    "ts",
    "gpu_uuid",
    "node",
    "model_name",
    "namespace",
    "pod",
    "gpu_util_ratio",
    "fb_used_bytes",
    "nvlink_tx_bytes_per_s",
    "nvlink_rx_bytes_per_s",
    "pcie_tx_bytes_per_s",
    "pcie_rx_bytes_per_s",
)
_DEVICE = [c for c in SAMPLE_COLUMNS if c not in ("ts", "gpu_uuid", "namespace", "pod")]

INPUT_SCHEMA: dict[str, pl.DataType] = {
    "gpu_uuid": pl.String(),
    "node": pl.String(),
    "model_name": pl.String(),
    "window_end_at": pl.Datetime("us"),
    "samples": pl.UInt32(),
    "gpu_util_ratio": pl.Float64(),
    "link_saturation_ratio": pl.Float64(),
    "link_capacity_bytes_per_s": pl.Float64(),
    "memory_growth_bytes_per_s": pl.Float64(),
    "link_bandwidth_variance": pl.Float64(),
    # The GPU's latest used memory in the window, bytes.
    "fb_used_bytes": pl.Int64(),
    # The pods labelled on the GPU's samples in the window.
    "pods": pl.List(pl.Struct({"namespace": pl.String(), "pod": pl.String()})),
}

POD_SCHEMA: dict[str, pl.DataType] = {
    "namespace": pl.String(),
    "pod": pl.String(),
    "gpu_util_ratio": pl.Float64(),
    "link_saturation_ratio": pl.Float64(),
    "link_capacity_bytes_per_s": pl.Float64(),
}

_SAMPLES_SQL = f"""
WITH r AS (
    SELECT {", ".join(SAMPLE_COLUMNS)} FROM gpu_samples
    WHERE gpu_uuid IS NOT NULL AND (?::TIMESTAMP IS NULL OR ts >= ?)
      AND (?::TIMESTAMP IS NULL OR ts < ?)
), last AS (SELECT gpu_uuid, max(ts) AS end_ts FROM r GROUP BY gpu_uuid)
SELECT r.* FROM r JOIN last USING (gpu_uuid)
WHERE r.ts > last.end_ts - to_microseconds(?::BIGINT)
"""


def load_elastic_samples(
    store: Store, since: datetime | None, until: datetime | None, settings: ClassSettings
) -> pl.DataFrame:
    """The :data:`SAMPLE_COLUMNS` of ``gpu_samples`` in ``since <= ts < until`` (None: open),
    trimmed in SQL to each GPU's last window (:func:`elastic_inputs` applies it anyway)."""
    lo = utc_naive(since) if since is not None else None
    hi = utc_naive(until) if until is not None else None
    window_us = round(settings.elastic_window_s * 1_000_000)
    return pl.DataFrame(store.query(_SAMPLES_SQL, [lo, lo, hi, hi, window_us]))


def _capacities(models: pl.Series, links: tuple[LinkCapacity, ...]) -> pl.DataFrame:
    names = models.drop_nulls().unique().to_list()
    found = [find_link_capacity(links, str(name)) for name in names]
    return pl.DataFrame(
        {
            "model_name": names,
            "_nv_cap": [None if f is None else f.nvlink_bytes_per_s for f in found],
            "_pcie_cap": [None if f is None else f.pcie_bytes_per_s for f in found],
        },
        schema={"model_name": pl.String(), "_nv_cap": pl.Float64(), "_pcie_cap": pl.Float64()},
    )


def elastic_inputs(
    samples: pl.DataFrame,
    settings: ClassSettings,
    links: tuple[LinkCapacity, ...] = DEFAULT_LINKS,
) -> pl.DataFrame:
    """The elastic inputs of every GPU in ``samples`` (:data:`SAMPLE_COLUMNS`; see the module
    docstring), one row per GPU in :data:`INPUT_SCHEMA`."""
    if samples.height == 0:
        return pl.DataFrame(schema=INPUT_SCHEMA)
    window = pl.duration(microseconds=round(settings.elastic_window_s * 1_000_000))
    rows = samples.filter(pl.col("ts") > pl.col("ts").max().over("gpu_uuid") - window).with_columns(
        pl.col("ts").cast(pl.Datetime("us"))
    )
    pods = (
        rows.filter(pl.col("pod").is_not_null())
        .group_by("gpu_uuid")
        .agg(pl.struct("namespace", "pod").unique().sort().alias("pods"))
    )
    per_ts = rows.group_by("gpu_uuid", "ts").agg(pl.col(c).drop_nulls().first() for c in _DEVICE)
    per_ts = per_ts.with_columns(pl.col("model_name").drop_nulls().first().over("gpu_uuid")).join(
        _capacities(per_ts.get_column("model_name"), links), on="model_name", how="left"
    )
    nv = pl.col("nvlink_tx_bytes_per_s").fill_null(0) + pl.col("nvlink_rx_bytes_per_s").fill_null(0)
    pcie = pl.col("pcie_tx_bytes_per_s").fill_null(0) + pl.col("pcie_rx_bytes_per_s").fill_null(0)
    has_nv = pl.any_horizontal(
        pl.col("nvlink_tx_bytes_per_s").is_not_null(), pl.col("nvlink_rx_bytes_per_s").is_not_null()
    )
    has_pcie = pl.any_horizontal(
        pl.col("pcie_tx_bytes_per_s").is_not_null(), pl.col("pcie_rx_bytes_per_s").is_not_null()
    )
    busiest = pl.max_horizontal(
        pl.when(has_pcie).then(pcie / pl.col("_pcie_cap")),
        pl.when(has_nv & (pl.col("_nv_cap") > 0)).then(nv / pl.col("_nv_cap")),
    )
    per_sample = per_ts.sort("gpu_uuid", "ts").with_columns(
        busiest.clip(0.0, 1.0).alias("_saturation"),
        pl.when(has_nv | has_pcie).then(nv + pcie).alias("_traffic"),
        ((pl.col("ts") - pl.col("ts").max().over("gpu_uuid")).dt.total_microseconds() / 1e6).alias(
            "_t"
        ),
    )
    out = per_sample.group_by("gpu_uuid").agg(
        pl.col("node").drop_nulls().first(),
        pl.col("model_name").first(),
        pl.col("ts").max().alias("window_end_at"),
        pl.len().alias("samples"),
        pl.col("gpu_util_ratio").mean(),
        pl.col("_saturation").mean().alias("link_saturation_ratio"),
        pl.when(pl.col("_nv_cap").first() > 0)
        .then(pl.col("_nv_cap").first())
        .otherwise(pl.col("_pcie_cap").first())
        .alias("link_capacity_bytes_per_s"),
        _slope(pl.col("_t"), pl.col("fb_used_bytes")).alias("memory_growth_bytes_per_s"),
        pl.col("_traffic").drop_nulls().var(ddof=1).alias("link_bandwidth_variance"),
        pl.col("fb_used_bytes").drop_nulls().last(),
    )
    return (
        out.join(pods, on="gpu_uuid", how="left")
        .select(list(INPUT_SCHEMA))
        .cast(INPUT_SCHEMA)  # type: ignore[arg-type]
        .sort("gpu_uuid")
    )


def _slope(t: pl.Expr, y: pl.Expr) -> pl.Expr:
    """Least-squares slope of ``y`` against ``t`` (seconds) per group, over the rows where
    ``y`` is measured; null with fewer than two distinct times."""
    known = y.is_not_null()
    tt, yy = t.filter(known), y.filter(known).cast(pl.Float64)
    spread = ((tt - tt.mean()) ** 2).sum()
    return pl.when(spread > 0).then(((tt - tt.mean()) * (yy - yy.mean())).sum() / spread)


def pod_elastic_inputs(inputs: pl.DataFrame) -> pl.DataFrame:
    """Per pod (:data:`POD_SCHEMA`) from :func:`elastic_inputs`: a pod on several GPUs takes
    its busiest GPU's utilisation and saturation and the smallest link capacity."""
    if inputs.height == 0:
        return pl.DataFrame(schema=POD_SCHEMA)
    return (
        inputs.select(
            "pods", "gpu_util_ratio", "link_saturation_ratio", "link_capacity_bytes_per_s"
        )
        .explode("pods")
        .unnest("pods")
        .filter(pl.col("namespace").is_not_null() & pl.col("pod").is_not_null())
        .group_by("namespace", "pod")
        .agg(
            pl.col("gpu_util_ratio").max(),
            pl.col("link_saturation_ratio").max(),
            pl.col("link_capacity_bytes_per_s").min(),
        )
        .select(list(POD_SCHEMA))
        .cast(POD_SCHEMA)  # type: ignore[arg-type]
        .sort("namespace", "pod")
    )


ROW_COLUMNS = (
    "node",
    "gpu_uuid",
    "pods",
    "tier",
    "samples",
    "gpu_util_ratio",
    "link_saturation_ratio",
    "memory_growth_bytes_per_s",
    "link_bandwidth_variance",
    "triggered",
    "memory_quota_bytes",
    "proposed_memory_quota_bytes",
    "bandwidth_quota_bytes_per_s",
    "proposed_bandwidth_quota_bytes_per_s",
    "reason",
)


def elastic_rows(
    store: Store,
    since: datetime | None,
    until: datetime | None,
    settings: ClassSettings,
    *,
    tier: str = "silver",
    links: tuple[LinkCapacity, ...] = DEFAULT_LINKS,
) -> pa.Table:
    """The elastic rule applied to ``tier``'s quotas on every GPU with samples in ``since <= ts
    < until`` (naive UTC; None: open), one row per GPU in :data:`ROW_COLUMNS` order.

    Each GPU is judged on the last ``elastic_window_s`` of its samples in that range. The
    memory minimum is the GPU's latest used memory (the quota never shrinks below what it
    holds); the bandwidth maximum is the product's link capacity, else the tier's quota (no
    increase on an unknown product). An unknown tier is an ``UnknownNameError``.
    """
    samples = load_elastic_samples(store, since, until, settings)
    return elastic_rows_from(samples, settings, tier=tier, links=links)


def elastic_rows_from(
    samples: pl.DataFrame,
    settings: ClassSettings,
    *,
    tier: str = "silver",
    links: tuple[LinkCapacity, ...] = DEFAULT_LINKS,
) -> pa.Table:
    """:func:`elastic_rows` on :data:`SAMPLE_COLUMNS` rows already read (e.g. from a PromQL
    store); each GPU is still judged on the last ``elastic_window_s`` of its rows."""
    quota = rules.tier_quota(tier, settings)
    inputs = elastic_inputs(samples, settings, links)
    memory = pl.lit(quota.memory_bytes, pl.Int64)
    bandwidth = pl.lit(quota.bandwidth_bytes_per_s, pl.Float64)
    fires = rules.elastic_contended(
        pl.col("gpu_util_ratio"), pl.col("link_saturation_ratio"), settings
    )
    frame = inputs.select(
        "node",
        "gpu_uuid",
        pl.col("pods")
        .list.eval(pl.element().struct.field("pod"))
        .list.unique()
        .list.sort()
        .list.join(",")
        .fill_null("")
        .alias("pods"),
        pl.lit(tier.lower()).alias("tier"),
        "samples",
        "gpu_util_ratio",
        "link_saturation_ratio",
        "memory_growth_bytes_per_s",
        "link_bandwidth_variance",
        fires.alias("triggered"),
        memory.alias("memory_quota_bytes"),
        pl.when(fires)
        .then(rules.elastic_memory_quota(memory, pl.col("fb_used_bytes").fill_null(0), settings))
        .otherwise(memory)
        .alias("proposed_memory_quota_bytes"),
        bandwidth.alias("bandwidth_quota_bytes_per_s"),
        pl.when(fires)
        .then(
            rules.elastic_bandwidth_quota(
                bandwidth, pl.col("link_capacity_bytes_per_s").fill_null(bandwidth), settings
            )
        )
        .otherwise(bandwidth)
        .alias("proposed_bandwidth_quota_bytes_per_s"),
        rules.elastic_reason(
            pl.col("gpu_util_ratio"), pl.col("link_saturation_ratio"), settings
        ).alias("reason"),
    )
    return frame.sort("node", "gpu_uuid", nulls_last=True).to_arrow()
