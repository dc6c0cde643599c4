"""``sits-observe ingest k8s`` against the emulator through a kubeconfig file."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pyarrow as pa
import pytest
from kubernetes import client as k8s_client
from typer.testing import CliRunner

from sits_observe.domain.tables import CONTAINER_SAMPLES
from sits_observe.lab.kube.emulator import KubeEmulator, write_kubeconfig
from sits_observe.store import Store
from sits_observe.surfaces.cli.main import app
from tests.integration.kube import bodies

pytestmark = pytest.mark.k8s

runner = CliRunner()


def seed_cluster(core: k8s_client.CoreV1Api) -> str:
    core.create_node(bodies.node("gpu-node-1"))
    core.create_node(bodies.node("gpu-node-2"))
    created = core.create_namespaced_pod(
        "serving",
        bodies.pod(
            "vllm-0",
            containers=[bodies.container("vllm"), bodies.container("sidecar")],
            container_ids={"vllm": "containerd://abc", "sidecar": "containerd://def"},
        ),
    )
    core.create_namespaced_pod("train", bodies.pod("job-0"))
    return str(created.metadata.uid)


def seed_samples(db: Path, pod_uid: str) -> None:
    rows = [
        {
            "ts": datetime(2024, 5, 1, 10),
            "node": "gpu-node-1",
            "pod_uid": pod_uid,
            "container_id": "abc",
        },
        {
            "ts": datetime(2024, 5, 1, 10),
            "node": "gpu-node-1",
            "pod_uid": pod_uid,
            "container_id": "def",
        },
        {
            "ts": datetime(2024, 5, 1, 10),
            "node": "gpu-node-1",
            "pod_uid": "someone-else",
            "container_id": "zzz",
        },
    ]
    with Store.open(db) as store:
        store.append(
            "container_samples", pa.Table.from_pylist(rows, schema=CONTAINER_SAMPLES.schema)
        )


def test_ingest_snapshots_and_attributes(
    kube: KubeEmulator, core: k8s_client.CoreV1Api, tmp_path: Path
) -> None:
    uid = seed_cluster(core)
    db = tmp_path / "obs.duckdb"
    seed_samples(db, uid)
    kubeconfig = kube.write_kubeconfig(tmp_path / "kubeconfig")
    result = runner.invoke(app, ["ingest", "k8s", "--db", str(db), "--kubeconfig", str(kubeconfig)])
    assert result.exit_code == 0, result.output
    assert "container_samples attributed" in result.output
    assert "rejected: nothing" in result.output
    with Store.open(db, read_only=True) as store:
        assert store.count("nodes") == 2
        assert store.count("pods") == 2
        assert store.count("collector_drops") == 0
        named = store.query(
            "SELECT container_id, namespace, pod, container FROM container_samples "
            "ORDER BY container_id"
        ).to_pylist()
    assert named == [
        {"container_id": "abc", "namespace": "serving", "pod": "vllm-0", "container": "vllm"},
        {"container_id": "def", "namespace": "serving", "pod": "vllm-0", "container": "sidecar"},
        {"container_id": "zzz", "namespace": None, "pod": None, "container": None},
    ]
    # A second snapshot appends, and attribution has nothing left to do.
    again = runner.invoke(
        app, ["ingest", "k8s", "--db", str(db), "--kubeconfig", str(kubeconfig), "--page-size", "1"]
    )
    assert again.exit_code == 0, again.output
    with Store.open(db, read_only=True) as store:
        assert store.count("pods") == 4


def test_context_selects_the_cluster(
    kube: KubeEmulator, core: k8s_client.CoreV1Api, tmp_path: Path
) -> None:
    seed_cluster(core)
    kubeconfig = write_kubeconfig(tmp_path / "kc", kube.url, context="emulated")
    db = tmp_path / "obs.duckdb"
    ok = runner.invoke(
        app,
        [
            "ingest",
            "k8s",
            "--db",
            str(db),
            "--kubeconfig",
            str(kubeconfig),
            "--context",
            "emulated",
        ],
    )
    assert ok.exit_code == 0, ok.output
    missing = runner.invoke(
        app,
        ["ingest", "k8s", "--db", str(db), "--kubeconfig", str(kubeconfig), "--context", "prod"],
    )
    assert missing.exit_code == 2
    assert "cannot load kubeconfig" in missing.output
    assert "prod" in missing.output


def test_unreachable_api_exits_2(kube: KubeEmulator, tmp_path: Path) -> None:
    kubeconfig = kube.write_kubeconfig(tmp_path / "kubeconfig")
    kube.stop()
    result = runner.invoke(
        app,
        [
            "ingest",
            "k8s",
            "--db",
            str(tmp_path / "x.duckdb"),
            "--kubeconfig",
            str(kubeconfig),
            "--request-timeout-s",
            "5",
        ],
    )
    assert result.exit_code == 2
    assert "cannot reach the Kubernetes API" in result.output


def test_forbidden_exits_2_with_the_rbac_hint(kube: KubeEmulator, tmp_path: Path) -> None:
    kubeconfig = kube.write_kubeconfig(tmp_path / "kubeconfig")
    kube.inject_error(
        r"GET /api/v1/nodes",
        403,
        reason="Forbidden",
        message='nodes is forbidden: User "x" cannot list resource "nodes"',
    )
    result = runner.invoke(
        app, ["ingest", "k8s", "--db", str(tmp_path / "x.duckdb"), "--kubeconfig", str(kubeconfig)]
    )
    assert result.exit_code == 2
    assert "403" in result.output and "rbac.yaml" in result.output


def test_in_cluster_excludes_kubeconfig(tmp_path: Path) -> None:
    result = runner.invoke(
        app,
        [
            "ingest",
            "k8s",
            "--db",
            str(tmp_path / "x.duckdb"),
            "--in-cluster",
            "--kubeconfig",
            str(tmp_path / "kc"),
        ],
    )
    assert result.exit_code == 2
    assert "--in-cluster takes no --kubeconfig" in result.output


def test_in_cluster_outside_a_pod_is_a_config_error(tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["ingest", "k8s", "--db", str(tmp_path / "x.duckdb"), "--in-cluster"]
    )
    assert result.exit_code == 2
    assert "cannot load the in-cluster service account" in result.output


def test_bad_page_size_is_a_config_error(tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["ingest", "k8s", "--db", str(tmp_path / "x.duckdb"), "--page-size", "0"]
    )
    assert result.exit_code == 2
    assert "page_size" in result.output


@pytest.mark.parametrize("content", ["garbage: [", "- a list\n", "clusters: 5\n"])
def test_malformed_kubeconfig_is_a_config_error(tmp_path: Path, content: str) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(content)
    result = runner.invoke(
        app, ["ingest", "k8s", "--db", str(tmp_path / "x.duckdb"), "--kubeconfig", str(kubeconfig)]
    )
    assert result.exit_code == 2, result.output
    assert "cannot load kubeconfig" in result.output
