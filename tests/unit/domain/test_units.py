"""Human units: what a person reads in a table cell, one formatter per kind."""

from __future__ import annotations

from datetime import datetime

import pytest

from sits_observe.domain.quantity import (
    format_bytes_quantity,
    format_milli_quantity,
    parse_quantity,
)
from sits_observe.domain.units import Unit, human

GI = 1024**3


@pytest.mark.parametrize(
    ("value", "unit", "shown"),
    [
        (76968624128, Unit.bytes, "71.7Gi"),
        (512, Unit.bytes, "512B"),
        (1024**4 * 1.5, Unit.bytes, "1.5Ti"),
        (76968624128, Unit.quantity_bytes, "72Gi"),
        (316110012416, Unit.quantity_bytes, "295Gi"),
        (0.032812499999999994, Unit.number, "0.03281"),
        (0.4321, Unit.ratio, "43.2%"),
        (1.0, Unit.ratio, "100%"),
        (0.85, Unit.seconds, "850ms"),
        (2.4, Unit.seconds, "2.40s"),
        (192, Unit.seconds, "3m12s"),
        (7200, Unit.seconds, "2h0m"),
        (7910, Unit.quantity_cpu, "7910m"),
        (73600, Unit.quantity_cpu, "73600m"),
        (8000, Unit.quantity_cpu, "8"),
        (108000, Unit.milli_cpu, "108"),
        (3727, Unit.milli_gpu, "3.73"),
        (12345, Unit.integer, "12,345"),
        (12.34, Unit.rate, "12.3/s"),
        (0.4126, Unit.score, "0.413"),
        (0.62, Unit.score, "0.62"),
        (32e9, Unit.bytes_per_s, "32GB/s"),
        (1.8e12, Unit.bytes_per_s, "1.8TB/s"),
        (999, Unit.bytes_per_s, "999B/s"),
        (None, Unit.bytes, ""),
        (float("nan"), Unit.ratio, ""),
        (True, Unit.flag, "yes"),
        (datetime(2026, 12, 1, 10, 0, 0, 123456), Unit.time, "2026-12-01 10:00:00Z"),
        ("2026-12-01T10:00:00.5Z", Unit.time, "2026-12-01 10:00:00Z"),
        ("n1/0 (H100)", Unit.text, "n1/0 (H100)"),
    ],
)
def test_human(value: object, unit: Unit, shown: str) -> None:
    assert human(value, unit) == shown


@pytest.mark.parametrize("value", [1, 1023, 1024, 1025, 80 * GI, 80 * GI + 1, 3 * 1024**4 - 7])
def test_manifest_quantities_round_up_and_parse_back(value: int) -> None:
    text = format_bytes_quantity(value)
    assert parse_quantity(text) >= value
    assert parse_quantity(text) - value < parse_quantity("1" + text.lstrip("0123456789") or "1")


@pytest.mark.parametrize("milli", [1, 999, 1000, 1001, 7910, 64000, 0.4])
def test_milli_quantities_round_up_and_parse_back(milli: float) -> None:
    text = format_milli_quantity(milli)
    assert parse_quantity(text) * 1000 >= milli
    assert parse_quantity(text) * 1000 - int(milli) < 1000


def test_floating_point_noise_prints_as_zero() -> None:
    """A flat series' fitted slope comes out as -4e-30: a table shows 0%, not
    -0.000000000000000000000000000407%; a real small value keeps its digits."""
    assert human(-4.07e-30, Unit.ratio) == "0%"
    assert human(3e-14, Unit.seconds) == human(0.0, Unit.seconds)
    assert human(2e-5, Unit.ratio) != "0%"
