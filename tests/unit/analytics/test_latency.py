"""Exact latency quantiles per group, the selection rules, and estimates kept apart."""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import datetime, timedelta

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from sits_observe.analytics.serving.latency import (
    RequestSelection,
    estimate_windows,
    exact_quantiles,
    explain_empty,
    groups_with_only_estimates,
    quantile_column,
)
from sits_observe.errors import ConfigError
from sits_observe.store import Store

T0 = datetime(2026, 3, 1, 12, 0, 0)


def requests(rows: list[dict[str, object]]) -> pa.Table:
    """A ``requests`` table from partial rows (missing columns are NULL)."""
    return pa.Table.from_pylist(rows)


@pytest.fixture
def store() -> Iterator[Store]:
    with Store.open(":memory:") as s:
        yield s


def numpy_linear(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=np.float64), q * 100))


def weight(n: int, q: float) -> float:
    """numpy's interpolation weight for quantile ``q`` of ``n`` values."""
    h = (n - 1) * q
    return h - math.floor(h)


def test_quantiles_per_model_match_numpy_and_skip_failed(store: Store) -> None:
    a = [0.5, 0.1, 0.3, 0.9, 0.7, 0.2]
    b = [2.0, 1.0]
    rows = [{"ts": T0, "model": "a", "latency_s": x, "ok": True} for x in a]
    rows += [{"ts": T0, "model": "b", "latency_s": x, "ok": True} for x in b]
    rows.append({"ts": T0, "model": "a", "latency_s": 99.0, "ok": False})
    store.append("requests", requests(rows))

    result = exact_quantiles(store, by="model").to_pylist()

    assert [r["model"] for r in result] == ["a", "b"]
    assert result[0]["count"] == 6
    for row, values in zip(result, (a, b), strict=True):
        for q in (0.5, 0.95, 0.99):
            assert math.isclose(row[quantile_column(q)], numpy_linear(values, q), rel_tol=1e-15)
    # the failed 99 s request counts only when asked
    with_failed = exact_quantiles(
        store, by="model", selection=RequestSelection(include_failed=True)
    )
    assert with_failed.to_pylist()[0]["count"] == 7
    assert with_failed.to_pylist()[0]["p99_s"] > 50


def test_model_since_and_null_ok_selection(store: Store) -> None:
    store.append(
        "requests",
        requests(
            [
                {"ts": T0, "model": "a", "latency_s": 1.0, "ok": None},
                {"ts": T0 + timedelta(minutes=10), "model": "a", "latency_s": 3.0, "ok": True},
                {"ts": T0 + timedelta(minutes=10), "model": "b", "latency_s": 5.0, "ok": True},
            ]
        ),
    )
    since = RequestSelection(model="a", since=T0 + timedelta(minutes=5))
    assert exact_quantiles(store, selection=since).to_pylist() == [
        {"model": "a", "count": 1, "p50_s": 3.0, "p95_s": 3.0, "p99_s": 3.0}
    ]
    # ok = NULL (not recorded) counts as not failed
    everything = exact_quantiles(store, selection=RequestSelection(model="a"))
    assert everything.column("count").to_pylist() == [2]


def test_invalid_values_never_count(store: Store) -> None:
    store.append(
        "requests",
        requests(
            [
                {"ts": T0, "model": "a", "latency_s": float("nan"), "ok": True},
                {"ts": T0, "model": "a", "latency_s": float("inf"), "ok": True},
                {"ts": T0, "model": "a", "latency_s": -1.0, "ok": True},
                {"ts": T0, "model": "a", "latency_s": None, "ok": True},
                {"ts": T0, "model": "a", "latency_s": 2.0, "ok": True},
            ]
        ),
    )
    assert exact_quantiles(store).to_pylist() == [
        {"model": "a", "count": 1, "p50_s": 2.0, "p95_s": 2.0, "p99_s": 2.0}
    ]


def test_other_metrics_groups_and_quantiles(store: Store) -> None:
    store.append(
        "requests",
        requests(
            [
                {"ts": T0, "model": "m", "pod": "p1", "latency_s": 1.0, "ttft_s": 0.1},
                {"ts": T0, "model": "m", "pod": "p1", "latency_s": 2.0, "ttft_s": None},
                {"ts": T0, "model": "m", "pod": None, "latency_s": 4.0, "ttft_s": 0.3},
            ]
        ),
    )
    by_pod = exact_quantiles(store, by="pod", quantiles=(0.25, 0.999)).to_pylist()
    assert by_pod == [
        {"pod": "p1", "count": 2, "p25_s": 1.25, "p99.9_s": pytest.approx(1.999)},
        {"pod": None, "count": 1, "p25_s": 4.0, "p99.9_s": 4.0},
    ]
    ttft = exact_quantiles(store, metric="ttft_s").to_pylist()
    assert ttft[0]["count"] == 2
    assert ttft[0]["p50_s"] == pytest.approx(0.2)


def test_bad_arguments_raise_config_errors(store: Store) -> None:
    with pytest.raises(ConfigError, match="valid: model, pod, node, gpu_uuid"):
        exact_quantiles(store, by="namespace")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="within"):
        exact_quantiles(store, quantiles=(1.5,))
    with pytest.raises(ConfigError, match="metric"):
        exact_quantiles(store, metric="tokens")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"valid: model, pod, node$"):
        estimate_windows(store, by="gpu_uuid")


def test_empty_selections_are_explained(store: Store) -> None:
    assert exact_quantiles(store).num_rows == 0
    assert "no requests" in explain_empty(store, None)
    store.append(
        "requests",
        requests(
            [
                {"ts": T0, "model": "a", "latency_s": 1.0, "ok": False},
                {"ts": T0, "model": "b", "latency_s": 1.0, "ok": True},
            ]
        ),
    )
    assert "models with requests: a, b" in explain_empty(store, RequestSelection(model="zz"))
    late = RequestSelection(since=T0 + timedelta(days=1))
    assert "no request completed since" in explain_empty(store, late)
    assert "--include-failed" in explain_empty(store, RequestSelection(model="a"))
    assert "ttft_s" in explain_empty(store, RequestSelection(model="b"), "ttft_s")


def test_estimates_stay_apart_and_are_pointed_to(store: Store) -> None:
    store.append(
        "server_windows",
        pa.Table.from_pylist(
            [
                {
                    "ts": T0,
                    "window_s": 15.0,
                    "model": "histo-only",
                    "completed": 30.0,
                    "latency_p50_s": 0.4,
                    "latency_p95_s": 0.9,
                    "latency_p99_s": 1.0,
                    "latency_error_bound_s": 0.5,
                    "estimate": True,
                }
            ]
        ),
    )
    store.append("requests", requests([{"ts": T0, "model": "exact", "latency_s": 1.0}]))
    windows = estimate_windows(store).to_pylist()
    assert windows == [
        {
            "model": "histo-only",
            "window_end": T0,
            "window_s": 15.0,
            "count": 30.0,
            "p50_s": 0.4,
            "p95_s": 0.9,
            "p99_s": 1.0,
            "error_bound_s": 0.5,
            "estimate": True,
        }
    ]
    exact = exact_quantiles(store)
    assert exact.column("model").to_pylist() == ["exact"]  # never mixed in
    only = groups_with_only_estimates(
        store, by="model", selection=None, exact_groups=exact.column("model").to_pylist()
    )
    assert only == ["histo-only"]
    message = explain_empty(store, RequestSelection(model="histo-only"))
    assert "--source estimate" in message


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.floats(min_value=0, max_value=1e4, allow_nan=False, allow_subnormal=False),
        min_size=1,
        max_size=300,
    ),
    st.sampled_from((0.0, 0.01, 0.25, 0.5, 0.9, 0.95, 0.99, 0.999, 1.0)),
)
@example(values=[0.0, 0.0, 0.0, 0.0, 0.0, 3.0], q=0.999)
def test_duckdb_quantiles_equal_numpy_linear(values: list[float], q: float) -> None:
    """Same order statistics and weight as numpy, rounded differently in the last bits.

    DuckDB evaluates ``a * (1 - t) + b * t``, numpy ``a + (b - a) * t`` (``b - (b - a) *
    (1 - t)`` for t >= 0.5): a few units in the last place of the larger neighbour apart,
    plus the rounding of the weight t itself (the fraction of h = (n - 1) q, known to one unit
    in the last place of h) times the neighbours' spread: [0, 0, 0, 0, 0, 3] at q = 0.999 gives
    2.985000000000003 here and 2.9850000000000003 in numpy.
    """
    with Store.open(":memory:") as store:
        rows = [{"ts": T0, "model": "m", "latency_s": v} for v in values]
        store.append("requests", requests(rows))
        got = exact_quantiles(store, quantiles=(q,)).to_pylist()[0][quantile_column(q)]
    want = numpy_linear(values, q)
    h = (len(values) - 1) * q
    assert abs(got - want) <= 4 * math.ulp(max(values)) + 2 * math.ulp(h) * max(values)
    if weight(len(values), q) == 0.0 or min(values) == max(values):
        assert got == want  # an order statistic itself: no rounding at all
