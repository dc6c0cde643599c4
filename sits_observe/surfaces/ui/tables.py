"""Showing a report's tables and facts on a page: short headers, human units.

A :class:`~sits_observe.reports.result.ReportTable` becomes a frame of the strings the CLI's
``-o table`` prints (:func:`sits_observe.domain.units.human` per column unit, the column's
short header), so the app and the terminal read the same; the wide columns (UUIDs, full ids,
raw counts) show when the sidebar's *every column* switch is on.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import streamlit as st

from sits_observe.domain.units import Unit, human
from sits_observe.reports.result import Column, Report, ReportTable
from sits_observe.surfaces.ui.session import wide


def shown_columns(table: ReportTable, every: bool) -> list[Column]:
    """The table's columns, the wide ones only when ``every``."""
    return [c for c in table.columns if every or not c.wide]


def frame(table: ReportTable, *, every: bool = False) -> pa.Table:
    """``table`` as a frame of human-unit strings under the columns' headers."""
    return pa.table(
        {
            c.header: pa.array(
                [human(v, c.unit) for v in table.rows.column(c.name).to_pylist()], pa.string()
            )
            for c in shown_columns(table, every)
        }
    )


def show(table: ReportTable, *, empty: str | None = None, title: bool = True) -> None:
    """Draw ``table`` under its title; ``empty`` (if given) instead of an empty table."""
    if title:
        st.subheader(table.title)
    if table.rows.num_rows == 0 and empty is not None:
        st.info(empty)
        return
    st.dataframe(frame(table, every=wide()), hide_index=True)


def fact(report: Report, name: str, unit: Unit, missing: str = "n/a") -> str:
    """Fact ``name`` of ``report`` as a person reads it (``missing`` when unknown)."""
    text = human(report.facts.get(name), unit)
    return text or missing


def cell(table: ReportTable, row: int, name: str, missing: str = "none") -> str:
    """One cell, in human units (``missing`` when empty)."""
    unit = next(c.unit for c in table.columns if c.name == name)
    text = human(table.rows.column(name)[row].as_py(), unit)
    return text or missing


def window_line(report: Report) -> None:
    """The window the report read, and its notes, as captions."""
    st.caption(f"window: {report.window.describe()}")
    for text in report.notes:
        st.caption(text)


def header(question: str) -> None:
    """The line under a page's title saying what it answers."""
    st.markdown(f"*{question}*")


def records(table: ReportTable, names: Sequence[str]) -> list[dict[str, Any]]:
    """Raw values of ``names`` per row, times as ISO-8601 (the data of a chart)."""
    return [
        {k: v.isoformat() if hasattr(v, "isoformat") else v for k, v in r.items()}
        for r in table.rows.select(list(names)).to_pylist()
    ]
