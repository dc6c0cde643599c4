"""Report ``trends``: GPUs (or nodes) grouped by how their framebuffer occupancy moves.

Series of ``fb_used_ratio`` per GPU or node, bucketed, turned into five features (level,
slope per hour, residual spread, daily swing, sharp drops per hour) and clustered with DBSCAN
(docs/analytics/trends.md). The main table has one row per cluster, largest first, its
members named as people know GPUs (``node/index (model)``; the series keys, GPU UUIDs or node
names, in ``member_keys``); the series DBSCAN left out of every cluster are the ``noise``
table; eps, its source, min_samples and the series dropped before clustering are facts.

Two sources: a store (``gpu_samples`` and the ``gpu_samples_1m`` minute roll-ups) or a
Prometheus-compatible store holding dcgm-exporter series (``--promql-url``, docs/scaling.md).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pydantic import Field

from sits_observe.analytics.source import OCCUPANCY_COLUMNS, occupancy_from_samples
from sits_observe.analytics.trends.clusters import TrendCluster, TrendClusters, cluster_trends
from sits_observe.analytics.trends.series import (
    OccupancySeries,
    TrendLevel,
    read_newest_occupancy,
    read_occupancy_series,
)
from sits_observe.analytics.trends.settings import TrendSettings
from sits_observe.domain.units import Unit
from sits_observe.errors import NoDataError
from sits_observe.reports.inventory.names import gpu_labels, gpu_labels_of
from sits_observe.reports.result import Report, col, table_of
from sits_observe.reports.spec import PromQLReader, ReportSpec, require_rows
from sits_observe.reports.window import Window
from sits_observe.store import Store
from sits_observe.store.promql.source import PromQLGpuSource

FILLED_BY = "`sits-observe ingest dcgm`, the node agent or `sits-observe demo`"
SIGNAL = "fb_used_ratio (framebuffer occupancy, bucket mean)"
#: Members named in the table's cell (all of them in ``members``, shown by ``-o wide``).
SHOWN_MEMBERS = 1


class TrendsQuery(TrendSettings):
    """Settings of the ``trends`` report."""

    level: TrendLevel = Field(TrendLevel.gpu, description="one series per GPU or per node")
    bucket_s: int | None = Field(
        None,
        ge=1,
        le=86_400,
        description="bucket width; none = about 240 points over the data's span, 1-60 s",
    )


_FEATURES = (
    col("level", "used", Unit.ratio),
    col("slope_per_h", "slope/h", Unit.ratio),
    col("resid_std", "resid sd", Unit.ratio, wide=True),
    col("daily_amplitude", "daily ±", Unit.ratio, wide=True),
    col("drops_per_h", "drops/h", Unit.number, wide=True),
)
_CLUSTERS = (
    col("cluster", "cluster", Unit.integer),
    col("size", "size", Unit.integer),
    col("pattern", "pattern"),
    *_FEATURES,
    col("first_members", "members"),
    col("members", "all members", wide=True),
    col("member_keys", "member keys", wide=True),
)
_NOISE = (
    col("series", "series"),
    col("key", "key", wide=True),
    col("pattern", "pattern"),
    *_FEATURES,
    col("points", "points", Unit.integer, wide=True),
)


def build(store: Store, window: Window, query: TrendsQuery) -> Report:
    """The ``trends`` report over ``window`` of ``store``."""
    _require_samples(store, window)
    result = trend_clusters(store, window, query, level=query.level, bucket_s=query.bucket_s)
    labels = gpu_labels(store, window) if query.level is TrendLevel.gpu else {}
    return report_of(window, result, labels)


def trend_clusters(
    store: Store,
    window: Window,
    settings: TrendSettings,
    *,
    level: TrendLevel = TrendLevel.gpu,
    bucket_s: int | None = None,
) -> TrendClusters:
    """DBSCAN clusters of the framebuffer-occupancy series over ``window``: the report's
    clusters and noise (the exporter's ``sits_gpu_trend_cluster``); an empty window gives
    no cluster."""
    series = read_occupancy_series(
        store, since=window.since, until=window.until, level=level, bucket_s=bucket_s
    )
    return cluster_trends(series, settings)


def newest_occupancy(store: Store, window: Window, bucket_s: int) -> OccupancySeries:
    """The newest point of each GPU's occupancy series over ``window`` in buckets of
    ``bucket_s`` (:func:`~sits_observe.analytics.trends.series.read_newest_occupancy`: the
    last point of the series :func:`trend_clusters` reads at that bucket, read from that
    bucket's rows only); the exporter's ``sits_gpu_framebuffer_used_ratio``."""
    return read_newest_occupancy(
        store, since=window.since, until=window.until, level=TrendLevel.gpu, bucket_s=bucket_s
    )


def build_promql(reader: PromQLReader, window: Window, query: TrendsQuery) -> Report:
    """The ``trends`` report from dcgm-exporter series in a Prometheus-compatible store."""
    assert window.since is not None  # run_promql_report requires --since
    source = PromQLGpuSource(reader.client, matchers=reader.matchers)
    samples = source.gpu_samples(
        window.since, window.until, step_s=reader.step_s, columns=list(OCCUPANCY_COLUMNS)
    )
    if samples.num_rows == 0:
        raise NoDataError(
            f"no dcgm-exporter framebuffer series in the window {window.describe()} at "
            f"{reader.client.base_url}"
        )
    series = occupancy_from_samples(samples, level=query.level, bucket_s=query.bucket_s)
    labels = gpu_labels_of(samples) if query.level is TrendLevel.gpu else {}
    return report_of(window, cluster_trends(series, query), labels)


def _require_samples(store: Store, window: Window) -> None:
    """Raw samples or minute roll-ups in the window (the message is the raw table's)."""
    try:
        require_rows(store, window, "gpu_samples", FILLED_BY)
    except NoDataError as missing:
        try:
            require_rows(store, window, "gpu_samples_1m", FILLED_BY)
        except NoDataError:
            raise missing from None


def report_of(window: Window, result: TrendClusters, labels: Mapping[str, str]) -> Report:
    """The report of a clustering; ``labels`` names series keys (GPU UUIDs) for people."""

    def name(key: str) -> str:
        return labels.get(key, key)

    rows = [_cluster_row(c, name) for c in result.clusters]
    noise = [_noise_row(c, name(c.members[0].key)) for c in result.noise]
    level = result.level.value
    main = table_of("clusters", f"Fragmentation trends by {level}", rows, _CLUSTERS)
    others = (table_of("noise", "Noise: series in no cluster", noise, _NOISE),)
    notes = (
        f"{result.n_series} {level} series, {result.bucket_s} s buckets; eps "
        f"{result.eps.eps:.4g} ({result.eps.source}), min_samples {result.min_samples}",
        *result.notes,
    )
    facts = {
        "signal": SIGNAL,
        "level": level,
        "bucket_s": result.bucket_s,
        "n_series": result.n_series,
        "eps": result.eps.eps,
        "eps_source": result.eps.source,
        "k": result.eps.k,
        "knee_strength": result.eps.knee_strength,
        "min_samples": result.min_samples,
        "clusters": len(result.clusters),
        "noise": len(result.noise),
        "dropped": dict(result.dropped),
        "dropped_keys": list(result.dropped_keys),
    }
    return Report("trends", window, main, others, notes, facts)


def _cluster_row(c: TrendCluster, name: Callable[[str], str]) -> dict[str, Any]:
    # A member whose own shape is not among the cluster's words (the cluster is named by what
    # two thirds of its members earn) says its own: "gpu-node-1/0 (A100) [flat]".
    names = [
        name(m.key) if not words or words[0] in c.words else f"{name(m.key)} [{words[0]}]"
        for m, words in zip(c.members, c.member_words, strict=True)
    ]
    return {
        "cluster": c.label,
        "size": len(c.members),
        "pattern": ", ".join(c.words),
        "words": list(c.words),
        "description": c.description,
        **c.centroid,
        "first_members": _first(names),
        "members": names,
        "member_keys": [m.key for m in c.members],
        "member_features": [
            {"key": m.key, "node": m.node, "points": m.points, "span_h": m.span_h}
            | m.features
            | {"words": list(words)}
            for m, words in zip(c.members, c.member_words, strict=True)
        ],
    }


def _first(names: list[str]) -> str:
    """The first :data:`SHOWN_MEMBERS` name(s) and how many more: what a table cell holds."""
    shown = ", ".join(names[:SHOWN_MEMBERS])
    return shown if len(names) <= SHOWN_MEMBERS else f"{shown} +{len(names) - SHOWN_MEMBERS}"


def _noise_row(c: TrendCluster, label: str) -> dict[str, Any]:
    member = c.members[0]
    return {
        "series": label,
        "key": member.key,
        "node": member.node,
        "pattern": ", ".join(c.words),
        "words": list(c.words),
        "description": c.description,
        **c.centroid,
        "points": member.points,
        "span_h": member.span_h,
    }


SPEC = ReportSpec(
    name="trends",
    summary="Cluster GPUs (or nodes) by the trend of their framebuffer occupancy (DBSCAN).",
    settings=TrendsQuery,
    reads=("gpu_samples", "gpu_samples_1m"),
    build=build,
    promql=build_promql,
)
