"""Reading a histogram bucket's ``le`` label."""

from __future__ import annotations

import math

import pytest

from sits_observe.domain.histogram_bounds import parse_le


@pytest.mark.parametrize(
    ("text", "bound"),
    [("0.005", 0.005), ("1e+01", 10.0), ("+Inf", math.inf), ("10", 10.0)],
)
def test_bounds_are_go_floats(text: str, bound: float) -> None:
    assert parse_le(text) == bound


@pytest.mark.parametrize("text", [None, "", "fast", "NaN"])
def test_unreadable_bounds_are_none(text: str | None) -> None:
    assert parse_le(text) is None
