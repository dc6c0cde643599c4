"""Histogram maths: bucket deltas, resets, PromQL-style quantile interpolation, error bound."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sits_observe.collectors import histogram as hist

INF = math.inf


def make(bounds: list[float], counts: list[float], total_sum: float = 0.0) -> hist.Histogram:
    return hist.build(zip(bounds, counts, strict=True), total_sum, counts[-1])


def bucketize(values: list[float], bounds: list[float]) -> hist.Histogram:
    """A cumulative histogram of ``values`` with finite ``bounds`` (+Inf added)."""
    arr = np.asarray(values, dtype=float)
    counts = [float(np.count_nonzero(arr <= b)) for b in bounds]
    return hist.build(
        [*zip(bounds, counts, strict=True), (INF, float(arr.size))], float(arr.sum()), arr.size
    )


# -- build ------------------------------------------------------------------------------


def test_build_sorts_buckets_and_adds_missing_inf_bucket() -> None:
    h = hist.build([(2.0, 5.0), (1.0, 2.0)], 7.5, 6.0)
    assert h.bounds == (1.0, 2.0, INF)
    assert h.counts == (2.0, 5.0, 6.0)
    assert h.total == 6.0


def test_build_raises_dipping_cumulative_counts_to_running_max() -> None:
    """A torn read (bucket below its predecessor) is made monotone, as PromQL does."""
    h = hist.build([(1.0, 4.0), (2.0, 3.0), (INF, 5.0)], 0.0, 5.0)
    assert h.counts == (4.0, 4.0, 5.0)


# -- quantile: worked examples ----------------------------------------------------------


def test_quantile_interpolates_linearly_inside_its_bucket() -> None:
    # 2 obs in (0,1], 4 in (1,2], 2 in (2,4]
    h = make([1.0, 2.0, 4.0, INF], [2.0, 6.0, 8.0, 8.0])
    median = hist.quantile(0.5, h)
    assert median is not None
    # rank 4 lies 2 of 4 into bucket (1, 2]
    assert median.value == pytest.approx(1.5)
    assert (median.lower, median.upper, median.error_bound) == (1.0, 2.0, 1.0)
    p95 = hist.quantile(0.95, h)
    assert p95 is not None
    # rank 7.6 lies 1.6 of 2 into bucket (2, 4]
    assert p95.value == pytest.approx(2.0 + 2.0 * 1.6 / 2.0)
    assert p95.error_bound == 2.0
    assert not p95.in_overflow


def test_first_bucket_starts_at_zero() -> None:
    h = make([0.5, 1.0, INF], [4.0, 4.0, 4.0])
    est = hist.quantile(0.5, h)
    assert est is not None
    assert est.value == pytest.approx(0.25)
    assert est.lower == 0.0


def test_quantile_in_inf_bucket_reports_highest_finite_bound_with_infinite_error() -> None:
    h = make([1.0, 2.0, INF], [1.0, 1.0, 10.0])
    est = hist.quantile(0.95, h)
    assert est is not None
    assert est.value == 2.0
    assert est.in_overflow
    assert est.error_bound == INF


def test_empty_histogram_has_no_quantile_and_no_mean() -> None:
    h = make([1.0, INF], [0.0, 0.0])
    assert hist.quantile(0.5, h) is None
    assert hist.mean(h) is None


@pytest.mark.parametrize("q", [-0.1, 1.5, math.nan])
def test_quantile_outside_unit_interval_is_a_programming_error(q: float) -> None:
    with pytest.raises(ValueError, match="outside"):
        hist.quantile(q, make([1.0, INF], [1.0, 1.0]))


def test_mean_is_sum_over_count() -> None:
    assert hist.mean(make([1.0, INF], [3.0, 4.0], total_sum=6.0)) == 1.5


# -- deltas and resets --------------------------------------------------------------------


def test_delta_subtracts_buckets_sum_and_count() -> None:
    before = make([1.0, 2.0, INF], [1.0, 3.0, 4.0], total_sum=5.0)
    after = make([1.0, 2.0, INF], [3.0, 6.0, 9.0], total_sum=20.0)
    assert not hist.is_reset(before, after)
    window = hist.delta(before, after)
    assert window.counts == (2.0, 3.0, 5.0)
    assert window.sum == 15.0
    assert window.count == 5.0


@pytest.mark.parametrize(
    ("after_counts", "after_sum"),
    [
        ([0.0, 1.0, 2.0], 30.0),  # count went down
        ([1.0, 3.0, 5.0], 4.0),  # sum went down, count up: a restart that already served more
        ([0.0, 4.0, 5.0], 30.0),  # one bucket went down
    ],
)
def test_any_decrease_is_a_reset(after_counts: list[float], after_sum: float) -> None:
    before = make([1.0, 2.0, INF], [1.0, 3.0, 4.0], total_sum=5.0)
    after = make([1.0, 2.0, INF], after_counts, total_sum=after_sum)
    assert hist.is_reset(before, after)
    with pytest.raises(ValueError, match="reset"):
        hist.delta(before, after)


def test_delta_refuses_different_layouts() -> None:
    before = make([1.0, INF], [1.0, 1.0])
    after = make([2.0, INF], [1.0, 2.0])
    assert not hist.same_layout(before, after)
    with pytest.raises(ValueError, match="bounds"):
        hist.delta(before, after)


# -- properties ---------------------------------------------------------------------------

bounds_strategy = st.lists(
    st.floats(min_value=1e-3, max_value=1e4, allow_nan=False), min_size=1, max_size=12
).map(lambda xs: sorted(set(xs)))
quantiles = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)


@st.composite
def histograms(draw: st.DrawFn) -> hist.Histogram:
    bounds = draw(bounds_strategy)
    per_bucket = draw(
        st.lists(st.integers(0, 1000), min_size=len(bounds) + 1, max_size=len(bounds) + 1)
    )
    if sum(per_bucket) == 0:
        per_bucket[0] = 1
    cumulative = np.cumsum(per_bucket).astype(float).tolist()
    return make([*bounds, INF], cumulative)


@given(histograms(), quantiles)
def test_estimate_lies_in_the_bucket_holding_the_rank(h: hist.Histogram, q: float) -> None:
    est = hist.quantile(q, h)
    assert est is not None
    assert est.lower <= est.value <= est.upper or (est.in_overflow and est.value == est.lower)
    index = h.bounds.index(est.upper)
    rank = q * h.total
    below = h.counts[index - 1] if index else 0.0
    assert h.counts[index] >= rank
    assert below < rank or (rank == 0 and below == 0)
    assert est.error_bound == est.upper - est.lower


@given(histograms(), quantiles, quantiles)
def test_estimate_is_monotone_in_q(h: hist.Histogram, q1: float, q2: float) -> None:
    lo, hi = sorted((q1, q2))
    a, b = hist.quantile(lo, h), hist.quantile(hi, h)
    assert a is not None
    assert b is not None
    assert a.value <= b.value


@given(
    st.lists(st.integers(1, 50), min_size=1, max_size=10),
    st.integers(1, 20),
    quantiles,
)
def test_estimate_is_exact_for_a_uniform_fill(widths: list[int], density: int, q: float) -> None:
    """Counts proportional to bucket widths = uniform data on [0, top]: the q quantile is q*top."""
    bounds = np.cumsum(widths).astype(float).tolist()
    cumulative = [b * density for b in bounds]
    h = make([*bounds, INF], [*cumulative, cumulative[-1]])
    est = hist.quantile(q, h)
    assert est is not None
    assert est.value == pytest.approx(q * bounds[-1], rel=1e-9, abs=1e-9)


@settings(max_examples=200)
@given(
    st.lists(st.floats(min_value=0.0, max_value=100.0, allow_nan=False), min_size=1, max_size=300),
    bounds_strategy,
    quantiles,
)
def test_true_sample_quantile_is_within_the_error_bound(
    values: list[float], bounds: list[float], q: float
) -> None:
    """|estimate - inverted-CDF sample quantile| <= bucket width (infinite in the +Inf bucket)."""
    est = hist.quantile(q, bucketize(values, bounds))
    assert est is not None
    truth = float(np.quantile(np.asarray(values), q, method="inverted_cdf"))
    assert abs(est.value - truth) <= est.error_bound * (1 + 1e-12) + 1e-12
