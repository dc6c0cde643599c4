"""One SQL text over rows in the store or in a frame (sits_observe.store.rows)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest

from sits_observe.domain.tables import GPU_SAMPLES
from sits_observe.errors import StoreError
from sits_observe.store import Store
from sits_observe.store.rows import StoreRows, query_rows, window

T0 = datetime(2026, 11, 30, 12, 0, 0)
COLUMNS = ("ts", "node", "gpu_uuid", "dram_active_ratio")
#: A query with its own common table expression, parameters and an outer ORDER BY.
BUSIEST = """
WITH per_node AS (
    SELECT node, avg(dram_active_ratio) AS dram, count(*) AS n FROM samples
    WHERE dram_active_ratio >= ? GROUP BY node
)
SELECT node, dram, n FROM per_node ORDER BY dram DESC, node
"""


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path / "rows.duckdb") as s:
        rows = [
            {"ts": T0 + timedelta(seconds=i), "node": f"n{i % 4}", "gpu_uuid": f"GPU-{i % 8}"}
            | {"dram_active_ratio": (i * 37 % 100) / 100}
            for i in range(64)
        ]
        rows.append({"ts": T0 - timedelta(hours=1), "node": "old", "gpu_uuid": "GPU-old"})
        s.append("gpu_samples", pa.Table.from_pylist(rows, schema=GPU_SAMPLES.schema))
        yield s


def test_the_same_sql_in_the_store_and_over_a_frame(store: Store) -> None:
    stored = window(store, "gpu_samples", COLUMNS, T0, T0 + timedelta(seconds=40))
    frame = pl.DataFrame(store.query(stored.select, stored.params))
    assert frame.height == 40 and "old" not in frame["node"].to_list()
    in_store = query_rows(BUSIEST, {"samples": stored}, [0.2]).to_pylist()
    over_frame = query_rows(BUSIEST, {"samples": frame}, [0.2]).to_pylist()
    over_arrow = query_rows(BUSIEST, {"samples": frame.to_arrow()}, [0.2]).to_pylist()
    assert in_store == over_frame == over_arrow
    drams = [r["dram"] for r in in_store]
    assert drams == sorted(drams, reverse=True)  # the query's own ORDER BY held
    expected = frame.filter(pl.col("dram_active_ratio") >= 0.2).group_by("node").len()
    assert {r["node"]: r["n"] for r in in_store} == dict(expected.iter_rows())


def test_two_relations_of_one_store_bind_in_order(store: Store) -> None:
    early = window(store, "gpu_samples", COLUMNS, until=T0)
    late = window(store, "gpu_samples", COLUMNS, T0 + timedelta(seconds=60), node="n1")
    got = query_rows(
        "SELECT (SELECT count(*) FROM a) AS a, (SELECT count(*) FROM b WHERE dram_active_ratio"
        " > ?) AS b",
        {"a": early, "b": late},
        [-1.0],
    ).to_pylist()
    assert got == [{"a": 1, "b": 1}]  # the hour-old row; n1 at second 61


def test_mixed_relations_and_bad_sql_are_refused(store: Store, tmp_path: Path) -> None:
    rows = window(store, "gpu_samples", COLUMNS)
    frame = pl.DataFrame({"x": [1]})
    with pytest.raises(TypeError, match="one store"):
        query_rows("SELECT * FROM a, b", {"a": rows, "b": frame})
    with (
        Store.open(tmp_path / "other.duckdb") as other,
        pytest.raises(TypeError, match="one store"),
    ):
        query_rows("SELECT * FROM a, b", {"a": rows, "b": StoreRows(other, "SELECT 1")})
    with pytest.raises(StoreError, match="query failed"):
        query_rows("SELECT nope FROM a", {"a": rows})
    with pytest.raises(StoreError, match="query failed"):
        query_rows("SELECT nope FROM a", {"a": frame})


def test_a_frame_is_seen_only_by_its_own_query() -> None:
    query_rows("SELECT * FROM hidden", {"hidden": pl.DataFrame({"x": [1]})})
    with pytest.raises(StoreError, match="hidden"):
        query_rows("SELECT * FROM hidden", {})
