"""The heatmap and fragmentation pages' results, composed from the analytics functions.

Each function here is the same composition as the matching CLI command (``latency``,
``heatmap``, ``fragmentation --db``, ``smf``, ``trends``), reusing the CLI modules' document
builders so the app and the terminal show the same keys and numbers. Nothing is computed here
that the analytics do not compute; the only additions are shapes for charts.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pyarrow as pa

from sits_observe.analytics.fgd import fragmentation
from sits_observe.analytics.fgd_live import live_cluster
from sits_observe.analytics.fgd_workload import TypicalPodSettings, typical_pods
from sits_observe.analytics.heatmap import Heatmap, compute_heatmaps, heatmap_settings
from sits_observe.analytics.heatmap_json import HeatmapJson, heatmap_json
from sits_observe.analytics.latency import RequestSelection, exact_quantiles
from sits_observe.analytics.smf import SmfGrouping, SmfSettings, align_smf, read_smf_inputs
from sits_observe.analytics.trends import TrendClusters, TrendSettings, cluster_trends
from sits_observe.analytics.trends_series import OccupancySeries, TrendLevel, read_occupancy_series
from sits_observe.errors import ConfigError
from sits_observe.store import Store
from sits_observe.surfaces.cli.analyze_fragmentation import report_document
from sits_observe.surfaces.cli.analyze_trends import smf_summary_rows, trends_document

_NEWEST_REQUEST = "SELECT max(ts) FROM requests"
_NEWEST_GPU = """
SELECT max(t) FROM (SELECT max(ts) AS t FROM gpu_samples
                    UNION ALL SELECT max(minute) FROM gpu_samples_1m)
"""


def _back_from(store: Store, sql: str, window_s: float | None) -> datetime | None:
    """``window_s`` before the newest row (the CLI's ``--since``); None = everything."""
    if window_s is None:
        return None
    newest = store.scalar(sql)
    if not isinstance(newest, datetime):
        return None
    return newest - timedelta(seconds=window_s)


# -- latency and heatmap -----------------------------------------------------------------


@dataclass(frozen=True)
class LatencyView:
    """Exact quantiles per model and one heatmap per model, with knee and safe maximum."""

    quantiles: pa.Table
    heatmaps: dict[str, Heatmap]
    since: datetime | None

    def document(self, model: str) -> HeatmapJson:
        """The JSON form of ``model``'s heatmap (what ``heatmap --format json`` prints)."""
        return heatmap_json(self.heatmaps[model])


def latency_view(
    store: Store,
    *,
    window_s: float | None,
    slo_ms: float,
    latency_bin_ms: float = 100.0,
    throughput_bin_rps: float = 10.0,
    heatmap_window_s: float = 1.0,
    min_bin_requests: int = 20,
) -> LatencyView:
    """``latency --by model`` and ``heatmap --by model --slo-ms`` over the window."""
    settings = heatmap_settings(
        window_s=heatmap_window_s,
        latency_bin_ms=latency_bin_ms,
        throughput_bin_rps=throughput_bin_rps,
        slo_ms=slo_ms,
        min_bin_requests=min_bin_requests,
    )
    since = _back_from(store, _NEWEST_REQUEST, window_s)
    selection = RequestSelection(since=since)
    quantiles = exact_quantiles(store, by="model", selection=selection)
    maps = compute_heatmaps(store, settings, selection=selection, by="model")
    return LatencyView(quantiles, {str(h.group): h for h in maps if h.group is not None}, since)


def heatmap_cells(doc: HeatmapJson) -> list[dict[str, Any]]:
    """The cells with their upper edges, for a rectangle chart."""
    width_ms, width_rps = doc["latency_bin_ms"], doc["throughput_bin_rps"]
    return [
        {
            "throughput_lo_rps": c["throughput_lo_rps"],
            "throughput_hi_rps": c["throughput_lo_rps"] + width_rps,
            "latency_lo_ms": c["latency_lo_ms"],
            "latency_hi_ms": c["latency_lo_ms"] + width_ms,
            "count": c["count"],
        }
        for c in doc["cells"]
    ]


# -- fragmentation: FGD, SMF, trend clusters -------------------------------------------------


def fgd_document(store: Store, *, since_s: float) -> dict[str, Any]:
    """``sits-observe fragmentation --db --all --format json`` on ``store``."""
    live = live_cluster(store, since_s=since_s)
    try:
        workload = typical_pods(live.shapes, TypicalPodSettings())
    except ValueError as exc:
        raise ConfigError(f"cannot build the typical-pod set: {exc}") from exc
    report = fragmentation(live.state, workload)
    source = {
        "nodes_at": live.nodes_at.isoformat(),
        "pods_at": live.pods_at.isoformat() if live.pods_at else None,
        "since_s": since_s,
        "placed_pods": live.pods_placed,
    }
    return report_document(
        report, live.state, workload, source=source, warnings=list(live.warnings), node_limit=None
    )


def smf_rows(
    store: Store, *, window_s: float | None, by: SmfGrouping = SmfGrouping.gpu
) -> list[dict[str, Any]]:
    """``sits-observe smf --by BY --format json`` rows over the window."""
    settings = SmfSettings()
    since = _back_from(store, _NEWEST_GPU, window_s)
    inputs = read_smf_inputs(store, since=since, settings=settings)
    alignment = align_smf(
        inputs.gpu_samples, inputs.container_samples, inputs.gpu_processes, settings=settings
    )
    return smf_summary_rows(alignment, by, table=False)


@dataclass(frozen=True)
class TrendView:
    """The trend clusters, their JSON document and each series' points with its cluster."""

    clusters: TrendClusters
    document: dict[str, Any]
    points: pa.Table


def trend_view(store: Store, *, window_s: float | None) -> TrendView:
    """``sits-observe trends --level gpu`` over the window, with the series for a chart."""
    since = _back_from(store, _NEWEST_GPU, window_s)
    series = read_occupancy_series(store, since=since, level=TrendLevel.gpu)
    result = cluster_trends(series, TrendSettings())
    return TrendView(result, trends_document(result), _series_points(series, result))


def cluster_of(result: TrendClusters) -> dict[str, str]:
    """Series key -> cluster name (``cluster 0``, ``noise``)."""
    names = {m.key: f"cluster {c.label}" for c in result.clusters for m in c.members}
    names |= {c.members[0].key: "noise" for c in result.noise}
    return names


def _series_points(series: OccupancySeries, result: TrendClusters) -> pa.Table:
    names = cluster_of(result)
    codes = series.codes.tolist()
    return pa.table(
        {
            "gpu": [series.keys[c] for c in codes],
            "node": [series.nodes[c] for c in codes],
            "cluster": [names.get(series.keys[c], "left out") for c in codes],
            "t": pa.array((series.t_s * 1_000_000).astype("int64"), pa.int64()).cast(
                pa.timestamp("us")
            ),
            "fb_used_ratio": series.values.tolist(),
        }
    )
