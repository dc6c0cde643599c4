"""``sits-observe fragmentation``: trace files, placements, a DuckDB file, errors, the report
document, CSV and golden tables."""

from __future__ import annotations

import csv
import io
import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from sits_observe.reports.fragmentation import SPEC, FragmentationQuery
from sits_observe.reports.spec import run_report
from sits_observe.reports.window import WindowRequest
from sits_observe.store import Store
from sits_observe.surfaces.cli.main import app
from sits_observe.surfaces.cli.reports.output import table_text
from tests.golden_support import assert_golden

CAUSES = {"lack_gpu", "lack_cpu", "lack_both", "cpu_only", "gpu_type"}


def invoke(*args: str) -> tuple[int, str, str]:
    outcome = CliRunner().invoke(app, ["fragmentation", *args])
    return outcome.exit_code, outcome.stdout, outcome.stderr


def as_json(*args: str) -> dict[str, Any]:
    code, stdout, stderr = invoke(*args, "-o", "json")
    assert code == 0, stdout + stderr
    doc: dict[str, Any] = json.loads(stdout)
    return doc


def rows(doc: dict[str, Any], table: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = doc["tables"][table]["rows"]
    return found


@pytest.fixture
def trace(tmp_path: Path) -> tuple[Path, Path]:
    """Two nodes, four pods (three shapes). M at 95% coverage keeps all three shapes:
    4 CPU + 1 GPU x 500 (2 pods, p 0.5), 1 CPU + 2 GPUs (p 0.25), CPU-only 1 CPU (p 0.25)."""
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,16000,1,4,A\nn1,8000,1,2,B\n")
    pods = tmp_path / "pods.csv"
    pods.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
        "half-1,4000,0,1,500,\nhalf-2,4000,0,1,500,\ntwo,1000,0,2,1000,\ncpu,1000,0,0,0,\n"
        "fill-1,0,0,1,800,\nfill-2,8000,0,1,1000,\nfill-3,6000,0,0,0,\n"
    )
    return nodes, pods


@pytest.fixture
def placements(tmp_path: Path) -> Path:
    path = tmp_path / "placements.csv"
    path.write_text("pod,node,gpu_index\nfill-1,n0,2\nfill-2,n0,0\nfill-3,n1,\n")
    return path


def test_empty_cluster_json_shape(trace: tuple[Path, Path]) -> None:
    """Empty: n0 4 GPUs / 16 CPU, n1 2 GPUs / 8 CPU. The 7 pods have 6 shapes, all kept at 95%
    (6.65 pods needed): 4 CPU + 1 x 500 (p 2/7), the others p 1/7. Every GPU shape fits an idle
    node with no GPU below its share, so only the CPU-only shapes (1 CPU, 6 CPU: p 2/7) count:
    F = 2/7 * 6000."""
    nodes, pods = trace
    doc = as_json("--nodes", str(nodes), "--workload", str(pods))
    assert doc["report"] == "fragmentation"
    assert set(doc["tables"]) == {"causes", "typical_pods", "nodes"}
    (cluster,) = doc["rows"]
    assert set(cluster) >= {
        "frag_ratio", "frag_amount_ratio", "frag_milli", "idle_milli", "total_milli",
        "alloc_ratio", "node_count", "placed_pods", "workload_pods",
    }  # fmt: skip
    assert cluster["total_milli"] == cluster["idle_milli"] == 6000
    assert cluster["frag_milli"] == pytest.approx(6000 * 2 / 7)
    assert cluster["frag_ratio"] == cluster["frag_amount_ratio"] == pytest.approx(2 / 7)
    causes = {r["cause"]: r for r in rows(doc, "causes")}
    assert set(causes) == CAUSES
    assert causes["cpu_only"]["frag_milli"] == pytest.approx(6000 * 2 / 7)
    assert causes["cpu_only"]["share"] == 1.0
    typical = rows(doc, "typical_pods")
    assert sum(p["weight"] for p in typical) == pytest.approx(1.0)
    assert typical[0] == {
        "cpu_milli": 4000, "num_gpu": 1, "gpu_milli": 500, "gpu_types": [], "models": "any",
        "count": 2, "weight": pytest.approx(2 / 7),
    }  # fmt: skip
    assert {n["node"] for n in rows(doc, "nodes")} == {"n0", "n1"}
    assert doc["facts"]["source"] == "trace" and doc["facts"]["placements"] is None
    assert doc["facts"]["nodes"] == str(nodes)


def test_placements_change_the_measure(trace: tuple[Path, Path], placements: Path) -> None:
    """fill-1 (0.8 GPU) on n0 GPU 2, fill-2 (1 GPU, 8 CPU) on n0 GPU 0, fill-3 (6 CPU) on n1:
    n0 free [0, 1000, 200, 1000], CPU 8000, R 2200; n1 free [1000, 1000], CPU 2000, R 2000.
    n0: every GPU shape fits and sees the 200 GPU as too small (lack_gpu): 2/7*200 + 3/7*200;
        the two CPU-only shapes: 2/7*2200. F_n0 = 5400/7.
    n1: 4 CPU x 500 (p 2/7) and 8 CPU x 1000 (p 1/7) lack CPU: 3/7*2000; 2 GPUs and 0.8 GPU
        fit with nothing below their share: 0; CPU-only: 2/7*2000. F_n1 = 10000/7.
    F = 2200 of 4200 idle (ratio 0.5238), amount 2200/6000. lack_gpu 1000/7, lack_cpu 6000/7,
    cpu_only 8400/7."""
    nodes, pods = trace
    doc = as_json("--nodes", str(nodes), "--workload", str(pods), "--placements", str(placements))
    (cluster,) = doc["rows"]
    assert cluster["placed_pods"] == 3
    assert cluster["idle_milli"] == 4200
    assert cluster["alloc_ratio"] == pytest.approx(1800 / 6000)
    assert cluster["frag_milli"] == pytest.approx(2200.0)
    assert cluster["frag_ratio"] == pytest.approx(2200 / 4200)
    assert cluster["frag_amount_ratio"] == pytest.approx(2200 / 6000)
    milli = {r["cause"]: r["frag_milli"] for r in rows(doc, "causes")}
    assert milli == pytest.approx(
        {
            "lack_gpu": 1000 / 7,
            "lack_cpu": 6000 / 7,
            "lack_both": 0.0,
            "cpu_only": 8400 / 7,
            "gpu_type": 0.0,
        }
    )
    by_node = rows(doc, "nodes")
    assert [n["node"] for n in by_node] == ["n1", "n0"]  # most fragmented first
    assert [n["frag_milli"] for n in by_node] == pytest.approx([10000 / 7, 5400 / 7])
    assert by_node[1]["cpu_free_milli"] == 8000
    assert doc["facts"]["placements"] == str(placements)


def test_top(trace: tuple[Path, Path]) -> None:
    nodes, pods = trace
    files = ("--nodes", str(nodes), "--workload", str(pods))
    assert len(rows(as_json(*files, "--top", "1"), "nodes")) == 1
    assert len(rows(as_json(*files, "--top", "0"), "nodes")) == 2  # 0 = every node


def test_table_output_in_human_units(trace: tuple[Path, Path], placements: Path) -> None:
    nodes, pods = trace
    code, stdout, stderr = invoke("--nodes", str(nodes), "--workload", str(pods))
    assert code == 0, stderr
    for text in ("frag/all", "28.6%", "cpu_only", "Typical pods", "n0"):
        assert text in stdout
    assert "window does not apply" in stderr
    code, stdout, stderr = invoke(
        "--nodes", str(nodes), "--workload", str(pods), "--placements", str(placements)
    )
    assert code == 0, stderr
    # GPUs, not milli-GPU: F = 2.2 GPUs of 4.2 idle; n0 has 8 cores free.
    assert "2.2" in stdout and "4.2" in stdout and "2200" not in stdout
    assert "8000" not in stdout and "8,000" not in stdout


def test_csv_is_the_cluster_row_with_raw_values(trace: tuple[Path, Path], placements: Path) -> None:
    nodes, pods = trace
    code, stdout, stderr = invoke(
        "--nodes", str(nodes), "--workload", str(pods), "--placements", str(placements),
        "-o", "csv",
    )  # fmt: skip
    assert code == 0, stderr
    (row,) = list(csv.DictReader(io.StringIO(stdout)))
    assert float(row["frag_milli"]) == pytest.approx(2200.0)
    assert int(row["idle_milli"]) == 4200 and int(row["placed_pods"]) == 3


@pytest.mark.parametrize(
    ("files", "extra", "message"),
    [
        ((), [], "give one source: --db FILE or --service URL"),
        (("nodes",), [], "a trace needs --nodes NODE_CSV and --workload POD_CSV"),
        (
            ("nodes", "workload"),
            ["--db", "x.duckdb"],
            "give either --db / --service or the files (--nodes, --workload, --placements)",
        ),
        (
            ("nodes", "workload"),
            ["--service", "http://127.0.0.1:9"],
            "give either --db / --service or the files",
        ),
        (("nodes", "workload"), ["--coverage-ratio", "1.5"], "--coverage-ratio:"),
        (("nodes", "workload"), ["--top", "-1"], "--top:"),
    ],
)
def test_usage_errors(
    trace: tuple[Path, Path], files: tuple[str, ...], extra: list[str], message: str
) -> None:
    nodes, pods = trace
    paths = {"nodes": nodes, "workload": pods}
    args = [a for f in files for a in (f"--{f}", str(paths[f]))]
    code, _, stderr = invoke(*args, *extra)
    assert code == 2
    assert message in " ".join(stderr.split())


def test_bad_placement_exits_2_with_the_line(trace: tuple[Path, Path], tmp_path: Path) -> None:
    nodes, pods = trace
    placements = tmp_path / "p.csv"
    placements.write_text("pod,node,gpu_index\nfill-1,n1,0\nhalf-1,n1,0\n")
    code, _, stderr = invoke(
        "--nodes", str(nodes), "--workload", str(pods), "--placements", str(placements)
    )
    assert code == 2
    expected = (
        "line 3: cannot place cpu 4 + 1x500m on 'n1': GPU 0 has 200 milli free, pod needs 500"
    )
    assert expected in " ".join(stderr.split())


AT = datetime(2026, 3, 1, 12)


def _inventory(at: datetime, pods: list[tuple[str, str | None, str, int, int]]) -> dict[str, Any]:
    node = {
        "ts": at,
        "node": "g1",
        "gpu_allocatable": 2,
        "gpu_product": "NVIDIA L4",
        "cpu_allocatable_milli": 8000,
        "ready": True,
    }
    return {
        "nodes": pa.Table.from_pylist([node]),
        "pods": pa.Table.from_pylist(
            [
                {
                    "ts": at,
                    "pod_uid": u,
                    "namespace": "ml",
                    "pod": u,
                    "node": n,
                    "phase": ph,
                    "gpu_request": g,
                    "cpu_request_milli": c,
                }
                for u, n, ph, g, c in pods
            ]
        ),
    }


@pytest.fixture
def live_db(tmp_path: Path) -> Path:
    """The cluster of test_fgd_live's hand computation (F = 1000 = all idle, amount 0.5) at
    12:00; an hour earlier a snapshot of the same node with no pod placed."""
    db = tmp_path / "obs.duckdb"
    pods = [
        ("a", "g1", "Running", 1, 2000),
        ("b", None, "Pending", 1, 2000),
        ("c", "g1", "Running", 0, 5000),
    ]
    earlier = datetime(2026, 3, 1, 11)
    with Store.open(db) as store:
        store.append_batch(_inventory(earlier, [("b", None, "Pending", 1, 2000)]))
        store.append_batch(_inventory(AT, pods))
    return db


def test_live_cluster_from_a_duckdb_file(live_db: Path) -> None:
    doc = as_json("--db", str(live_db), "--since", "1h", "--until", "newest")
    (cluster,) = doc["rows"]
    assert cluster["frag_milli"] == pytest.approx(1000.0)
    assert cluster["frag_ratio"] == pytest.approx(1.0)
    assert cluster["frag_amount_ratio"] == pytest.approx(0.5)
    causes = {r["cause"]: r for r in rows(doc, "causes")}
    assert causes["lack_cpu"]["share"] == pytest.approx(2 / 3)
    assert doc["facts"]["source"] == "store"
    assert doc["facts"]["nodes_at"] == doc["facts"]["pods_at"] == "2026-03-01T12:00:00Z"
    assert doc["window"]["since"] == "2026-03-01T11:00:00Z"
    assert rows(doc, "nodes")[0]["gpu_model"] == "NVIDIA L4"
    code, _, stderr = invoke("--db", str(live_db), "--since", "soon")
    assert code == 2 and "--since 'soon'" in stderr


def test_live_state_is_the_inventory_at_the_end_of_the_window(live_db: Path) -> None:
    """Default window (all data up to now): the 12:00 snapshot, every pod seen (a, b, c).
    Until 11:30: the 11:00 snapshot (nothing placed, M = pod b only: 1 GPU, 2 CPU), so no
    idle GPU is fragmented."""
    doc = as_json("--db", str(live_db))
    assert doc["window"]["since"] is None and doc["window"]["until_rule"] == "now"
    assert doc["facts"]["nodes_at"] == "2026-03-01T12:00:00Z"
    assert doc["rows"][0]["workload_pods"] == 3
    assert doc["rows"][0]["frag_milli"] == pytest.approx(1000.0)
    early = as_json("--db", str(live_db), "--until", "2026-03-01T11:30:00Z")
    assert early["facts"]["nodes_at"] == "2026-03-01T11:00:00Z"
    assert early["rows"][0]["workload_pods"] == 1 and early["rows"][0]["placed_pods"] == 0
    assert early["rows"][0]["frag_milli"] == pytest.approx(0.0)
    assert early["rows"][0]["idle_milli"] == 2000


def test_a_window_before_the_inventory_has_no_data(live_db: Path) -> None:
    code, _, stderr = invoke("--db", str(live_db), "--until", "2026-03-01T10:00:00Z")
    assert code == 2 and "no nodes rows in the window" in " ".join(stderr.split())
    code, _, stderr = invoke("--db", str(live_db), "--since", "1h")  # back from now: empty
    assert code == 2 and "try --until newest" in " ".join(stderr.split())


@pytest.mark.parametrize("width", [80, 160])
def test_golden_tables(trace: tuple[Path, Path], placements: Path, width: int) -> None:
    nodes, pods = trace
    query = FragmentationQuery(nodes=nodes, workload=pods, placements=placements)
    with Store.open(":memory:") as store:
        report = run_report(SPEC, store, WindowRequest(), query, now=AT)
    assert_golden(f"fragmentation_{width}", table_text(report, width))


@pytest.mark.shared_data
def test_alibaba_default_workload_end_to_end(shared_data: Path) -> None:
    base = shared_data / "traces" / "alibaba-gpu-v2023"
    doc = as_json(
        "--nodes", str(base / "openb_node_list_gpu_node.csv"),
        "--workload", str(base / "openb_pod_list_default.csv"),
    )  # fmt: skip
    (cluster,) = doc["rows"]
    assert round(cluster["frag_amount_ratio"], 3) == 0.139
    assert cluster["node_count"] == 1213 and len(rows(doc, "nodes")) == 20
    assert len(rows(doc, "typical_pods")) == 35
