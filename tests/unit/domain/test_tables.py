"""The table contract: conform(), lookup errors, and docs/schema.md kept in step."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pyarrow as pa
import pytest

from sits_observe.domain.schema.describe import schema_markdown
from sits_observe.domain.tables import TABLES, conform, empty_table, find_table
from sits_observe.errors import UnknownNameError

ROOT = Path(__file__).resolve().parents[3]
#: Float columns that are counts (dimensionless), not quantities with a unit.
COUNTS = {"completed", "requests_running", "requests_waiting"}


def test_conform_orders_casts_and_fills_nulls() -> None:
    data = pa.table({"latency_s": pa.array([1], pa.int64()), "ts": [datetime(2026, 1, 1)]})
    out = conform("requests", data)
    assert out.schema == find_table("requests").schema
    assert out.column("latency_s").to_pylist() == [1.0]
    assert out.column("model").null_count == 1


def test_conform_rejects_unknown_columns_by_name() -> None:
    with pytest.raises(ValueError, match="latncy_s"):
        conform("requests", pa.table({"latncy_s": [1.0]}))


def test_find_table_lists_valid_names_on_a_miss() -> None:
    with pytest.raises(UnknownNameError, match="gpu_samples"):
        find_table("gpu")


def test_every_quantity_column_names_its_unit() -> None:
    """STYLE.md: every quantity names its unit (or is an id, label, count or flag)."""
    units = (
        "_bytes",
        "_ratio",
        "_s",
        "_bytes_per_s",
        "_w",
        "_c",
        "_hz",
        "_j",
        "_milli",
        "_total",
        "_rps",
        "_cores",
        "_at",
    )
    for spec in TABLES.values():
        for field in spec.schema:
            if pa.types.is_floating(field.type):
                assert field.name.endswith(units) or field.name in COUNTS, (
                    spec.name,
                    field.name,
                )


def test_empty_table_has_the_schema() -> None:
    assert empty_table("gpu_samples").num_rows == 0


def test_docs_schema_page_matches_the_code() -> None:
    """docs/schema.md embeds `sits-observe schema`; regenerate it when this fails."""
    page = (ROOT / "docs" / "schema.md").read_text()
    assert schema_markdown().strip() in page
