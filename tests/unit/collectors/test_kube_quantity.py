"""Kubernetes quantity parsing (apimachinery resource.Quantity grammar)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kubernetes.utils.quantity import parse_quantity as reference_parse

from sits_observe.domain.quantity import (
    MAX_QUANTITY,
    parse_quantity,
    quantity_milli,
    quantity_value,
)
from sits_observe.errors import ParseError


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("7910m", Decimal("7.91")),
        ("8", Decimal(8)),
        ("32Gi", Decimal(32 * 1024**3)),
        ("1000000Ki", Decimal(1_024_000_000)),
        ("1e9", Decimal(10**9)),
        ("1E3", Decimal(1000)),
        ("2e-3", Decimal("0.002")),
        ("1E", Decimal(10**18)),  # E alone is the exa suffix, not an exponent
        ("100M", Decimal(10**8)),
        ("1.5Gi", Decimal(3 * 512 * 1024**2)),
        ("250000000n", Decimal("0.25")),
        ("5u", Decimal("0.000005")),
        ("+1k", Decimal(1000)),
        ("-1", Decimal(-1)),
        (".5", Decimal("0.5")),
        ("5.", Decimal(5)),
        ("1Ei", Decimal(1024**6)),
        (" 4 ", Decimal(4)),
        (8, Decimal(8)),
    ],
)
def test_parse_quantity_examples(text: str | int, expected: Decimal) -> None:
    assert parse_quantity(text) == expected


@pytest.mark.parametrize(
    "text", ["", "Gi", "1.2.3", "1 Gi", "1KiB", "1ki", "1K", "abc", "1e", "1e1.5", "0x10", "1Mi2"]
)
def test_parse_quantity_rejects(text: str) -> None:
    with pytest.raises(ParseError, match="not a Kubernetes quantity"):
        parse_quantity(text)


@pytest.mark.parametrize("value", [True, None, [1], {"a": 1}])
def test_parse_quantity_rejects_non_scalars(value: object) -> None:
    with pytest.raises(ParseError):
        parse_quantity(value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "value", "milli"),
    [
        ("7910m", 8, 7910),  # Value() rounds up
        ("1m", 1, 1),
        ("0.0001", 1, 1),  # MilliValue() rounds up too
        ("8", 8, 8000),
        ("0", 0, 0),
        ("32Gi", 34_359_738_368, 34_359_738_368_000),
    ],
)
def test_value_and_milli_round_up(text: str, value: int, milli: int) -> None:
    assert quantity_value(text) == value
    assert quantity_milli(text) == milli


_SUFFIXES = ["", "n", "u", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]


@given(
    whole=st.integers(min_value=0, max_value=10**9),
    frac=st.one_of(st.none(), st.integers(min_value=0, max_value=999_999)),
    suffix=st.sampled_from(_SUFFIXES),
)
def test_agrees_with_the_official_client(whole: int, frac: int | None, suffix: str) -> None:
    """Our parser and ``kubernetes.utils.parse_quantity`` agree on the shared grammar, up to
    2^63-1 (the client does not cap, the API reference does: ``10E`` is capped)."""
    text = f"{whole}{'' if frac is None else f'.{frac}'}{suffix}"
    assert parse_quantity(text) == min(reference_parse(text), MAX_QUANTITY)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("9223372036854775807", 2**63 - 1),
        ("9223372036854775808", 2**63 - 1),
        ("1e16", 10**16),  # within the range: exact
        ("1e30", 2**63 - 1),
        ("-1e30", -(2**63 - 1)),
        ("16Ei", 2**63 - 1),
        ("1e999999", 2**63 - 1),  # int() of it alone would take seconds
        ("1e1000000", 2**63 - 1),  # beyond Decimal's exponent range
        pytest.param("1e" + "9" * 5000, 2**63 - 1, id="1e9999..."),  # int() refuses it
        ("0e99999999999999999999", 0),
        pytest.param(10**5000, 2**63 - 1, id="10**5000"),  # str() refuses it
    ],
)
def test_magnitudes_above_2_63_are_capped(text: str | int, expected: int) -> None:
    """The Quantity reference: "no quantity may represent a number greater than 2^63-1 in
    magnitude [...] Numbers larger [...] will be capped"."""
    assert parse_quantity(text) == expected


def test_a_vanishing_exponent_is_out_of_range() -> None:
    with pytest.raises(ParseError, match="out of range"):
        parse_quantity("1e-99999999999999999999")


@given(st.integers(min_value=-(10**12), max_value=10**12), st.integers(-6, 6))
def test_exponent_form(mantissa: int, exponent: int) -> None:
    assert parse_quantity(f"{mantissa}e{exponent}") == Decimal(mantissa).scaleb(exponent)
