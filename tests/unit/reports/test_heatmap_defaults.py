"""``heatmap`` on its defaults: bins chosen from the requests, the SLO from configuration per
model, and a plain word when none is set.

The fixture is a service of a few requests a second on a six-minute load ramp (0.5 to 6
requests/s in 20 s steps) whose latency follows a queue, 2 s / (1 - load / 6.5): the shape of
the demo's servers. Fixed bins of 1 s and 10 rps put every time bin in the lowest throughput
bin, so no knee and only an upper bound; bins from the data find both.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from fractions import Fraction
from pathlib import Path

import pyarrow as pa
import pytest

from sits_observe.analytics.heatmap.bins import (
    data_bins,
    latency_bin_ms,
    nice_at_least,
    throughput_bin_rps,
    time_bin_s,
)
from sits_observe.analytics.serving.latency import RequestSelection
from sits_observe.domain.validation import validate_settings
from sits_observe.reports.serving import heatmap, heatmap_query
from sits_observe.reports.serving.heatmap_maps import heatmaps_of
from sits_observe.reports.window import Window
from sits_observe.store import Store

T0 = datetime(2026, 5, 4, 10, 0, 0)
STEP_S = 20
STEPS = 18
WINDOW = Window(None, T0 + timedelta(seconds=STEP_S * STEPS + 60), "given")
SLO_S = 10.0


def rate_of(step: int) -> float:
    return 0.5 + step * (5.5 / (STEPS - 1))


def queue_latency_s(rate_rps: float) -> float:
    return 2.0 / (1.0 - rate_rps / 6.5)


@pytest.fixture(scope="module")
def store() -> Store:
    rows: list[dict[str, object]] = []
    for step in range(STEPS):
        rate = rate_of(step)
        n = round(rate * STEP_S)
        for j in range(n):
            rows.append(
                {
                    "ts": T0 + timedelta(seconds=step * STEP_S + (j + 0.5) * STEP_S / n),
                    "model": "chat",
                    "pod": "chat-0",
                    "latency_s": queue_latency_s(rate) * (0.8 + 0.4 * j / n),
                    "ok": True,
                }
            )
    # A second model, slow and quiet: 1 request every 4 s at 30 s.
    for j in range(60):
        rows.append({"ts": T0 + timedelta(seconds=4 * j), "model": "embed", "latency_s": 30.0})
    s = Store.open(":memory:")
    s.append("requests", pa.Table.from_pylist(rows))
    return s


def test_fixed_bins_find_no_knee_on_this_load(store: Store) -> None:
    fixed = heatmap_query.HeatmapQuery(
        model="chat", bin_s=1, throughput_bin_rps=10, latency_bin_ms=100, slo_ms=SLO_S * 1000
    )
    (fact,) = heatmap.build(store, WINDOW, fixed).facts["heatmaps"]
    assert fact["knee"] is None


def test_default_bins_come_from_the_data_and_find_the_knee(store: Store) -> None:
    report = heatmap.build(store, WINDOW, heatmap_query.HeatmapQuery(model="chat"))
    facts = report.facts
    # About 3.3 requests/s: 10 s time bins hold 20+ (min_bin_requests) on average.
    assert facts["bin_s"] == 10
    assert facts["throughput_bin_rps"] == 0.5  # 1,174 requests: 11 bins over 0.5-6 rps
    assert facts["latency_bin_ms"] == 1000  # P99 about 31 s in about 40 bins
    (fact,) = facts["heatmaps"]
    assert fact["knee"] is not None, fact["notes"]
    assert 3 <= fact["knee"]["throughput_lo_rps"] <= 5
    assert any(n.startswith("bins from the data: 10 s time bins") for n in report.notes)


def test_no_slo_is_said_plainly_and_a_model_s_own_slo_gives_its_safe_maximum(
    store: Store,
) -> None:
    plain = heatmap.build(store, WINDOW, heatmap_query.HeatmapQuery(model="chat"))
    (fact,) = plain.facts["heatmaps"]
    assert fact["safe_max"] is None and fact["slo_ms"] is None
    assert (
        "no P95 SLO set for chat, so no safe maximum: set one with --slo chat=SECONDS "
        "(or --slo-ms for every model)"
    ) in plain.notes
    assert plain.table("limits").records()[0]["slo_s"] is None

    query = validate_settings(
        heatmap_query.HeatmapQuery, {"slo": ["chat=10", "embed=60"]}, what="t"
    )
    own = heatmap.build(
        store, WINDOW, query.model_copy(update={"by": heatmap_query.HeatmapBy.model})
    )
    limits = {r["model"]: r for r in own.table("limits").records()}
    assert limits["chat"]["slo_s"] == SLO_S and limits["embed"]["slo_s"] == 60
    chat = limits["chat"]
    # The queue's latency passes 10 s (at its bins' high end) between 5 and 6 rps.
    assert chat["safe_max_rps"] is not None and 4 <= chat["safe_max_rps"] <= 5
    assert chat["exceeded_from_rps"] is not None
    assert not any("no P95 SLO" in n for n in own.notes)
    # The default SLO covers a model without its own; its own wins.
    mixed = heatmap_query.HeatmapQuery(
        by=heatmap_query.HeatmapBy.model, slo=("chat=10",), slo_ms=45_000
    )
    rows = {r["model"]: r for r in heatmap.build(store, WINDOW, mixed).table("limits").records()}
    assert (rows["chat"]["slo_s"], rows["embed"]["slo_s"]) == (10, 45)


def test_cells_read_back_with_each_heatmap_s_own_slo(store: Store) -> None:
    query = heatmap_query.HeatmapQuery(
        by=heatmap_query.HeatmapBy.model, slo=("chat=10",), table=heatmap_query.HeatmapTable.cells
    )
    report = heatmap.build(store, WINDOW, query)
    drawn = {h.group: h for h in heatmaps_of(report)}
    assert drawn["chat"].settings.slo_ms == 10_000 and drawn["chat"].safe_max is not None
    assert drawn["embed"].settings.slo_ms is None and drawn["embed"].safe_max is None
    assert drawn["chat"].settings.window_s == report.facts["bin_s"]


def test_a_bad_slo_item_names_the_form() -> None:
    with pytest.raises(Exception, match="use MODEL=SECONDS"):
        validate_settings(heatmap_query.HeatmapQuery, {"slo": ["chat"]}, what="heatmap")


def test_the_rules() -> None:
    assert nice_at_least(0.68) == 1 and nice_at_least(0.3) == Fraction(1, 2)
    # A width is a whole number of requests per time bin: 30 s bins step by 1/30 rps.
    assert nice_at_least(0.03, multiple_of=Fraction(1, 30)) == Fraction(1, 10)
    assert time_bin_s(3.0, 360, 20) == 10  # 20 / 3 = 6.7 s -> 10 s
    assert time_bin_s(0.01, 360, 20) == 30  # 2,000 s wanted, but 12 bins must fit in 360 s
    assert time_bin_s(1000, 3600, 20) == 0.02
    assert throughput_bin_rps(0.1, 6.1, 700, 10, 20) == 1  # 7 bins over 6 rps
    assert throughput_bin_rps(0, 0, 5, 1, 20) == 1  # one throughput: one request per bin
    assert latency_bin_ms(69.0) == 2000 and latency_bin_ms(0.001) == 1


def test_data_bins_of_nothing_is_none(store: Store) -> None:
    chosen = RequestSelection(model="nobody")
    assert data_bins(store, chosen, by=None, min_bin_requests=20) is None


def test_a_time_bin_the_data_stop_in_is_left_out(tmp_path: Path) -> None:
    """A run stopped 2 s into a 10 s time bin: its 6 requests at the load's full latency would
    read as 0.6 rps at 20 s, breaking the SLO at the lowest load; only whole bins count."""
    rows = [
        {"ts": T0 + timedelta(seconds=k + 0.5), "model": "m", "latency_s": 1.0 + k / 100}
        for k in range(60)
    ]
    rows += [
        {"ts": T0 + timedelta(seconds=60 + k / 3), "model": "m", "latency_s": 20.0}
        for k in range(6)
    ]
    with Store.open(tmp_path / "s.duckdb") as s:
        s.append("requests", pa.Table.from_pylist(rows))
        query = heatmap_query.HeatmapQuery(bin_s=10, throughput_bin_rps=0.5, min_bin_requests=5)
        report = heatmap.build(s, Window(None, T0 + timedelta(hours=1), "given"), query)
    assert report.facts["requests"] == 60  # the 6 of the last, partial bin left out
    assert [b["throughput_lo_rps"] for b in report.main.records()] == [1.0]
