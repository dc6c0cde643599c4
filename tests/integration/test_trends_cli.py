"""``sits-observe smf`` and ``sits-observe trends`` on DuckDB files in tmp_path, and on the demo:
the report documents, CSV, errors and golden tables."""

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
from sits_observe.lab.demo.demo import Demo, DemoSettings
from sits_observe.reports import smf, trends
from sits_observe.reports.spec import run_report
from sits_observe.reports.window import WindowRequest, parse_duration_s
from sits_observe.store import Store
from sits_observe.surfaces.cli.main import app
from sits_observe.surfaces.cli.reports.output import table_text
from tests.golden_support import assert_golden

T0 = datetime(2026, 3, 1, 12, 0, 0)
GIB = 1024**3
CID = "ab" * 32
H100 = "NVIDIA H100 80GB HBM3"


def invoke(*args: str) -> tuple[int, str, str]:
    outcome = CliRunner().invoke(app, list(args))
    return outcome.exit_code, outcome.stdout, outcome.stderr


def as_json(*args: str) -> dict[str, Any]:
    code, stdout, stderr = invoke(*args, "-o", "json")
    assert code == 0, stderr
    doc: dict[str, Any] = json.loads(stdout)
    return doc


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
        base = {
            "ts": at(10 * i),
            "node": "n1",
            "fb_total_bytes": 80 * GIB,
            "source": "dcgm",
            "model_name": H100,
        }
        gpus.append(
            base | names | {"gpu_uuid": "GPU-a", "gpu_index": 0, "fb_free_bytes": (40 + i) * GIB}
        )
        gpus.append(base | {"gpu_uuid": "GPU-b", "gpu_index": 1, "fb_free_bytes": 79 * GIB})
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


def write_fleet(db: Path, *, outlier: bool = False) -> Path:
    """16 GPUs on 4 nodes, 3 h of one sample a minute: the even GPUs steady at 50-55 %, the
    odd ones leaking 5 pp an hour from 10-15 %; with ``outlier`` a 17th GPU (n4/0) that fills
    to 90 % and is emptied every 20 minutes (saw-tooth)."""
    rng = np.random.default_rng(3)
    minutes = np.arange(180)
    rows: list[dict[str, Any]] = []
    gpus = []
    for g in range(16):
        leaking = g % 2 == 1
        level = rng.uniform(0.1, 0.15) if leaking else rng.uniform(0.5, 0.55)
        slope = 0.05 / 60 if leaking else 0.0  # 5 pp per hour
        used = level + slope * minutes + rng.normal(0, 0.002, minutes.size)
        gpus.append((g, f"n{g % 4}", g // 4, used))
    if outlier:
        gpus.append((16, "n4", 0, 0.1 + 0.8 * (minutes % 20) / 19))
    for g, node, index, used in gpus:
        for m, u in zip(minutes, used, strict=True):
            rows.append(
                {
                    "ts": at(60 * int(m)),
                    "node": node,
                    "gpu_uuid": f"GPU-{g:02d}",
                    "gpu_index": index,
                    "model_name": H100,
                    "fb_used_bytes": int(u * 80 * GIB),
                    "fb_free_bytes": int((1 - u) * 80 * GIB),
                    "fb_total_bytes": 80 * GIB,
                }
            )
    with Store.open(db) as store:
        store.append("gpu_samples", conform("gpu_samples", pa.Table.from_pylist(rows)))
    return db


@pytest.fixture
def fleet_db(tmp_path: Path) -> Path:
    """The fleet of :func:`write_fleet`, no outlier."""
    return write_fleet(tmp_path / "fleet.duckdb")


# -- smf --------------------------------------------------------------------------------------


def test_smf_json_summary(smf_db: Path) -> None:
    doc = as_json("smf", "--db", str(smf_db))
    assert doc["report"] == "smf" and doc["facts"]["by"] == "container"
    (row,) = doc["rows"]
    assert row["container_ids"] == [CID] and CID.startswith(row["container_id"])
    assert row["gpu_uuids"] == ["GPU-a"] and row["gpus"] == 1
    assert (row["samples"], row["unmatched_samples"]) == (6, 1)
    expected = [(40 + i - 8) / 80 for i in range(6)]
    assert row["latest_smf"] == expected[-1]
    assert row["max_smf"] == max(expected)
    assert row["mean_smf"] == pytest.approx(sum(expected) / 6, rel=1e-14)
    assert doc["facts"]["unmatched_samples"] == 1 and doc["facts"]["max_skew_s"] == 2.0
    assert any("no GPU sample within 2 s before them" in n for n in doc["notes"])
    (idle,) = doc["tables"]["unlinked_gpus"]["rows"]
    assert idle["gpu_uuid"] == "GPU-b" and "no pod labels" in idle["reason"]


def test_smf_by_gpu_names_the_gpu(smf_db: Path) -> None:
    (row,) = as_json("smf", "--db", str(smf_db), "--by", "gpu")["rows"]
    assert row["gpu"] == "n1/0 (H100 80GB)" and row["gpu_uuid"] == "GPU-a"
    assert row["containers"] == 1 and row["container_ids"] == [CID]


def test_smf_wider_skew_and_window(smf_db: Path) -> None:
    code, stdout, stderr = invoke(
        "smf", "--db", str(smf_db), "-o", "json", "--max-skew-s", "6", "--since", "25s",
        "--until", "newest",
    )  # fmt: skip
    assert code == 0, stderr
    doc = json.loads(stdout)
    (row,) = doc["rows"]
    # Newest sample read: the cgroup read at 65 s, so the window starts just after 40 s;
    # cgroup reads at 40.5, 50.5 and 65 s, each with a GPU sample at most 6 s before it.
    assert doc["window"]["since"] == "2026-03-01T12:00:40Z"
    assert (row["samples"], row["unmatched_samples"]) == (3, 0)
    assert "window:" in stderr


def test_smf_raw_csv_and_by_gpu_table(smf_db: Path) -> None:
    code, stdout, stderr = invoke("smf", "--db", str(smf_db), "--raw", "-o", "csv")
    assert code == 0, stderr
    rows = list(csv.DictReader(io.StringIO(stdout)))
    assert len(rows) == 6
    assert {"ts", "node", "pod", "gpu_uuid", "smf", "skew_s"} <= set(rows[0])
    assert float(rows[0]["smf"]) == (40 - 8) / 80
    assert "1 GPU(s) have no cgroup match" in stderr

    code, stdout, stderr = invoke("smf", "--db", str(smf_db), "--by", "gpu")
    assert code == 0, stderr
    assert "SMF fragmentation rate" in stdout
    assert "GPU-b" in stdout and "no cgroup match" in stderr
    assert "unmatched" in stderr


def test_smf_and_trends_on_an_empty_store(tmp_path: Path) -> None:
    db = tmp_path / "empty.duckdb"
    Store.open(db).close()
    code, _, stderr = invoke("smf", "--db", str(db))
    assert code == 2 and "table container_samples is empty" in stderr
    code, _, stderr = invoke("trends", "--db", str(db), "--since", "1h")
    assert code == 2 and "table gpu_samples is empty" in stderr
    code, _, stderr = invoke("trends", "--db", str(db), "--until", "newest")
    assert code == 2 and "holds no rows" in stderr


def test_bad_input_gives_a_message_not_a_traceback(tmp_path: Path, smf_db: Path) -> None:
    code, _, stderr = invoke("smf", "--db", str(tmp_path / "absent.duckdb"))
    assert code == 2 and "does not exist" in stderr
    code, _, stderr = invoke("smf", "--db", str(smf_db), "--since", "yesterday")
    assert code == 2 and "not a positive duration" in stderr
    code, _, stderr = invoke("smf", "--db", str(smf_db), "--max-skew-s", "0")
    assert code == 2 and "--max-skew-s" in stderr
    code, _, stderr = invoke("trends", "--db", str(smf_db), "--eps", "-1")
    assert code == 2 and "invalid trends settings: --eps" in stderr
    code, _, stderr = invoke("trends", "--db", str(smf_db), "--bucket-s", "0")
    assert code == 2 and "--bucket-s" in stderr
    code, _, stderr = invoke("trends", "--db", str(smf_db), "--since", "1h")
    assert code == 2 and "try --until newest" in " ".join(stderr.split())


def test_parse_duration() -> None:
    assert [parse_duration_s(s) for s in ("90", "30s", "15m", "2h", "7d", "1w", "1h30m")] == [
        90, 30, 900, 7200, 604800, 604800, 5400,
    ]  # fmt: skip
    for bad in ("", "0", "-5m", "5x", "h"):
        with pytest.raises(Exception, match="not a positive duration"):
            parse_duration_s(bad)


# -- trends -----------------------------------------------------------------------------------


def test_trends_groups_steady_and_leaking_gpus(fleet_db: Path) -> None:
    doc = as_json("trends", "--db", str(fleet_db))
    assert doc["report"] == "trends"
    assert doc["facts"]["bucket_s"] == 30 and doc["facts"]["n_series"] == 16
    assert doc["facts"]["noise"] == 0 and doc["tables"]["noise"]["rows"] == []
    groups = {
        tuple(c["words"]): sorted(int(key[4:]) % 2 for key in c["member_keys"]) for c in doc["rows"]
    }
    assert groups == {("flat",): [0] * 8, ("leaking",): [1] * 8}
    # Members are named as people know GPUs; the UUIDs are the keys.
    steady = next(c for c in doc["rows"] if c["words"] == ["flat"])
    assert "n0/0 (H100 80GB)" in steady["members"]
    assert steady["member_keys"][steady["members"].index("n0/0 (H100 80GB)")] == "GPU-00"
    assert {f["key"] for f in steady["member_features"]} == set(steady["member_keys"])
    leaking = next(c for c in doc["rows"] if c["words"] == ["leaking"])
    assert leaking["slope_per_h"] == pytest.approx(0.05, rel=0.05)

    code, stdout, stderr = invoke("trends", "--db", str(fleet_db), "--level", "node")
    assert code == 0, stderr
    assert "4 node series" in stderr and "Fragmentation trends by node" in stdout


def test_trends_window_and_csv(fleet_db: Path) -> None:
    """The last hour (until the newest sample): 60 one-minute points per GPU over 59 min, so
    10 s buckets (about 240 points: 3540 s / 240 = 14.75, rounded down to 10)."""
    doc = as_json("trends", "--db", str(fleet_db), "--since", "1h", "--until", "newest")
    assert doc["window"]["until"] == "2026-03-01T14:59:00Z"
    assert doc["facts"]["bucket_s"] == 10 and doc["facts"]["n_series"] == 16
    code, stdout, stderr = invoke("trends", "--db", str(fleet_db), "-o", "csv")
    assert code == 0, stderr
    rows = list(csv.DictReader(io.StringIO(stdout)))
    assert sorted(int(r["size"]) for r in rows) == [8, 8]
    assert {"cluster", "pattern", "level", "slope_per_h", "members"} <= set(rows[0])


# -- golden tables ----------------------------------------------------------------------------


@pytest.mark.parametrize("width", [80, 160])
def test_golden_smf(smf_db: Path, width: int) -> None:
    with Store.open(smf_db, read_only=True) as store:
        report = run_report(smf.SPEC, store, WindowRequest(), smf.SmfQuery(), now=T0 + timedelta(1))
    assert_golden(f"smf_{width}", table_text(report, width))


@pytest.mark.parametrize("width", [80, 160])
def test_golden_trends(tmp_path: Path, width: int) -> None:
    db = write_fleet(tmp_path / "outlier.duckdb", outlier=True)
    with Store.open(db, read_only=True) as store:
        report = run_report(
            trends.SPEC, store, WindowRequest(), trends.TrendsQuery(), now=T0 + timedelta(1)
        )
    assert_golden(f"trends_{width}", table_text(report, width))


# -- the demo ---------------------------------------------------------------------------------


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

    doc = as_json("smf", "--db", db)
    vllm = [r for r in doc["rows"] if r["pod"] and r["pod"].startswith("vllm-")]
    # One vLLM replica per node (a Deployment per GPU product, pinned by node affinity).
    assert len({r["pod"] for r in vllm}) == 2, vllm
    # Each vLLM pod holds two GPUs (tensor parallel 2 on 4-GPU nodes), labelled by DCGM.
    assert all(len(r["gpu_uuids"]) == 2 and r["samples"] > 0 for r in vllm)
    with Store.open(db, read_only=True) as store:
        labelled = store.query(
            "SELECT DISTINCT gpu_uuid FROM gpu_samples WHERE pod LIKE 'vllm-%'"
        ).column("gpu_uuid")
    assert {g for r in vllm for g in r["gpu_uuids"]} == set(labelled.to_pylist())
    assert all(0.0 <= r["max_smf"] <= 1.0 for r in doc["rows"] if r["max_smf"] is not None)

    for args in (("--by", "gpu"), ("--raw", "-o", "csv"), ("--since", "5s", "--until", "newest")):
        code, _, stderr = invoke("smf", "--db", db, *args)
        assert code == 0, stderr

    found = as_json("trends", "--db", db)
    assert found["facts"]["n_series"] == 8
    members = [key for c in found["rows"] for key in c["member_keys"]]
    members += [n["key"] for n in found["tables"]["noise"]["rows"]]
    assert len(members) == 8
    code, _, stderr = invoke("trends", "--db", db, "--level", "node")
    assert code == 0, stderr
