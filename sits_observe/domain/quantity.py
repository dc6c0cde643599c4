"""Kubernetes resource quantities (``resource.Quantity``): parsing, exactly, in one place.

Read by the inventory collector, the controller, the scheduler extender and the GPU request
reader, none of which should need the Kubernetes client to parse ``7910m`` or ``32Gi``.
"""

from __future__ import annotations

import re
from decimal import ROUND_CEILING, Decimal, InvalidOperation

from sits_observe.errors import ParseError

_QUANTITY = re.compile(
    r"^(?P<num>[+-]?(?:\d+(?:\.\d*)?|\.\d+))"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?\d+|[numkMGTPE]?)$"
)
_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}


def parse_quantity(text: str | int | float) -> Decimal:
    """A Kubernetes quantity (``resource.Quantity`` grammar) as an exact ``Decimal``.

    ``<number><suffix>`` with suffix a binary SI (``Ki`` .. ``Ei``, powers of 1024), a decimal
    SI (``n``, ``u``, ``m``, none, ``k``, ``M`` .. ``E``; apimachinery's suffix.go) or a
    decimal exponent (``e3``, ``E-2``). Raises :class:`ParseError` for anything else.
    """
    if isinstance(text, bool) or not isinstance(text, str | int | float):
        raise ParseError(f"quantity {text!r} is not a string or number")
    raw = str(text).strip()
    match = _QUANTITY.match(raw)
    if match is None:
        raise ParseError(
            f"quantity {text!r} is not a Kubernetes quantity; expected e.g. 7910m, 8, 32Gi, 1e9"
        )
    number = Decimal(match["num"])
    suffix = match["suffix"]
    if suffix in _BINARY:
        return number * (Decimal(1024) ** _BINARY[suffix])
    exponent = _DECIMAL[suffix] if suffix in _DECIMAL else int(suffix[1:])
    try:
        return number.scaleb(exponent)
    except InvalidOperation as exc:  # pragma: no cover - exponent beyond Decimal's range
        raise ParseError(f"quantity {text!r} is out of range") from exc


def quantity_value(text: str | int | float) -> int:
    """The quantity as an integer, rounded up (``Quantity.Value()``)."""
    return int(parse_quantity(text).to_integral_value(rounding=ROUND_CEILING))


def quantity_milli(text: str | int | float) -> int:
    """The quantity in thousandths, rounded up (``Quantity.MilliValue()``)."""
    return int((parse_quantity(text) * 1000).to_integral_value(rounding=ROUND_CEILING))
