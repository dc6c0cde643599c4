"""The ``recommend`` report: the controller's plan over one window, rows that read at 100
columns (quotas as Kubernetes quantities, short reasons), and the window's cuts."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sits_observe.control.model import Action
from sits_observe.control.settings import ControllerSettings
from sits_observe.errors import NoDataError
from sits_observe.reports import recommend
from sits_observe.reports.result import Report
from sits_observe.reports.spec import run_report
from sits_observe.reports.window import WindowRequest
from sits_observe.store import Store
from sits_observe.surfaces.cli.report_output import table_text
from tests.golden_support import assert_golden
from tests.unit.reports.recommend_store import T0, fill


@pytest.fixture(scope="module")
def store() -> Iterator[Store]:
    with Store.open(":memory:") as s:
        fill(s)
        yield s


def report(store: Store, since: str | None = None, until: str = "newest", **values: Any) -> Report:
    spec = recommend.SPEC
    return run_report(spec, store, WindowRequest.parse(since, until), spec.validate(values))


def by_key(r: Report) -> dict[tuple[str, str], dict[str, Any]]:
    return {(row["target"], row["action"]): row for row in r.main.records()}


def test_the_plan_as_of_the_newest_sample(store: Store) -> None:
    r = report(store)
    assert r.facts["at"] == T0  # one microsecond before until = T0 + 1 us
    rows = by_key(r)
    assert rows[("finance/p1", "memory-class")]["proposed"] == "L2"
    assert rows[("finance/p1", "time-slice")]["proposed"] == "25ms"
    prio = rows[("finance/p1", "priority-class")]
    assert (prio["current"], prio["proposed"]) == ("throughput-guaranteed", "best-effort")
    memory = rows[("finance", "quota-memory")]
    assert (memory["kind"], memory["proposed"], memory["proposed_value"]) == (
        "Namespace",
        "50Gi",
        52685701120,
    )
    assert json.loads(memory["evidence"])["history_days"] == 3
    assert rows[("finance", "quota-cpu")]["proposed"] == "12267m"


def test_the_window_start_cuts_every_look_back(store: Store) -> None:
    # The last 5 s: 5 requests of p1 (still ~30 ms P95 > 10 ms) and one inventory snapshot,
    # so one day of peaks: the quotas grow by a larger confidence factor (VPA: 1 + 1/1 days).
    rows = by_key(report(store, since="5s"))
    assert rows[("finance/p1", "time-slice")]["proposed"] == "25ms"
    gpu = rows[("finance", "quota-gpu")]
    assert json.loads(gpu["evidence"])["history_days"] == 1
    assert gpu["proposed_value"] == 7  # 3 GPUs x 1.15 x 2 = 6.9 -> 7
    # Until a time before the requests and samples: only the earlier inventory is read.
    early = by_key(report(store, until=(T0 - timedelta(hours=1)).isoformat()))
    assert ("finance/p1", "time-slice") not in early and ("n1", "fragmentation") not in early
    assert json.loads(early[("finance", "quota-gpu")]["evidence"])["history_days"] == 2


def test_filters_and_an_empty_window(store: Store) -> None:
    only = report(store, namespace="finance", action="quota-gpu").main.records()
    assert [(r["target"], r["action"]) for r in only] == [("finance", "quota-gpu")]
    assert report(store, namespace="elsewhere").main.rows.num_rows == 0
    with pytest.raises(NoDataError, match="try --until newest"):
        report(store, since="1h", until="now")
    with Store.open(":memory:") as empty, pytest.raises(NoDataError, match="are empty; fill"):
        report(empty, until="now")


@given(st.text(max_size=200))
def test_a_short_reason_fits_its_column(text: str) -> None:
    short = recommend.short_reason(Action.TIME_SLICE, text, {}, ControllerSettings())
    assert len(short) <= 40
    assert text.startswith(short.removesuffix("…"))


@pytest.mark.parametrize("width", [80, 160])
def test_golden_table(store: Store, width: int) -> None:
    assert_golden(f"recommend_{width}", table_text(report(store), width))
