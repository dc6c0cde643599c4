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
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from typer.testing import CliRunner

from sits_observe.reports.serving.heatmap_query import last_bin_end
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


def document(*args: str) -> tuple[dict[str, Any], str]:
    """The JSON document of one report command, and its stderr."""
    code, stdout, stderr = invoke(*args, "-o", "json")
    assert code == 0, stderr
    doc = json.loads(stdout)
    assert isinstance(doc, dict)
    return doc, stderr


def test_latency_json_has_exactly_the_keys_and_numpy_values(db: Path) -> None:
    doc, stderr = document("latency", "--db", str(db))
    rows = doc["rows"]
    assert [list(r) for r in rows] == [["model", "count", "p50_s", "p95_s", "p99_s"]] * 2
    with Store.open(db, read_only=True) as store:
        chat = store.query("SELECT latency_s FROM requests WHERE model = 'chat' AND ok")
    values = chat.column("latency_s").to_numpy()
    assert rows[0]["model"] == "chat" and rows[0]["count"] == len(values)
    for q in (50, 95, 99):
        assert rows[0][f"p{q}_s"] == pytest.approx(np.percentile(values, q), rel=1e-14)
    assert "no exact latencies for model rerank" in stderr
    assert "--source estimate" in stderr
    assert doc["facts"]["source"] == "exact" and doc["facts"]["by"] == "model"


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


def test_latency_window_counts_back_from_the_newest_request(db: Path) -> None:
    doc, _ = document("latency", "--db", str(db), "--since", "5s", "--until", "newest")
    (chat,) = doc["rows"]  # embed's requests all completed in the first 5 s
    # the newest request completed at T0 + 17.x s: the window holds the 1 s bins 12..17
    newest = T0 + timedelta(seconds=17 + 94 / 95)
    assert doc["window"]["until_rule"] == "newest"
    with Store.open(db, read_only=True) as store:
        expected = store.scalar(
            "SELECT count(*) FROM requests WHERE model = 'chat' AND ok AND ts >= ?",
            [newest - timedelta(seconds=5)],
        )
    assert chat["count"] == expected > 0


def test_latency_estimates_are_labelled(db: Path) -> None:
    doc, _ = document("latency", "--db", str(db), "--source", "estimate")
    first, unbounded = doc["rows"]
    assert first["estimate"] is True and first["error_bound_s"] == 0.25
    assert first["window_end"] == "2026-05-04T10:00:00Z"
    assert unbounded["error_bound_s"] is None  # JSON has no infinity
    _, stdout, _ = invoke("latency", "--db", str(db), "--source", "estimate")
    assert "ESTIMATES" in stdout and "inf" in stdout


def test_latency_by_gpu_names_the_gpu(db: Path, tmp_path: Path) -> None:
    with Store.open(db) as store:
        store.execute("UPDATE requests SET gpu_uuid = 'GPU-1234' WHERE pod = 'embed-0'")
        store.append(
            "gpu_samples",
            pa.Table.from_pylist(
                [
                    {
                        "ts": T0,
                        "node": "node-a",
                        "gpu_uuid": "GPU-1234",
                        "gpu_index": 3,
                        "model_name": "NVIDIA H100 80GB HBM3",
                    }
                ]
            ),
        )
    doc, _ = document("latency", "--db", str(db), "--by", "gpu")
    gpus = {r["gpu_uuid"]: r for r in doc["rows"]}
    assert gpus["GPU-1234"]["gpu"] == "node-a/3 (H100 80GB)"
    assert gpus["GPU-1234"]["count"] == 5
    assert gpus[None]["count"] == 945  # the chat requests record no GPU


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--model", "nope"), "models with requests: chat, embed"),
        (("--model", "rerank"), "--source estimate"),
        (("--since", "5 parsecs"), "--since"),
        (("--since", "1h"), "try --until newest"),
        (("--by", "gpu", "--source", "estimate"), "do not know the GPU"),
        (("--by", "gpu_uuid"), "--by"),
        (("--metric", "ttft", "--source", "estimate"), "end-to-end latency only"),
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
        assert code == 2 and "table requests is empty" in stderr
        assert "sits-observe ingest requests" in stderr


# -- heatmap ----------------------------------------------------------------------------

HEATMAP_SETTINGS = {
    "bin_s",
    "latency_bin_ms",
    "throughput_bin_rps",
    "slo_ms",
    "slo",
    "min_bin_requests",
    "by",
    "model",
    "include_failed",
    "table",
}
HEATMAP_FACTS = {
    *HEATMAP_SETTINGS,
    "first_bin_at",
    "requests",
    "heatmaps",
    "store",
    "bins_from_data",
}


def test_heatmap_json(db: Path) -> None:
    common = ("heatmap", "--db", str(db), "--model", "chat", "--throughput-bin-rps", "20")
    common += ("--latency-bin-ms", "25", "--slo-ms", "400", "--bin-s", "1")
    cells, _ = document(*common, "--table", "cells")
    assert set(cells["facts"]) == HEATMAP_FACTS
    facts = cells["facts"]
    assert facts["latency_bin_ms"] == 25 and facts["throughput_bin_rps"] == 20
    assert all(
        set(c) == {"latency_lo_ms", "throughput_lo_rps", "count", "latency_bin", "throughput_bin"}
        for c in cells["rows"]
    )
    assert set(cells["tables"]) == {"bins", "limits"}
    total = sum(10 + 5 * k for k in range(18))
    assert sum(c["count"] for c in cells["rows"]) == facts["requests"] == total
    windows, _ = document(*common, "--table", "windows")
    assert all(
        set(w) == {"start", "throughput_rps", "count", "throughput_bin", "p50_s", "p95_s", "p99_s"}
        for w in windows["rows"]
    )
    assert [w["count"] for w in windows["rows"]] == [10 + 5 * k for k in range(18)]
    bins, _ = document(*common)
    assert set(bins["tables"]) == {"limits"}
    assert sum(b["requests"] for b in bins["rows"]) == total
    (heatmap,) = facts["heatmaps"]
    assert heatmap["safe_max"] is not None and heatmap["safe_max"]["slo_ms"] == 400
    assert heatmap["knee"] is None or heatmap["knee"]["throughput_lo_rps"] >= 0
    (limits,) = bins["tables"]["limits"]["rows"]
    assert limits["safe_max_rps"] == heatmap["safe_max"]["throughput_lo_rps"]
    assert limits["exceeded_from_rps"] == heatmap["safe_max"]["exceeded_from_rps"]


def test_heatmap_grouped_and_pooling_is_noted(db: Path) -> None:
    doc, _ = document("heatmap", "--db", str(db), "--by", "model")
    assert [m["model"] for m in doc["facts"]["heatmaps"]] == ["chat", "embed"]
    assert [r["model"] for r in doc["tables"]["limits"]["rows"]] == ["chat", "embed"]
    doc, stderr = document("heatmap", "--db", str(db))
    assert doc["facts"]["by"] is None and len(doc["facts"]["heatmaps"]) == 1
    assert "one heatmap over 2 models" in stderr


def test_heatmap_bins_start_inside_the_window(db: Path) -> None:
    doc, _ = document(
        "heatmap", "--db", str(db), "--model", "chat", "--since", "5.5s", "--until", "newest",
        "--table", "windows", "--bin-s", "1",
    )  # fmt: skip
    since = datetime.fromisoformat(doc["window"]["since"].removesuffix("Z"))
    starts = [datetime.fromisoformat(w["start"].removesuffix("Z")) for w in doc["rows"]]
    # the window starts mid-bin (at T0 + 12.49 s): the first whole bin is T0 + 13 s
    assert starts[0] == T0 + timedelta(seconds=13) > since
    assert [w["count"] for w in doc["rows"]] == [10 + 5 * k for k in range(13, 18)]


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
        "heatmap", "--db", str(db), "--model", "chat", "--format", "csv", "--table", part
    )
    assert code == 0, stderr
    assert stdout.splitlines()[0].startswith(header)
    code, stdout, _ = invoke(
        "heatmap", "--db", str(db), "--by", "pod", "--format", "csv", "--table", "cells"
    )
    assert stdout.splitlines()[0].startswith("pod,latency_lo_ms,throughput_lo_rps,count")


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
        "heatmap", "--db", str(db), "--model", "chat", "--slo-ms", "400", "--png", str(out)
    )
    assert code == 0, stderr
    assert f"wrote {out} (945 requests)" in stderr
    width, height = _png_size(out)
    assert width > 50 and height > 50
    code, stdout, stderr = invoke(
        "heatmap", "--db", str(db), "--by", "model", "--png", str(out), "-o", "json"
    )
    assert code == 0, stderr
    assert json.loads(stdout)["report"] == "heatmap"  # the picture does not touch stdout
    for name in ("chat-chat.png", "chat-embed.png"):
        _png_size(tmp_path / name)


def test_heatmap_table_and_grid(db: Path) -> None:
    code, stdout, stderr = invoke(
        "heatmap", "--db", str(db), "--model", "chat", "--throughput-bin-rps", "20",
        "--slo-ms", "400", "--grid",
    )  # fmt: skip
    assert code == 0, stderr
    assert "P95 per throughput bin" in stdout
    assert "safe max" in stdout and "knee" in stdout
    assert "safe maximum 40 rps" in stderr  # the verdicts' reasons are notes
    assert "requests per cell" in stdout and "every selected request: 945 requests" in stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--bin-s", "0"), "--bin-s"),
        (("--bin-s", "0.0000001"), "whole number of microseconds"),
        (("--window-s", "1"), "No such option: --window-s"),
        (("--throughput-bin-rps", "-1"), "--throughput-bin-rps"),
        (("--latency-bin-ms", "0.0000001"), "whole number of microseconds"),
        (("--model", "rerank"), "--source estimate"),
        (("--table", "grid"), "--table"),
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
    from sits_observe.lab.demo.demo import Demo, DemoSettings

    settings = DemoSettings(
        nodes=2, gpus_per_node=4, db_path=tmp_path / "demo.duckdb", workdir=tmp_path, seed=3
    )
    with Demo(settings) as demo:
        deadline = time.monotonic() + 60
        time.sleep(15)
        while demo.counts()["requests"] < 5 and time.monotonic() < deadline:
            time.sleep(1)
    db = str(settings.db_path)

    doc, _ = document("latency", "--db", db)
    rows = doc["rows"]
    assert rows and all(set(r) == {"model", "count", "p50_s", "p95_s", "p99_s"} for r in rows)
    assert all(0 < r["p50_s"] <= r["p95_s"] <= r["p99_s"] for r in rows)

    doc, _ = document("latency", "--db", db, "--by", "pod")
    # The demo's inference pods come from its vLLM Deployments (one per GPU product).
    pods = {r["pod"] for r in doc["rows"]}
    assert pods and all(p.startswith("vllm-llama2-70b-") for p in pods), pods

    doc, _ = document("latency", "--db", db, "--source", "estimate")
    assert all(r["estimate"] is True for r in doc["rows"])

    doc, _ = document("heatmap", "--db", db, "--throughput-bin-rps", "1", "--slo-ms", "5000")
    cells, _ = document("heatmap", "--db", db, "--throughput-bin-rps", "1", "--table", "cells")
    windows, _ = document("heatmap", "--db", db, "--throughput-bin-rps", "1", "--table", "windows")
    # Every stored request is in a cell but those of a last time bin the demo's stop cut short
    # (the heatmap leaves such a bin out: heatmap_query.last_bin_end).
    with Store.open(settings.db_path, read_only=True) as store:
        end = last_bin_end(store, datetime.now(UTC), float(cells["facts"]["bin_s"]))
        stored = store.scalar(
            "SELECT count(*) FROM requests WHERE ok IS DISTINCT FROM false AND ts < ?",
            [end.replace(tzinfo=None)],
        )
    assert sum(c["count"] for c in cells["rows"]) == cells["facts"]["requests"] == stored
    assert sum(w["count"] for w in windows["rows"]) == stored
    assert doc["facts"]["requests"] == stored

    png = tmp_path / "demo.png"
    code, _, stderr = invoke("heatmap", "--db", db, "--png", str(png))
    assert code == 0, stderr
    _png_size(png)
