"""Printing Kubernetes quantities: canonical text that parses back to the same amount."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sits_observe.domain.quantity import QuantityUnit, format_quantity, parse_quantity


@pytest.mark.parametrize(
    ("value", "unit", "text"),
    [
        (294 * 1024**3, "bytes", "294Gi"),
        (1536 * 1024**2, "bytes", "1536Mi"),
        (2 * 1024**4, "bytes", "2Ti"),
        (1000, "bytes", "1000"),
        (0, "bytes", "0"),
        (73600, "millicores", "73600m"),
        (8000, "millicores", "8"),
        (Decimal("0.5"), "cores", "500m"),
        (Decimal("0.0005"), "cores", "1m"),  # rounded up, as Quantity does
        (4, "cores", "4"),
        (110, "count", "110"),
        (Decimal("2.50"), "count", "2.5"),
    ],
)
def test_format_examples(value: Decimal | int, unit: QuantityUnit, text: str) -> None:
    assert format_quantity(value, unit) == text


@given(st.integers(min_value=0, max_value=2**62), st.sampled_from(["bytes", "count"]))
def test_whole_amounts_round_trip(value: int, unit: QuantityUnit) -> None:
    assert parse_quantity(format_quantity(value, unit)) == value


@given(st.integers(min_value=0, max_value=10**9))
def test_millicores_round_trip(milli: int) -> None:
    assert parse_quantity(format_quantity(milli, "millicores")) * 1000 == milli
