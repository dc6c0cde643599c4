"""`sits-observe serve` with a kubeconfig: the inventory loop and the in-process controller."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from sits_observe.lab.cluster.cluster import SimulatedCluster
from sits_observe.lab.kube.emulator import KubeEmulator
from sits_observe.lab.kube.publish import KubePublisher
from sits_observe.store import Store

pytestmark = [pytest.mark.k8s, pytest.mark.slow]

CLI = Path(sys.executable).parent / "sits-observe"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_serve_snapshots_inventory_and_runs_the_controller(tmp_path: Path) -> None:
    cluster = SimulatedCluster(nodes=2, gpus_per_node=4, seed=2)
    db = tmp_path / "s.duckdb"
    with KubeEmulator() as emulator:
        publisher = KubePublisher(emulator.api_client())
        publisher.register_nodes(cluster)
        for event in cluster.take_events():
            publisher.on_pod_event(event, datetime.now(UTC))
        kubeconfig = emulator.write_kubeconfig(tmp_path / "kubeconfig")
        (tmp_path / "token").write_text("t0ken")
        args = [
            str(CLI), "serve", "--db", str(db), "--port", str(_free_port()),
            "--token-file", str(tmp_path / "token"), "--kubeconfig", str(kubeconfig),
            "--inventory-interval-s", "1", "--controller", "--controller-mode", "annotate",
            "--log-level", "info",
        ]  # fmt: skip
        log = (tmp_path / "serve.log").open("wb")
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ))
        try:
            deadline = time.monotonic() + 60
            leases: list[dict[str, object]] = []
            while time.monotonic() < deadline and not leases:
                time.sleep(0.5)
                leases = emulator.objects("leases", group="coordination.k8s.io")
                assert proc.poll() is None, (tmp_path / "serve.log").read_text()
            assert leases, "the in-process controller never took its Lease"
            time.sleep(2)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
    # serve turns SIGTERM into a normal exit, so its final checkpoint runs.
    text = (tmp_path / "serve.log").read_text()
    assert proc.returncode == 0, text
    assert "controller in annotate mode inside the service" in text
    with Store.open(db, read_only=True) as store:
        assert store.count("nodes") >= 2
        assert store.count("pods") >= 2


def test_controller_flag_needs_cluster_access(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("t0ken")
    result = subprocess.run(
        [str(CLI), "serve", "--db", str(tmp_path / "s.duckdb"), "--token-file",
         str(tmp_path / "token"), "--controller"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 2
    assert "--controller needs --kubeconfig or --in-cluster" in result.stderr


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--controller-mode", "act"], "--controller-mode act needs --controller"),
        (
            ["--controller", "--kubeconfig", "kc", "--controller-mode", "write"],
            "'write' is not one of 'dry-run', 'annotate', 'act'",
        ),
    ],
)
def test_controller_mode_is_checked_before_anything_starts(
    tmp_path: Path, flags: list[str], message: str
) -> None:
    (tmp_path / "token").write_text("t0ken")
    (tmp_path / "kc").write_text("")
    result = subprocess.run(
        [str(CLI), "serve", "--db", str(tmp_path / "s.duckdb"), "--token-file",
         str(tmp_path / "token"), "--port", str(_free_port()), *flags],
        capture_output=True, text=True, timeout=60, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert not (tmp_path / "s.duckdb").exists()
