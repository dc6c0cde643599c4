"""Report ``decisions``: the log newest first, its filters, the unfiltered counts, the window
and golden tables at 80 and 160 columns."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from sits_observe.errors import NoDataError
from sits_observe.reports.actions.decisions import SPEC
from sits_observe.reports.result import Report
from sits_observe.reports.spec import run_report
from sits_observe.reports.window import WindowRequest
from sits_observe.store import Store
from sits_observe.surfaces.cli.reports.output import table_text
from tests.golden_support import assert_golden
from tests.unit.surfaces.test_ui_pages import fill_store

T0 = datetime(2026, 3, 2, 9, 0)
NOW = T0 + timedelta(days=1)


@pytest.fixture
def store() -> Store:
    store = Store.open(":memory:")
    fill_store(store, T0)
    return store


def decisions(store: Store, since: str = "1h", until: str = "newest", **values: object) -> Report:
    request = WindowRequest.parse(since, until)
    return run_report(SPEC, store, request, SPEC.validate(values), now=NOW)


def test_the_log_is_newest_first_and_the_counts_per_action_and_outcome(store: Store) -> None:
    report = decisions(store)
    assert report.main.rows.column("reason").to_pylist() == ["because 2", "because 1", "because 0"]
    counts = report.table("counts").rows.to_pylist()
    assert [(c["action"], c["outcome"], c["decisions"]) for c in counts] == [
        ("fragmentation", "skipped", 1),
        ("memory-class", "recommended", 2),
    ]
    assert report.facts["decisions"] == 3


def test_filters_keep_the_counts_whole(store: Store) -> None:
    report = decisions(store, outcomes=["recommended"], actions=["memory-class"])
    assert report.main.rows.column("name").to_pylist() == ["node-b", "node-a"]
    assert report.facts["decisions"] == 3 and report.facts["listed"] == 2
    assert decisions(store, outcomes=["skipped"]).main.rows.column("outcome").to_pylist() == [
        "skipped:rate-limited"
    ]
    assert decisions(store, limit=1).main.rows.num_rows == 1


def test_the_window_bounds_the_log(store: Store) -> None:
    # Until T0 + 1 s: only the first decision (at T0) is in the window.
    report = decisions(store, since="1h", until="2026-03-02T09:00:01Z")
    assert report.main.rows.column("reason").to_pylist() == ["because 0"]
    with pytest.raises(NoDataError, match="try --until newest"):
        decisions(store, until="now")


@pytest.mark.parametrize("width", [80, 160])
def test_golden_tables(store: Store, width: int) -> None:
    assert_golden(f"decisions_{width}", table_text(decisions(store), width))
