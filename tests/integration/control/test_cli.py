"""``sits-observe recommend`` / ``kubectl sits recommend`` (the ``recommend`` report) and
``sits-observe controller`` on a store file and the emulator."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import yaml
from typer.testing import CliRunner

from sits_observe.collectors.kube.api import KubeJson
from sits_observe.control.controller.actions import Action
from sits_observe.lab.kube.emulator import KubeEmulator
from sits_observe.store import Store
from sits_observe.surfaces.cli.main import app

pytestmark = pytest.mark.k8s

GIB = 1024**3
NOW = datetime.now(UTC).replace(tzinfo=None, microsecond=0)
KEYS = {
    "kind", "namespace", "name", "target", "action", "current", "proposed", "current_value",
    "proposed_value", "unit", "change_ratio", "confidence", "history_s", "backing",
    "reason_short", "reason", "evidence", "workload",
}  # fmt: skip

#: finance's SLA from the SPEC's example, configured (no namespace has an SLA by default).
SLA_FLAGS = ("--sla", "finance=0.015")


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


def recommend_doc(db: Path, *extra: str) -> dict[str, Any]:
    """``recommend`` as of the store's newest row (the fixture's ``NOW``), as JSON."""
    args = ["recommend", "--db", str(db), "--until", "newest", "-o", "json", *SLA_FLAGS, *extra]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


def recommend_json(db: Path, *extra: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = recommend_doc(db, *extra)["rows"]
    return rows


def controller_rows(db: Path) -> set[tuple[str, str, str]]:
    """``(kind, name, action)`` of the rows of the controller's actions (the analytics' rows,
    per workload, follow the inventory's workload names, which `ingest k8s` replaces)."""
    ours = {str(a) for a in Action}
    return {(r["kind"], r["name"], r["action"]) for r in recommend_json(db) if r["action"] in ours}


def test_recommend_prints_every_recommendation_with_the_documented_keys(db: Path) -> None:
    doc = recommend_doc(db)
    assert doc["report"] == "recommend" and doc["window"]["until_rule"] == "newest"
    assert doc["facts"]["at"] == NOW.isoformat() + "Z"  # the newest sample, to the second
    rows = doc["rows"]
    assert rows and all(set(r) == KEYS for r in rows)
    got = {(r["kind"], r["name"], r["action"]): r for r in rows}
    assert got[("Pod", "p1", "memory-class")]["proposed"] == "L2"
    # P95 ~35 ms > 10 ms: the long slice; finance's SLA is 15 ms P99: all 50 requests violate.
    assert got[("Pod", "p1", "time-slice")]["proposed"] == "25ms"
    prio = got[("Pod", "p1", "priority-class")]
    assert (prio["current"], prio["proposed"]) == ("throughput-guaranteed", "best-effort")
    assert json.loads(prio["evidence"])["sla_violation_ratio"] == 1.0
    assert prio["reason_short"] == "SLA violation 100.0% > 5%"
    assert prio["reason"] == "SLA violation 100.0% > 5%: next lower priority class"
    assert ("Node", "n1", "fragmentation") in got and ("Node", "n2", "fragmentation") in got
    quota = got[("Namespace", "finance", "quota-gpu")]
    # A Namespace is cluster-scoped; its quota advice is listed in its own namespace's group.
    # Three daily snapshots span two days: VPA's confidence is the history's length.
    assert quota["namespace"] == "finance" and json.loads(quota["evidence"])["history_days"] == 2
    assert quota["confidence"] == "medium" and quota["backing"] == "medium 2d"  # >= 2, under 7
    # p95 of 3 GPUs x 1.15 x confidence (1 + 1/2) = 5.2 GPUs, rounded up.
    assert (quota["target"], quota["proposed"], quota["proposed_value"]) == ("finance", "6", 6)
    # 2 pods x 16 GiB x 1.15 x 1.5 = 55.2 GiB: as a Kubernetes quantity rounded up; the exact
    # bytes the controller writes (whole MiB) stay beside it.
    memory = got[("Namespace", "finance", "quota-memory")]
    assert (memory["proposed"], memory["proposed_value"]) == ("56Gi", 59270758400)
    assert memory["reason_short"] == "2d p95 peak 32Gi x 1.72"
    cpu = got[("Namespace", "finance", "quota-cpu")]
    assert (cpu["proposed"], cpu["proposed_value"], cpu["unit"]) == ("13800m", 13800, "milli-CPU")
    only = recommend_json(db, "--action", "memory-class", "--namespace", "finance")
    assert {r["action"] for r in only} == {"memory-class"}
    # p1's workload chat has rows of its own: GPU memory and replicas, not enough data yet.
    names = {r["name"] for r in recommend_json(db, "--namespace", "finance")}
    assert names == {"p1", "finance", "chat"}
    bad = CliRunner().invoke(app, ["recommend", "--db", str(db), "--action", "nope"])
    assert bad.exit_code == 2 and "memory-class" in bad.output


def test_recommend_yaml_and_table(db: Path) -> None:
    args = ["recommend", "--db", str(db), "--until", "newest", *SLA_FLAGS]
    result = CliRunner().invoke(app, [*args, "-o", "yaml"])
    assert result.exit_code == 0, result.output
    assert yaml.safe_load(result.stdout)["rows"] == recommend_json(db)
    table = CliRunner().invoke(app, args, env={"COLUMNS": "100"})
    assert table.exit_code == 0
    lines = table.stdout.splitlines()
    assert lines[0] == f"Recommendations ({len(recommend_json(db))} rows)"
    assert any(li.split()[:2] == ["finance", "p1"] for li in lines)  # namespace, then object
    assert "56Gi" in table.stdout and "13800m" in table.stdout
    # Off a terminal: natural width, one line per recommendation, nothing cut or folded.
    assert len(lines) == 3 + len(recommend_json(db))
    assert "…" not in table.stdout and "SLA violation 100.0% > 5%" in table.stdout


def test_kubectl_sits_recommend(db: Path) -> None:
    plugin = Path(sys.executable).parent / "kubectl-sits"
    result = subprocess.run(
        [str(plugin), "recommend", "--db", str(db), "--until", "newest", "-o", "json", *SLA_FLAGS],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == recommend_doc(db)
    usage = subprocess.run(
        [str(plugin), "--help"], capture_output=True, text=True, timeout=120, check=False
    )
    assert "kubectl sits" in usage.stdout and "recommend" in usage.stdout
    serve = subprocess.run(
        [str(plugin), "serve", "--db", str(db)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert serve.returncode == 2 and "No such command 'serve'" in serve.stderr


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
        before = controller_rows(db)
        assert ("Node", "n1", "fragmentation") in before
        acted = CliRunner().invoke(app, [*base, "--act", "--rules-on", "fragmentation"])
        assert acted.exit_code == 0, acted.output
        n1 = next(n for n in emu.objects("nodes") if n["metadata"]["name"] == "n1")
        assert "sits.io/fragmentation" in n1["metadata"]["labels"]
        assert emu.objects("events")
        [lease] = emu.objects("leases", group="coordination.k8s.io")
        assert lease["spec"]["holderIdentity"] == ""  # released on exit
        # Applied labels are no longer recommendations once the inventory shows them (what
        # `serve` snapshots in a cluster; here one `ingest k8s` of the emulator).
        ingest = CliRunner().invoke(
            app, ["ingest", "k8s", "--db", str(db), "--kubeconfig", str(config)]
        )
        assert ingest.exit_code == 0, ingest.output
        with Store.open(db, read_only=True) as store:
            labels = store.scalar("SELECT arg_max(labels_json, ts) FROM nodes WHERE node = 'n1'")
        assert "sits.io/fragmentation" in labels
        after = controller_rows(db)
        assert ("Node", "n1", "fragmentation") not in after
        assert after < before
        api.close()


def test_controller_rejects_two_modes(db: Path) -> None:
    result = CliRunner().invoke(app, ["controller", "--db", str(db), "--act", "--annotate"])
    assert result.exit_code == 2
    assert "exclude each other" in result.output
