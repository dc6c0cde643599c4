"""Kubernetes resource quantities (``resource.Quantity``): parsing and printing, in one place.

Read by the inventory collector, the controller, the scheduler extender and the GPU request
reader, none of which should need the Kubernetes client to parse ``7910m`` or ``32Gi``; written
by the simulator and the scheduler replay when they build objects. :func:`format_quantity`
prints an amount the way the API server canonicalises it: bytes with the largest binary suffix
that divides them (``294Gi``), CPU as whole cores (``8``) or thousandths (``73600m``), and
other counts as plain numbers.
"""

from __future__ import annotations

import re
from decimal import ROUND_CEILING, Decimal, DecimalException
from typing import Literal

from sits_observe.errors import ParseError

_QUANTITY = re.compile(
    r"^(?P<num>[+-]?(?:\d+(?:\.\d*)?|\.\d+))"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?\d+|[numkMGTPE]?)$"
)
_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY_LARGEST_FIRST = sorted(_BINARY.items(), key=lambda item: -item[1])

#: The largest magnitude a quantity holds: "no quantity may represent a number greater than
#: 2^63-1 in magnitude [...] Numbers larger [...] will be capped" (Kubernetes API reference,
#: Quantity). Capped at parse time, so no reader's arithmetic meets ``1e999999``.
MAX_QUANTITY = Decimal(2**63 - 1)

#: What the amount handed to :func:`format_quantity` counts.
QuantityUnit = Literal["bytes", "cores", "millicores", "count"]


def parse_quantity(text: str | int | float) -> Decimal:
    """A Kubernetes quantity (``resource.Quantity`` grammar) as an exact ``Decimal``.

    ``<number><suffix>`` with suffix a binary SI (``Ki`` .. ``Ei``, powers of 1024), a decimal
    SI (``n``, ``u``, ``m``, none, ``k``, ``M`` .. ``E``; apimachinery's suffix.go) or a
    decimal exponent (``e3``, ``E-2``). Raises :class:`ParseError` for anything else. A
    magnitude above :data:`MAX_QUANTITY` (2^63-1) is capped at it, as the API reference says
    quantities are: ``1e30`` and ``1e1000000`` read as 9223372036854775807.
    """
    if isinstance(text, bool) or not isinstance(text, str | int | float):
        raise ParseError(f"quantity {text!r} is not a string or number")
    if isinstance(text, int) and abs(text) > MAX_QUANTITY:
        return MAX_QUANTITY if text > 0 else -MAX_QUANTITY  # str() of 5,000 digits raises
    raw = str(text).strip()
    match = _QUANTITY.match(raw)
    if match is None:
        raise ParseError(
            f"quantity {text!r} is not a Kubernetes quantity; expected e.g. 7910m, 8, 32Gi, 1e9"
        )
    number = Decimal(match["num"])
    suffix = match["suffix"]
    try:
        if suffix in _BINARY:
            value = number * (Decimal(1024) ** _BINARY[suffix])
        else:
            exponent = _DECIMAL[suffix] if suffix in _DECIMAL else int(suffix[1:])
            value = number.scaleb(exponent)
    except (DecimalException, ValueError):
        # An exponent beyond Decimal's range (1e1000000; int() refuses 5,000 digits): a huge
        # number is capped below like any other; a vanishing one is refused.
        if number != 0 and suffix[1:2] == "-":
            raise ParseError(f"quantity {text!r} is out of range") from None
        value = MAX_QUANTITY.copy_sign(number) if number != 0 else number
    return max(-MAX_QUANTITY, min(value, MAX_QUANTITY))


def quantity_value(text: str | int | float) -> int:
    """The quantity as an integer, rounded up (``Quantity.Value()``)."""
    return int(parse_quantity(text).to_integral_value(rounding=ROUND_CEILING))


def quantity_milli(text: str | int | float) -> int:
    """The quantity in thousandths, rounded up (``Quantity.MilliValue()``)."""
    return int((parse_quantity(text) * 1000).to_integral_value(rounding=ROUND_CEILING))


def format_bytes_quantity(value: float | int | Decimal) -> str:
    """A byte count as the quantity a manifest takes, rounded up to a whole number of the
    largest binary unit it reaches: ``76968624128`` -> ``72Gi``, ``1536`` -> ``2Ki``."""
    number = Decimal(str(value))
    if number <= 0:
        return str(int(number.to_integral_value(rounding=ROUND_CEILING)))
    for suffix, power in _BINARY_LARGEST_FIRST:
        unit = Decimal(1024) ** power
        if number >= unit:
            return f"{int((number / unit).to_integral_value(rounding=ROUND_CEILING))}{suffix}"
    return str(int(number.to_integral_value(rounding=ROUND_CEILING)))


def format_milli_quantity(milli: float | int | Decimal) -> str:
    """Thousandths (millicores, milli-GPUs) as a quantity, rounded up: ``8000`` -> ``8``,
    ``7910`` -> ``7910m``, ``0.4`` -> ``1m``."""
    whole = int(Decimal(str(milli)).to_integral_value(rounding=ROUND_CEILING))
    return str(whole // 1000) if whole % 1000 == 0 else f"{whole}m"


def format_quantity(value: Decimal | int, unit: QuantityUnit = "count") -> str:
    """``value`` (in ``unit``) as a canonical quantity: ``294Gi``, ``8``, ``73600m``, ``110``.

    Bytes take the largest binary suffix (``Ki`` .. ``Ei``) that divides them exactly, so the
    text parses back to the same amount (:func:`format_bytes_quantity` rounds up instead, for a
    proposal); CPU (``cores``, or ``millicores`` for an amount in thousandths) is
    :func:`format_milli_quantity`; anything else is the plain number.
    """
    amount = Decimal(value)
    if unit in ("cores", "millicores"):
        return format_milli_quantity(amount if unit == "millicores" else amount * 1000)
    whole = amount == amount.to_integral_value()
    if unit == "bytes" and whole and amount > 0:
        count = int(amount)
        for suffix, power in _BINARY_LARGEST_FIRST:
            if count % (1024**power) == 0:
                return f"{count // 1024**power}{suffix}"
    if whole:
        return str(int(amount))
    return format(amount.normalize(), "f")
