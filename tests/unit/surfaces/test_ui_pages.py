"""The Streamlit app's pages under ``streamlit.testing`` on a real DuckDB file.

The file is filled through the store API with rows whose answers are known by hand: the
heatmap's bins have constant latencies (so each bin's P95 is that latency, the knee is the
30 rps bin and the safe maximum at a 1 s SLO is 40 rps), SMF is (50 - 10) / 80 GiB = 0.5,
node A's free GPU is fragmented for the one-GPU, all-CPU workload (FGD 1/3 of idle GPU), and
so on. Each page must show these values, not merely render.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from streamlit.testing.v1 import AppTest

from sits_observe.domain.tables import conform
from sits_observe.store import Store

APP = Path(__file__).resolve().parents[3] / "dashboards" / "app.py"
#: An hour ago, to the minute (naive UTC): inside the app's window however it counts back.
T0 = datetime.now(UTC).replace(tzinfo=None, second=0, microsecond=0) - timedelta(hours=1)
GIB = 1024**3
CID = "c" * 64
#: Per throughput bin (10 rps wide): requests per 1 s window and their (constant) latency.
BIN_RATES = (15, 25, 35, 45, 55)
BIN_LATENCY_S = (0.10, 0.12, 0.15, 0.60, 1.50)
WINDOWS_PER_BIN = 3


def _table(name: str, rows: list[dict[str, Any]]) -> pa.Table:
    return conform(name, pa.Table.from_pylist(rows))


def request_rows() -> list[dict[str, Any]]:
    """Windows of BIN_RATES requests, each bin's requests all with one latency."""
    rows = []
    second = 0
    for rate, latency in zip(BIN_RATES, BIN_LATENCY_S, strict=True):
        for _ in range(WINDOWS_PER_BIN):
            start = T0 + timedelta(seconds=second)
            for i in range(rate):
                ts = start + timedelta(microseconds=(i * 1_000_000) // (rate + 1))
                rows.append({"ts": ts, "model": "llm-a", "latency_s": latency, "ok": True})
            second += 1
    # A second, small model and a failed request (left out of the quantiles).
    rows += [
        {"ts": T0 + timedelta(seconds=s), "model": "llm-b", "latency_s": 0.2 + s / 100, "ok": True}
        for s in range(5)
    ]
    rows.append({"ts": T0, "model": "llm-a", "latency_s": 30.0, "ok": False})
    return rows


def fill_store(store: Store) -> None:
    """Every table a page reads, with hand-checkable values (see the module docstring)."""
    store.append(
        "nodes",
        _table(
            "nodes",
            [
                {
                    "ts": T0,
                    "node": "node-a",
                    "gpu_allocatable": 2,
                    "gpu_product": "H100",
                    "cpu_allocatable_milli": 4000,
                    "memory_allocatable_bytes": 64 * GIB,
                    "ready": True,
                },
                {
                    "ts": T0,
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
                    "ts": T0,
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
        ts = T0 + timedelta(seconds=10 * k)
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
    store.append("requests", _table("requests", request_rows()))
    store.append(
        "collector_drops",
        _table(
            "collector_drops",
            [{"ts": T0, "node": "node-a", "collector": "dcgm", "reason": "nan", "count": 7}],
        ),
    )
    store.append(
        "decisions",
        _table(
            "decisions",
            [
                {
                    "ts": T0 + timedelta(seconds=k),
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


def app_on(monkeypatch: pytest.MonkeyPatch, **env: str) -> AppTest:
    for name in ("SITS_UI_DB", "SITS_UI_SERVICE", "SITS_UI_TOKEN_FILE", "SITS_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("SITS_UI_WINDOW_S", str(7 * 86400))
    at = AppTest.from_file(str(APP), default_timeout=120)
    return at.run()


def page(at: AppTest, name: str) -> AppTest:
    at.switch_page(f"views/{name}.py").run()
    assert not at.exception, [e.value for e in at.exception]
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


# -- pages --------------------------------------------------------------------------------


def test_fleet_page_shows_inventory_utilisation_freshness_and_drops(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    at = page(app_on(monkeypatch, SITS_UI_DB=str(db)), "fleet")
    assert metrics(at) == {
        "Nodes": "2",
        "GPUs": "4",  # allocatable in the inventory
        "GPUs sampled": "2",
        "Mean GPU utilisation": "37.5%",  # (0.5 + 0.25) / 2
    }
    nodes, utilisation, gpus, fresh, drops = frames(at)
    assert nodes["node"].tolist() == ["node-a", "node-b"]
    assert nodes["cpu_allocatable_milli"].tolist() == [4000, 8000]
    row = utilisation.iloc[0]
    assert (row["node"], row["mean_gpu_util_ratio"], row["mean_power_w"]) == ("node-a", 0.375, 400)
    # GPU-a1's framebuffer grows 1 GiB a minute: 10 GiB of 80 at the last sample.
    assert gpus.set_index("gpu_uuid")["fb_used_ratio"].to_dict() == {
        "GPU-a0": 0.375,
        "GPU-a1": 0.125,
    }
    newest = {r.source: r.newest_at.to_pydatetime() for r in fresh.itertuples()}
    assert newest == {
        "gpu_samples": T0 + timedelta(seconds=590),
        "container_samples": T0 + timedelta(seconds=591),
    }
    assert drops[["collector", "reason", "dropped"]].values.tolist() == [["dcgm", "nan", 7]]
    (bars,) = charts(at)
    assert [r["mean_gpu_util_ratio"] for r in bars["data"]["values"]] == [0.375]


def test_heatmap_page_shows_knee_safe_max_and_the_slo_line(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    at = page(app_on(monkeypatch, SITS_UI_DB=str(db), SITS_UI_SLO_MS="1000"), "heatmap")
    # Chord (10 rps, 0.1 s) -> (50 rps, 1.5 s): the 30 rps bin lies deepest below it; the
    # 50 rps bin (P95 1.5 s) is the first over the 1 s SLO, so 40 rps is the safe maximum.
    assert metrics(at) == {"Requests": "525", "Knee": "30 rps", "Safe max throughput": "40 rps"}
    quantiles, bins = frames(at)
    latencies = [r["latency_s"] for r in request_rows() if r["model"] == "llm-a" and r["ok"]]
    got = quantiles.set_index("model").loc["llm-a"]
    assert got["count"] == len(latencies) == 525
    for q in (50, 95, 99):
        assert got[f"p{q}_s"] == pytest.approx(np.percentile(latencies, q), abs=1e-12)
    assert bins["p95_s"].tolist() == pytest.approx(list(BIN_LATENCY_S))
    assert bins["within_slo"].tolist() == [True, True, True, True, False]
    heat, curve = charts(at)
    cells, slo, knee, safe = heat["layer"]
    assert sum(c["count"] for c in cells["data"]["values"]) == 525
    assert {c["latency_lo_ms"] for c in cells["data"]["values"]} == {100, 600, 1500}
    assert [layer["data"]["values"][0]["value"] for layer in (slo, knee, safe)] == [1000, 30, 40]
    assert curve["layer"][1]["data"]["values"][0]["value"] == 1000

    # A tighter SLO moves the safe maximum down: 0.6 s breaks at the 40 rps bin.
    at.sidebar.number_input[0].set_value(500.0).run()
    assert metrics(at)["Safe max throughput"] == "30 rps"
    # The other model has its own heatmap.
    at.selectbox(key="model").select("llm-b").run()
    assert metrics(at)["Requests"] == "5"


def test_fragmentation_page_shows_fgd_causes_smf_and_trend_clusters(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    at = page(app_on(monkeypatch, SITS_UI_DB=str(db)), "fragmentation")
    # node-a's free GPU cannot take the workload's pod (no CPU left): F = 1 GPU of 3 idle, 4 total.
    assert metrics(at) == {
        "Fragmentation ratio": "33.33%",
        "Fragmentation amount": "25.00%",
        "Fragmented GPUs": "1.00",
        "GPU allocation": "25.00%",
    }
    causes, nodes, smf, trends = frames(at)
    assert causes.set_index("cause")["gpus"].to_dict()["lack_cpu"] == 1.0
    assert nodes.set_index("node")["frag_milli"].to_dict() == {"node-a": 1000, "node-b": 0}
    # SMF = (fb_free 50 GiB - memory.current 10 GiB) / 80 GiB, on all 60 aligned samples.
    (row,) = smf.to_dict("records")
    assert (row["gpu_uuid"], row["mean_smf"], row["samples"]) == ("GPU-a0", 0.5, 60)
    # The flat GPU and the leaking one fall in different groups, each described in words.
    patterns = dict(zip(trends["members"], trends["pattern"], strict=True))
    assert patterns == {"GPU-a0": "steady", "GPU-a1": "leaking"}
    series = charts(at)[-1]["data"]["values"]
    assert {p["gpu"] for p in series} == {"GPU-a0", "GPU-a1"}


def test_whatif_page_replays_the_live_cluster_with_progress(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    at = page(app_on(monkeypatch, SITS_UI_DB=str(db)), "whatif")
    assert any("2 nodes, 4 GPUs, 1 pods" in m.value for m in at.markdown)
    at.multiselect(key="policies").set_value(["bestfit"])
    at.button(key="run").click().run()
    assert not at.exception
    (results,) = frames(at)
    row = results.iloc[0]
    assert row["policy"] == "bestfit"
    # Onto the empty cluster the pod (1 GPU, 4000 mCPU) fits node-a once and node-b twice
    # (CPU runs out first): 3 of 4 GPUs allocated, 1 left however high the load.
    assert row["alloc_ratio"] == pytest.approx(0.75)
    assert row["unallocated_gpus"] == pytest.approx(1.0)
    assert "done: 1 replays" in at.get("progress")[0].proto.text
    (curve,) = charts(at)
    assert {p["policy"] for p in curve["data"]["values"]} == {"bestfit"}


def test_whatif_page_replays_kube_scheduler_with_and_without_the_extender(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    at = page(app_on(monkeypatch, SITS_UI_DB=str(db)), "whatif")
    offered = at.multiselect(key="policies").options
    assert {"kube-default", "kube-sits", "kube-sits-gpuhint"} <= set(offered)
    at.multiselect(key="policies").set_value(["kube-default", "kube-sits"])
    at.button(key="run").click().run()
    assert not at.exception, [e.value for e in at.exception]
    (results,) = frames(at)
    by = {row["policy"]: row for _, row in results.iterrows()}
    assert set(by) == {"kube-default", "kube-sits"}
    # kube-sits went through the extender's handler: it placed the same pods (the cluster of
    # the fixture leaves no choice that changes the count).
    for row in by.values():
        assert row["alloc_ratio"] == pytest.approx(0.75)
    assert "done: 2 replays" in at.get("progress")[0].proto.text


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
    assert ("Node", "node-a", "fragmentation") in {
        (r["kind"], r["name"], r["action"]) for r in planned.to_dict("records")
    }
    assert counts[["action", "outcome", "decisions"]].values.tolist() == [
        ["fragmentation", "skipped", 1],
        ["memory-class", "recommended", 2],
    ]
    assert log["reason"].tolist() == ["because 2", "because 1", "because 0"]
    at.multiselect(key="outcomes").set_value(["recommended"]).run()
    assert frames(at)[2]["name"].tolist() == ["node-b", "node-a"]


def test_a_missing_source_is_one_line_not_a_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    at = app_on(monkeypatch)
    assert not at.exception
    assert "exactly one data source" in at.error[0].value
