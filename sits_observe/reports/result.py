"""What a report returns: frozen tables with column units, the window used, and notes.

A :class:`Report` is the whole answer to one question. Surfaces only render it: the CLI as a
table (short headers, human units), JSON, YAML or CSV; the Streamlit app as tables and charts;
the service's API as the JSON document of :meth:`Report.document`, which
:meth:`Report.from_document` reads back (that is how ``--service`` reads work), so an answer
read through the service is the one a local file gives.

The JSON document has one shape for every report::

    {"report": "smf", "title": ..., "window": {"since": ..., "until": ..., ...},
     "columns": [{"name": ..., "header": ..., "unit": ..., "wide": false}, ...],
     "rows": [...], "tables": {"<name>": {"title": ..., "columns": [...], "rows": [...]}},
     "notes": [...], "facts": {...}}

``rows`` is the main table; ``tables`` holds the others (none for most reports); ``facts``
holds scalar results and the settings used. Values are raw (bytes, seconds, ratios 0-1); times
are ISO-8601 UTC strings; NaN and infinities are ``null``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal
from enum import Enum
from typing import Any

import pyarrow as pa

from sits_observe.domain.units import Unit
from sits_observe.reports.window import Window, parse_time, utc_text


@dataclass(frozen=True)
class Column:
    """One printed column: the row key, a short header, its unit; ``wide`` columns show only
    with ``-o wide`` (or when named in ``--columns``); a ``wrap`` column (a sentence, such as
    a reason) folds onto more lines in a narrow terminal instead of ending in an ellipsis."""

    name: str
    header: str
    unit: Unit = Unit.text
    wide: bool = False
    wrap: bool = False

    def as_dict(self) -> dict[str, Any]:
        """The column for JSON (``wrap`` only where set)."""
        return {
            "name": self.name,
            "header": self.header,
            "unit": self.unit.value,
            "wide": self.wide,
            **({"wrap": True} if self.wrap else {}),
        }

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> Column:
        """The inverse of :meth:`as_dict`."""
        return cls(
            str(doc["name"]),
            str(doc["header"]),
            Unit(doc["unit"]),
            bool(doc["wide"]),
            bool(doc.get("wrap", False)),
        )


_DIGITS = re.compile(r"(\d+)")


def natural_key(value: object) -> tuple[Any, ...]:
    """A sort key that orders numbers inside text by value (``gpu-node-2/9`` before
    ``gpu-node-2/10``), None last: how a person expects node, GPU and pod names listed."""
    if value is None:
        return (1,)
    parts = _DIGITS.split(str(value))
    return (0, *((int(p), "") if i % 2 else (0, p) for i, p in enumerate(parts)))


def sorted_rows(rows: Sequence[Mapping[str, Any]], keys: Sequence[str]) -> list[Any]:
    """``rows`` ordered by ``keys`` (:func:`natural_key` each)."""
    return sorted(rows, key=lambda r: tuple(natural_key(r.get(k)) for k in keys))


def col(
    name: str, header: str, unit: Unit = Unit.text, *, wide: bool = False, wrap: bool = False
) -> Column:
    """Shorthand for :class:`Column` in the report modules' column lists."""
    return Column(name, header, unit, wide, wrap)


@dataclass(frozen=True)
class ReportTable:
    """One table of a report: a title, rows and the columns people see."""

    name: str
    title: str
    rows: pa.Table
    columns: tuple[Column, ...]

    def __post_init__(self) -> None:
        missing = [c.name for c in self.columns if c.name not in self.rows.column_names]
        if missing:
            raise ValueError(f"table {self.name}: columns {missing} are not in its rows")

    def records(self) -> list[dict[str, Any]]:
        """The rows as JSON-ready dicts (see the module docstring for value rules)."""
        return [{k: json_value(v) for k, v in row.items()} for row in self.rows.to_pylist()]

    def as_dict(self) -> dict[str, Any]:
        """The table for JSON (under the document's ``tables``)."""
        return {
            "title": self.title,
            "columns": [c.as_dict() for c in self.columns],
            "rows": self.records(),
        }


@dataclass(frozen=True)
class Report:
    """The answer to one question over one window (see the module docstring)."""

    name: str
    window: Window
    main: ReportTable
    others: tuple[ReportTable, ...] = ()
    notes: tuple[str, ...] = ()
    facts: Mapping[str, Any] = field(default_factory=dict)

    @property
    def tables(self) -> tuple[ReportTable, ...]:
        """Every table, the main one first."""
        return (self.main, *self.others)

    def table(self, name: str) -> ReportTable:
        """The table called ``name`` (KeyError names the ones there are)."""
        for t in self.tables:
            if t.name == name:
                return t
        raise KeyError(f"report {self.name} has no table {name!r}; it has {self.table_names()}")

    def table_names(self) -> list[str]:
        """Names of every table, the main one first."""
        return [t.name for t in self.tables]

    def document(self) -> dict[str, Any]:
        """The JSON document (one shape for every report)."""
        return {
            "report": self.name,
            "title": self.main.title,
            "window": self.window.as_dict(),
            "columns": [c.as_dict() for c in self.main.columns],
            "rows": self.main.records(),
            "tables": {t.name: t.as_dict() for t in self.others},
            "notes": list(self.notes),
            "facts": {k: json_value(v) for k, v in self.facts.items()},
        }

    @classmethod
    def from_document(cls, doc: Mapping[str, Any]) -> Report:
        """A report read back from :meth:`document` (the service's answer)."""
        main = _table_from(doc["report"], doc["title"], doc["columns"], doc["rows"])
        others = tuple(
            _table_from(name, t["title"], t["columns"], t["rows"])
            for name, t in dict(doc.get("tables", {})).items()
        )
        return cls(
            name=str(doc["report"]),
            window=Window.from_dict(doc["window"]),
            main=main,
            others=others,
            notes=tuple(str(n) for n in doc.get("notes", [])),
            facts=dict(doc.get("facts", {})),
        )


def _table_from(
    name: str, title: str, columns: Sequence[Mapping[str, Any]], rows: Sequence[Mapping[str, Any]]
) -> ReportTable:
    cols = tuple(Column.from_dict(c) for c in columns)
    times = {c.name for c in cols if c.unit is Unit.time}
    fixed = [
        {k: (parse_time(v, k) if k in times and isinstance(v, str) else v) for k, v in r.items()}
        for r in rows
    ]
    names = list(dict.fromkeys([*(c.name for c in cols), *(k for r in fixed for k in r)]))
    table = pa.Table.from_pylist(fixed) if fixed else _empty(names)
    return ReportTable(name, title, table, cols)


def _empty(names: Sequence[str]) -> pa.Table:
    return pa.table({n: pa.array([], type=pa.null()) for n in names})


def json_value(value: Any) -> Any:
    """A value as strict JSON takes it: times as ISO-8601 UTC, NaN/inf as None, Decimal as
    float, enums as their value, nested lists and dicts converted too."""
    if isinstance(value, float):
        return None if math.isnan(value) or math.isinf(value) else value
    if isinstance(value, datetime):
        return utc_text(value)
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, Mapping):
        return {str(k): json_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_value(v) for v in value]
    return value


def table_of(
    name: str,
    title: str,
    rows: Sequence[Mapping[str, Any]] | pa.Table,
    columns: Sequence[Column],
) -> ReportTable:
    """A :class:`ReportTable` from rows as dicts or an Arrow table; empty dict rows get the
    columns' names (all null), so an empty answer still has its header."""
    if isinstance(rows, pa.Table):
        return ReportTable(name, title, rows, tuple(columns))
    if rows:
        return ReportTable(name, title, pa.Table.from_pylist(list(rows)), tuple(columns))
    return ReportTable(name, title, _empty([c.name for c in columns]), tuple(columns))
