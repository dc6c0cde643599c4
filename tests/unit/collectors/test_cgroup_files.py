"""Parsers of cgroup v2 interface files: kernel formats, units, and strictness.

Literal texts follow Documentation/admin-guide/cgroup-v2.rst (PSI lines print averages with
``%lu.%02lu`` and totals in microseconds; cpu.max is ``$MAX $PERIOD``).
"""

from __future__ import annotations

import math
from dataclasses import astuple

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sits_observe.collectors.cgroup.files import (
    INT64_MAX,
    KeyedValues,
    Pressure,
    parse_cpu_max,
    parse_flat_keyed,
    parse_memory_max,
    parse_pressure,
    parse_single_value,
    parse_uint,
)
from sits_observe.errors import ParseError

PSI = (
    "some avg10=1.25 avg60=0.50 avg300=0.07 total=2500000\n"
    "full avg10=0.00 avg60=0.00 avg300=0.00 total=1234\n"
)


def test_pressure_averages_are_ratios_and_totals_seconds() -> None:
    found = parse_pressure(PSI)
    assert found.malformed == 0
    assert astuple(found.lines["some"]) == pytest.approx((0.0125, 0.005, 0.0007, 2.5))
    assert found.lines["full"] == Pressure(0.0, 0.0, 0.0, 0.001234)


def test_pressure_keeps_good_line_when_other_is_bad() -> None:
    found = parse_pressure("some avg10=nan avg60=0.00 avg300=0.00 total=1\n" + PSI.split("\n")[1])
    assert found.malformed == 1
    assert set(found.lines) == {"full"}


@pytest.mark.parametrize(
    "line",
    [
        "some avg10=101.00 avg60=0.00 avg300=0.00 total=0",  # above 100 percent
        "some avg10=-1.00 avg60=0.00 avg300=0.00 total=0",
        "some avg10=inf avg60=0.00 avg300=0.00 total=0",
        "some avg10=0.00 avg60=0.00 total=0",  # avg300 missing
        "some avg10=0.00 avg60=0.00 avg300=0.00 total=-5",
        "some avg10=0.00 avg60=0.00 avg300=0.00",
        "some avg10=0.00 avg60=0.00 avg300=0.00 total=1_000",
        "some avg10 0.00",
        "some",
    ],
)
def test_pressure_rejects_bad_lines(line: str) -> None:
    found = parse_pressure(line + "\n")
    assert found.lines == {}
    assert found.malformed == 1


@pytest.mark.parametrize(
    ("text", "cores"),
    [("max 100000\n", None), ("200000 100000\n", 2.0), ("50000 100000\n", 0.5), ("1000 1000", 1.0)],
)
def test_cpu_max(text: str, cores: float | None) -> None:
    assert parse_cpu_max(text) == cores


@pytest.mark.parametrize(
    "text", ["", "max\n", "200000\n", "0 100000\n", "100 0\n", "a b\n", "1 2 3\n", "-1 100\n"]
)
def test_cpu_max_rejects(text: str) -> None:
    with pytest.raises(ParseError):
        parse_cpu_max(text)


def test_memory_max_and_current() -> None:
    assert parse_memory_max("max\n") is None
    assert parse_memory_max("536870912\n") == 536870912
    assert parse_single_value("12345\n") == 12345
    for bad in ["", "\n", "12 34\n", "+5\n", " 5\n", "1_000\n", "5\n6\n", "１２\n", "-1\n"]:
        with pytest.raises(ParseError):
            parse_single_value(bad)
    with pytest.raises(ParseError):
        parse_single_value(f"{INT64_MAX + 1}\n")
    assert parse_single_value(f"{INT64_MAX}\n") == INT64_MAX


def test_flat_keyed_reads_wanted_keys_only() -> None:
    text = "anon 100\nfile 200\nkernel_stack 7\nkernel x\nweird line here\n"
    found = parse_flat_keyed(text, ("anon", "file", "kernel", "sock"))
    assert found == KeyedValues({"anon": 100, "file": 200}, ("kernel",))


# -- properties --------------------------------------------------------------------------

percent_hundredths = st.integers(min_value=0, max_value=10_000)
totals_us = st.integers(min_value=0, max_value=INT64_MAX)


def _psi_line(kind: str, a10: int, a60: int, a300: int, total: int) -> str:
    def pct(h: int) -> str:  # the kernel's "%lu.%02lu"
        return f"{h // 100}.{h % 100:02d}"

    return f"{kind} avg10={pct(a10)} avg60={pct(a60)} avg300={pct(a300)} total={total}\n"


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["some", "full"]),
            percent_hundredths,
            percent_hundredths,
            percent_hundredths,
            totals_us,
        ),
        min_size=1,
        max_size=2,
        unique_by=lambda t: t[0],
    )
)
def test_psi_lines_round_trip(lines: list[tuple[str, int, int, int, int]]) -> None:
    found = parse_pressure("".join(_psi_line(*line) for line in lines))
    assert found.malformed == 0
    for kind, a10, a60, a300, total in lines:
        got = found.lines[kind]
        assert got.avg10_ratio == pytest.approx(a10 / 10_000)
        assert got.avg60_ratio == pytest.approx(a60 / 10_000)
        assert got.avg300_ratio == pytest.approx(a300 / 10_000)
        assert got.total_s == pytest.approx(total / 1e6)
        assert 0.0 <= got.avg10_ratio <= 1.0


@given(st.text(max_size=200))
def test_psi_never_raises_and_values_are_sane(text: str) -> None:
    found = parse_pressure(text)
    for line in found.lines.values():
        for ratio in (line.avg10_ratio, line.avg60_ratio, line.avg300_ratio):
            assert 0.0 <= ratio <= 1.0
        assert math.isfinite(line.total_s) and line.total_s >= 0


@given(
    st.integers(min_value=1, max_value=INT64_MAX),
    st.integers(min_value=1, max_value=INT64_MAX),
    st.booleans(),
)
def test_cpu_max_round_trip(quota_us: int, period_us: int, unlimited: bool) -> None:
    quota = "max" if unlimited else str(quota_us)
    cores = parse_cpu_max(f"{quota} {period_us}\n")
    assert cores == (None if unlimited else pytest.approx(quota_us / period_us))


@given(st.text(max_size=60))
def test_cpu_max_never_raises_other_errors(text: str) -> None:
    try:
        cores = parse_cpu_max(text)
    except ParseError:
        return
    assert cores is None or (math.isfinite(cores) and cores > 0)


keys = st.text("abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=20)


@given(
    st.dictionaries(keys, st.integers(min_value=0, max_value=INT64_MAX), max_size=30),
    st.sets(keys, max_size=5),
)
def test_flat_keyed_round_trip(values: dict[str, int], wanted_extra: set[str]) -> None:
    """Every wanted key present is read exactly; absent ones are neither value nor error."""
    text = "".join(f"{k} {v}\n" for k, v in values.items())
    wanted = set(list(values)[::2]) | wanted_extra
    found = parse_flat_keyed(text, wanted)
    assert found.values == {k: v for k, v in values.items() if k in wanted}
    assert found.malformed == ()


@given(st.text(max_size=300), st.sets(keys, max_size=5))
def test_flat_keyed_never_raises(text: str, wanted: set[str]) -> None:
    found = parse_flat_keyed(text, wanted)
    assert set(found.values) <= wanted
    assert all(0 <= v <= INT64_MAX for v in found.values.values())
    assert not set(found.malformed) & set(found.values)


@given(st.text(max_size=30))
def test_uint_accepts_only_plain_digits(text: str) -> None:
    try:
        value = parse_uint(text)
    except ParseError:
        assert not (text.isascii() and text.isdigit()) or int(text) > INT64_MAX
        return
    assert str(value) == text.lstrip("0") or (value == 0 and set(text) == {"0"})
