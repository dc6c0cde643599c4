"""Property tests of the heatmap: whatever the requests and the bin widths,

- every request lands in exactly one cell, the one its latency and its window's throughput
  name (checked against Python integer / fraction arithmetic), so counts sum to the requests;
- each window's throughput times the window length is its request count;
- the throughput bins' request counts also sum to the requests.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta
from fractions import Fraction

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sits_observe.analytics.heatmap.grid import compute_heatmaps, exact, heatmap_settings
from sits_observe.store import Store

EPOCH = datetime(1970, 1, 1)
# around the epoch (negative epoch microseconds) and around now
BASES = (EPOCH - timedelta(seconds=3), datetime(2026, 1, 1))

requests_strategy = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=20_000_000),  # microseconds after the base
        st.floats(min_value=0, max_value=30, allow_nan=False, allow_subnormal=False),
    ),
    min_size=1,
    max_size=200,
)


def half_up(x: float) -> int:
    """Round half away from zero (for x >= 0), as DuckDB's ``round`` does."""
    whole = math.floor(x)
    return whole + (1 if x - whole >= 0.5 else 0)


@pytest.fixture(scope="module")
def store() -> Iterator[Store]:
    with Store.open(":memory:") as s:
        yield s


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    rows=requests_strategy,
    base=st.sampled_from(BASES),
    window_s=st.sampled_from((0.1, 0.25, 1.0, 2.5, 7.0)),
    latency_bin_ms=st.sampled_from((0.5, 10.0, 100.0, 333.0, 1000.0)),
    throughput_bin_rps=st.sampled_from((0.01, 0.3, 1.0, 2.5, 10.0)),
)
def test_every_request_in_exactly_one_cell(
    store: Store,
    rows: list[tuple[int, float]],
    base: datetime,
    window_s: float,
    latency_bin_ms: float,
    throughput_bin_rps: float,
) -> None:
    store.execute("DELETE FROM requests")
    ts = [base + timedelta(microseconds=us) for us, _ in rows]
    latency = [lat for _, lat in rows]
    store.append(
        "requests",
        pa.table(
            {
                "ts": pa.array(ts, pa.timestamp("us")),
                "model": ["m"] * len(rows),
                "latency_s": latency,
            }
        ),
    )
    s = heatmap_settings(
        window_s=window_s, latency_bin_ms=latency_bin_ms, throughput_bin_rps=throughput_bin_rps
    )
    [h] = compute_heatmaps(store, s)

    window_us = s.window_us
    per_window = Counter((t - EPOCH) // timedelta(microseconds=1) // window_us for t in ts)
    width = exact(throughput_bin_rps)
    expected: Counter[tuple[int, int]] = Counter()
    for t, lat in zip(ts, latency, strict=True):
        w = (t - EPOCH) // timedelta(microseconds=1) // window_us
        tb = math.floor(Fraction(per_window[w] * 1_000_000, window_us) / width)
        expected[(half_up(lat * 1e6) // s.latency_bin_us, tb)] += 1
    cells = h.cells.to_pylist()
    got = Counter({(c["latency_bin"], c["throughput_bin"]): c["count"] for c in cells})
    assert got == expected
    assert len(cells) == len(got)  # no cell twice
    assert sum(got.values()) == h.requests == len(rows)
    assert sum(b.requests for b in h.bins) == len(rows)

    for window in h.windows.to_pylist():
        assert math.isclose(window["throughput_rps"] * window_s, window["count"], rel_tol=1e-12)
        assert window["p50_s"] <= window["p95_s"] <= window["p99_s"]
    assert sorted(h.windows.column("count").to_pylist()) == sorted(per_window.values())
