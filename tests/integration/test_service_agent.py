"""The service and the agent as real processes on loopback, with real DuckDB files.

Faults: a wrong token, a 10 MB body, a malformed body, a replayed batch id, the service
stopped (SIGTERM) or killed (SIGKILL) while an agent keeps sending, and a spool that fills.
Every row the agent produced must arrive exactly once; counts are exact.
"""

from __future__ import annotations

import http.server
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path

import httpx
import pyarrow as pa
import pytest

from sits_observe.collectors.agent import AgentLoop, AgentMetrics, Shipper, Spool
from sits_observe.collectors.agent.wire import CONTENT_TYPE, encode_batch
from sits_observe.domain.collect import CollectResult
from sits_observe.store import Store

TOKEN = "integration-token-123"
READY_TIMEOUT_S = 60.0

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cli_command() -> list[str]:
    """The installed ``sits-observe`` entry point (what users run)."""
    script = Path(sys.executable).with_name("sits-observe")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "from sits_observe.surfaces.cli.main import main; main()"]


def wait_until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


class ServiceProcess:
    """``sits-observe serve`` as a child process on a fixed loopback port."""

    def __init__(self, tmp_path: Path, *, db: Path | None = None, port: int | None = None) -> None:
        self.db = db or tmp_path / "service.duckdb"
        self.port = port or free_port()
        self.token_file = tmp_path / "token"
        self.token_file.write_text(TOKEN + "\n")
        self.log = tmp_path / "service.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ServiceProcess:
        args = [
            *cli_command(),
            "serve",
            "--db",
            str(self.db),
            "--port",
            str(self.port),
            "--token-file",
            str(self.token_file),
            "--log-level",
            "warning",
        ]
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        self.wait_ready()
        return self

    def wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"service exited with {self.proc.returncode}:\n{self.logs()}")
            try:
                if httpx.get(self.url + "/readyz", timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"service not ready after {READY_TIMEOUT_S} s:\n{self.logs()}")

    def signal(self, signum: int) -> int:
        """Send ``signum`` and wait for the process to end; returns its exit code."""
        assert self.proc is not None
        self.proc.send_signal(signum)
        return self.proc.wait(timeout=30)

    def stop(self) -> None:
        """Always safe: SIGTERM, then SIGKILL if it lingers."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def logs(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


@pytest.fixture
def service(tmp_path: Path) -> Iterator[ServiceProcess]:
    svc = ServiceProcess(tmp_path)
    try:
        yield svc.start()
    finally:
        svc.stop()


def auth_headers(batch_id: str | None = None) -> dict[str, str]:
    return {
        "Authorization": f"Bearer {TOKEN}",
        "Content-Type": CONTENT_TYPE,
        "X-Sits-Batch-Id": batch_id or uuid.uuid4().hex,
        "X-Sits-Node": "it-node",
    }


def gpu_batch(marker: str, rows: int = 3) -> bytes:
    return encode_batch(
        {
            "gpu_samples": pa.table(
                {
                    "ts": pa.array([datetime(2026, 11, 1, 12)] * rows, pa.timestamp("us")),
                    "node": ["it-node"] * rows,
                    "gpu_uuid": [marker] * rows,
                    "fb_used_bytes": list(range(rows)),
                }
            )
        }
    )


class CountingGpus:
    """A collector producing ``gpus`` rows per call; counts what it produced (thread-safe)."""

    name = "counting-gpus"

    def __init__(self, gpus: int = 4) -> None:
        self.gpus = gpus
        self.rows = 0
        self.calls = 0
        self._lock = threading.Lock()

    def collect(self, now: datetime) -> CollectResult:
        with self._lock:
            self.calls += 1
            call = self.calls
            self.rows += self.gpus
        n = self.gpus
        table = pa.table(
            {
                "ts": pa.array([now.replace(tzinfo=None)] * n, pa.timestamp("us")),
                "node": ["agent-node"] * n,
                "gpu_uuid": [f"GPU-{i}" for i in range(n)],
                "fb_used_bytes": [call * 100 + i for i in range(n)],
            }
        )
        return CollectResult({"gpu_samples": table})


def agent_loop(
    url: str, spool_dir: Path, collector: CountingGpus, *, max_files: int = 10_000
) -> AgentLoop:
    stop = threading.Event()
    shipper = Shipper(
        url, TOKEN, node="agent-node", timeout_s=2.0, retries=1, backoff_s=0.05, stop_event=stop
    )
    return AgentLoop(
        [collector],
        shipper,
        Spool(spool_dir, max_bytes=50_000_000, max_files=max_files),
        interval_s=0.05,
        node="agent-node",
        metrics=AgentMetrics(),
        stop_event=stop,
    )


def metric(loop: AgentLoop, name: str, **labels: str) -> float:
    return loop.metrics.registry.get_sample_value(name, labels) or 0.0


# -- the service alone ---------------------------------------------------------------------


def test_wrong_or_missing_token_is_refused(service: ServiceProcess) -> None:
    body = gpu_batch("x")
    for auth in ({}, {"Authorization": "Bearer not-the-token"}):
        h = auth_headers()
        del h["Authorization"]
        answer = httpx.post(service.url + "/api/v1/ingest", content=body, headers=h | auth)
        assert answer.status_code == 401
        assert answer.headers["www-authenticate"].startswith("Bearer")


def test_ten_megabyte_body_is_413_and_the_service_keeps_serving(service: ServiceProcess) -> None:
    big = os.urandom(10 * 1000 * 1000)
    answer = httpx.post(
        service.url + "/api/v1/ingest", content=big, headers=auth_headers(), timeout=30
    )
    assert answer.status_code == 413

    def chunks() -> Iterator[bytes]:
        for start in range(0, len(big), 256 * 1024):
            yield big[start : start + 256 * 1024]

    streamed = httpx.post(
        service.url + "/api/v1/ingest", content=chunks(), headers=auth_headers(), timeout=30
    )
    assert streamed.status_code == 413
    assert httpx.get(service.url + "/healthz").status_code == 200
    assert httpx.get(service.url + "/readyz").status_code == 200
    ok = httpx.post(service.url + "/api/v1/ingest", content=gpu_batch("ok"), headers=auth_headers())
    assert ok.status_code == 200 and ok.json()["rows"] == 3


def test_malformed_body_is_400(service: ServiceProcess) -> None:
    for body in (b"\x00" * 100, gpu_batch("t")[:-40]):
        answer = httpx.post(service.url + "/api/v1/ingest", content=body, headers=auth_headers())
        assert answer.status_code == 400 and answer.json()["reason"] == "undecodable"
    assert httpx.get(service.url + "/healthz").status_code == 200


def test_a_batch_id_sent_twice_is_stored_once(service: ServiceProcess) -> None:
    body = gpu_batch("dup", rows=5)
    answers = [
        httpx.post(service.url + "/api/v1/ingest", content=body, headers=auth_headers("dup-1"))
        for _ in range(3)
    ]
    assert [a.json()["duplicate"] for a in answers] == [False, True, True]
    text = httpx.get(service.url + "/metrics").text
    assert 'sits_ingest_batches_total{result="duplicate"} 2.0' in text
    service.stop()
    with Store.open(service.db, read_only=True) as store:
        assert store.count("gpu_samples") == 5
        assert store.count("ingest_batches") == 1


# -- the agent against a service that goes away ---------------------------------------------


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_agent_spools_through_a_service_outage_and_nothing_is_lost_or_doubled(
    tmp_path: Path, signum: int
) -> None:
    svc = ServiceProcess(tmp_path)
    collector = CountingGpus()
    loop = agent_loop(svc.url, tmp_path / "spool", collector)
    thread = threading.Thread(target=loop.run, daemon=True)
    try:
        svc.start()
        thread.start()
        wait_until(
            lambda: metric(loop, "sits_agent_batches_total", result="shipped") >= 5,
            30,
            "first batches shipped",
        )
        svc.signal(signum)
        wait_until(lambda: len(loop._spool) >= 5, 30, "batches spooled during the outage")
        svc.start()
        wait_until(
            lambda: metric(loop, "sits_agent_batches_total", result="replayed") >= 5,
            60,
            "spooled batches replayed",
        )
        shipped = metric(loop, "sits_agent_batches_total", result="shipped")
        wait_until(
            lambda: metric(loop, "sits_agent_batches_total", result="shipped") >= shipped + 3,
            30,
            "new batches shipped after the replay",
        )
        loop.stop()
        thread.join(timeout=30)
        assert not thread.is_alive()
        assert len(loop._spool) == 0
    finally:
        loop.stop()
        svc.stop()
    assert metric(loop, "sits_agent_samples_dropped_total", reason="spool_full") == 0
    with Store.open(svc.db, read_only=True) as store:
        assert store.count("gpu_samples") == collector.rows
        batches = store.count("ingest_batches")
        assert batches == store.scalar("SELECT count(DISTINCT batch_id) FROM ingest_batches")
        assert store.scalar("SELECT sum(rows) FROM ingest_batches") == collector.rows
        # Each collect call is one batch with fb_used_bytes = call * 100 + gpu: no call twice.
        assert (
            store.scalar(
                "SELECT count(*) FROM (SELECT fb_used_bytes FROM gpu_samples "
                "GROUP BY fb_used_bytes HAVING count(*) > 1)"
            )
            == 0
        )
        assert batches == collector.calls


def test_spool_bound_drops_the_oldest_batches_and_counts_them(tmp_path: Path) -> None:
    svc = ServiceProcess(tmp_path)  # not started yet: the agent finds nobody listening
    collector = CountingGpus(gpus=2)
    loop = agent_loop(svc.url, tmp_path / "spool", collector, max_files=3)
    for _ in range(8):
        assert loop.tick().result == "spooled"
    kept = [e.batch_id for e in loop._spool.entries()]
    assert len(kept) == 3 and len(list((tmp_path / "spool").glob("*.batch"))) == 3
    assert metric(loop, "sits_agent_batches_total", result="evicted") == 5
    assert metric(loop, "sits_agent_samples_dropped_total", reason="spool_full") == 10
    try:
        svc.start()
        report = loop.tick()
        assert report.replayed == 3 and report.result == "shipped"
    finally:
        svc.stop()
    with Store.open(svc.db, read_only=True) as store:
        stored = store.query("SELECT batch_id FROM ingest_batches").column(0).to_pylist()
        assert set(kept) <= set(stored) and len(stored) == 4
        assert store.count("gpu_samples") == 8


# -- the real CLI agent ---------------------------------------------------------------------


@pytest.mark.shared_data
def test_cli_agent_ships_a_real_dcgm_body_and_stops_on_sigterm(
    service: ServiceProcess, tmp_path: Path, shared_data: Path
) -> None:
    pytest.importorskip("sits_observe.collectors.dcgm")
    prom = shared_data / "dcgm" / "l4-kops-aws-default-counters.prom"
    metrics_port = free_port()
    log = tmp_path / "agent.log"
    env = {**os.environ, "SITS_TOKEN": TOKEN}
    args = [
        *cli_command(),
        "agent",
        "--service",
        service.url,
        "--node",
        "l4-node",
        "--interval-s",
        "0.2",
        "--dcgm-url",
        str(prom),
        "--no-nvml",
        "--spool-dir",
        str(tmp_path / "agent-spool"),
        "--metrics-port",
        str(metrics_port),
    ]
    with log.open("wb") as out:
        agent = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    try:

        def gpu_rows() -> int:
            answer = httpx.get(service.url + "/api/v1/tables", headers=auth)
            return int(answer.json()["tables"]["gpu_samples"])

        wait_until(lambda: agent.poll() is not None or gpu_rows() >= 3, 60, "agent rows")
        assert agent.poll() is None, log.read_text()
        text = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics").text
        assert "sits_agent_samples_shipped_total" in text
        agent.send_signal(signal.SIGTERM)
        assert agent.wait(timeout=30) == 0, log.read_text()
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait(timeout=10)
    rows = httpx.get(
        service.url + "/api/v1/tables/gpu_samples", params={"format": "json"}, headers=auth
    ).json()
    assert {r["node"] for r in rows} == {"l4-node"}
    assert {r["model_name"] for r in rows} == {"NVIDIA L4"}
    assert {r["gpu_uuid"] for r in rows} == {"GPU-c2f76b33-7953-256e-8f33-1343419b1a1c"}


# -- a poison batch: one the service cannot take, while it takes the others ------------------


class PoisonService:
    """A real HTTP server on loopback that answers ``poison_status`` to the batch ids in
    ``poison`` (every batch when it is None; the first id it sees when "first") and stores
    every other batch."""

    def __init__(
        self, poison: set[str] | str | None, *, poison_status: int = 500, port: int = 0
    ) -> None:
        self.poison = poison
        self.poison_status = poison_status
        self.stored: list[str] = []
        self.attempts: list[str] = []
        self._lock = threading.Lock()
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                batch_id = self.headers["X-Sits-Batch-Id"]
                status = owner.answer(batch_id)
                body = json.dumps({"batch_id": batch_id, "duplicate": False}).encode()
                if status != 200:
                    body = json.dumps({"detail": "Internal Server Error"}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                return

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def answer(self, batch_id: str) -> int:
        with self._lock:
            self.attempts.append(batch_id)
            if self.poison == "first":
                self.poison = {batch_id}
            if self.poison is None or batch_id in self.poison:
                return self.poison_status
            if batch_id not in self.stored:
                self.stored.append(batch_id)
            return 200

    def __enter__(self) -> PoisonService:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


def quarantine_loop(url: str, tmp_path: Path, *, after: int) -> AgentLoop:
    """An agent loop on ``url`` whose batch ids are batch-0000, batch-0001, ..."""
    ids = iter(f"batch-{i:04d}" for i in range(10_000))
    return AgentLoop(
        [CountingGpus(gpus=2)],
        Shipper(url, TOKEN, node="agent-node", timeout_s=2.0, retries=1, backoff_s=0.01),
        Spool(tmp_path / "spool", max_bytes=50_000_000, max_files=1000),
        interval_s=1.0,
        node="agent-node",
        dead_letter=Spool(tmp_path / "spool" / "dead-letter", max_bytes=10**7, max_files=10),
        quarantine=Spool(tmp_path / "spool" / "quarantine", max_bytes=10**7, max_files=10),
        quarantine_after_failures=after,
        metrics=AgentMetrics(),
        batch_ids=lambda: next(ids),
    )


def test_a_poison_batch_is_quarantined_and_newer_batches_keep_flowing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with PoisonService({"batch-0000"}) as svc, caplog.at_level(logging.WARNING):
        loop = quarantine_loop(svc.url, tmp_path, after=3)
        reports = [loop.tick() for _ in range(8)]
    # The poison batch failed on the first tick (no evidence yet that it, not the service, is
    # at fault), then three times while newer batches were stored: quarantined on tick 4.
    assert reports[0].result == "spooled"
    assert [r.result for r in reports[1:]] == ["shipped"] * 7
    assert svc.stored == [f"batch-{i:04d}" for i in range(1, 8)]
    assert len(loop._spool) == 0
    (kept,) = Spool(tmp_path / "spool" / "quarantine", max_bytes=10**7, max_files=10).entries()
    assert (kept.batch_id, kept.rows) == ("batch-0000", 2)
    tries = svc.attempts.count("batch-0000")
    assert tries <= 2 + 3  # first tick with one retry, then one try per tick, then never again
    assert metric(loop, "sits_agent_batches_quarantined_total") == 1
    assert metric(loop, "sits_agent_samples_dropped_total", reason="quarantined") == 2
    assert caplog.text.count("quarantined") == 1
    assert metric(loop, "sits_agent_spool_batches") == 0


def test_a_poison_batch_ahead_of_others_does_not_stop_the_replay(tmp_path: Path) -> None:
    port = free_port()
    loop = quarantine_loop(f"http://127.0.0.1:{port}", tmp_path, after=2)
    for _ in range(4):  # an outage first: four batches spooled, the oldest is the poison one
        assert loop.tick().result == "spooled"
    with PoisonService({"batch-0000"}, port=port) as svc:
        first = loop.tick()
        assert first.replayed == 3 and first.result == "shipped"
        loop.tick()
    assert svc.stored == [f"batch-{i:04d}" for i in range(1, 6)]
    quarantined = Spool(tmp_path / "spool" / "quarantine", max_bytes=10**7, max_files=10)
    assert [e.batch_id for e in quarantined.entries()] == ["batch-0000"]


@pytest.mark.parametrize("status", [500, 503])
def test_a_service_failing_every_batch_quarantines_nothing(tmp_path: Path, status: int) -> None:
    with PoisonService(None, poison_status=status) as svc:
        loop = quarantine_loop(svc.url, tmp_path, after=2)
        for _ in range(10):
            assert loop.tick().result == "spooled"
        per_tick = len(svc.attempts) / 10
    assert len(loop._spool) == 10
    assert metric(loop, "sits_agent_batches_quarantined_total") == 0
    assert not list((tmp_path / "spool" / "quarantine").glob("*.batch"))
    assert per_tick <= 5  # a few probes per tick, not the whole spool


def test_an_outage_quarantines_nothing(tmp_path: Path) -> None:
    loop = quarantine_loop(f"http://127.0.0.1:{free_port()}", tmp_path, after=1)
    for _ in range(10):
        assert loop.tick().result == "spooled"
    assert len(loop._spool) == 10
    assert metric(loop, "sits_agent_batches_quarantined_total") == 0
    assert not list((tmp_path / "spool" / "quarantine").glob("*.batch"))


def test_cli_agent_quarantines_a_poison_batch(tmp_path: Path) -> None:
    """The real ``agent`` command: the quarantine directory sits beside the dead letters and
    ``--quarantine-after-failures`` sets N."""
    dcgm = tmp_path / "dcgm.prom"
    dcgm.write_text(
        'DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-0",modelName="NVIDIA L4",Hostname="n1"} 1024\n'
    )
    spool = tmp_path / "agent-spool"
    metrics_port = free_port()
    with PoisonService("first") as svc:
        args = [sys.executable, "-m", "sits_observe.surfaces.cli.agent", "--service", svc.url]
        args += ["--node", "n1", "--dcgm-url", str(dcgm), "--no-nvml", "--interval-s", "0.2"]
        args += ["--spool-dir", str(spool), "--quarantine-after-failures", "2"]
        args += ["--ship-retries", "0", "--metrics-port", str(metrics_port)]
        log = tmp_path / "agent.log"
        with log.open("wb") as out:
            agent = subprocess.Popen(
                args, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "SITS_TOKEN": TOKEN}
            )
        try:
            wait_until(
                lambda: (
                    agent.poll() is not None
                    or (
                        len(list((spool / "quarantine").glob("*.batch"))) == 1
                        and len(svc.stored) >= 3
                    )
                ),
                60,
                "the poison batch quarantined and newer batches stored",
            )
            assert agent.poll() is None, log.read_text()
            text = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics").text
            assert "sits_agent_batches_quarantined_total 1.0" in text
            agent.send_signal(signal.SIGTERM)
            assert agent.wait(timeout=30) == 0, log.read_text()
        finally:
            if agent.poll() is None:
                agent.kill()
                agent.wait(timeout=10)
    (kept,) = (spool / "quarantine").glob("*.batch")
    assert isinstance(svc.poison, set) and kept.name.endswith(f"_{svc.poison.pop()}.batch")
    assert not list(spool.glob("*.batch"))
