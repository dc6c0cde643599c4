"""The heatmap from cumulative histograms: deltas per time bin, pooling, what is left out."""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np
import pyarrow as pa
import pytest

from sits_observe.analytics.heatmap.grid import HeatmapSettings
from sits_observe.analytics.heatmap.histograms import histogram_heatmaps
from sits_observe.collectors import histogram as hist
from sits_observe.store.promql.source import SNAPSHOT_SCHEMA

T0 = datetime(2026, 12, 1, 12, 0, 0)
BOUNDS = (0.5, 1.0, 2.0, float("inf"))


def _rows(
    pod: str, cumulative: list[list[int]], *, every_s: int = 10, model: str = "m", start: int = 0
) -> list[dict[str, object]]:
    """Snapshot rows of one series: ``cumulative[k]`` are the bucket counts at point k."""
    rows: list[dict[str, object]] = []
    for k, counts in enumerate(cumulative):
        ts = T0 + timedelta(seconds=start + k * every_s)
        for le, c in zip(BOUNDS, counts, strict=True):
            rows.append(
                {
                    "ts": ts,
                    "server": "vllm",
                    "model": model,
                    "namespace": "ns",
                    "pod": pod,
                    "node": "n1",
                    "le": le,
                    "cumulative": float(c),
                    "sum_s": float(counts[-1]) * 0.7,
                    "count": float(counts[-1]),
                }
            )
    return rows


def _table(*parts: list[dict[str, object]]) -> pa.Table:
    return pa.Table.from_pylist([r for p in parts for r in p], schema=SNAPSHOT_SCHEMA)


SETTINGS = HeatmapSettings(window_s=10, throughput_bin_rps=1.0, min_bin_requests=1)


def test_each_time_bin_is_the_difference_of_two_points() -> None:
    table = _table(_rows("p0", [[0, 0, 0, 0], [5, 8, 10, 10], [5, 10, 25, 30]]))
    (heatmap,) = histogram_heatmaps(table, SETTINGS).maps
    windows = heatmap.windows.to_pylist()
    assert [w["start"] for w in windows] == [T0, T0 + timedelta(seconds=10)]
    assert [w["count"] for w in windows] == [10, 20]
    assert [w["throughput_bin"] for w in windows] == [1, 2]  # 1 rps and 2 rps
    # the second bin's histogram is (0, 2, 13, 5) per bucket: P50 rank 10 in (1, 2]
    second = hist.build(list(zip(BOUNDS, [0, 2, 15, 20], strict=True)), 14.0, 20)
    p50 = hist.quantile(0.5, second)
    assert p50 is not None and windows[1]["p50_s"] == pytest.approx(p50.value)
    assert heatmap.requests == 30
    cells = heatmap.cells.to_pylist()
    assert [(c["throughput_bin"], c["latency_lo_ms"], c["count"]) for c in cells] == [
        (1, 0.0, 5),
        (1, 500.0, 3),
        (1, 1000.0, 2),
        (2, 500.0, 2),
        (2, 1000.0, 13),
        (2, 2000.0, 5),
    ]


def test_series_are_summed_per_time_bin_and_split_by_pod_when_asked() -> None:
    a = _rows("p0", [[0, 0, 0, 0], [5, 5, 5, 5]])
    b = _rows("p1", [[0, 0, 0, 0], [0, 10, 15, 15]])
    pooled = histogram_heatmaps(_table(a, b), SETTINGS).maps
    assert [h.requests for h in pooled] == [20]
    assert pooled[0].windows.column("throughput_bin").to_pylist() == [2]
    per_pod = histogram_heatmaps(_table(a, b), SETTINGS, by="pod").maps
    assert [(h.group, h.requests) for h in per_pod] == [("p0", 5), ("p1", 15)]


def test_gaps_resets_and_other_buckets_are_left_out_and_counted() -> None:
    gap = _rows("p0", [[0, 0, 0, 0], [1, 2, 3, 4]], every_s=20)  # two bins apart
    reset = _rows("p1", [[4, 4, 4, 4], [0, 1, 1, 1]])
    result = histogram_heatmaps(_table(gap, reset), SETTINGS)
    assert result.maps == ()
    assert sum(result.skipped.values()) == 2
    assert any("gap" in why for why in result.skipped)
    assert any("reset" in why for why in result.skipped)


def test_the_true_p95_lies_within_the_stated_error() -> None:
    rng = np.random.default_rng(4)
    values = rng.lognormal(0.0, 0.5, 400)
    counts = [int((values <= b).sum()) for b in BOUNDS]
    table = _table(_rows("p0", [[0, 0, 0, 0], counts]))
    result = histogram_heatmaps(table, HeatmapSettings(window_s=10, throughput_bin_rps=100))
    (heatmap,), (errors,) = result.maps, result.errors
    (b,) = heatmap.bins
    true = float(np.quantile(values, 0.95, method="inverted_cdf"))
    if np.isfinite(errors[0].p95_error_s):
        assert abs(b.p95_s - true) <= errors[0].p95_error_s
    else:  # in the +Inf bucket: the estimate is the highest bound, the truth above it
        assert true > b.p95_s


def test_a_p95_in_the_overflow_bucket_breaks_any_slo() -> None:
    # every request above the highest finite bound (2 s), SLO 10 s: unknown, so a breach
    table = _table(_rows("p0", [[0, 0, 0, 0], [0, 0, 0, 50]]))
    settings = HeatmapSettings(window_s=10, throughput_bin_rps=1.0, slo_ms=10_000)
    (heatmap,) = histogram_heatmaps(table, settings).maps
    assert heatmap.bins[0].p95_s == 2.0  # PromQL's value: the highest finite bound
    assert heatmap.safe_max is not None and heatmap.safe_max.value is None


def test_every_bucket_keeps_its_bounds_even_without_a_request() -> None:
    """Requests only in the first (<= 0.5 s) and the overflow (> 2 s) buckets: the two
    buckets between them have no cell, but their edges are the histogram's bounds, not
    multiples of ``latency_bin_ms``."""
    table = _table(_rows("p0", [[0, 0, 0, 0], [4, 4, 4, 10]]))
    (heatmap,) = histogram_heatmaps(table, SETTINGS).maps
    assert [c["latency_bin"] for c in heatmap.cells.to_pylist()] == [0, 3]
    assert heatmap.latency_edges_ms == (0.0, 500.0, 1000.0, 2000.0)
    assert [heatmap.latency_lo_ms(i) for i in range(4)] == [0.0, 500.0, 1000.0, 2000.0]
    assert SETTINGS.latency_bin_ms not in (500.0, 1000.0)  # not vacuous: bins would differ
