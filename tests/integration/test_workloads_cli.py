"""``interference``, ``baseline``, ``classes``, ``timeline`` and ``capacity`` on a real DuckDB
file in ``tmp_path`` filled with ``Store.append``: output keys and values, and errors."""

from __future__ import annotations

import csv
import io
import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from sits_observe.lab.catalog import all_reports
from sits_observe.reports.result import Report
from sits_observe.reports.spec import run_report
from sits_observe.reports.window import WindowRequest
from sits_observe.store import Store
from sits_observe.surfaces.cli.main import app
from sits_observe.surfaces.cli.reports.output import table_text
from tests.golden_support import assert_golden

REPORTS = all_reports()

GIB = 1024**3
T0 = datetime(2026, 3, 1, 12, 0, 0)
H100 = "NVIDIA H100 80GB HBM3"


def invoke(*args: str) -> tuple[int, str, str]:
    outcome = CliRunner().invoke(app, list(args))
    return outcome.exit_code, outcome.stdout, outcome.stderr


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def gpu_rows() -> list[dict[str, Any]]:
    rows = []
    for i in range(30):
        common = {"ts": at(i), "node": "n1", "model_name": H100, "source": "sim"}
        g1, g2 = common | {"gpu_index": 0}, common | {"gpu_index": 1}
        # G1: shared by two pods, half its NVLink busy, DRAM 80% active.
        for pod in ("chat-1", "chat-2"):
            rows.append(
                g1
                | {
                    "gpu_uuid": "G1",
                    "namespace": "finance",
                    "pod": pod,
                    "dram_active_ratio": 0.8,
                    "nvlink_tx_bytes_per_s": 225e9,
                    "nvlink_rx_bytes_per_s": 225e9,
                    "gpu_util_ratio": 0.95,
                    "fb_used_bytes": 3 * GIB,
                    "pcie_tx_bytes_per_s": 1e9,
                    "pcie_rx_bytes_per_s": 1e9,
                }
            )
        # G2: one training pod, a spike of utilisation at t = 20 s.
        rows.append(
            g2
            | {
                "gpu_uuid": "G2",
                "namespace": "ml",
                "pod": "train-0",
                "dram_active_ratio": 0.2,
                "nvlink_tx_bytes_per_s": 0.0,
                "nvlink_rx_bytes_per_s": 0.0,
                "gpu_util_ratio": 1.0 if i == 20 else (0.50 if i % 2 else 0.52),
                "fb_used_bytes": 20 * GIB,
            }
        )
    return rows


def pod_row(uid: str, ns: str, pod: str, workload: str, node: str, **extra: Any) -> dict[str, Any]:
    return {
        "ts": at(30),
        "pod_uid": uid,
        "namespace": ns,
        "pod": pod,
        "workload": workload,
        "node": node,
        "phase": "Running",
        "created_at": at(-60),
        "scheduled_at": at(-59),
        "initialized_at": at(-58),
        "containers_ready_at": at(-40),
        "ready_at": at(-40),
        **extra,
    }


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "obs.duckdb"
    pods = [
        pod_row("u1", "finance", "chat-1", "chat", "n1", qos_class="Guaranteed", gpu_request=2,
                priority_class="ultra-low-latency"),
        pod_row("u2", "finance", "chat-2", "chat", "n1", qos_class="Guaranteed", gpu_request=2,
                priority_class="ultra-low-latency"),
        pod_row("u3", "ml", "train-0", "train", "n1", qos_class="Burstable", gpu_request=1,
                priority_class="best-effort", scheduled_at=at(-55), initialized_at=at(-54)),
        pod_row("u4", "ml", "gpu-b", "bench", "n2", qos_class="Guaranteed", gpu_request=1),
    ]  # fmt: skip
    nodes = [
        {"ts": at(30), "node": "n1", "gpu_product": "NVIDIA-H100-80GB-HBM3",
         "gpu_memory_bytes": 80 * GIB, "labels_json": "{}"},
        {"ts": at(30), "node": "n2", "gpu_product": "NVIDIA-A100-SXM4-80GB",
         "gpu_memory_bytes": 80 * GIB, "labels_json": '{"pool": "a100"}'},
    ]  # fmt: skip
    # 5 requests per second for 30 s on chat-1 (n1); 20 slow ones on gpu-b (n2).
    requests = [
        {"ts": at(i / 5), "model": "llama", "latency_s": 10.3 if i % 10 else 9.0, "ok": True,
         "namespace": "finance", "pod": "chat-1", "prompt_tokens": 100, "output_tokens": 20}
        for i in range(150)
    ] + [
        {"ts": at(i), "model": "llama", "latency_s": 12.8, "ok": True, "namespace": "ml",
         "pod": "gpu-b"}
        for i in range(20)
    ]  # fmt: skip
    with Store.open(path) as store:
        store.append("gpu_samples", pa.Table.from_pylist(gpu_rows()))
        store.append("pods", pa.Table.from_pylist(pods))
        store.append("nodes", pa.Table.from_pylist(nodes))
        store.append("requests", pa.Table.from_pylist(requests))
    return path


@pytest.fixture
def empty_db(tmp_path: Path) -> Path:
    path = tmp_path / "empty.duckdb"
    Store.open(path).close()
    return path


@pytest.mark.parametrize(
    ("args", "table", "filler"),
    [
        (["interference"], "gpu_samples", "ingest dcgm"),
        (["baseline", "--table", "requests", "--metric", "latency_s"], "requests",
         "ingest requests"),
        (["classes"], "pods", "ingest k8s"),
        (["timeline"], "pods", "ingest k8s"),
        (["capacity", "--target-rps", "5", "--model", "m", "--safe-max-rps", "1"], "requests",
         "ingest requests"),
    ],
)  # fmt: skip
def test_empty_tables_are_named_with_their_filler(
    empty_db: Path, args: list[str], table: str, filler: str
) -> None:
    code, _, stderr = invoke(*args, "--db", str(empty_db))
    assert code == 2
    message = " ".join(stderr.split())
    assert f"table {table} " in message and "is empty" in message and filler in message


def test_interference_json(db: Path) -> None:
    code, stdout, stderr = invoke(
        "interference", "--db", str(db), "-o", "json",
        "--numa-miss", "n1=0.5", "--sync-delays", "n1=81,90,85",
    )  # fmt: skip
    assert code == 0, stderr
    data = json.loads(stdout)
    assert data["report"] == "interference"
    (node,) = data["rows"]
    gpus = {g["gpu_uuid"]: g for g in data["tables"]["gpus"]["rows"]}
    # G1: shared all the time, NVLink 450/900 -> conflict 0.5; DRAM 0.8; NUMA 0.5.
    assert gpus["G1"]["nvlink_conflict_ratio"] == 0.5
    assert gpus["G1"]["score"] == pytest.approx(0.4 * 0.8 + 0.35 * 0.5 + 0.25 * 0.5)
    assert gpus["G1"]["pods"] == ["chat-1", "chat-2"]
    assert gpus["G1"]["gpu"] == "n1/0 (H100 80GB)"
    assert gpus["G2"]["nvlink_conflict_ratio"] == 0.0
    assert node["score"] == pytest.approx(0.4 * 0.5 + 0.35 * 0.25 + 0.25 * 0.5, abs=1e-4)
    assert node["missing_inputs"] == []
    assert node["recommendation"] == "best-effort"  # three syncs above 80 ms
    code, stdout, _ = invoke("interference", "--db", str(db), "-o", "csv", "--level", "gpu")
    assert code == 0
    assert [r["gpu_uuid"] for r in csv.DictReader(io.StringIO(stdout))] == ["G1", "G2"]
    code, _, stderr = invoke("interference", "--db", str(db), "--numa-miss", "n1=2")
    assert code == 2 and "--numa-miss" in stderr and "0-1" in stderr
    code, stdout, _ = invoke(
        "interference", "--db", str(db), "-o", "json", "--nvlink-conflict-scope", "node"
    )
    assert code == 0
    assert json.loads(stdout)["facts"]["nvlink_conflict_scope"] == "node"


def test_baseline_compare_runs(db: Path) -> None:
    first, second = f"{T0.isoformat()}Z..{at(15).isoformat()}Z", f"{at(15)}..{at(30)}"
    code, stdout, stderr = invoke(
        "baseline", "--db", str(db), "--table", "gpu_samples", "--metric", "gpu_util_ratio",
        "--by", "gpu_uuid", "--compare", f"early={first}", "--compare", f"late={second}",
        "-o", "json",
    )  # fmt: skip
    assert code == 0, stderr
    rows = {(r["run"], r["gpu_uuid"]): r for r in json.loads(stdout)["rows"]}
    late = rows[("late", "G2")]
    assert late["samples_excluded"] == 1  # the t = 20 s spike
    assert late["exclusion_reason"] == "outside 2.5 sigma of the 60 s window mean"
    assert late["mean"] == pytest.approx(0.51, abs=0.002)
    assert rows[("early", "G2")]["samples_excluded"] == 0
    assert rows[("late", "G1")]["mean_change_ratio"] == pytest.approx(0.0)
    code, stdout, stderr = invoke(
        "baseline", "--db", str(db), "--by", "gpu_uuid", "--sliding-window-s", "30", "-o", "json"
    )
    assert code == 0, stderr
    (_, g2) = sorted(json.loads(stdout)["rows"], key=lambda r: r["gpu_uuid"])
    assert g2["exclusion_reason"] == "outside 2.5 sigma of the 30 s window mean"
    assert (g2["samples_excluded"], g2["run"]) == (1, "all")
    code, _, stderr = invoke("baseline", "--db", str(db), "--metric", "nope")
    assert code == 2
    assert "no numeric column 'nope'" in stderr
    code, _, stderr = invoke("baseline", "--db", str(db), "--compare", "x=2026-03-01..yesterday")
    assert code == 2 and "--compare" in stderr


def test_classes_json(db: Path) -> None:
    code, stdout, stderr = invoke(
        "classes", "--db", str(db), "-o", "json", "--fragmentation-ratio", "0.75",
        "--sla", "finance=0.015",
    )  # fmt: skip
    assert code == 0, stderr
    rows = {r["name"]: r for r in json.loads(stdout)["rows"]}
    assert set(rows) == {"chat-1", "chat-2", "train-0", "gpu-b"}
    chat = rows["chat-1"]
    assert (chat["memory_class"], chat["shared_gpu"], chat["exclusive_gpu"]) == ("L2", True, True)
    assert chat["peak_gpu_memory_bytes"] == 3 * GIB
    assert chat["time_slice_s"] == 0.025  # P95 10.3 s > 10 ms
    assert chat["sla_violation_rate"] == 1.0  # finance SLA 15 ms
    assert chat["proposed_priority_class"] == "throughput-guaranteed"
    assert chat["preemption_policy"] == "PreemptLowerPriority"
    train = rows["train-0"]
    assert (train["memory_class"], train["gpu_memory_share_ratio"]) == ("L3", 0.6)
    assert rows["gpu-b"]["memory_class"] is None  # no GPU memory measured
    code, stdout, _ = invoke("classes", "--db", str(db), "--by", "workload", "-o", "csv")
    assert code == 0
    assert {r["name"] for r in csv.DictReader(io.StringIO(stdout))} == {"chat", "train", "bench"}
    code, _, stderr = invoke("classes", "--db", str(db), "--fragmentation-ratio", "75")
    assert code == 2 and "--fragmentation-ratio" in stderr


def test_classes_elastic_view(db: Path) -> None:
    code, stdout, stderr = invoke(
        "classes", "--db", str(db), "--view", "elastic", "--tier", "gold", "-o", "json"
    )
    assert code == 0, stderr
    rows = {r["gpu_uuid"]: r for r in json.loads(stdout)["rows"]}
    g1 = rows["G1"]
    assert g1["samples"] == 5  # the last 5 s at 1 Hz
    assert g1["gpu_util_ratio"] == pytest.approx(0.95)
    assert g1["link_saturation_ratio"] == pytest.approx(0.5)
    assert not g1["triggered"]  # link saturation 50% is not above 75%
    assert g1["proposed_memory_quota_bytes"] == 8 * GIB  # gold, unchanged
    assert not rows["G2"]["triggered"]
    code, _, stderr = invoke("classes", "--db", str(db), "--view", "elastic", "--tier", "tin")
    assert code == 2 and "unknown QoS tier" in stderr


def test_timeline_summary_and_pods(db: Path) -> None:
    code, stdout, stderr = invoke("timeline", "--db", str(db), "-o", "json")
    assert code == 0, stderr
    data = json.loads(stdout)
    assert data["report"] == "timeline" and data["facts"]["by"] == ["namespace", "workload"]
    rows = {r["workload"]: r for r in data["rows"]}
    assert rows["chat"]["start_p95_s"] == 20.0
    assert rows["chat"]["dominant_stage"] == "containers"
    assert rows["train"]["dominant_stage"] == "containers"  # 5 s scheduling < 14 s start
    assert "above the before-fix figure" in rows["chat"]["comparison"]
    assert any(n.startswith("all pods: p95") for n in data["notes"])
    code, stdout, _ = invoke("timeline", "--db", str(db), "--pods", "-o", "csv")
    assert code == 0
    pods = {r["pod"]: r for r in csv.DictReader(io.StringIO(stdout))}
    assert pods["train-0"]["scheduling_s"] == "5.0"
    assert pods["train-0"]["largest_stage"] == "containers"
    code, stdout, _ = invoke("timeline", "--db", str(db), "--by", "node", "-o", "json")
    assert code == 0
    by_node = {r["node"]: r["pods"] for r in json.loads(stdout)["rows"]}
    assert by_node == {"n1": 3, "n2": 1}
    code, _, stderr = invoke("timeline", "--db", str(db), "--by", "namespace,zone")
    assert code == 2 and "--by" in stderr and "zone" in stderr
    # Pods are picked by creation time: all were created 90 s before the newest snapshot.
    code, stdout, stderr = invoke(
        "timeline", "--db", str(db), "--since", "60s", "--until", "newest", "-o", "json"
    )
    assert code == 0, stderr
    assert json.loads(stdout)["rows"] == []


def test_capacity_frontier_and_sizing(db: Path, tmp_path: Path) -> None:
    prices = tmp_path / "prices.yaml"
    prices.write_text(
        "pools:\n"
        "  - {pool: a100, price_usd_per_hour: 32.77, node_labels: {pool: a100}}\n"
        "  - {pool: h100, price_usd_per_hour: 41.20, gpu_product: NVIDIA-H100-80GB-HBM3}\n"
    )
    code, stdout, stderr = invoke(
        "capacity", "--db", str(db), "--prices", str(prices), "--model", "llama",
        "--target-rps", "12", "--slo-ms", "11000", "--throughput-bin-rps", "1", "--bin-s", "1",
        "-o", "json",
    )  # fmt: skip
    assert code == 0, stderr
    data = json.loads(stdout)
    assert data["report"] == "capacity" and data["facts"]["unpriced_nodes"] == []
    frontier = {r["pool"]: r for r in data["rows"]}  # with --prices the frontier is the main table
    assert frontier["a100"]["latency_p95_s"] == 12.8
    assert frontier["h100"]["latency_p95_s"] == 10.3
    assert frontier["a100"]["on_frontier"] and frontier["h100"]["on_frontier"]
    sizing = {r["gpu_product"]: r for r in data["tables"]["sizing"]["rows"]}
    h100 = sizing["NVIDIA-H100-80GB-HBM3"]
    # chat-1 served 5 rps with P95 10.3 s <= 11 s: safe max 5 rps per replica, 2 GPUs each.
    assert h100["safe_max_rps_per_replica"] == 5.0
    assert (h100["replicas"], h100["gpus_per_replica"], h100["gpus"]) == (3, 2, 6)
    # gpu-b ran 1 rps at 12.8 s > 11 s: no safe maximum, so no A100 sizing, with a note.
    assert "NVIDIA-A100-SXM4-80GB" not in sizing
    assert any("no safe maximum" in n for n in data["notes"])
    code, stdout, _ = invoke(
        "capacity", "--db", str(db), "--model", "llama", "--target-rps", "12",
        "--safe-max-rps", "NVIDIA-A100-SXM4-80GB=2.5", "-o", "csv",
    )  # fmt: skip
    assert code == 0
    (row,) = list(csv.DictReader(io.StringIO(stdout)))  # without --prices the sizing is main
    assert (row["replicas"], row["gpus"], row["source"]) == ("5", "5", "--safe-max-rps")
    # The window: the 10 s up to just after the newest row read (the inventory at t = 30 s):
    # 49 requests on chat-1 (h100, t = 20.2 .. 29.8 s), none of gpu-b's (a100, t <= 19 s).
    code, stdout, stderr = invoke(
        "capacity", "--db", str(db), "--prices", str(prices), "--model", "llama",
        "--since", "10s", "--until", "newest", "-o", "json",
    )  # fmt: skip
    assert code == 0, stderr
    counts = {r["pool"]: r["requests"] for r in json.loads(stdout)["rows"]}
    assert counts == {"h100": 49}


def test_capacity_flag_errors(db: Path, tmp_path: Path) -> None:
    code, _, stderr = invoke("capacity", "--db", str(db))
    assert code == 2 and "--prices" in stderr
    code, _, stderr = invoke("capacity", "--db", str(db), "--target-rps", "3")
    assert code == 2 and "needs --model" in stderr
    code, _, stderr = invoke("capacity", "--db", str(db), "--model", "llama", "--target-rps", "3")
    assert code == 2 and "--slo-ms" in stderr and "--safe-max-rps" in stderr
    code, _, stderr = invoke("capacity", "--db", str(db), "--window-s", "1")
    assert code == 2 and "No such option" in stderr  # renamed --bin-s
    remote = CliRunner().invoke(
        app,
        ["capacity", "--service", "http://127.0.0.1:1", "--prices", str(tmp_path / "p.yaml")],
        env={"SITS_TOKEN": "t"},
    )
    assert remote.exit_code == 2 and "local file" in remote.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("pools: [{pool: x}]\n")
    code, _, stderr = invoke("capacity", "--db", str(db), "--prices", str(bad))
    assert code == 2 and "price table" in stderr


# -- golden tables of the interference, baseline and classes reports -------------------------


def _golden_report(db: Path, name: str, **values: Any) -> Report:
    spec = REPORTS[name]
    with Store.open(db, read_only=True) as store:
        return run_report(spec, store, WindowRequest.parse(None, "newest"), spec.validate(values))


@pytest.mark.parametrize(
    ("golden", "report", "values"),
    [
        ("interference", "interference", {"numa_miss": ["n1=0.5"]}),
        ("baseline", "baseline", {}),
        ("classes", "classes", {"fragmentation_ratio": 0.75, "sla": ["finance=0.015"]}),
    ],
)
@pytest.mark.parametrize("width", [80, 160])
def test_golden_tables(
    db: Path, golden: str, report: str, values: dict[str, Any], width: int
) -> None:
    assert_golden(f"{golden}_{width}", table_text(_golden_report(db, report, **values), width))


def test_golden_elastic_view(db: Path) -> None:
    report = _golden_report(db, "classes", view="elastic", tier="gold")
    assert_golden("classes_elastic_100", table_text(report, 100))


# -- golden tables of the timeline and capacity reports --------------------------------------


@pytest.mark.parametrize("width", [80, 160])
def test_golden_timeline_and_capacity(db: Path, tmp_path: Path, width: int) -> None:
    assert_golden(f"timeline_{width}", table_text(_golden_report(db, "timeline"), width))
    prices = tmp_path / "prices.yaml"
    prices.write_text(
        "pools:\n"
        "  - {pool: a100, price_usd_per_hour: 32.77, node_labels: {pool: a100}}\n"
        "  - {pool: h100, price_usd_per_hour: 41.20, gpu_product: NVIDIA-H100-80GB-HBM3}\n"
    )
    capacity = _golden_report(
        db, "capacity", prices=prices, model="llama", target_rps=12, slo_ms=11000,
        throughput_bin_rps=1,
    )  # fmt: skip
    assert_golden(f"capacity_{width}", table_text(capacity, width))
