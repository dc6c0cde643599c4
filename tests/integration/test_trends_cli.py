"""``sits-observe smf`` and ``sits-observe trends`` on DuckDB files in tmp_path, and on the demo."""

from __future__ import annotations

import csv
import io
import json
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from typer.testing import CliRunner

from sits_observe.domain.tables import conform
from sits_observe.store import Store
from sits_observe.surfaces.cli.analyze_trends import parse_duration_s
from sits_observe.surfaces.cli.main import app
from sits_observe.surfaces.demo import Demo, DemoSettings

T0 = datetime(2026, 3, 1, 12, 0, 0)
GIB = 1024**3
CID = "ab" * 32


def invoke(*args: str) -> tuple[int, str, str]:
    outcome = CliRunner().invoke(app, list(args))
    return outcome.exit_code, outcome.stdout, outcome.stderr


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


@pytest.fixture
def smf_db(tmp_path: Path) -> Path:
    """One vLLM container on GPU-a (labelled), GPU-b idle; samples every 10 s for 60 s."""
    db = tmp_path / "smf.duckdb"
    names = {"namespace": "inference", "pod": "vllm-0", "container": "vllm"}
    gpus: list[dict[str, Any]] = []
    cgroups: list[dict[str, Any]] = []
    for i in range(7):
        base = {"ts": at(10 * i), "node": "n1", "fb_total_bytes": 80 * GIB, "source": "dcgm"}
        gpus.append(base | names | {"gpu_uuid": "GPU-a", "fb_free_bytes": (40 + i) * GIB})
        gpus.append(base | {"gpu_uuid": "GPU-b", "fb_free_bytes": 79 * GIB})
        skew = 5.0 if i == 6 else 0.5  # the last cgroup read is 5 s late
        cgroups.append(
            {"ts": at(10 * i + skew), "node": "n1", "container_id": CID}
            | names
            | {"memory_current_bytes": 8 * GIB}
        )
    with Store.open(db) as store:
        store.append("gpu_samples", conform("gpu_samples", pa.Table.from_pylist(gpus)))
        store.append(
            "container_samples", conform("container_samples", pa.Table.from_pylist(cgroups))
        )
    return db


def test_smf_json_summary(smf_db: Path) -> None:
    code, stdout, stderr = invoke("smf", "--db", str(smf_db), "--format", "json")
    assert code == 0, stderr
    doc = json.loads(stdout)
    assert doc["metric"] == "SMF fragmentation rate"
    (row,) = doc["rows"]
    assert row["container_id"] == CID and row["gpus"] == ["GPU-a"]
    assert (row["samples"], row["unmatched_samples"]) == (6, 1)
    expected = [(40 + i - 8) / 80 for i in range(6)]
    assert row["latest_smf"] == expected[-1]
    assert row["max_smf"] == max(expected)
    assert row["mean_smf"] == pytest.approx(sum(expected) / 6, rel=1e-14)
    assert doc["unmatched_samples"] == 1
    assert doc["unmatched"][0]["closest_skew_s"] == 5.0
    (idle,) = doc["unlinked_gpus"]
    assert idle["gpu_uuid"] == "GPU-b" and "no pod labels" in idle["reason"]


def test_smf_wider_skew_and_window(smf_db: Path) -> None:
    code, stdout, stderr = invoke(
        "smf", "--db", str(smf_db), "--format", "json", "--max-skew-s", "6", "--since", "25s"
    )
    assert code == 0, stderr
    (row,) = json.loads(stdout)["rows"]
    # newest GPU sample at 60 s: the window starts at 35 s; cgroup reads at 40.5, 50.5, 65 s.
    assert (row["samples"], row["unmatched_samples"]) == (3, 0)
    assert "window:" in stderr


def test_smf_raw_csv_and_by_gpu_table(smf_db: Path) -> None:
    code, stdout, stderr = invoke("smf", "--db", str(smf_db), "--raw", "--format", "csv")
    assert code == 0, stderr
    rows = list(csv.DictReader(io.StringIO(stdout)))
    assert len(rows) == 6
    assert {"ts", "node", "container_id", "gpu_uuid", "smf", "skew_s"} <= set(rows[0])
    assert float(rows[0]["smf"]) == (40 - 8) / 80
    assert "1 GPU(s) have no cgroup match" in stderr

    code, stdout, stderr = invoke("smf", "--db", str(smf_db), "--by", "gpu")
    assert code == 0, stderr
    assert "SMF fragmentation rate" in stdout
    assert "GPU-b" in stderr and "no cgroup match" in stderr
    assert "unmatched" in stderr


def test_smf_and_trends_on_an_empty_store(tmp_path: Path) -> None:
    db = tmp_path / "empty.duckdb"
    Store.open(db).close()
    code, stdout, stderr = invoke("smf", "--db", str(db))
    assert code == 0 and "no SMF samples" in stderr
    code, stdout, stderr = invoke("trends", "--db", str(db), "--since", "1h")
    assert code == 0 and "no series" in stderr
    code, stdout, _ = invoke("trends", "--db", str(db), "--format", "json")
    assert code == 0 and json.loads(stdout)["clusters"] == []


def test_bad_input_gives_a_message_not_a_traceback(tmp_path: Path, smf_db: Path) -> None:
    code, _, stderr = invoke("smf", "--db", str(tmp_path / "absent.duckdb"))
    assert code == 2 and "does not exist" in stderr
    code, _, stderr = invoke("smf", "--db", str(smf_db), "--since", "yesterday")
    assert code == 2 and "not a positive duration" in stderr
    code, _, stderr = invoke("smf", "--db", str(smf_db), "--max-skew-s", "0")
    assert code == 2 and "--max-skew-s" in stderr
    code, _, stderr = invoke("trends", "--db", str(smf_db), "--eps", "-1")
    assert code == 2 and "invalid clustering option" in stderr
    code, _, stderr = invoke("trends", "--db", str(smf_db), "--format", "csv")
    assert code == 2 and "table or json" in stderr


def test_parse_duration() -> None:
    assert [parse_duration_s(s) for s in ("90", "30s", "15m", "2h", "7d", "1w", "1h30m")] == [
        90, 30, 900, 7200, 604800, 604800, 5400,
    ]  # fmt: skip
    for bad in ("", "0", "-5m", "5x", "h"):
        with pytest.raises(Exception, match="not a positive duration"):
            parse_duration_s(bad)


def test_trends_groups_steady_and_leaking_gpus(tmp_path: Path) -> None:
    db = tmp_path / "fleet.duckdb"
    rng = np.random.default_rng(3)
    minutes = np.arange(180)
    rows: list[dict[str, Any]] = []
    for g in range(16):
        leaking = g % 2 == 1
        level = rng.uniform(0.1, 0.15) if leaking else rng.uniform(0.5, 0.55)
        slope = 0.05 / 60 if leaking else 0.0  # 5 pp per hour
        used = level + slope * minutes + rng.normal(0, 0.002, minutes.size)
        for m, u in zip(minutes, used, strict=True):
            rows.append(
                {
                    "ts": at(60 * int(m)),
                    "node": f"n{g % 4}",
                    "gpu_uuid": f"GPU-{g:02d}",
                    "fb_used_bytes": int(u * 80 * GIB),
                    "fb_free_bytes": int((1 - u) * 80 * GIB),
                    "fb_total_bytes": 80 * GIB,
                }
            )
    with Store.open(db) as store:
        store.append("gpu_samples", conform("gpu_samples", pa.Table.from_pylist(rows)))
    code, stdout, stderr = invoke("trends", "--db", str(db), "--format", "json")
    assert code == 0, stderr
    doc = json.loads(stdout)
    assert doc["bucket_s"] == 30 and doc["n_series"] == 16
    groups = {
        tuple(c["words"]): sorted(int(m["key"][4:]) % 2 for m in c["members"])
        for c in doc["clusters"]
    }
    assert groups == {("steady",): [0] * 8, ("leaking",): [1] * 8}
    code, stdout, stderr = invoke("trends", "--db", str(db), "--level", "node")
    assert code == 0, stderr
    assert "4 node series" in stderr and "fragmentation trends by node" in stdout


@pytest.mark.slow
@pytest.mark.k8s
def test_smf_and_trends_on_the_demo(tmp_path: Path) -> None:
    settings = DemoSettings(
        nodes=2, gpus_per_node=4, db_path=tmp_path / "demo.duckdb", workdir=tmp_path, seed=3
    )
    with Demo(settings) as demo:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            counts = demo.counts()
            if counts["pods"] > 0 and counts["container_samples"] > 0:
                break
            time.sleep(0.5)
        time.sleep(15)  # ~15 s of samples, several inventory rounds (attribution)
    db = str(settings.db_path)

    code, stdout, stderr = invoke("smf", "--db", db, "--format", "json")
    assert code == 0, stderr
    doc = json.loads(stdout)
    vllm = [r for r in doc["rows"] if r["pod"] and r["pod"].startswith("vllm-")]
    # One vLLM replica per node (a Deployment per GPU product, pinned by node affinity).
    assert len({r["pod"] for r in vllm}) == 2, vllm
    # Each vLLM pod holds two GPUs (tensor parallel 2 on 4-GPU nodes), labelled by DCGM.
    assert all(len(r["gpus"]) == 2 and r["samples"] > 0 for r in vllm)
    with Store.open(db, read_only=True) as store:
        labelled = store.query(
            "SELECT DISTINCT gpu_uuid FROM gpu_samples WHERE pod LIKE 'vllm-%'"
        ).column("gpu_uuid")
    assert {g for r in vllm for g in r["gpus"]} == set(labelled.to_pylist())
    assert all(0.0 <= r["max_smf"] <= 1.0 for r in doc["rows"] if r["max_smf"] is not None)

    for args in (("--by", "gpu"), ("--raw", "--format", "csv"), ("--since", "5s")):
        code, _, stderr = invoke("smf", "--db", db, *args)
        assert code == 0, stderr

    code, stdout, stderr = invoke("trends", "--db", db, "--format", "json")
    assert code == 0, stderr
    trends = json.loads(stdout)
    assert trends["n_series"] == 8
    members = [m["key"] for c in trends["clusters"] for m in c["members"]]
    members += [n["key"] for n in trends["noise"]]
    assert len(members) == 8
    code, stdout, stderr = invoke("trends", "--db", db, "--level", "node")
    assert code == 0, stderr
