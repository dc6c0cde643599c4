"""``sits-observe recommend`` / ``kubectl sits recommend`` and ``sits-observe controller`` on a
store file and the emulator."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest
import yaml
from typer.testing import CliRunner

from sits_observe.control.kube import KubeJson
from sits_observe.simulator.kube_emulator import KubeEmulator
from sits_observe.store import Store
from sits_observe.surfaces.cli.main import app

pytestmark = pytest.mark.k8s

GIB = 1024**3
NOW = datetime.now(UTC).replace(tzinfo=None, microsecond=0)
KEYS = ["kind", "namespace", "name", "action", "current", "proposed", "reason", "evidence"]


def fill(db: Path) -> None:
    """A two-node H100 cluster: finance/p1 (1 GPU, slow, 3 GiB) and finance/p2 (2 GPUs)."""
    nodes = [
        {
            "ts": NOW,
            "node": n,
            "gpu_allocatable": 8,
            "gpu_product": "NVIDIA H100 80GB HBM3",
            "gpu_memory_bytes": 80 * GIB,
            "cpu_allocatable_milli": 64_000,
            "memory_allocatable_bytes": 512 * GIB,
            "ready": True,
            "labels_json": "{}",
        }
        for n in ("n1", "n2")
    ]
    pods = []
    for day in range(3):
        ts = NOW - timedelta(days=day)
        for pod, gpus, prio, wl in (
            ("p1", 1, "throughput-guaranteed", "chat"),
            ("p2", 2, "ultra-low-latency", "search"),
        ):
            pods.append(
                {
                    "ts": ts,
                    "pod_uid": f"uid-{pod}",
                    "namespace": "finance",
                    "pod": pod,
                    "node": "n1",
                    "phase": "Running",
                    "gpu_request": gpus,
                    "cpu_request_milli": 4000,
                    "memory_request_bytes": 16 * GIB,
                    "priority_class": prio,
                    "workload": wl,
                }
            )
    samples = [
        {
            "ts": NOW - timedelta(seconds=s),
            "node": "n1",
            "gpu_uuid": "GPU-1",
            "model_name": "NVIDIA H100 80GB HBM3",
            "namespace": "finance",
            "pod": "p1",
            "fb_used_bytes": 3 * GIB,
            "fb_free_bytes": 77 * GIB,
            "fb_total_bytes": 80 * GIB,
            "gpu_util_ratio": 0.5,
            "dram_active_ratio": 0.3,
            "source": "sim",
        }
        for s in range(10)
    ]
    requests = [
        {
            "ts": NOW - timedelta(seconds=i),
            "model": "m",
            "latency_s": 0.03 + i * 1e-4,
            "ok": True,
            "namespace": "finance",
            "pod": "p1",
            "prompt_tokens": 100,
            "output_tokens": 50,
        }
        for i in range(50)
    ]
    with Store.open(db) as store:
        store.append_batch(
            {
                "nodes": pa.Table.from_pylist(nodes),
                "pods": pa.Table.from_pylist(pods),
                "gpu_samples": pa.Table.from_pylist(samples),
                "requests": pa.Table.from_pylist(requests),
            }
        )


def seed_cluster(kube: KubeJson) -> None:
    for node in ("n1", "n2"):
        kube.request("POST", "/api/v1/nodes", body={"metadata": {"name": node}})
    kube.request("POST", "/api/v1/namespaces", body={"metadata": {"name": "finance"}})
    for pod, prio in (("p1", "throughput-guaranteed"), ("p2", "ultra-low-latency")):
        kube.request(
            "POST",
            "/api/v1/namespaces/finance/pods",
            body={
                "metadata": {"name": pod},
                "spec": {"nodeName": "n1", "priorityClassName": prio, "containers": []},
            },
        )


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "sits.duckdb"
    fill(path)
    return path


def recommend_json(db: Path, *extra: str) -> list[dict[str, object]]:
    result = CliRunner().invoke(app, ["recommend", "--db", str(db), "--format", "json", *extra])
    assert result.exit_code == 0, result.output
    rows: list[dict[str, object]] = json.loads(result.stdout)
    return rows


def test_recommend_prints_every_recommendation_with_the_documented_keys(db: Path) -> None:
    rows = recommend_json(db)
    assert rows and all(list(r) == KEYS for r in rows)
    got = {(r["kind"], r["name"], r["action"]): r for r in rows}
    assert got[("Pod", "p1", "memory-class")]["proposed"] == "L2"
    # P95 ~35 ms > 10 ms: the long slice; finance's SLA is 15 ms P99: all 50 requests violate.
    assert got[("Pod", "p1", "time-slice")]["proposed"] == "25ms"
    prio = got[("Pod", "p1", "priority-class")]
    assert (prio["current"], prio["proposed"]) == ("throughput-guaranteed", "best-effort")
    assert prio["evidence"]["sla_violation_ratio"] == 1.0  # type: ignore[index]
    assert ("Node", "n1", "fragmentation") in got and ("Node", "n2", "fragmentation") in got
    quota = got[("Namespace", "finance", "quota-gpu")]
    assert quota["namespace"] is None and quota["evidence"]["history_days"] == 3  # type: ignore[index]
    only = recommend_json(db, "--action", "memory-class", "--namespace", "finance")
    assert {r["action"] for r in only} == {"memory-class"}


def test_recommend_yaml_and_table(db: Path) -> None:
    result = CliRunner().invoke(app, ["recommend", "--db", str(db), "--format", "yaml"])
    assert result.exit_code == 0, result.output
    assert yaml.safe_load(result.stdout) == recommend_json(db)
    table = CliRunner().invoke(app, ["recommend", "--db", str(db)])
    assert table.exit_code == 0
    assert "sits_observe recommendations" in table.stdout and "finance" in table.stdout


def test_kubectl_sits_recommend(db: Path) -> None:
    plugin = Path(sys.executable).parent / "kubectl-sits"
    result = subprocess.run(
        [str(plugin), "recommend", "--db", str(db), "--format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == recommend_json(db)
    usage = subprocess.run(
        [str(plugin), "--help"], capture_output=True, text=True, timeout=120, check=False
    )
    assert "kubectl sits" in usage.stdout


def test_recommend_on_a_missing_store_is_a_clear_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["recommend", "--db", str(tmp_path / "nope.duckdb")])
    assert result.exit_code == 2
    assert "does not exist" in result.output


def test_controller_once_dry_run_then_act(db: Path, tmp_path: Path) -> None:
    with KubeEmulator() as emu:
        api = emu.api_client()
        seed_cluster(KubeJson(api))
        config = emu.write_kubeconfig(tmp_path / "kubeconfig")
        base = [
            "controller",
            "--db",
            str(db),
            "--kubeconfig",
            str(config),
            "--once",
            "--replica-id",
            "test-replica",
        ]
        nodes_before = emu.objects("nodes")
        dry = CliRunner().invoke(app, base)
        assert dry.exit_code == 0, dry.output
        assert emu.objects("nodes") == nodes_before and emu.objects("events") == []
        with Store.open(db, read_only=True) as store:
            assert store.scalar("SELECT count(*) FROM decisions WHERE dry_run") > 0
            assert store.scalar("SELECT count(*) FROM decisions WHERE NOT dry_run") == 0
        standing = len(recommend_json(db, "--kubeconfig", str(config)))
        acted = CliRunner().invoke(app, [*base, "--act"])
        assert acted.exit_code == 0, acted.output
        n1 = next(n for n in emu.objects("nodes") if n["metadata"]["name"] == "n1")
        assert "sits.io/fragmentation" in n1["metadata"]["labels"]
        assert emu.objects("events")
        [lease] = emu.objects("leases", group="coordination.k8s.io")
        assert lease["spec"]["holderIdentity"] == ""  # released on exit
        # Applied labels are no longer recommendations when read against the cluster.
        assert len(recommend_json(db, "--kubeconfig", str(config))) < standing
        api.close()


def test_controller_rejects_two_modes(db: Path) -> None:
    result = CliRunner().invoke(app, ["controller", "--db", str(db), "--act", "--annotate"])
    assert result.exit_code == 2
    assert "exclude each other" in result.output
