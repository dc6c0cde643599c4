"""Reports ``latency`` and ``heatmap``: values known by hand, the window rule (only rows in
``since <= ts < until`` count), GPUs by name, the heatmap read back through its JSON for the
picture, and golden tables at 80 and 160 columns.

The fixture: model ``chat`` on pods chat-0 / chat-1 (GPU-a on node-1, GPU-b unknown to the
GPU samples) on a load ramp of 1 s bins with 4, 8, ... 40 requests, latency rising with the
load; model ``embed`` with 3 requests of 0.1, 0.2, 0.3 s; one failed chat request; one chat
request at ``END`` (just outside the window, which ends there).
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import pyarrow as pa
import pytest

from sits_observe.analytics.heatmap.grid import compute_heatmaps
from sits_observe.analytics.heatmap.png import render_png
from sits_observe.analytics.serving.latency import RequestSelection
from sits_observe.domain.validation import validate_settings
from sits_observe.errors import ConfigError, NoDataError
from sits_observe.reports.registry import REPORTS
from sits_observe.reports.result import Report
from sits_observe.reports.serving import heatmap, heatmap_query, latency
from sits_observe.reports.serving.heatmap_maps import heatmaps_of
from sits_observe.reports.window import Window
from sits_observe.store import Store
from sits_observe.surfaces.cli.reports.output import Output, table_text
from tests.golden_support import assert_golden

T0 = datetime(2026, 3, 2, 9, 0)
END = T0 + timedelta(seconds=10)
WINDOW = Window(None, END, "given")
#: The bins these tests count by hand (left open, a heatmap takes them from the data:
#: tests/unit/reports/test_heatmap_defaults.py).
FIXED_BINS: dict[str, float] = {"bin_s": 1, "throughput_bin_rps": 10, "latency_bin_ms": 100}


@pytest.fixture(scope="module")
def store() -> Store:
    rows: list[dict[str, object]] = []
    for k in range(10):
        n = 4 * (k + 1)
        for j in range(n):
            rows.append(
                {
                    "ts": T0 + timedelta(seconds=k + j / n),
                    "model": "chat",
                    "pod": f"chat-{j % 2}",
                    "gpu_uuid": f"GPU-{'ab'[j % 2]}",
                    "latency_s": 0.1 + 0.01 * n + 0.001 * j,
                    "ok": True,
                }
            )
    for j in range(3):
        rows.append({"ts": T0 + timedelta(seconds=j), "model": "embed", "latency_s": 0.1 * (j + 1)})
    rows.append({"ts": T0, "model": "chat", "pod": "chat-0", "latency_s": 60.0, "ok": False})
    rows.append({"ts": END, "model": "chat", "pod": "chat-0", "latency_s": 90.0, "ok": True})
    s = Store.open(":memory:")
    s.append("requests", pa.Table.from_pylist(rows))
    s.append(
        "gpu_samples",
        pa.Table.from_pylist(
            [
                {
                    "ts": T0,
                    "node": "node-1",
                    "gpu_uuid": "GPU-a",
                    "gpu_index": 0,
                    "model_name": "NVIDIA H100 80GB HBM3",
                }
            ]
        ),
    )
    return s


def test_latency_is_exact_and_reads_only_the_window(store: Store) -> None:
    report = latency.build(store, WINDOW, latency.LatencyQuery())
    chat, embed = report.main.records()
    assert chat["count"] == sum(4 * (k + 1) for k in range(10))  # not the one at END
    # 0.1, 0.2, 0.3 s: P95 at h = 2 * 0.95 = 1.9, 0.2 + 0.9 * 0.1 (numpy's linear rule)
    assert embed == {
        "model": "embed",
        "count": 3,
        "p50_s": 0.2,
        "p95_s": pytest.approx(0.29, rel=1e-12),
        "p99_s": pytest.approx(0.298, rel=1e-12),
    }
    with_end = latency.build(
        store, Window(None, END + timedelta(seconds=1), "given"), latency.LatencyQuery()
    )
    assert with_end.main.records()[0]["count"] == chat["count"] + 1
    assert with_end.main.records()[0]["p99_s"] > chat["p99_s"]


def test_latency_by_gpu_shows_node_index_and_model(store: Store) -> None:
    report = latency.build(store, WINDOW, latency.LatencyQuery(by=latency.LatencyGroup.gpu))
    rows = {r["gpu_uuid"]: r for r in report.main.records()}
    assert rows["GPU-a"]["gpu"] == "node-1/0 (H100 80GB)"
    assert rows["GPU-b"]["gpu"] == "GPU-b"  # no GPU sample names it
    assert rows[None]["count"] == 3  # embed's requests record no GPU
    assert any("without a recorded gpu" in n for n in report.notes)


def test_an_empty_window_names_what_fills_the_table(store: Store) -> None:
    before = Window(T0 - timedelta(hours=2), T0 - timedelta(hours=1), "given")
    with pytest.raises(NoDataError, match="no requests rows in the window"):
        latency.build(store, before, latency.LatencyQuery())
    with pytest.raises(NoDataError, match="table server_windows is empty"):
        latency.build(store, WINDOW, latency.LatencyQuery(source=latency.LatencySource.estimate))
    with pytest.raises(NoDataError, match="no requests rows in the window"):
        heatmap.build(store, before, heatmap_query.HeatmapQuery())


def test_heatmap_limits_and_facts(store: Store) -> None:
    query = heatmap_query.HeatmapQuery(model="chat", slo_ms=300, min_bin_requests=4, **FIXED_BINS)
    report = heatmap.build(store, WINDOW, query)
    assert report.main.name == "bins" and [t.name for t in report.others] == ["limits"]
    bins = report.main.records()
    # 1 s bins of 4, 8, ... 40 requests: throughput bins 0-10, 10-20, 20-30, 30-40 and 40-50 rps
    assert [b["windows"] for b in bins] == [2, 2, 3, 2, 1]  # 4 8 | 12 16 | 20 24 28 | 32 36 | 40
    assert sum(b["requests"] for b in bins) == report.facts["requests"] == 220
    (fact,) = report.facts["heatmaps"]
    (limits,) = report.table("limits").records()
    assert limits["safe_max_rps"] == fact["safe_max"]["throughput_lo_rps"]
    # P95 of a bin crosses 300 ms once its bins hold 16+ requests a second
    over = [b for b in bins if b["p95_s"] > 0.3]
    assert fact["safe_max"]["exceeded_from_rps"] == over[0]["throughput_lo_rps"]
    assert all(b["within_slo"] == (b["p95_s"] <= 0.3) for b in bins)


def test_heatmap_bins_start_at_the_first_whole_bin_in_the_window(store: Store) -> None:
    window = Window(T0 + timedelta(seconds=2.5), END, "given")
    query = heatmap_query.HeatmapQuery(
        model="chat", table=heatmap_query.HeatmapTable.windows, **FIXED_BINS
    )
    report = heatmap.build(store, window, query)
    starts = report.main.rows.column("start").to_pylist()
    assert starts[0] == T0 + timedelta(seconds=3)
    assert report.facts["first_bin_at"] == T0 + timedelta(seconds=3)
    assert [w["count"] for w in report.main.records()] == [4 * (k + 1) for k in range(3, 10)]


def test_the_picture_drawn_from_the_json_is_the_analytics_picture(store: Store) -> None:
    query = heatmap_query.HeatmapQuery(
        model="chat", slo_ms=300, table=heatmap_query.HeatmapTable.cells, **FIXED_BINS
    )
    report = heatmap.build(store, WINDOW, query)
    back = Report.from_document(json.loads(json.dumps(report.document())))
    (drawn,) = heatmaps_of(back)
    selection = RequestSelection(model="chat", until=END)
    (direct,) = compute_heatmaps(store, query.heatmap(), selection=selection)
    assert render_png(drawn) == render_png(direct)
    with pytest.raises(ConfigError, match="--table cells"):
        heatmaps_of(
            heatmap.build(
                store, WINDOW, query.model_copy(update={"table": heatmap_query.HeatmapTable.bins})
            )
        )


def test_settings_are_validated_with_the_flag_names() -> None:
    spec = REPORTS["heatmap"]
    with pytest.raises(ConfigError, match=r"--bin-s: .*whole number of microseconds"):
        validate_settings(spec.settings, {"bin_s": "0.0000001"}, what="heatmap")
    with pytest.raises(ConfigError, match=r"--latency-bin-ms: .*whole number of microseconds"):
        validate_settings(spec.settings, {"latency_bin_ms": "0.0000001"}, what="heatmap")
    with pytest.raises(ConfigError, match="--throughput-bin-rps"):
        validate_settings(spec.settings, {"throughput_bin_rps": "0"}, what="heatmap")
    assert spec.validate({"bin_s": "10", "by": "gpu"}).heatmap().window_s == 10
    assert REPORTS["latency"].promql is not None and spec.promql is not None


@pytest.mark.parametrize("width", [80, 160])
def test_golden_latency(store: Store, width: int) -> None:
    report = latency.build(store, WINDOW, latency.LatencyQuery(by=latency.LatencyGroup.gpu))
    assert_golden(f"latency_{width}", table_text(report, width, Output.table))


@pytest.mark.parametrize("width", [80, 160])
def test_golden_heatmap(store: Store, width: int) -> None:
    query = heatmap_query.HeatmapQuery(
        by=heatmap_query.HeatmapBy.model, slo_ms=300, min_bin_requests=4, **FIXED_BINS
    )
    report = heatmap.build(store, WINDOW, query)
    assert_golden(f"heatmap_{width}", table_text(report, width, Output.table))
