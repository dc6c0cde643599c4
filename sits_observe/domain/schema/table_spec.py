"""How a sample table is declared: :class:`TableSpec`, its name, its Arrow schema (every field
with its meaning as ``doc`` metadata, :func:`table_schema`) and its time column.

Time columns are :data:`TS`: UTC, microsecond precision, stored without a zone. The tables
and the conventions they follow are in :mod:`sits_observe.domain.tables`.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

TS = pa.timestamp("us")


@dataclass(frozen=True)
class TableSpec:
    """One table: its name, Arrow schema, a one-line purpose and its time column."""

    name: str
    schema: pa.Schema
    doc: str
    time_column: str = "ts"


def table_schema(*fields: tuple[str, pa.DataType, str]) -> pa.Schema:
    """The Arrow schema of ``(name, type, meaning)`` fields, each meaning kept as the field's
    ``doc`` metadata (docs/schema.md is generated from it)."""
    return pa.schema([pa.field(name, dtype, metadata={"doc": doc}) for name, dtype, doc in fields])
