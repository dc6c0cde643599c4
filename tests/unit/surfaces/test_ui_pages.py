"""The Streamlit app's pages under ``streamlit.testing`` on a real DuckDB file.

The file is filled through the store API with rows whose answers are known by hand: the
heatmap's bins have constant latencies (so each bin's P95 is that latency, the knee is the
30 rps bin and the safe maximum at a 1 s SLO is 40 rps), SMF is (50 - 10) / 80 GiB = 0.5,
node A's free GPU is fragmented for the one-GPU, all-CPU workload (FGD 1/3 of idle GPU), and
so on. Each page must show these values, not merely render, and show them as the report it
reads gives them (the same report the CLI prints), in the CLI's human units.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from streamlit.testing.v1 import AppTest
from typer.testing import CliRunner

from sits_observe.domain.tables import conform
from sits_observe.domain.units import Unit, human
from sits_observe.lab.catalog import all_reports
from sits_observe.reports.registry import find_report
from sits_observe.reports.result import Report, ReportTable
from sits_observe.reports.spec import run_report
from sits_observe.reports.window import WindowRequest
from sits_observe.store import Store
from sits_observe.surfaces.cli.main import app

REPORTS_ALL = all_reports()

APP = Path(__file__).resolve().parents[3] / "dashboards" / "app.py"
#: An hour ago, to the minute (naive UTC): inside the app's window (``--since 7d``, to now).
T0 = datetime.now(UTC).replace(tzinfo=None, second=0, microsecond=0) - timedelta(hours=1)
GIB = 1024**3
CID = "c" * 64
#: Per throughput bin (10 rps wide): requests per 1 s window and their (constant) latency.
BIN_RATES = (15, 25, 35, 45, 55)
BIN_LATENCY_S = (0.10, 0.12, 0.15, 0.60, 1.50)
WINDOWS_PER_BIN = 3


def _table(name: str, rows: list[dict[str, Any]]) -> pa.Table:
    return conform(name, pa.Table.from_pylist(rows))


def request_rows(t0: datetime = T0) -> list[dict[str, Any]]:
    """Windows of BIN_RATES requests, each bin's requests all with one latency."""
    rows = []
    second = 0
    for rate, latency in zip(BIN_RATES, BIN_LATENCY_S, strict=True):
        for _ in range(WINDOWS_PER_BIN):
            start = t0 + timedelta(seconds=second)
            for i in range(rate):
                ts = start + timedelta(microseconds=(i * 1_000_000) // (rate + 1))
                rows.append({"ts": ts, "model": "llm-a", "latency_s": latency, "ok": True})
            second += 1
    # A second, small model and a failed request (left out of the quantiles).
    rows += [
        {"ts": t0 + timedelta(seconds=s), "model": "llm-b", "latency_s": 0.2 + s / 100, "ok": True}
        for s in range(5)
    ]
    rows.append({"ts": t0, "model": "llm-a", "latency_s": 30.0, "ok": False})
    return rows


def fill_store(store: Store, t0: datetime = T0) -> None:
    """Every table a page reads, with hand-checkable values (see the module docstring),
    starting at ``t0``."""
    store.append(
        "nodes",
        _table(
            "nodes",
            [
                {
                    "ts": t0,
                    "node": "node-a",
                    "gpu_allocatable": 2,
                    "gpu_product": "H100",
                    "cpu_allocatable_milli": 4000,
                    "memory_allocatable_bytes": 64 * GIB,
                    "ready": True,
                },
                {
                    "ts": t0,
                    "node": "node-b",
                    "gpu_allocatable": 2,
                    "gpu_product": "H100",
                    "cpu_allocatable_milli": 8000,
                    "memory_allocatable_bytes": 64 * GIB,
                    "ready": True,
                },
            ],
        ),
    )
    store.append(
        "pods",
        _table(
            "pods",
            [
                {
                    "ts": t0,
                    "pod_uid": "u1",
                    "namespace": "ns",
                    "pod": "p1",
                    "node": "node-a",
                    "phase": "Running",
                    "gpu_request": 1,
                    "cpu_request_milli": 4000,
                    "memory_request_bytes": 8 * GIB,
                },
            ],
        ),
    )
    gpu, cgroup = [], []
    for k in range(60):  # ten minutes, every 10 s
        ts = t0 + timedelta(seconds=10 * k)
        gpu.append(
            {
                "ts": ts,
                "node": "node-a",
                "gpu_uuid": "GPU-a0",
                "gpu_index": 0,
                "namespace": "ns",
                "pod": "p1",
                "container": "c",
                "gpu_util_ratio": 0.5,
                "fb_used_bytes": 30 * GIB,
                "fb_free_bytes": 50 * GIB,
                "fb_total_bytes": 80 * GIB,
                "power_w": 300.0,
                "source": "dcgm",
            }
        )
        gpu.append(
            {
                "ts": ts,
                "node": "node-a",
                "gpu_uuid": "GPU-a1",
                "gpu_index": 1,
                "gpu_util_ratio": 0.25,
                "fb_used_bytes": (1 + k // 6) * GIB,
                "fb_free_bytes": (79 - k // 6) * GIB,
                "fb_total_bytes": 80 * GIB,
                "power_w": 100.0,
                "source": "dcgm",
            }
        )
        cgroup.append(
            {
                "ts": ts + timedelta(seconds=1),
                "node": "node-a",
                "pod_uid": "u1",
                "container_id": CID,
                "namespace": "ns",
                "pod": "p1",
                "container": "c",
                "memory_current_bytes": 10 * GIB,
            }
        )
    store.append("gpu_samples", _table("gpu_samples", gpu))
    store.append("container_samples", _table("container_samples", cgroup))
    store.append("requests", _table("requests", request_rows(t0)))
    store.append(
        "collector_drops",
        _table(
            "collector_drops",
            [{"ts": t0, "node": "node-a", "collector": "dcgm", "reason": "nan", "count": 7}],
        ),
    )
    store.append(
        "decisions",
        _table(
            "decisions",
            [
                {
                    "ts": t0 + timedelta(seconds=k),
                    "kind": "Node",
                    "name": f"node-{n}",
                    "action": action,
                    "outcome": outcome,
                    "mode": "dry-run",
                    "dry_run": True,
                    "reason": f"because {k}",
                }
                for k, (n, action, outcome) in enumerate(
                    [
                        ("a", "memory-class", "recommended"),
                        ("b", "memory-class", "recommended"),
                        ("a", "fragmentation", "skipped:rate-limited"),
                    ]
                )
            ],
        ),
    )


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "ui.duckdb"
    with Store.open(path) as store:
        fill_store(store)
    return path


#: The window every test page reads (as ``--since 7d``, until now).
SINCE = "7d"


def report_on(db: Path, name: str, **values: Any) -> Report:
    """Report ``name`` on ``db`` over the pages' window, as ``sits-observe NAME --db``."""
    spec = find_report(name, REPORTS_ALL)
    with Store.open(db, read_only=True) as store:
        return run_report(spec, store, WindowRequest.parse(SINCE, None), spec.validate(values))


def heading(table: ReportTable, name: str) -> str:
    """The header the page shows for column ``name`` of a report's table."""
    return next(c.header for c in table.columns if c.name == name)


def app_on(monkeypatch: pytest.MonkeyPatch, **env: str) -> AppTest:
    for name in ("SITS_UI_DB", "SITS_UI_SERVICE", "SITS_UI_TOKEN_FILE", "SITS_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SITS_UI_SINCE", SINCE)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    at = AppTest.from_file(str(APP), default_timeout=120)
    return at.run()


def page(at: AppTest, name: str) -> AppTest:
    at.switch_page(f"views/{name}.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    return at


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def charts(at: AppTest) -> list[dict[str, Any]]:
    """Each chart's spec; Streamlit moves a single view's rows out of the spec: put back."""
    specs = []
    for chart in at.get("vega_lite_chart") or at.get("arrow_vega_lite_chart"):
        spec = json.loads(chart.proto.spec)
        if "data" not in spec and "layer" not in spec and chart.proto.data.data:
            rows = pa.ipc.open_stream(chart.proto.data.data).read_all().to_pylist()
            spec["data"] = {"values": rows}
        specs.append(spec)
    return specs


def frames(at: AppTest) -> list[Any]:
    return [d.value for d in at.dataframe]


def shown(at: AppTest) -> str:
    """Every text and cell of the page, to check what never shows."""
    kinds = ("markdown", "caption", "subheader", "header")
    texts = [getattr(e, "value", "") for kind in kinds for e in at.get(kind)]
    cells = [str(v) for f in frames(at) for v in [*f.columns, *f.to_numpy().ravel()]]
    return "\n".join(map(str, texts + cells))


# -- pages --------------------------------------------------------------------------------


def test_fleet_page_shows_the_fleet_report_in_human_units(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    at = page(app_on(monkeypatch, SITS_UI_DB=str(db)), "fleet")
    report = report_on(db, "fleet")
    assert metrics(at) == {
        "Nodes": "2",
        "GPUs": "4",  # allocatable in the inventory
        "Allocated GPUs": "1",  # p1's one GPU
        "Idle GPUs": "0",  # 50% and 25% busy: neither under the 5% floor
        "GPU utilisation": "37.5%",  # (0.5 + 0.25) / 2
        "Fragmentation": "33.3%",  # node-a's free GPU, of 3 free
    }
    # The numbers shown are the report's, as the CLI prints them.
    assert metrics(at)["GPU utilisation"] == human(report.facts["gpu_util_ratio"], Unit.ratio)
    assert metrics(at)["Fragmentation"] == human(report.facts["frag_ratio"], Unit.ratio)
    nodes, gpus, fresh, drops = frames(at)
    assert list(nodes.columns) == [c.header for c in report.main.columns if not c.wide]
    row = nodes.set_index("node").loc["node-a"]
    # Power is a mean per GPU: (300 W + 100 W) / 2, not the node's sum.
    assert (row["GPUs"], row["alloc"], row["util"], row["power/GPU"]) == ("2", "1", "37.5%", "200W")
    assert row["power/GPU"] == human(report.main.rows.column("power_w")[0].as_py(), Unit.watts)
    assert (row["memory"], row["FB used"]) == ("64Gi", "40Gi")  # 30 GiB + GPU-a1's last 10 GiB
    # GPU-a1's framebuffer grows 1 GiB a minute: 10 GiB of 80 at the last sample.
    assert gpus.set_index("GPU")["FB"].to_dict() == {"node-a/0": "37.5%", "node-a/1": "12.5%"}
    newest = dict(zip(fresh["table"], fresh["newest"], strict=True))
    assert newest == {
        "container_samples": human(T0 + timedelta(seconds=591), Unit.time),
        "gpu_samples": human(T0 + timedelta(seconds=590), Unit.time),
    }
    assert drops[["collector", "reason", "dropped"]].values.tolist() == [["dcgm", "nan", "7"]]
    shares, idle, p95 = charts(at)
    # Times as the tables write them: UTC on a 24-hour clock (18:51, not 06:51 PM in the
    # browser's zone); latency in seconds.
    for chart in (shares, idle, p95):
        x = chart["encoding"]["x"]
        # A "time" format on a utc scale is written in UTC ("utc" is no Vega-Lite format
        # type: the browser dropped the format and drew "06 PM", tests/integration/
        # test_ui_browser.py reads the drawn labels).
        assert (x["scale"]["type"], x["axis"]["format"], x["axis"]["formatType"]) == (
            "utc",
            "%H:%M",
            "time",
        )
    assert p95["encoding"]["y"]["title"] == "P95 latency, s"
    assert "1000" not in json.dumps(p95["transform"])
    first = shares["data"]["values"][0]
    assert (first["allocation"], first["fragmentation"]) == (0.25, pytest.approx(1 / 3))
    assert {r["idle GPUs"] for r in idle["data"]["values"]} == {0}
    latency = report.table("latency_over_time").rows.to_pylist()
    assert {(r["model"], r["p95_s"]) for r in p95["data"]["values"]} == {
        (r["model"], r["p95_s"]) for r in latency
    }
    text = shown(at)
    assert CID not in text and "gpu_util_ratio" not in text and "power_w" not in text


def test_heatmap_page_shows_knee_safe_max_and_the_slo_line(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    at = page(app_on(monkeypatch, SITS_UI_DB=str(db), SITS_UI_SLO_MS="1000"), "heatmap")
    # Chord (10 rps, 0.1 s) -> (50 rps, 1.5 s): the 30 rps bin lies deepest below it; the
    # 50 rps bin (P95 1.5 s) is the first over the 1 s SLO, so 40 rps is the safe maximum.
    assert metrics(at) == {
        "Requests": "525",
        "Knee": "30/s",
        "P95 SLO": "1.00s",
        "Safe max throughput": "40/s",
    }
    quantiles, bins = frames(at)
    latencies = [r["latency_s"] for r in request_rows() if r["model"] == "llm-a" and r["ok"]]
    exact = report_on(db, "latency", by="model").main
    got = quantiles.set_index(heading(exact, "model")).loc["llm-a"]
    assert got[heading(exact, "count")] == "525"
    for q in (50, 95, 99):
        shown_q = got[heading(exact, f"p{q}_s")]
        assert shown_q == human(float(np.percentile(latencies, q)), Unit.seconds)
    evidence = report_on(db, "heatmap", model="llm-a", table="cells", slo_ms=1000).table("bins")
    assert bins[heading(evidence, "p95_s")].tolist() == [
        human(s, Unit.seconds) for s in BIN_LATENCY_S
    ]
    assert bins[heading(evidence, "within_slo")].tolist() == ["yes", "yes", "yes", "yes", "no"]
    heat, curve = charts(at)
    cells, slo, knee, safe = heat["layer"]
    assert sum(c["count"] for c in cells["data"]["values"]) == 525
    # 50 ms latency bins from the data (P99 1.5 s in about 40 bins).
    assert {c["latency_lo_ms"] for c in cells["data"]["values"]} == {100, 150, 600, 1500}
    # Seconds on every latency axis and rule, as the tables write them.
    assert [layer["data"]["values"][0]["value"] for layer in (slo, knee, safe)] == [1.0, 30, 40]
    assert curve["layer"][1]["data"]["values"][0]["value"] == 1.0
    assert heat["layer"][0]["encoding"]["y"]["title"] == "latency, s"
    assert curve["layer"][0]["encoding"]["y"]["title"] == "latency, s"

    # A tighter SLO moves the safe maximum down: 0.6 s breaks at the 40 rps bin.
    at.sidebar.number_input[0].set_value(500.0).run()
    assert metrics(at)["Safe max throughput"] == "30/s"
    # The other model has its own heatmap.
    at.selectbox(key="model").select("llm-b").run()
    assert metrics(at)["Requests"] == "5"


def test_heatmap_page_on_its_defaults_finds_the_knee_and_says_no_slo_is_set(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No SLO configured and no bins given: the bins the report takes from the data (1 s time
    bins at about 35 requests/s, 10 rps over 10-50 rps) still find the knee, and the page
    says plainly that no SLO is set rather than showing a safe maximum at a made-up one."""
    at = page(app_on(monkeypatch, SITS_UI_DB=str(db)), "heatmap")
    assert metrics(at) == {
        "Requests": "525",
        "Knee": "30/s",
        "P95 SLO": "none set",
        "Safe max throughput": "needs an SLO",
    }
    captions = [c.value for c in at.caption]
    assert any(c.startswith("no P95 SLO set for llm-a, so no safe maximum") for c in captions)
    assert any(c.startswith("bins from the data: 1 s time bins") for c in captions)
    heat, _curve = charts(at)
    assert len(heat["layer"]) == 2  # the cells and the knee: no SLO line, no safe maximum


def test_fragmentation_page_shows_fgd_causes_smf_and_trend_clusters(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    at = page(app_on(monkeypatch, SITS_UI_DB=str(db)), "fragmentation")
    # node-a's free GPU cannot take the workload's pod (no CPU left): F = 1 GPU of 3 idle, 4 total.
    assert metrics(at) == {
        "Fragmentation ratio": "33.3%",
        "Fragmentation amount": "25%",
        "Fragmented GPUs": "1",
        "GPU allocation": "25%",
    }
    fgd = report_on(db, "fragmentation")
    assert metrics(at)["Fragmentation ratio"] == human(
        fgd.main.rows.column("frag_ratio")[0].as_py(), Unit.ratio
    )
    causes, typical, nodes, smf, clusters = frames(at)
    by_cause, by_node = fgd.table("causes"), fgd.table("nodes")
    frag = heading(by_cause, "frag_milli")
    assert causes.set_index(heading(by_cause, "cause"))[frag].to_dict()["lack_cpu"] == "1"
    shapes = fgd.table("typical_pods")
    assert typical[
        [heading(shapes, n) for n in ("cpu_milli", "num_gpu", "count")]
    ].values.tolist() == [["4", "1", "1"]]
    per_node = nodes.set_index(heading(by_node, "node"))[heading(by_node, "frag_milli")]
    assert per_node.to_dict() == {"node-a": "1", "node-b": "0"}
    # SMF = (fb_free 50 GiB - memory.current 10 GiB) / 80 GiB, on all 60 aligned samples.
    per_gpu = report_on(db, "smf", by="gpu").main
    (row,) = smf.to_dict("records")
    got = tuple(row[heading(per_gpu, n)] for n in ("gpu", "mean_smf", "samples"))
    assert got == ("node-a/0", "50%", "60")
    # The flat GPU and the leaking one fall in different groups, each described in words.
    trends = report_on(db, "trends", level="gpu").main
    pattern = heading(trends, "pattern")
    rows = {r[pattern]: " ".join(map(str, r.values())) for r in clusters.to_dict("records")}
    assert set(rows) == {"flat", "leaking"}
    assert "node-a/0" in rows["flat"] and "node-a/1" in rows["leaking"]
    assert clusters[heading(trends, "level")].tolist() == [
        human(v, Unit.ratio) for v in trends.rows.column("level").to_pylist()
    ]


def test_whatif_page_replays_the_live_cluster(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    at = page(app_on(monkeypatch, SITS_UI_DB=str(db)), "whatif")
    at.multiselect(key="policies").set_value(["bestfit"])
    at.button(key="run").click().run()
    assert not at.exception and not at.error
    assert any("live cluster: 2 nodes, 1 pods" in m.value for m in at.markdown)
    assert any("4 GPUs" in m.value for m in at.markdown)
    results, causes, failed = frames(at)
    row = results.iloc[0]
    # Onto the empty cluster the pod (1 GPU, 4000 mCPU) fits node-a once and node-b twice
    # (CPU runs out first): 3 of 4 GPUs allocated, 1 left however high the load.
    assert (row["policy"], row["alloc"], row["unalloc GPUs"]) == ("bestfit", "75%", "1")
    report = report_on(db, "whatif", policies=["bestfit"])
    assert row["alloc"] == human(report.main.rows.column("alloc_ratio")[0].as_py(), Unit.ratio)
    (curve,) = charts(at)
    assert {p["policy"] for p in curve["data"]["values"]} == {"bestfit"}
    # The GPU left is on the node whose CPU ran out: unusable for lack of CPU.
    assert (causes.iloc[0]["policy"], causes.iloc[0]["lack_cpu"]) == ("bestfit", "1")
    # Five 1-GPU copies arrive (1.3 x 4 GPUs); the two that fit nowhere failed.
    assert list(failed.iloc[0]) == ["bestfit", "1gpu", "2", "2"]


def test_whatif_page_replays_kube_scheduler_with_and_without_the_extender(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    at = page(app_on(monkeypatch, SITS_UI_DB=str(db)), "whatif")
    offered = at.multiselect(key="policies").options
    assert {"kube-default", "kube-sits", "kube-sits-gpuhint"} <= set(offered)
    at.multiselect(key="policies").set_value(["kube-default", "kube-sits"])
    at.button(key="run").click().run()
    assert not at.exception, [e.value for e in at.exception]
    results, _causes, _failed = frames(at)
    by = {row["policy"]: row for _, row in results.iterrows()}
    assert set(by) == {"kube-default", "kube-sits"}
    # kube-sits went through the extender's handler: it placed the same pods (the cluster of
    # the fixture leaves no choice that changes the count).
    for row in by.values():
        assert row["alloc"] == "75%"
    assert any("2 replays" in m.value for m in at.markdown)


@pytest.mark.slow
@pytest.mark.k8s
def test_whatif_page_runs_the_experiment_with_both_arms(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    at = page(app_on(monkeypatch, SITS_UI_DB=str(db)), "whatif")
    assert at.multiselect(key="exp_arms").value == ["kube-default", "kube-sits"]
    at.number_input(key="exp_hours").set_value(0.02)
    at.number_input(key="exp_nodes").set_value(2)
    at.number_input(key="exp_gpus").set_value(4)
    at.run()
    assert any(
        "experiment --arms kube-default,kube-sits --seeds 1 --hours 0.02 --nodes 2 "
        "--gpus-per-node 4" in c.value
        for c in at.code
    )
    at.button(key="exp_run").click().run(timeout=600)
    assert not at.exception, [e.value for e in at.exception]
    table = frames(at)[-1]
    assert list(table.columns) == ["measure", "kube-default", "kube-sits"]
    measures = dict(zip(table["measure"], table["kube-sits"], strict=True))
    assert measures["GPU pods arrived"] != "-"
    assert any("target, kube-sits against kube-default, seed 0" in m.value for m in at.markdown)
    assert at.get("image"), "the chart of fragmentation and allocation over time"
    assert "done: 2 runs" in at.get("progress")[-1].proto.text


def test_decisions_page_shows_the_log_its_counts_and_the_plan(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    at = page(app_on(monkeypatch, SITS_UI_DB=str(db)), "decisions")
    planned, counts, log = frames(at)
    plan = report_on(db, "recommend")
    target, action = heading(plan.main, "name"), heading(plan.main, "action")
    assert ("node-a", "fragmentation") in set(zip(planned[target], planned[action], strict=True))
    assert len(planned) == plan.main.rows.num_rows
    assert counts[["action", "outcome", "decisions"]].values.tolist() == [
        ["fragmentation", "skipped", "1"],
        ["memory-class", "recommended", "2"],
    ]
    assert log["object"].tolist() == ["node/node-a", "node/node-b", "node/node-a"]  # newest first
    at.multiselect(key="outcomes").set_value(["recommended"]).run()
    assert frames(at)[2]["object"].tolist() == ["node/node-b", "node/node-a"]
    # Every column (-o wide) shows the reasons.
    at.sidebar.toggle(key="wide").set_value(True).run()
    assert frames(at)[2]["reason"].tolist() == ["because 1", "because 0"]


def test_the_window_comes_from_since_and_until(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Ten minutes back from now hold nothing (the rows are an hour old) ...
    at = app_on(monkeypatch, SITS_UI_DB=str(db), SITS_UI_SINCE="10m")
    at.switch_page("views/fleet.py").run()
    assert "try --until newest" in at.error[0].value
    # ... and ten minutes back from the newest sample hold it all.
    at.sidebar.text_input(key="until").set_value("newest").run()
    assert not at.error, [e.value for e in at.error]
    assert metrics(at)["GPU utilisation"] == "37.5%"
    assert any("until the newest sample" in c.value for c in at.caption)


def test_a_missing_source_is_one_line_not_a_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    at = app_on(monkeypatch)
    assert not at.exception
    assert "exactly one data source" in at.error[0].value


def test_a_bad_window_is_one_line(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    at = app_on(monkeypatch, SITS_UI_DB=str(db), SITS_UI_SINCE="yesterday")
    assert not at.exception
    assert "--since 'yesterday' is not a positive duration" in at.error[0].value


# -- what the pages show, read back from their elements -----------------------------------


def encodings(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """Every channel encoding of a Vega-Lite spec, in its layers too."""
    found = [v for v in spec.get("encoding", {}).values() if isinstance(v, dict)]
    for layer in spec.get("layer", []):
        found += encodings(layer)
    return found


def page_charts(db: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, list[dict[str, Any]]]:
    """The charts of each page (the what-if page after one replay)."""
    at = app_on(monkeypatch, SITS_UI_DB=str(db), SITS_UI_SLO_MS="1000")
    out = {}
    for name in ("fleet", "heatmap", "fragmentation", "decisions"):
        out[name] = charts(page(at, name))
    at = page(at, "whatif")
    at.multiselect(key="policies").set_value(["bestfit"])
    at.button(key="run").click().run()
    out["whatif"] = charts(at)
    return out


def test_every_chart_writes_time_on_a_24_hour_utc_clock_and_latency_in_seconds(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read from each page's chart specs as the browser gets them: a time axis is UTC with
    Vega's 24-hour ``%H`` (18:51, never ``%I`` / ``%p``: 06:51 PM), as the tables write it; a
    latency axis is in seconds, as the tables' P95."""
    timed = 0
    for name, specs in page_charts(db, monkeypatch).items():
        for spec in specs:
            for enc in encodings(spec):
                title = str(enc.get("title") or "")
                if enc.get("type") == "temporal":
                    timed += 1
                    axis = enc.get("axis") or {}
                    assert enc["scale"]["type"] == "utc", (name, enc)
                    assert axis.get("formatType") == "time", (name, enc)  # UTC: the scale
                    assert "%H" in axis["format"], (name, enc)
                    assert "%I" not in axis["format"] and "%p" not in axis["format"], (name, enc)
                if "latency" in title.lower() or "p95" in title.lower():
                    assert title.endswith(", s") or title.endswith(" s"), (name, title)
                    assert "ms" not in title, (name, title)
    assert timed >= 3  # the fleet page's three charts over time at least


def test_tables_show_times_on_a_24_hour_clock(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    at = app_on(monkeypatch, SITS_UI_DB=str(db))
    for name in ("fleet", "decisions"):
        text = shown(page(at, name))
        stamps = re.findall(r"\d{4}-\d\d-\d\d \d\d:\d\d(?::\d\d)?Z?(?: ?[AP]M)?", text)
        assert stamps, name
        assert not [s for s in stamps if s.endswith(("AM", "PM"))], stamps
    # The newest sample, T0 + 590 s, written in UTC hours as the CLI writes it.
    assert human(T0 + timedelta(seconds=590), Unit.time) in shown(page(at, "fleet"))


def test_heatmap_page_shows_the_knee_and_safe_max_the_cli_prints(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The page and ``sits-observe heatmap`` on the same file and settings: the same knee,
    safe maximum and SLO, in the same words."""
    args = ["heatmap", "--db", str(db), "--since", SINCE, "--model", "llm-a", "-o", "json"]
    for slo_ms in ("1000", "500"):
        outcome = CliRunner().invoke(
            app, [*args, "--slo-ms", slo_ms], env={"SITS_DB": "", "SITS_SERVICE": ""}
        )
        assert outcome.exit_code == 0, outcome.output
        doc = json.loads(outcome.stdout)
        (limits,) = doc["tables"]["limits"]["rows"]
        units = {c["name"]: Unit(c["unit"]) for c in doc["tables"]["limits"]["columns"]}
        at = page(app_on(monkeypatch, SITS_UI_DB=str(db), SITS_UI_SLO_MS=slo_ms), "heatmap")
        assert at.selectbox(key="model").value == "llm-a"
        got = metrics(at)
        for label, column in (
            ("Knee", "knee_rps"),
            ("Safe max throughput", "safe_max_rps"),
            ("P95 SLO", "slo_s"),
        ):
            assert limits[column] is not None, column
            assert got[label] == human(limits[column], units[column]), (label, limits)
        assert got["Requests"] == human(limits["requests"], units["requests"])
