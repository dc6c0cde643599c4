"""``/metrics`` answers what the reports answer: for one family of each report, the exporter's
value equals the value the report (what ``sits-observe <command>`` prints) gives for the same
window, on the same DuckDB file.

The exporter's window is ``[now - window_s, now]``: the reports' ``Window(since, until)``
with ``until`` just after ``now`` (:attr:`PassInputs.span`). Each test builds the report with
the settings the exporter uses and compares every exported sample with its row.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pytest

from sits_observe.collectors.exposition import Exposition
from sits_observe.reports.classes import ClassQuery
from sits_observe.reports.classes import build as classes_report
from sits_observe.reports.fragmentation import FragmentationQuery
from sits_observe.reports.fragmentation import build as fragmentation_report
from sits_observe.reports.interference import InterferenceQuery
from sits_observe.reports.interference import build as interference_report
from sits_observe.reports.serving.heatmap import build as heatmap_report
from sits_observe.reports.serving.heatmap_query import HeatmapQuery
from sits_observe.reports.serving.latency import LatencyQuery, LatencySource
from sits_observe.reports.serving.latency import build as latency_report
from sits_observe.reports.window import Window
from sits_observe.store import Store
from sits_observe.surfaces.service.exporter.exporter import ExporterSettings
from tests.unit.surfaces.test_exporter import add_gpu_samples, add_requests
from tests.unit.surfaces.test_exporter_signals import (
    NOW,
    add_classes,
    add_heatmap_requests,
    add_inventory,
    ago,
    scrape,
    series,
    ts,
)

GIB = 1024**3


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path / "s.duckdb") as s:
        yield s


def window(seconds: float) -> Window:
    """The exporter's window of ``seconds`` up to NOW, as the reports read it."""
    return Window(ago(seconds), NOW + timedelta(microseconds=1), "now")


def samples(expo: Exposition, name: str) -> dict[tuple[str, ...], float]:
    """``{label values in the family's label order: value}``."""
    return {tuple(v for _, v in s.labels): s.value for s in expo.samples if s.name == name}


def test_latency_families_are_the_latency_reports(store: Store) -> None:
    add_requests(store)
    store.append(
        "server_windows",
        pa.table(
            {
                "ts": ts([ago(30), ago(15), ago(20)]),
                "window_s": [15.0, 15.0, 60.0],
                "model": ["a", "a", "b"],
                "completed": [5.0, 7.0, 3.0],
                "latency_p50_s": [0.2, 0.3, 1.0],
                "latency_p95_s": [0.6, 0.8, 2.0],
                "latency_p99_s": [0.9, 1.1, 3.0],
                "estimate": [True, True, True],
            }
        ),
    )
    expo = scrape(store)
    exact = latency_report(store, window(300), LatencyQuery()).main.rows.to_pylist()
    assert {r["model"] for r in exact} == {"a", "b"}
    got = samples(expo, "sits_latency_seconds")
    rps = samples(expo, "sits_requests_per_second")
    for row in exact:
        for q, column in (("0.5", "p50_s"), ("0.95", "p95_s"), ("0.99", "p99_s")):
            assert got[(row["model"], q, "5m")] == row[column]
        assert rps[(row["model"], "5m")] == row["count"] / 300
    assert len(got) == 3 * len(exact)

    estimates = latency_report(store, window(300), LatencyQuery(source=LatencySource.estimate))
    newest = {r["model"]: r for r in estimates.main.rows.to_pylist()}  # by window end
    got = samples(expo, "sits_latency_estimate_seconds")
    assert got == {
        (model, q, "15s" if model == "a" else "1m"): row[column]
        for model, row in newest.items()
        for q, column in (("0.5", "p50_s"), ("0.95", "p95_s"), ("0.99", "p99_s"))
    }
    assert got[("a", "0.95", "15s")] == 0.8  # the newest window of a, not the older one


def test_fragmentation_families_are_the_fragmentation_report(store: Store) -> None:
    add_inventory(store)
    expo = scrape(store)
    # The exporter measures the latest inventory with M of the fgd_since_s before it: the
    # report over that window (the snapshots are at NOW).
    settings = ExporterSettings()
    report = fragmentation_report(store, window(settings.fgd_since_s), FragmentationQuery())
    cluster = report.main.rows.to_pylist()[0]
    assert samples(expo, "sits_fgd_fragmentation_ratio") == {(): cluster["frag_ratio"]}
    assert samples(expo, "sits_fgd_fragmentation_amount_ratio") == {
        (): cluster["frag_amount_ratio"]
    }
    nodes = report.table("nodes").rows.to_pylist()
    assert samples(expo, "sits_fgd_node_fragmentation_gpus") == {
        (r["node"],): r["frag_milli"] / 1000 for r in nodes
    }
    assert cluster["frag_ratio"] > 0  # not vacuous: A's free GPU is fragmented


def test_interference_family_is_the_interference_reports_nodes(store: Store) -> None:
    add_gpu_samples(store)
    # Measured NUMA counters of n1: 900 hits and 100 misses in the window, ratio 0.1.
    store.append(
        "numa_samples",
        pa.table(
            {
                "ts": ts([ago(60), ago(10)]),
                "node": ["n1", "n1"],
                "numa_node": pa.array([0, 0], pa.int16()),
                "numa_hit_pages_total": [1000, 1900],
                "numa_miss_pages_total": [0, 100],
            }
        ),
    )
    expo = scrape(store)
    report = interference_report(store, window(300), InterferenceQuery())
    nodes = report.main.rows.to_pylist()
    assert samples(expo, "sits_interference_score_ratio") == {
        (r["node"],): r["score"] for r in nodes
    }
    # 0.4 x mean DRAM activity 0.4 + 0.25 x NUMA miss 0.1: the measured ratio counts.
    assert nodes[0]["score"] == pytest.approx(0.16 + 0.025)


def test_knee_and_safe_max_are_the_heatmap_reports_limits(store: Store) -> None:
    add_heatmap_requests(store)
    expo = scrape(store, latency_slo_s=1.0)
    h = ExporterSettings().heatmap
    query = HeatmapQuery.model_validate(
        {
            "bin_s": h.window_s,
            "latency_bin_ms": h.latency_bin_ms,
            "throughput_bin_rps": h.throughput_bin_rps,
            "min_bin_requests": h.min_bin_requests,
            "slo_ms": 1000.0,
            "by": "model",
        }
    )
    settings = ExporterSettings()
    limits = heatmap_report(store, window(settings.heatmap_since_s), query).table("limits")
    rows = limits.rows.to_pylist()
    assert samples(expo, "sits_knee_requests_per_second") == {
        (r["model"],): r["knee_rps"] for r in rows
    }
    assert samples(expo, "sits_safe_max_requests_per_second") == {
        (r["model"],): r["safe_max_rps"] for r in rows
    }
    assert rows[0]["knee_rps"] == 30.0 and rows[0]["safe_max_rps"] == 40.0


def test_heatmap_reads_from_the_first_whole_bin_as_the_report_does(store: Store) -> None:
    """Requests of the partial time bin before the window's start count in neither: 15 slow
    requests in the half second before ``now - heatmap_since_s`` would otherwise join the
    10 rps bin (15 in a 1 s bin) and break the SLO from the lowest bin on."""
    add_heatmap_requests(store)
    since_s = 1000.5
    early = [ago(since_s) - timedelta(microseconds=1000 * i + 1) for i in range(15)]
    store.append(
        "requests",
        pa.table(
            {"ts": ts(early), "model": ["m"] * 15, "latency_s": [9.0] * 15, "ok": [True] * 15}
        ),
    )
    expo = scrape(store, latency_slo_s=1.0, heatmap_since_s=since_s)
    assert series(expo, "sits_safe_max_requests_per_second") == {(("model", "m"),): 40.0}
    assert series(expo, "sits_knee_requests_per_second") == {(("model", "m"),): 30.0}


def test_memory_classes_are_the_classes_reports_rows(store: Store) -> None:
    add_classes(store)
    expo = scrape(store)
    settings = ExporterSettings()
    rows = classes_report(store, window(settings.class_window_s), ClassQuery(by="workload"))
    classes = [r["memory_class"] or "unmeasured" for r in rows.main.rows.to_pylist()]
    got = samples(expo, "sits_memory_class_workloads")
    assert got == {(c,): float(classes.count(c)) for c in ("L1", "L2", "L3", "unmeasured")}
    assert len(classes) == 4


def test_a_request_stamped_after_now_counts_in_neither(store: Store) -> None:
    """A request stamped after now is in no window, the report's or the exporter's."""
    add_requests(store)
    store.append(
        "requests",
        pa.table(
            {
                "ts": ts([NOW + timedelta(seconds=5)]),
                "model": ["a"],
                "latency_s": [100.0],
                "ok": [True],
            }
        ),
    )
    expo = scrape(store)
    rows = latency_report(store, window(300), LatencyQuery()).main.rows.to_pylist()
    exact = {r["model"]: r for r in rows}
    assert samples(expo, "sits_requests_per_second")[("a", "5m")] == exact["a"]["count"] / 300
    assert exact["a"]["count"] == 137  # the 137 requests of the window, not the later one
