"""Human units for printed values: one formatter per kind of quantity.

Every table a person reads (CLI, Streamlit) shows a value through :func:`human`, so a byte
count is ``71.7Gi`` everywhere, a ratio ``43.2%``, a latency ``850ms`` or ``2.40s``, a CPU
amount ``7.9`` cores or ``7910m``. Values that could go into a manifest (a request, a limit,
a quota) use :attr:`Unit.quantity_bytes` / :attr:`Unit.quantity_cpu`: the Kubernetes
quantity, rounded up, that can be pasted as written. JSON and CSV keep the raw numbers.
"""

from __future__ import annotations

import math
from datetime import datetime
from decimal import Decimal
from enum import StrEnum

from sits_observe.domain.quantity import format_bytes_quantity, format_milli_quantity


class Unit(StrEnum):
    """How a column's values read."""

    text = "text"
    integer = "integer"  # 1,234
    number = "number"  # 4 significant digits
    score = "score"  # a 0..1 index (not a share of anything): 3 significant digits, 0.413
    ratio = "ratio"  # 0..1 shown as a percentage
    percent = "percent"  # already 0..100
    bytes = "bytes"  # 71.7Gi
    bytes_per_s = "bytes_per_s"  # 32GB/s: decimal, as link and bandwidth figures are quoted
    quantity_bytes = "quantity_bytes"  # 72Gi, rounded up: goes into a manifest
    milli_cpu = "milli_cpu"  # 7.91 cores
    quantity_cpu = "quantity_cpu"  # 7910m, rounded up: goes into a manifest
    milli_gpu = "milli_gpu"  # 3.73 GPUs
    seconds = "seconds"  # 850ms, 2.40s, 3m12s
    rate = "rate"  # 12.3/s
    watts = "watts"  # 312W
    time = "time"  # 2026-12-01 10:00:00Z
    flag = "flag"  # yes / no


_BINARY = ("", "Ki", "Mi", "Gi", "Ti", "Pi")
_DECIMAL = ("", "k", "M", "G", "T", "P")


def _significant(value: float, digits: int = 3) -> str:
    """``value`` with ``digits`` significant digits, no exponent below 1e15, no ``-0``."""
    if value == 0:
        return "0"
    magnitude = math.floor(math.log10(abs(value)))
    decimals = max(0, digits - 1 - magnitude)
    text = f"{value:,.{decimals}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def human_bytes(value: float) -> str:
    """``76968624128`` -> ``71.7Gi`` (binary prefixes, 3 significant digits)."""
    size, step = abs(value), 0
    while size >= 1024 and step < len(_BINARY) - 1:
        size, step = size / 1024, step + 1
    sign = "-" if value < 0 else ""
    return f"{sign}{_significant(size)}{_BINARY[step]}" + ("" if step else "B")


def human_bytes_per_s(value: float) -> str:
    """``32e9`` -> ``32GB/s``; ``1.8e12`` -> ``1.8TB/s`` (decimal prefixes, 3 significant
    digits: datasheets quote NVLink and PCIe bandwidth in 10^9 bytes/s)."""
    size, step = abs(value), 0
    while size >= 1000 and step < len(_DECIMAL) - 1:
        size, step = size / 1000, step + 1
    sign = "-" if value < 0 else ""
    return f"{sign}{_significant(size)}{_DECIMAL[step]}B/s"


def human_seconds(value: float) -> str:
    """``0.85`` -> ``850ms``; ``2.4`` -> ``2.40s``; ``192`` -> ``3m12s``; ``7200`` -> ``2h0m``."""
    size = abs(value)
    sign = "-" if value < 0 else ""
    if size == 0:
        return "0s"
    if size < 1e-3:
        return f"{sign}{_significant(size * 1e6)}us"
    if size < 1:
        return f"{sign}{_significant(size * 1e3)}ms"
    if size < 60:
        return f"{sign}{size:.2f}s"
    if size < 3600:
        minutes, seconds = divmod(round(size), 60)
        return f"{sign}{minutes}m{seconds:02d}s"
    hours, rest = divmod(round(size), 3600)
    return f"{sign}{hours}h{rest // 60}m"


def span_text(seconds: float) -> str:
    """A span of history in one unit, rounded down: ``45s``, ``5m``, ``23h``, ``9d``."""
    whole = max(0, int(seconds))
    for unit, size in (("d", 86_400), ("h", 3600), ("m", 60)):
        if whole >= 2 * size or (unit != "d" and whole >= size):
            return f"{whole // size}{unit}"
    return f"{whole}s"


def human_time(value: datetime | str) -> str:
    """UTC to the second: ``2026-12-01 10:00:00Z`` (a naive time is UTC)."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if value.tzinfo is not None:
        from datetime import UTC

        value = value.astimezone(UTC).replace(tzinfo=None)
    return value.replace(microsecond=0).isoformat(sep=" ") + "Z"


#: Magnitudes under this are floating-point rounding (a flat series' fitted slope comes out as
#: -4e-30), printed as 0.
FLOAT_NOISE = 1e-12


def human(value: object, unit: Unit | str) -> str:
    """``value`` as a person reads it in a table cell; None (and NaN) is empty."""
    if value is None:
        return ""
    if isinstance(value, float) and math.isnan(value):
        return ""
    kind = Unit(unit)
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value)
    if kind is Unit.text or (isinstance(value, str) and kind is not Unit.time):
        return str(value)
    if kind is Unit.time:
        return human_time(value)  # type: ignore[arg-type]
    if kind is Unit.flag:
        return "yes" if value else "no"
    if not isinstance(value, int | float | Decimal):
        return str(value)
    number = float(value)
    if math.isinf(number):
        return "inf" if number > 0 else "-inf"
    if abs(number) < FLOAT_NOISE:  # rounding left over from sums and fits, not a value
        number = 0.0
    match kind:
        case Unit.integer:
            return f"{round(number):,}"
        case Unit.score:
            return _significant(number, 3)
        case Unit.ratio:
            return _significant(number * 100, 3) + "%"
        case Unit.percent:
            return _significant(number, 3) + "%"
        case Unit.bytes:
            return human_bytes(number)
        case Unit.bytes_per_s:
            return human_bytes_per_s(number)
        case Unit.quantity_bytes:
            return format_bytes_quantity(number)
        case Unit.milli_cpu:
            return _significant(number / 1000, 3)
        case Unit.quantity_cpu:
            return format_milli_quantity(number)
        case Unit.milli_gpu:
            return _significant(number / 1000, 3)
        case Unit.seconds:
            return human_seconds(number)
        case Unit.rate:
            return _significant(number, 3) + "/s"
        case Unit.watts:
            return _significant(number, 3) + "W"
        case _:
            return _significant(number, 4)
