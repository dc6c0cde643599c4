"""Report ``whatif``: the live cluster of the window as a trace, trace files, the replay's
numbers, ``simulate``'s JSON document, and golden tables at 80 and 160 columns."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pytest

from sits_observe.errors import ConfigError, NoDataError
from sits_observe.lab.replay.whatif import SPEC, WhatIfQuery, is_trace
from sits_observe.lab.replay.whatif_trace import trace_from_store
from sits_observe.reports.result import Report
from sits_observe.reports.spec import run_report
from sits_observe.reports.window import Window, WindowRequest
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


def whatif(store: Store, until: str = "newest", **values: object) -> Report:
    request = WindowRequest.parse("1h", until)
    return run_report(SPEC, store, request, SPEC.validate(values), now=NOW)


def test_the_live_trace_is_the_inventory_of_the_window(store: Store) -> None:
    trace = trace_from_store(store, Window(T0, T0 + timedelta(seconds=1), "given"))
    assert trace.label == "live cluster: 2 nodes, 1 pods"
    assert (trace.total_gpus, list(trace.nodes.cpu_milli)) == (4, [4000, 8000])
    assert list(trace.pods.memory_mib) == [8 * 1024] and list(trace.pods.gpu_milli) == [1000]
    with pytest.raises(NoDataError, match="nodes"):
        trace_from_store(store, Window(T0 - timedelta(hours=1), T0, "given"))


def test_a_replay_of_the_live_cluster(store: Store) -> None:
    report = whatif(store, policies=["bestfit", "fgd"])
    rows = {r["policy"]: r for r in report.main.rows.to_pylist()}
    # The pod (1 GPU, 4000 mCPU) fits node-a once and node-b twice: 3 of 4 GPUs, 1 left.
    for row in rows.values():
        assert row["alloc_ratio"] == pytest.approx(0.75)
        assert row["unallocated_gpus"] == pytest.approx(1.0)
    assert (report.facts["gpus"], report.facts["pods"], report.facts["replays"]) == (4, 1, 2)
    curve = report.table("curve").rows.to_pylist()
    assert {r["policy"] for r in curve} == {"bestfit", "fgd"}
    assert curve[-1]["arrived_ratio"] == pytest.approx(1.3)  # the load, the last step kept
    # The GPU left is node-a's, whose CPU the pod used up: F(M) is that GPU, for lack of CPU.
    for row in report.table("causes").rows.to_pylist():
        assert row["lack_cpu"] == pytest.approx(1.0)
        assert sum(v for k, v in row.items() if k != "policy") == pytest.approx(1.0)
    # Five copies arrive (5 GPUs <= 1.3 x 4); the two that find no GPU fail, as 1-GPU pods.
    failed = [
        (r["policy"], r["kind"], r["pods"], r["gpus"])
        for r in report.table("failed").rows.to_pylist()
    ]
    assert failed == [("bestfit", "1gpu", 2.0, 2.0), ("fgd", "1gpu", 2.0, 2.0)]


def test_trace_files_read_no_store(tmp_path: Path) -> None:
    nodes, pods = tmp_path / "nodes.csv", tmp_path / "pods.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn1,8000,65536,2,H100\n")
    pods.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
        "creation_time,deletion_time,scheduled_time\n"
        "p1,1000,1024,1,1000,,LS,Running,0,,0\n"
    )
    query = WhatIfQuery(trace_nodes=nodes, trace_pods=pods, policies=("bestfit",))
    assert is_trace(query)
    with Store.open(":memory:") as empty:
        report = run_report(SPEC, empty, WindowRequest(), query, now=NOW)
        assert report.facts["trace"] == "nodes.csv + pods.csv"
        assert report.main.rows.column("alloc_ratio").to_pylist() == [
            pytest.approx(1.0)
        ]  # copies arrive up to 1.3x the GPUs
        with pytest.raises(ConfigError, match="both --trace-nodes"):
            run_report(SPEC, empty, WindowRequest(), WhatIfQuery(trace_nodes=nodes), now=NOW)


def test_unknown_policies_are_refused(store: Store) -> None:
    with pytest.raises(Exception, match="unknown policy 'nope'"):
        whatif(store, policies=["nope"])
    with pytest.raises(ConfigError, match="--policies"):
        SPEC.validate({"policies": []})


@pytest.mark.parametrize("width", [80, 160])
def test_golden_tables(store: Store, width: int) -> None:
    report = whatif(store, policies=["bestfit", "fgd"])
    assert_golden(f"whatif_{width}", table_text(report, width))
