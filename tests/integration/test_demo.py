"""The embedded default end to end: simulated cluster -> agents -> service -> DuckDB.

Everything is real and on loopback: the Kubernetes emulator, the exporters, the cgroup trees
on disk, the agents' HTTP batches and the service's DuckDB file.
"""

from __future__ import annotations

import time
from pathlib import Path

import duckdb
import pytest

from sits_observe.lab.demo.demo import SHOWN_TABLES, Demo, DemoSettings

pytestmark = [pytest.mark.slow, pytest.mark.k8s]


def _wait_for(demo: Demo, tables: tuple[str, ...], timeout_s: float) -> dict[str, int]:
    deadline = time.monotonic() + timeout_s
    counts = demo.counts()
    while time.monotonic() < deadline:
        counts = demo.counts()
        if all(counts[t] > 0 for t in tables):
            break
        time.sleep(0.5)
    return counts


def test_demo_fills_every_sample_table_from_two_nodes(tmp_path: Path) -> None:
    settings = DemoSettings(
        nodes=2, gpus_per_node=4, db_path=tmp_path / "demo.duckdb", workdir=tmp_path, seed=3
    )
    with Demo(settings) as demo:
        counts = _wait_for(demo, SHOWN_TABLES, 60)
        time.sleep(2)  # one more inventory round, so cgroup samples get their pod names
    assert all(counts[t] > 0 for t in counts), counts

    con = duckdb.connect(str(settings.db_path), read_only=True)
    nodes = con.execute("SELECT count(DISTINCT node) FROM gpu_samples").fetchone()
    assert nodes == (2,)
    assert con.execute("SELECT count(DISTINCT node) FROM container_samples").fetchone() == (2,)
    # 4 GPUs per node, each with consistent framebuffer accounting (MiB rounding aside).
    gpus, bad_totals = con.execute(
        "SELECT count(DISTINCT gpu_uuid), count(*) FILTER (WHERE abs(fb_total_bytes - "
        "(fb_used_bytes + fb_free_bytes + fb_reserved_bytes)) > 3 * 1048576) FROM gpu_samples"
    ).fetchone() or (0, 0)
    assert (gpus, bad_totals) == (8, 0)
    # Exact latencies from the request logs, all positive and attributed to the vLLM pods.
    bad = con.execute(
        "SELECT count(*) FILTER (WHERE latency_s <= 0 OR ttft_s < 0 OR ttft_s > latency_s) "
        "FROM requests"
    ).fetchone()
    assert bad == (0,)
    pods = {row[0] for row in con.execute("SELECT DISTINCT pod FROM requests").fetchall()}
    # One inference Deployment per GPU product, so one replica on each of the two nodes.
    replicas = {
        p.node: p.name for n in demo.cluster.nodes.values() for p in n.pods.values() if p.server
    }
    assert replicas.keys() == {"gpu-node-1", "gpu-node-2"}
    assert replicas["gpu-node-1"].startswith("vllm-llama2-70b-h100-")
    assert replicas["gpu-node-2"].startswith("vllm-llama2-70b-a100-")
    assert pods and pods <= set(replicas.values())
    # Estimates from the vLLM histograms are labelled as such.
    assert con.execute("SELECT bool_and(estimate) FROM server_windows").fetchone() == (True,)
    # The inventory named the containers of the cgroup samples.
    named = con.execute(
        "SELECT count(*) FROM container_samples WHERE namespace = 'inference'"
    ).fetchone()
    assert named is not None and named[0] > 0
    # The nodes' NUMA counters, each container's NUMA placement and the GPU topology reach
    # the store, so the interference, affinity and TopologyManager advice have their inputs.
    for table in ("numa_samples", "container_numa_samples", "gpu_topology", "gpu_links"):
        (rows,) = con.execute(f"SELECT count(DISTINCT node) FROM {table}").fetchone() or (0,)
        assert rows == 2, table
    # Nothing the simulated exporters produce is malformed.
    drops = con.execute("SELECT collector, reason, sum(count) FROM collector_drops GROUP BY ALL")
    assert drops.fetchall() == []


def test_demo_database_answers_the_analysis_commands(tmp_path: Path) -> None:
    """After a short run, recommend, latency and heatmap answer from the demo's database."""
    import json

    from typer.testing import CliRunner

    from sits_observe.surfaces.cli.main import app

    settings = DemoSettings(
        nodes=2,
        gpus_per_node=4,
        db_path=tmp_path / "demo.duckdb",
        workdir=tmp_path,
        seed=5,
        controller_interval_s=2,
    )
    with Demo(settings) as demo:
        _wait_for(demo, ("requests", "pods", "decisions"), 60)
    db = str(settings.db_path)
    runner = CliRunner()
    advice = runner.invoke(app, ["recommend", "--db", db, "-o", "json"])
    assert advice.exit_code == 0, advice.output
    rows = json.loads(advice.stdout)["rows"]
    assert rows and {"kind", "target", "action", "current", "proposed"} <= set(rows[0])
    latency = runner.invoke(app, ["latency", "--db", db, "--by", "model", "--format", "json"])
    assert latency.exit_code == 0, latency.output
    (model,) = json.loads(latency.stdout)["rows"]
    assert model["model"] == "llama2-70b" and model["count"] > 0
    assert 0 < model["p50_s"] <= model["p95_s"] <= model["p99_s"]


def test_demo_serves_the_streamlit_app_and_stops_it(tmp_path: Path) -> None:
    """With ui_port the demo starts the app (reading through the service) and ends it."""
    import socket

    import httpx

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    settings = DemoSettings(
        nodes=1,
        gpus_per_node=2,
        db_path=tmp_path / "demo.duckdb",
        workdir=tmp_path,
        seed=2,
        ui_port=port,
    )
    with Demo(settings) as demo:
        assert demo.ui_url == f"http://127.0.0.1:{port}"
        assert httpx.get(f"{demo.ui_url}/_stcore/health", timeout=5).text == "ok"
        child = demo.ui
        assert child is not None and child.poll() is None
        # The app was pointed at the service with the demo's read token, never at the file.
        args = list(child.args)
        assert args[args.index("--service") + 1] == demo.service_url and "--db" not in args
        token_file = tmp_path / "read-token"
        assert args[args.index("--token-file") + 1] == str(token_file)
        assert token_file.read_text(encoding="utf-8") == demo.read_token != demo.token
        assert oct(token_file.stat().st_mode & 0o777) == "0o600"
    assert child.poll() is not None
    assert demo.ui is None
