"""JSON that strict parsers accept: a non-finite float is written as ``null``.

Python's :mod:`json` writes ``NaN``, ``Infinity`` and ``-Infinity``, which RFC 8259 does not
allow; Go's ``encoding/json`` (kube-scheduler reading the extender's answers), JavaScript's
``JSON.parse`` and ``jq`` reject the whole document. NULL already means "not measured" in
every table (docs/schema.md), so ``null`` is what a non-finite value becomes on the way out.
Every JSON answer of the service is written with these helpers; ``allow_nan=False`` makes a
value that slipped past them an error here rather than a broken document at the client.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping

import pyarrow as pa
import pyarrow.compute as pc


def finite_or_none(value: object) -> object:
    """``value`` with every non-finite float inside (dicts, lists, tuples) replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {k: finite_or_none(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite_or_none(v) for v in value]
    return value


def dumps(value: object, *, separators: tuple[str, str] | None = None) -> str:
    """``json.dumps`` of ``value`` with non-finite floats as ``null`` (strict RFC 8259).

    Most documents hold no such float and only dicts and lists, so the C encoder tries first;
    only when it refuses one (a non-finite float, or a mapping that is not a dict) is the
    document walked in Python by :func:`finite_or_none` (an extender answer for 5,000 nodes
    holds tens of thousands of values; the walk was most of its encoding time).
    """
    try:
        return json.dumps(value, allow_nan=False, separators=separators)
    except (ValueError, TypeError):
        return json.dumps(finite_or_none(value), allow_nan=False, separators=separators)


def finite_columns(table: pa.Table) -> pa.Table:
    """``table`` with NaN and infinite values of its floating-point columns set to NULL
    (vectorised, for answers of many rows)."""
    for i, column in enumerate(table.columns):
        if pa.types.is_floating(column.type) and column.null_count < len(column):
            bad = pc.fill_null(pc.invert(pc.is_finite(column)), False)
            if pc.any(bad).as_py():
                fixed = pc.if_else(bad, pa.scalar(None, column.type), column)
                table = table.set_column(i, table.schema.field(i), fixed)
    return table
