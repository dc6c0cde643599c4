"""A report's JSON document: one shape, strict JSON, and read back unchanged."""

from __future__ import annotations

import json
from datetime import datetime

import pyarrow as pa
import pytest

from sits_observe.domain.units import Unit
from sits_observe.reports.result import Report, col, table_of
from sits_observe.reports.window import Window

WINDOW = Window(datetime(2026, 12, 1, 9), datetime(2026, 12, 1, 10), "given")


def report() -> Report:
    main = table_of(
        "gpus",
        "GPUs",
        [
            {
                "gpu": "n1/0 (H100)",
                "used": 76968624128,
                "ratio": 0.5,
                "at": datetime(2026, 12, 1, 9, 30),
            },
            {"gpu": "n1/1 (H100)", "used": None, "ratio": float("nan"), "at": None},
        ],
        (
            col("gpu", "GPU"),
            col("used", "used", Unit.bytes),
            col("ratio", "use", Unit.ratio, wide=True),
            col("at", "at", Unit.time),
        ),
    )
    other = table_of("empty", "nothing", [], (col("x", "x"),))
    return Report("demo", WINDOW, main, (other,), ("a note",), {"settings": {"k": 1.5}, "n": 2})


def test_the_document_has_the_one_shape_and_is_strict_json() -> None:
    doc = report().document()
    assert list(doc) == ["report", "title", "window", "columns", "rows", "tables", "notes", "facts"]
    text = json.dumps(doc, allow_nan=False)  # NaN would raise here
    assert '"ratio": null' in text
    assert doc["rows"][0]["at"] == "2026-12-01T09:30:00Z"
    assert doc["tables"]["empty"]["rows"] == []
    assert doc["window"]["seconds"] == 3600.0


def test_a_document_reads_back_as_the_same_report() -> None:
    original = report()
    back = Report.from_document(json.loads(json.dumps(original.document())))
    assert back.document() == original.document()
    assert back.main.rows.column("at").to_pylist()[0] == datetime(2026, 12, 1, 9, 30)


def test_a_column_that_is_not_in_the_rows_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match=r"columns \['missing'\]"):
        table_of("t", "t", pa.table({"a": [1]}), (col("missing", "m"),))


def test_tables_by_name() -> None:
    r = report()
    assert r.table("empty").title == "nothing"
    with pytest.raises(KeyError, match="it has"):
        r.table("nope")
