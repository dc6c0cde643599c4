"""``sits-observe latency`` and ``sits-observe heatmap`` on real DuckDB files.

Output keys and formats, the PNG file, every error path (exit code 2, one line, no
traceback), and both commands on a database filled by the running demo cluster.
"""

from __future__ import annotations

import csv
import io
import json
import struct
import time
import zlib
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from typer.testing import CliRunner

from sits_observe.store import Store
from sits_observe.surfaces.cli.main import app

T0 = datetime(2026, 5, 4, 10, 0, 0)


def invoke(*args: str) -> tuple[int, str, str]:
    """Exit code, stdout and stderr (Rich's line wrapping undone) of one command."""
    outcome = CliRunner().invoke(app, list(args))
    assert outcome.exception is None or isinstance(outcome.exception, SystemExit), outcome.exception
    return outcome.exit_code, outcome.stdout, " ".join(outcome.stderr.split())


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """Two models: ``chat`` on a load ramp (1 s windows of 10, 15 ... 95 requests) and a
    small ``embed``; one failed chat request; ``rerank`` has only histogram estimates."""
    rng = np.random.default_rng(5)
    ts, lat, model, pod = [], [], [], []
    for k in range(18):
        n = 10 + 5 * k
        for j in range(n):
            ts.append(T0 + timedelta(seconds=k + j / n))
            lat.append(0.1 + 0.004 * n + 0.01 * float(rng.random()))
            model.append("chat")
            pod.append(f"chat-{j % 2}")
    for j in range(5):
        ts.append(T0 + timedelta(seconds=j))
        lat.append(0.05 * (j + 1))
        model.append("embed")
        pod.append("embed-0")
    ok = [True] * len(ts)
    ts.append(T0)
    lat.append(60.0)
    model.append("chat")
    pod.append("chat-0")
    ok.append(False)
    path = tmp_path / "obs.duckdb"
    with Store.open(path) as store:
        store.append(
            "requests",
            pa.table(
                {
                    "ts": pa.array(ts, pa.timestamp("us")),
                    "model": model,
                    "pod": pod,
                    "latency_s": lat,
                    "ok": ok,
                }
            ),
        )
        store.append(
            "server_windows",
            pa.Table.from_pylist(
                [
                    {
                        "ts": T0,
                        "window_s": 15.0,
                        "model": "rerank",
                        "pod": "rerank-0",
                        "completed": 12.0,
                        "latency_p50_s": 0.2,
                        "latency_p95_s": 0.45,
                        "latency_p99_s": 0.49,
                        "latency_error_bound_s": 0.25,
                        "estimate": True,
                    },
                    {  # a P99 in the +Inf bucket: no upper bound on the error
                        "ts": T0 + timedelta(seconds=15),
                        "window_s": 15.0,
                        "model": "rerank",
                        "pod": "rerank-0",
                        "completed": 3.0,
                        "latency_p50_s": 0.2,
                        "latency_p95_s": 60.0,
                        "latency_p99_s": 60.0,
                        "latency_error_bound_s": float("inf"),
                        "estimate": True,
                    },
                ]
            ),
        )
    return path


# -- latency ----------------------------------------------------------------------------


def test_latency_json_has_exactly_the_keys_and_numpy_values(db: Path) -> None:
    code, stdout, stderr = invoke("latency", "--db", str(db), "--format", "json")
    assert code == 0, stderr
    rows = json.loads(stdout)
    assert [list(r) for r in rows] == [["model", "count", "p50_s", "p95_s", "p99_s"]] * 2
    with Store.open(db, read_only=True) as store:
        chat = store.query("SELECT latency_s FROM requests WHERE model = 'chat' AND ok")
    values = chat.column("latency_s").to_numpy()
    assert rows[0]["model"] == "chat" and rows[0]["count"] == len(values)
    for q in (50, 95, 99):
        assert rows[0][f"p{q}_s"] == pytest.approx(np.percentile(values, q), rel=1e-14)
    assert "no exact latencies for model rerank" in stderr
    assert "--source estimate" in stderr


def test_latency_csv_by_pod_and_failed(db: Path) -> None:
    code, stdout, stderr = invoke(
        "latency", "--db", str(db), "--by", "pod", "--model", "chat", "--format", "csv",
        "--include-failed",
    )  # fmt: skip
    assert code == 0, stderr
    rows = list(csv.DictReader(io.StringIO(stdout)))
    assert list(rows[0]) == ["pod", "count", "p50_s", "p95_s", "p99_s"]
    assert [r["pod"] for r in rows] == ["chat-0", "chat-1"]
    _, without, _ = invoke(
        "latency", "--db", str(db), "--by", "pod", "--model", "chat", "--format", "csv"
    )
    ok_only = list(csv.DictReader(io.StringIO(without)))
    assert int(rows[0]["count"]) == int(ok_only[0]["count"]) + 1  # the failed request


def test_latency_estimates_are_labelled(db: Path) -> None:
    code, stdout, stderr = invoke(
        "latency", "--db", str(db), "--source", "estimate", "--format", "json"
    )
    assert code == 0, stderr
    first, unbounded = json.loads(stdout)
    assert first["estimate"] is True and first["error_bound_s"] == 0.25
    assert first["window_end"] == "2026-05-04T10:00:00Z"
    assert unbounded["error_bound_s"] is None  # JSON has no infinity
    code, stdout, _ = invoke("latency", "--db", str(db), "--source", "estimate")
    assert "ESTIMATES" in stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--model", "nope"), "models with requests: chat, embed"),
        (("--model", "rerank"), "--source estimate"),
        (("--since", "5 parsecs"), "--since"),
        (("--since", "1h"), "no request completed since"),
        (("--by", "gpu_uuid", "--source", "estimate"), "do not know the GPU"),
    ],
)
def test_latency_errors_are_one_line(db: Path, args: tuple[str, ...], message: str) -> None:
    code, stdout, stderr = invoke("latency", "--db", str(db), *args)
    assert code == 2
    assert message in stderr
    assert "Traceback" not in stderr + stdout


def test_missing_database(tmp_path: Path) -> None:
    code, _, stderr = invoke("latency", "--db", str(tmp_path / "none.duckdb"))
    assert code == 2 and "does not exist" in stderr
    code, _, stderr = invoke("heatmap", "--db", str(tmp_path / "none.duckdb"))
    assert code == 2 and "does not exist" in stderr


def test_empty_database(tmp_path: Path) -> None:
    path = tmp_path / "empty.duckdb"
    Store.open(path).close()
    for command in ("latency", "heatmap"):
        code, _, stderr = invoke(command, "--db", str(path))
        assert code == 2 and "has no requests" in stderr


# -- heatmap ----------------------------------------------------------------------------

HEATMAP_KEYS = {
    "by",
    "group",
    "window_s",
    "latency_bin_ms",
    "throughput_bin_rps",
    "slo_ms",
    "min_bin_requests",
    "requests",
    "cells",
    "windows",
    "throughput_bins",
    "knee",
    "safe_max",
    "notes",
}


def test_heatmap_json(db: Path) -> None:
    code, stdout, stderr = invoke(
        "heatmap", "--db", str(db), "--model", "chat", "--throughput-bin-rps", "20",
        "--latency-bin-ms", "25", "--slo-ms", "400", "--format", "json",
    )  # fmt: skip
    assert code == 0, stderr
    data = json.loads(stdout)
    assert set(data) == HEATMAP_KEYS
    assert data["latency_bin_ms"] == 25 and data["throughput_bin_rps"] == 20
    assert all(set(c) == {"latency_lo_ms", "throughput_lo_rps", "count"} for c in data["cells"])
    assert all(
        set(w) == {"start", "throughput_rps", "count", "p50_s", "p95_s", "p99_s"}
        for w in data["windows"]
    )
    total = sum(10 + 5 * k for k in range(18))
    assert sum(c["count"] for c in data["cells"]) == data["requests"] == total
    assert [w["count"] for w in data["windows"]] == [10 + 5 * k for k in range(18)]
    assert data["safe_max"] is not None and data["safe_max"]["slo_ms"] == 400
    assert data["knee"] is None or data["knee"]["throughput_lo_rps"] >= 0


def test_heatmap_grouped_json_is_a_list_and_pooling_is_noted(db: Path) -> None:
    code, stdout, stderr = invoke("heatmap", "--db", str(db), "--by", "model", "--format", "json")
    assert code == 0, stderr
    maps = json.loads(stdout)
    assert [(m["by"], m["group"]) for m in maps] == [("model", "chat"), ("model", "embed")]
    code, stdout, stderr = invoke("heatmap", "--db", str(db), "--format", "json")
    assert code == 0
    assert json.loads(stdout)["group"] is None
    assert "one heatmap over 2 models" in stderr


@pytest.mark.parametrize(
    ("part", "header"),
    [
        ("cells", "latency_lo_ms,throughput_lo_rps,count"),
        ("windows", "start,throughput_rps,count,p50_s,p95_s,p99_s"),
        ("bins", "throughput_lo_rps,throughput_hi_rps,windows,requests,p50_s,p95_s,p99_s"),
    ],
)
def test_heatmap_csv(db: Path, part: str, header: str) -> None:
    code, stdout, stderr = invoke(
        "heatmap", "--db", str(db), "--model", "chat", "--format", "csv", "--csv-of", part
    )
    assert code == 0, stderr
    assert stdout.splitlines()[0].startswith(header)
    code, stdout, _ = invoke("heatmap", "--db", str(db), "--by", "pod", "--format", "csv")
    assert stdout.splitlines()[0] == "pod,latency_lo_ms,throughput_lo_rps,count"


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    length, kind = struct.unpack(">I4s", data[8:16])
    assert kind == b"IHDR" and length == 13
    width, height = struct.unpack(">II", data[16:24])
    (crc,) = struct.unpack(">I", data[29:33])
    assert crc == zlib.crc32(data[12:29]) & 0xFFFFFFFF
    return width, height


def test_heatmap_png_files(db: Path, tmp_path: Path) -> None:
    out = tmp_path / "chat.png"
    code, _, stderr = invoke(
        "heatmap", "--db", str(db), "--model", "chat", "--slo-ms", "400", "--format", "png",
        "--out", str(out),
    )  # fmt: skip
    assert code == 0, stderr
    width, height = _png_size(out)
    assert width > 50 and height > 50
    code, _, stderr = invoke(
        "heatmap", "--db", str(db), "--by", "model", "--format", "png", "--out", str(out)
    )
    assert code == 0, stderr
    for name in ("chat-chat.png", "chat-embed.png"):
        _png_size(tmp_path / name)


def test_heatmap_table(db: Path) -> None:
    code, stdout, stderr = invoke(
        "heatmap", "--db", str(db), "--model", "chat", "--throughput-bin-rps", "20",
        "--slo-ms", "400",
    )  # fmt: skip
    assert code == 0, stderr
    assert "P95 per throughput bin" in stdout
    assert "safe maximum" in stdout and "knee" in stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--format", "png"), "needs --out"),
        (("--window-s", "0"), "--window-s"),
        (("--throughput-bin-rps", "-1"), "--throughput-bin-rps"),
        (("--latency-bin-ms", "0.0000001"), "whole number of microseconds"),
        (("--model", "rerank"), "--source estimate"),
        (("--out", "x.txt"), "--out works with"),
    ],
)
def test_heatmap_errors_are_one_line(db: Path, args: tuple[str, ...], message: str) -> None:
    code, stdout, stderr = invoke("heatmap", "--db", str(db), *args)
    assert code == 2
    assert message in stderr
    assert "Traceback" not in stderr + stdout


# -- on the demo cluster ------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.k8s
def test_both_commands_on_a_demo_database(tmp_path: Path) -> None:
    from sits_observe.surfaces.demo import Demo, DemoSettings

    settings = DemoSettings(
        nodes=2, gpus_per_node=4, db_path=tmp_path / "demo.duckdb", workdir=tmp_path, seed=3
    )
    with Demo(settings) as demo:
        deadline = time.monotonic() + 60
        time.sleep(15)
        while demo.counts()["requests"] < 5 and time.monotonic() < deadline:
            time.sleep(1)
    db = str(settings.db_path)

    code, stdout, stderr = invoke("latency", "--db", db, "--format", "json")
    assert code == 0, stderr
    rows = json.loads(stdout)
    assert rows and all(set(r) == {"model", "count", "p50_s", "p95_s", "p99_s"} for r in rows)
    assert all(0 < r["p50_s"] <= r["p95_s"] <= r["p99_s"] for r in rows)

    code, stdout, stderr = invoke("latency", "--db", db, "--by", "pod", "--format", "json")
    assert code == 0, stderr
    # The demo's inference pods come from its vLLM Deployments (one per GPU product).
    pods = {r["pod"] for r in json.loads(stdout)}
    assert pods and all(p.startswith("vllm-llama2-70b-") for p in pods), pods

    code, stdout, stderr = invoke("latency", "--db", db, "--source", "estimate", "--format", "json")
    assert code == 0, stderr
    assert all(r["estimate"] is True for r in json.loads(stdout))

    code, stdout, stderr = invoke(
        "heatmap", "--db", db, "--throughput-bin-rps", "1", "--format", "json", "--slo-ms", "5000"
    )
    assert code == 0, stderr
    data = json.loads(stdout)
    with Store.open(settings.db_path, read_only=True) as store:
        stored = store.scalar("SELECT count(*) FROM requests WHERE ok IS DISTINCT FROM false")
    assert sum(c["count"] for c in data["cells"]) == data["requests"] == stored
    assert sum(w["count"] for w in data["windows"]) == stored

    png = tmp_path / "demo.png"
    code, _, stderr = invoke("heatmap", "--db", db, "--format", "png", "--out", str(png))
    assert code == 0, stderr
    _png_size(png)
