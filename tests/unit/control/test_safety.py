"""Safety rules: hysteresis, step, bounds, threshold and the write budget."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sits_observe.control.controller.planning.safety import (
    TokenBucket,
    above_with_hysteresis,
    below_threshold,
    clamp,
    hysteresis_levels,
    levels,
    limit_step,
)

NAN = float("nan")


def arr(*values: float) -> np.ndarray:
    return np.array(values, dtype=np.float64)


def test_levels_count_boundaries_with_inclusive_edges() -> None:
    # Memory classes: L2 from 2 GiB inclusive, L3 strictly above 8 GiB.
    got = levels(arr(1.9, 2.0, 8.0, 8.1, NAN), [2.0, 8.0], [True, False])
    assert got.tolist() == [0, 1, 1, 2, -1]


def test_entering_a_level_uses_the_exact_boundary() -> None:
    state = np.array([0, 0, -1])
    got = hysteresis_levels(arr(0.701, 0.7, 0.701), state, [0.3, 0.7], [False, False], 0.1)
    assert got.tolist() == [2, 1, 2]


def test_leaving_a_level_needs_the_band() -> None:
    state = np.array([2, 2, 2, 1])
    # 0.7 x 0.9 = 0.63: above it a "high" node stays high; below it, it drops.
    got = hysteresis_levels(arr(0.65, 0.64, 0.62, 0.28), state, [0.3, 0.7], [False, False], 0.1)
    assert got.tolist() == [2, 2, 1, 1]  # 0.28 > 0.27 keeps medium
    assert hysteresis_levels(arr(0.1), np.array([2]), [0.3, 0.7], [False, False], 0.1)[0] == 0


def test_a_missing_value_keeps_the_state() -> None:
    got = hysteresis_levels(arr(NAN, NAN), np.array([2, -1]), [0.3, 0.7], [False, False], 0.1)
    assert got.tolist() == [2, -1]


@given(
    st.lists(st.floats(min_value=0.64, max_value=0.8), min_size=1, max_size=50),
)
def test_noise_inside_the_band_never_flips_a_level_back(noise: list[float]) -> None:
    """Once high (entered above 0.7), values staying above 0.7 x 0.9 keep it high."""
    state = 2
    for value in noise:
        state = int(
            hysteresis_levels(arr(value), np.array([state]), [0.3, 0.7], [False, False], 0.1)[0]
        )
        assert state == 2


def test_above_with_hysteresis() -> None:
    engaged = np.array([False, True, True, False])
    got = above_with_hysteresis(arr(0.66, 0.60, 0.58, NAN), 0.65, engaged, 0.1)
    assert got.tolist() == [True, True, False, False]


def test_limit_step_and_unknown_current() -> None:
    got = limit_step(arr(40, 1, 12, 5), arr(10, 10, 10, NAN), 0.5)
    assert got.tolist() == [15, 5, 12, 5]
    assert limit_step(arr(7), arr(0), 0.5).tolist() == [7]  # nothing to scale from 0


def test_clamp_and_threshold() -> None:
    assert clamp(arr(0, 5, 99), arr(1, 1, 1), arr(10, 10, 10)).tolist() == [1, 5, 10]
    small = below_threshold(arr(10.5, 12, 1, 3), arr(10, 10, 0, NAN), 0.1)
    assert small.tolist() == [True, False, False, False]


def test_token_bucket_burst_then_rate() -> None:
    now = [0.0]
    bucket = TokenBucket(rate_per_s=1.0, burst=3, clock=lambda: now[0])
    assert [bucket.try_take() for _ in range(4)] == [True, True, True, False]
    now[0] = 0.5
    assert not bucket.try_take()
    now[0] = 1.0
    assert bucket.try_take()
    now[0] = 100.0  # saved-up tokens never exceed the burst
    assert [bucket.try_take() for _ in range(4)] == [True, True, True, False]


def test_token_bucket_rejects_nonsense() -> None:
    with pytest.raises(ValueError):
        TokenBucket(0, 1)
