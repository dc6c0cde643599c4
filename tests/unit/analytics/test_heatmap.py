"""The latency-throughput heatmap: invariants, a synthetic load ramp, knee, safe max, odd input.

The reference below computes the same output the slow, obvious way (Python integers and
fractions for the bins, numpy for the quantiles), so each test checks the DuckDB queries
against an independent implementation, not against themselves.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from fractions import Fraction

import numpy as np
import pyarrow as pa
import pytest

from sits_observe.analytics.heatmap.document import heatmap_json
from sits_observe.analytics.heatmap.grid import (
    HeatmapSettings,
    compute_heatmaps,
    exact,
    heatmap_settings,
)
from sits_observe.analytics.serving.latency import RequestSelection
from sits_observe.errors import ConfigError
from sits_observe.store import Store

EPOCH = datetime(1970, 1, 1)
T0 = datetime(2026, 5, 4, 10, 0, 0)


@pytest.fixture
def store() -> Iterator[Store]:
    with Store.open(":memory:") as s:
        yield s


def add(store: Store, ts: list[datetime], latency_s: list[float], **columns: object) -> None:
    n = len(ts)
    data: dict[str, object] = {"ts": pa.array(ts, pa.timestamp("us")), "latency_s": latency_s}
    data.update({k: [v] * n for k, v in columns.items()})
    data.setdefault("model", ["m"] * n)
    store.append("requests", pa.table(data))


def half_up(x: float) -> int:
    """Round half away from zero (for x >= 0), as DuckDB's ``round`` does."""
    whole = math.floor(x)
    return whole + (1 if x - whole >= 0.5 else 0)


@dataclass
class Reference:
    """The heatmap computed the obvious way."""

    cells: Counter[tuple[int, int]]
    windows: dict[int, list[float]]
    bins: dict[int, list[float]]


def reference(ts: list[datetime], latency_s: list[float], s: HeatmapSettings) -> Reference:
    window_us = s.window_us
    width = exact(s.throughput_bin_rps)
    windows: dict[int, list[float]] = {}
    for t, lat in zip(ts, latency_s, strict=True):
        us = (t - EPOCH) // timedelta(microseconds=1)
        windows.setdefault(us // window_us, []).append(lat)  # Python // floors
    cells: Counter[tuple[int, int]] = Counter()
    bins: dict[int, list[float]] = {}
    for values in windows.values():
        rate = Fraction(len(values) * 1_000_000, window_us)
        tb = math.floor(rate / width)
        bins.setdefault(tb, []).extend(values)
        for lat in values:
            cells[(half_up(lat * 1e6) // s.latency_bin_us, tb)] += 1
    return Reference(cells, windows, bins)


def ramp(seed: int = 1) -> tuple[list[datetime], list[float]]:
    """1 s windows whose request count grows 10, 15, 20 ... 245. Latency grows with the rate:
    by 1 ms per request/s up to 100 requests/s and by 10 ms per request/s above (the bend),
    each window's requests spread evenly over +-10 % of that, in shuffled order."""
    rng = np.random.default_rng(seed)
    ts: list[datetime] = []
    lat: list[float] = []
    for k in range(48):
        n = 10 + 5 * k
        base = 0.1 + 0.001 * min(n, 100) + 0.01 * max(0, n - 100)
        order = rng.permutation(n)
        for j in range(n):
            ts.append(T0 + timedelta(seconds=k + float(order[j]) / n))
            lat.append(base * (0.9 + 0.2 * j / (n - 1)))
    return ts, lat


def test_cells_windows_and_bins_match_the_reference(store: Store) -> None:
    ts, lat = ramp()
    add(store, ts, lat)
    s = heatmap_settings(window_s=1, latency_bin_ms=50, throughput_bin_rps=20)
    [h] = compute_heatmaps(store, s)
    ref = reference(ts, lat, s)

    got = Counter(
        {
            (r["latency_bin"], r["throughput_bin"]): r["count"]
            for r in h.cells.select(["latency_bin", "throughput_bin", "count"]).to_pylist()
        }
    )
    assert got == ref.cells
    assert sum(got.values()) == h.requests == len(ts)
    assert h.windows.num_rows == len(ref.windows)
    for row, (w, values) in zip(h.windows.to_pylist(), sorted(ref.windows.items()), strict=True):
        assert row["start"] == EPOCH + timedelta(seconds=w)
        assert row["count"] == len(values)
        assert row["throughput_rps"] == len(values)
        for q in (50, 95, 99):
            assert row[f"p{q}_s"] == pytest.approx(np.percentile(values, q), rel=1e-12)
    assert [b.throughput_lo_rps for b in h.bins] == [20.0 * tb for tb in sorted(ref.bins)]
    for b in h.bins:
        values = ref.bins[round(b.throughput_lo_rps / 20)]
        assert b.requests == len(values)
        assert b.p95_s == pytest.approx(np.percentile(values, 95), rel=1e-12)
    # lower edges are the exact decimals
    edges = {(r["latency_lo_ms"], r["throughput_lo_rps"]) for r in h.cells.to_pylist()}
    assert (200.0, 100.0) in edges


def test_load_ramp_p95_rises_knee_at_the_bend_and_safe_max(store: Store) -> None:
    ts, lat = ramp()
    add(store, ts, lat)
    s = heatmap_settings(window_s=1, latency_bin_ms=50, throughput_bin_rps=20, slo_ms=800)
    [h] = compute_heatmaps(store, s)

    p95 = [b.p95_s for b in h.bins]
    assert p95 == sorted(p95), "P95 per throughput bin must not fall along the ramp"
    assert h.knee.value is not None
    # the curve bends at 100 requests/s: the knee is the bin at or just below the bend
    assert h.knee.value.throughput_lo_rps in (80.0, 100.0)
    # SLO 0.8 s: the base latency 0.2 + 0.01 * (rate - 100) s reaches 0.8 s at 160 rps
    assert h.safe_max is not None and h.safe_max.value is not None
    safe = h.safe_max.value
    ref_bins = reference(ts, lat, s).bins
    within = [tb * 20.0 for tb in sorted(ref_bins) if np.percentile(ref_bins[tb], 95) <= 0.8]
    assert safe.throughput_lo_rps == max(within)
    assert safe.throughput_lo_rps in (120.0, 140.0)
    assert safe.exceeded_from_rps == safe.throughput_lo_rps + 20


def test_groups_get_their_own_windows_and_throughput(store: Store) -> None:
    add(store, [T0, T0 + timedelta(milliseconds=10)], [0.1, 0.2], model="a", pod="a-0")
    add(store, [T0 + timedelta(milliseconds=500)], [0.3], model="b", pod="b-0")
    add(store, [T0 + timedelta(milliseconds=600)], [0.4], model="b", pod=None)
    s = heatmap_settings(window_s=1, throughput_bin_rps=1)

    pooled = compute_heatmaps(store, s)
    assert len(pooled) == 1 and pooled[0].requests == 4
    assert pooled[0].windows.column("throughput_rps").to_pylist() == [4.0]

    per_model = compute_heatmaps(store, s, by="model")
    assert [(h.group, h.requests) for h in per_model] == [("a", 2), ("b", 2)]
    per_pod = compute_heatmaps(store, s, by="pod")
    assert [(h.group, h.requests) for h in per_pod] == [("a-0", 2), ("b-0", 1), (None, 1)]
    only_b = compute_heatmaps(store, s, selection=RequestSelection(model="b"))
    assert [h.requests for h in only_b] == [2]


def test_decimal_bins_are_exact(store: Store) -> None:
    # 3 requests in a 0.1 s window = 30 rps exactly: bin [30, 30.01) with a 0.01 rps width
    # (floats would give 29.999999999999996 / 0.01 -> bin 2999)
    base = T0 + timedelta(milliseconds=300)
    add(
        store,
        [base, base + timedelta(milliseconds=1), base + timedelta(milliseconds=2)],
        [0.57] * 3,
    )
    s = heatmap_settings(window_s=0.1, latency_bin_ms=10, throughput_bin_rps=0.01)
    [h] = compute_heatmaps(store, s)
    assert h.cells.to_pylist() == [
        {
            "latency_bin": 57,
            "throughput_bin": 3000,
            "latency_lo_ms": 570.0,
            "throughput_lo_rps": 30.0,
            "count": 3,
        }
    ]
    assert h.windows.column("throughput_rps").to_pylist() == [30.0]
    assert h.windows.column("start").to_pylist() == [base]
    # 1.001 s is 1000999.9999999999 us as a double: rounded to the microsecond, it is in the
    # 1001 ms bin, where a reader expects it
    add(store, [T0], [1.001])
    [h] = compute_heatmaps(store, heatmap_settings(latency_bin_ms=1))
    assert 1001.0 in h.cells.column("latency_lo_ms").to_pylist()


def test_single_request_and_equal_latencies(store: Store) -> None:
    add(store, [T0], [1.25])
    [one] = compute_heatmaps(store, heatmap_settings())
    assert one.requests == 1
    assert one.windows.to_pylist()[0]["p99_s"] == 1.25
    assert one.knee.value is None and "needs 3 throughput bins" in one.knee.note

    store.execute("DELETE FROM requests")
    ts = [T0 + timedelta(seconds=k, milliseconds=j) for k in range(6) for j in range(10 * k + 30)]
    add(store, ts, [0.5] * len(ts))
    [flat] = compute_heatmaps(store, heatmap_settings(slo_ms=500))
    assert {b.p95_s for b in flat.bins} == {0.5}
    assert flat.knee.value is None and "does not rise" in flat.knee.note
    assert flat.safe_max is not None and flat.safe_max.value is not None
    assert flat.safe_max.value.exceeded_from_rps is None  # the SLO held everywhere
    assert "lies above the measured load" in flat.safe_max.note


def test_empty_failed_and_gappy_input(store: Store) -> None:
    assert compute_heatmaps(store, heatmap_settings()) == []
    add(store, [T0], [0.1], ok=False)
    assert compute_heatmaps(store, heatmap_settings()) == []
    [with_failed] = compute_heatmaps(
        store, heatmap_settings(), selection=RequestSelection(include_failed=True)
    )
    assert with_failed.requests == 1
    # a gap of empty windows: they do not appear at all
    add(store, [T0 + timedelta(seconds=10)], [0.1])
    [h] = compute_heatmaps(
        store, heatmap_settings(), selection=RequestSelection(include_failed=True)
    )
    assert h.windows.column("count").to_pylist() == [1, 1]


def test_since_is_moved_down_to_a_window_boundary(store: Store) -> None:
    add(store, [T0 + timedelta(seconds=1), T0 + timedelta(seconds=9.5)], [0.1, 0.2])
    since = RequestSelection(since=T0 + timedelta(seconds=9.9))
    [h] = compute_heatmaps(store, heatmap_settings(window_s=5), selection=since)
    # the 9.9 s cut moves to 5 s, so the 9.5 s request's window is complete
    assert h.requests == 1
    assert h.windows.column("start").to_pylist() == [T0 + timedelta(seconds=5)]


def test_timestamps_before_the_epoch_use_floor_windows(store: Store) -> None:
    before = EPOCH - timedelta(milliseconds=500)
    add(store, [before, EPOCH + timedelta(milliseconds=500)], [0.1, 0.1])
    [h] = compute_heatmaps(store, heatmap_settings(window_s=1))
    assert h.windows.column("start").to_pylist() == [EPOCH - timedelta(seconds=1), EPOCH]


def test_json_shape(store: Store) -> None:
    ts, lat = ramp()
    add(store, ts, lat)
    [h] = compute_heatmaps(store, heatmap_settings(slo_ms=800, throughput_bin_rps=20))
    data = heatmap_json(h)
    assert set(data["cells"][0]) == {"latency_lo_ms", "throughput_lo_rps", "count"}
    assert set(data["windows"][0]) == {
        "start",
        "throughput_rps",
        "count",
        "p50_s",
        "p95_s",
        "p99_s",
    }
    assert data["windows"][0]["start"] == "2026-05-04T10:00:00Z"
    assert sum(c["count"] for c in data["cells"]) == data["requests"] == len(ts)
    assert data["knee"] is not None and data["safe_max"] is not None
    assert data["safe_max"]["slo_ms"] == 800
    assert all(b["used"] for b in data["throughput_bins"])
    assert [b["within_slo"] for b in data["throughput_bins"]][:3] == [True, True, True]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"window_s": 0}, "--window-s: Input should be greater than 0"),
        ({"latency_bin_ms": -5}, "--latency-bin-ms"),
        ({"throughput_bin_rps": 0}, "--throughput-bin-rps"),
        ({"window_s": 1e-7}, "whole number of microseconds"),
        ({"latency_bin_ms": 0.0001}, "whole number of microseconds"),
        ({"throughput_bin_rps": 1e-10}, "more than 9 decimals"),
        ({"slo_ms": 0}, "--slo-ms"),
        ({"min_bin_requests": 0}, "--min-bin-requests"),
    ],
)
def test_bad_settings_are_clear_config_errors(values: dict[str, float], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        heatmap_settings(**values)


def test_map_only_skips_the_evidence(store: Store) -> None:
    ts, lat = ramp()
    add(store, ts, lat)
    s = heatmap_settings(slo_ms=800, throughput_bin_rps=20)
    [full] = compute_heatmaps(store, s)
    [bare] = compute_heatmaps(store, s, evidence=False)
    assert bare.cells.equals(full.cells) and bare.windows.equals(full.windows)
    assert bare.bins == () and full.bins
    assert bare.knee.value is None and "not computed" in bare.knee.note
    assert bare.safe_max is not None and "not computed" in bare.safe_max.note
