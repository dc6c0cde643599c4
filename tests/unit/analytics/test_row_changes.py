"""Row-span fingerprints: one span at a time, and several spans of a table in one scan."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest

from sits_observe.analytics.row_changes import (
    RowSpan,
    fingerprint,
    fingerprints,
    query_fingerprint,
)
from sits_observe.domain.tables import TABLES, conform
from sits_observe.store import Store

T0 = datetime(2026, 5, 1, 12, 0)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path / "fp.duckdb") as s:
        rows = [
            {"ts": at(s), "node": f"n{s % 3}", "gpu_uuid": f"GPU-{s % 5}", "fb_used_bytes": s}
            for s in range(0, 120, 3)
        ]
        s.append("gpu_samples", conform("gpu_samples", pa.Table.from_pylist(rows)))
        s.append(
            "collector_drops",
            conform(
                "collector_drops",
                pa.Table.from_pylist(
                    [{"ts": at(5), "node": "n1", "collector": "dcgm", "reason": "nan", "count": 2}],
                    schema=TABLES["collector_drops"].schema,
                ),
            ),
        )
        yield s


SPANS = (
    RowSpan("gpu_samples", at(30), at(90)),
    RowSpan("gpu_samples", at(28)),  # open end
    RowSpan("gpu_samples", None, at(10)),  # open start
    RowSpan("gpu_samples", at(500), at(600)),  # empty
    RowSpan("gpu_samples"),  # everything
    RowSpan("collector_drops"),
    RowSpan("collector_drops", at(6)),  # empty
)


def test_spans_read_together_equal_each_read_alone(store: Store) -> None:
    together = fingerprints(store, SPANS)
    assert together == {span: fingerprint(store, span) for span in SPANS}
    assert together[SPANS[3]] == (0, None)
    assert together[SPANS[4]][0] == 40
    # Different spans of one table are told apart.
    assert len({together[s] for s in SPANS[:5]}) == 5


def test_a_changed_row_changes_only_the_spans_that_hold_it(store: Store) -> None:
    before = fingerprints(store, SPANS)
    store.query("UPDATE gpu_samples SET fb_used_bytes = -1 WHERE ts = ?", [at(60)])
    after = fingerprints(store, SPANS)
    changed = {span for span in SPANS if before[span] != after[span]}
    assert changed == {SPANS[0], SPANS[1], SPANS[4]}
    assert after == {span: fingerprint(store, span) for span in SPANS}


def test_a_missing_table_raises_as_one_span_does(store: Store) -> None:
    with pytest.raises(Exception, match="no_such_table"):
        fingerprints(store, [RowSpan("gpu_samples"), RowSpan("no_such_table")])


def test_duplicate_spans_are_read_once(store: Store) -> None:
    span = RowSpan("gpu_samples", at(30), at(90))
    assert fingerprints(store, [span, span]) == {span: fingerprint(store, span)}


def test_a_query_fingerprint_is_that_of_its_rows_in_any_order(tmp_path: Path) -> None:
    """:func:`query_fingerprint` of a query is the fingerprint of the rows it returns: equal
    for the same rows in another order, different when one row differs."""
    with Store.open(tmp_path / "q.duckdb") as store:
        a = query_fingerprint(store, "SELECT * FROM (VALUES (1, 'x'), (2, 'y')) AS t(n, s)")
        b = query_fingerprint(store, "SELECT * FROM (VALUES (2, 'y'), (1, 'x')) AS t(n, s)")
        c = query_fingerprint(store, "SELECT * FROM (VALUES (2, 'y'), (1, 'z')) AS t(n, s)")
        empty = query_fingerprint(store, "SELECT 1 AS n WHERE ? = 2", [1])
        assert a == b and a[0] == 2 and a != c
        assert empty == (0, None)
