"""``sits-observe fragmentation``: trace files, placements, a DuckDB file, errors, JSON shape."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from sits_observe.store import Store
from sits_observe.surfaces.cli.main import app

CAUSES = {"lack_gpu", "lack_cpu", "lack_both", "cpu_only", "gpu_type"}


def invoke(*args: str) -> tuple[int, str, str]:
    outcome = CliRunner().invoke(app, ["fragmentation", *args])
    return outcome.exit_code, outcome.stdout, outcome.stderr


def as_json(*args: str) -> dict[str, Any]:
    code, stdout, stderr = invoke(*args, "--format", "json")
    assert code == 0, stdout + stderr
    doc: dict[str, Any] = json.loads(stdout)
    return doc


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


def test_empty_cluster_json_shape(trace: tuple[Path, Path]) -> None:
    """Empty: n0 4 GPUs / 16 CPU, n1 2 GPUs / 8 CPU. The 7 pods have 6 shapes, all kept at 95%
    (6.65 pods needed): 4 CPU + 1 x 500 (p 2/7), the others p 1/7. Every GPU shape fits an idle
    node with no GPU below its share, so only the CPU-only shapes (1 CPU, 6 CPU: p 2/7) count:
    F = 2/7 * 6000."""
    nodes, pods = trace
    doc = as_json("--nodes", str(nodes), "--workload", str(pods))
    assert set(doc) >= {
        "frag_ratio", "frag_amount_ratio", "frag_milli", "idle_milli", "total_milli",
        "by_cause", "typical_pods", "nodes", "source", "alloc_ratio", "warnings",
    }  # fmt: skip
    assert doc["total_milli"] == doc["idle_milli"] == 6000
    assert doc["frag_milli"] == pytest.approx(6000 * 2 / 7)
    assert doc["frag_ratio"] == doc["frag_amount_ratio"] == pytest.approx(2 / 7)
    assert set(doc["by_cause"]) == CAUSES
    assert doc["by_cause"]["cpu_only"] == {"milli": pytest.approx(6000 * 2 / 7), "share": 1.0}
    weights = [p["weight"] for p in doc["typical_pods"]]
    assert sum(weights) == pytest.approx(1.0)
    assert doc["typical_pods"][0] == {
        "cpu_milli": 4000, "num_gpu": 1, "gpu_milli": 500, "gpu_types": [], "count": 2,
        "weight": pytest.approx(2 / 7),
    }  # fmt: skip
    assert {n["node"] for n in doc["nodes"]} == {"n0", "n1"}
    assert doc["source"]["placements"] is None


def test_placements_change_the_measure(trace: tuple[Path, Path], tmp_path: Path) -> None:
    """fill-1 (0.8 GPU) on n0 GPU 2, fill-2 (1 GPU, 8 CPU) on n0 GPU 0, fill-3 (6 CPU) on n1:
    n0 free [0, 1000, 200, 1000], CPU 8000, R 2200; n1 free [1000, 1000], CPU 2000, R 2000.
    n0: every GPU shape fits and sees the 200 GPU as too small (lack_gpu): 2/7*200 + 3/7*200;
        the two CPU-only shapes: 2/7*2200. F_n0 = 5400/7.
    n1: 4 CPU x 500 (p 2/7) and 8 CPU x 1000 (p 1/7) lack CPU: 3/7*2000; 2 GPUs and 0.8 GPU
        fit with nothing below their share: 0; CPU-only: 2/7*2000. F_n1 = 10000/7.
    F = 2200 of 4200 idle (ratio 0.5238), amount 2200/6000. lack_gpu 1000/7, lack_cpu 6000/7,
    cpu_only 8400/7."""
    nodes, pods = trace
    placements = tmp_path / "placements.csv"
    placements.write_text("pod,node,gpu_index\nfill-1,n0,2\nfill-2,n0,0\nfill-3,n1,\n")
    doc = as_json("--nodes", str(nodes), "--workload", str(pods), "--placements", str(placements))
    assert doc["source"]["placed_pods"] == 3
    assert doc["idle_milli"] == 4200
    assert doc["alloc_ratio"] == pytest.approx(1800 / 6000)
    assert doc["frag_milli"] == pytest.approx(2200.0)
    assert doc["frag_ratio"] == pytest.approx(2200 / 4200)
    assert doc["frag_amount_ratio"] == pytest.approx(2200 / 6000)
    milli = {cause: value["milli"] for cause, value in doc["by_cause"].items()}
    assert milli == pytest.approx(
        {
            "lack_gpu": 1000 / 7,
            "lack_cpu": 6000 / 7,
            "lack_both": 0.0,
            "cpu_only": 8400 / 7,
            "gpu_type": 0.0,
        }
    )
    assert [n["node"] for n in doc["nodes"]] == ["n1", "n0"]  # most fragmented first
    assert [n["frag_milli"] for n in doc["nodes"]] == pytest.approx([10000 / 7, 5400 / 7])
    assert doc["nodes"][1]["cpu_free_milli"] == 8000


def test_top_and_all(trace: tuple[Path, Path]) -> None:
    nodes, pods = trace
    assert len(as_json("--nodes", str(nodes), "--workload", str(pods), "--top", "1")["nodes"]) == 1
    doc = as_json("--nodes", str(nodes), "--workload", str(pods), "--top", "0", "--all")
    assert len(doc["nodes"]) == 2


def test_table_output(trace: tuple[Path, Path]) -> None:
    nodes, pods = trace
    code, stdout, _ = invoke("--nodes", str(nodes), "--workload", str(pods))
    assert code == 0
    for text in ("fragmentation amount", "28.57%", "cpu_only", "Typical pods", "n0"):
        assert text in stdout


@pytest.mark.parametrize(
    ("with_trace", "extra", "message"),
    [
        (False, [], "give --nodes NODE_CSV and --workload POD_CSV"),
        (True, ["--db", "x.duckdb"], "give either --db or --nodes/--workload"),
        (True, ["--coverage", "1.5"], "--coverage 1.5: must be > 0 and <= 1"),
    ],
)
def test_usage_errors(
    trace: tuple[Path, Path], with_trace: bool, extra: list[str], message: str
) -> None:
    nodes, pods = trace
    files = ["--nodes", str(nodes), "--workload", str(pods)] if with_trace else []
    code, _, stderr = invoke(*files, *extra)
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


def test_live_cluster_from_a_duckdb_file(tmp_path: Path) -> None:
    """Same cluster as test_fgd_live's hand computation: F = 1000 = all idle, amount 0.5."""
    db = tmp_path / "obs.duckdb"
    at = datetime(2026, 3, 1, 12)
    with Store.open(db) as store:
        store.append_batch(
            {
                "nodes": pa.Table.from_pylist(
                    [
                        {
                            "ts": at,
                            "node": "g1",
                            "gpu_allocatable": 2,
                            "gpu_product": "NVIDIA L4",
                            "cpu_allocatable_milli": 8000,
                            "ready": True,
                        }
                    ]
                ),
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
                        for u, n, ph, g, c in [
                            ("a", "g1", "Running", 1, 2000),
                            ("b", None, "Pending", 1, 2000),
                            ("c", "g1", "Running", 0, 5000),
                        ]
                    ]
                ),
            }
        )
    doc = as_json("--db", str(db), "--since", "1h")
    assert doc["frag_milli"] == pytest.approx(1000.0)
    assert doc["frag_ratio"] == pytest.approx(1.0)
    assert doc["frag_amount_ratio"] == pytest.approx(0.5)
    assert doc["by_cause"]["lack_cpu"]["share"] == pytest.approx(2 / 3)
    assert doc["source"]["db"] == str(db) and doc["source"]["since_s"] == 3600.0
    assert doc["nodes"][0]["gpu_model"] == "NVIDIA L4"
    code, _, stderr = invoke("--db", str(db), "--since", "soon")
    assert code == 2 and "--since 'soon'" in stderr


@pytest.mark.shared_data
def test_alibaba_default_workload_end_to_end(shared_data: Path) -> None:
    base = shared_data / "traces" / "alibaba-gpu-v2023"
    doc = as_json(
        "--nodes", str(base / "openb_node_list_gpu_node.csv"),
        "--workload", str(base / "openb_pod_list_default.csv"),
    )  # fmt: skip
    assert round(doc["frag_amount_ratio"], 3) == 0.139
    assert doc["node_count"] == 1213 and len(doc["nodes"]) == 20
    assert len(doc["typical_pods"]) == 35
