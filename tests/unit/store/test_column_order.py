"""Every stored table keeps its columns in the domain schema's order.

The group commit inserts a group's tables by position (``insert_into``), not by name, so a
migration that added a column anywhere but where the domain schema has it would shift every
later value into the wrong column. This pins the order for every table a store creates.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sits_observe.domain.tables import TABLES
from sits_observe.store import Store
from sits_observe.store.inventory import VERSIONS


@pytest.mark.parametrize("name", sorted(set(TABLES) - set(VERSIONS)))
def test_stored_columns_are_in_the_domain_order(tmp_path: Path, name: str) -> None:
    sql = "SELECT column_name FROM duckdb_columns() WHERE table_name = ? ORDER BY column_index"
    with Store.open(tmp_path / "s.duckdb") as store:
        stored = store.query(sql, [name]).column(0).to_pylist()
    assert stored == TABLES[name].schema.names
