"""The DCGM collector and ``sits-observe ingest dcgm`` over real HTTP on 127.0.0.1.

A ``http.server`` in a thread (port 0) serves the real dcgm-exporter captures in
``../shared/data/dcgm`` and a few broken endpoints: one that never answers, one that drips a
byte at a time, one that answers 500, bodies over the size limit (with and without a
``Content-Length``), and bodies cut short. A dead endpoint is a port nothing listens on.
Timeouts are short, so a hang shows up as a failure, not as a stuck suite.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sits_observe.collectors.dcgm import UNMAPPED_FAMILY, UNTERMINATED, parse_dcgm
from sits_observe.collectors.dcgm_collector import DcgmCollector
from sits_observe.collectors.http import fetch_text, new_client
from sits_observe.domain.schema.dcgm_fields import MIB
from sits_observe.errors import CollectorError
from sits_observe.store import Store
from sits_observe.surfaces.cli.main import app

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
L4 = 'gpu="0",UUID="GPU-l4",Hostname="node-a"'
CUT_BODY = f"DCGM_FI_DEV_GPU_TEMP{{{L4}}} 40\nDCGM_FI_DEV_POWER_USAGE{{{L4}}} 16.3".encode()


class Handler(BaseHTTPRequestHandler):
    """Real files under /dcgm/<name>, and the broken endpoints the tests need."""

    data_dir: Path
    release: threading.Event

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: the test output is the assertions."""

    def _send(self, body: bytes, *, length: int | None = None, status: int = 200) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body) if length is None else length))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        path = self.path
        if path.startswith("/dcgm/"):
            file = self.data_dir / path.removeprefix("/dcgm/")
            if not file.is_file():
                self._send(b"not found", status=404)
                return
            self._send(file.read_bytes())
        elif path == "/hang":
            self.release.wait(30)  # accept, read the request, never answer
        elif path == "/drip":
            self.send_response(200)
            self.send_header("Content-Length", "1000")
            self.end_headers()
            for _ in range(1000):
                if self.release.wait(0.1):
                    return
                self.wfile.write(b"#")
                self.wfile.flush()
        elif path == "/error":
            self._send(b"exporter broke", status=500)
        elif path == "/huge":
            self._send(b"# padding\n" * 2000)
        elif path == "/huge-streamed":
            self.send_response(200)
            self.end_headers()  # no Content-Length: the body ends when the connection closes
            self.close_connection = True
            for _ in range(200):
                self.wfile.write(b"# padding\n" * 10)
        elif path == "/short":
            self._send(b"DCGM_FI_DEV_GPU_TEMP", length=5000)  # promises more than it sends
            self.close_connection = True
        elif path == "/cut":
            self._send(CUT_BODY)
        else:
            self._send(b"no such endpoint", status=404)


class QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        """A client that hangs up early (the size limit, a timeout) is the test's point."""


@pytest.fixture
def server(shared_data: Path) -> Iterator[str]:
    release = threading.Event()
    handler = type(
        "BoundHandler", (Handler,), {"data_dir": shared_data / "dcgm", "release": release}
    )
    httpd = QuietServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        release.set()
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)


def dead_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/metrics"  # closed again: nothing listens there


# -- real captures over HTTP ----------------------------------------------------------------


@pytest.mark.shared_data
def test_every_capture_scraped_equals_the_file_read(server: str, shared_data: Path) -> None:
    """Checks every ``../shared/data/dcgm/*.prom``, served over HTTP and scraped."""
    paths = sorted((shared_data / "dcgm").glob("*.prom"))
    assert paths
    with new_client(2.0) as client:
        for path in paths:
            scraped = DcgmCollector(f"{server}/dcgm/{path.name}", client=client).collect(NOW)
            local = parse_dcgm(path.read_text(encoding="utf-8"), now=NOW, node=None)
            assert scraped.tables["gpu_samples"].equals(local.tables["gpu_samples"]), path.name
            assert scraped.dropped == local.dropped, path.name
            assert scraped.tables["gpu_samples"].num_rows > 0


@pytest.mark.shared_data
def test_collector_opens_and_closes_its_own_client(server: str) -> None:
    """Checks ``l4-kops-aws-default-counters.prom`` through a collector without a client."""
    collector = DcgmCollector(f"{server}/dcgm/l4-kops-aws-default-counters.prom", node="n1")
    try:
        (row,) = collector.collect(NOW).tables["gpu_samples"].to_pylist()
    finally:
        collector.close()
    assert (row["node"], row["fb_total_bytes"]) == ("n1", 23033 * MIB)


# -- broken endpoints -----------------------------------------------------------------------


def test_hanging_endpoint_times_out_promptly(server: str) -> None:
    started = time.monotonic()
    with new_client(0.5) as client, pytest.raises(CollectorError, match="timed out"):
        DcgmCollector(f"{server}/hang", client=client).collect(NOW)
    assert time.monotonic() - started < 10  # 0.5 s asked; a hang would hit pytest's timeout


def test_dripping_endpoint_hits_the_whole_scrape_deadline(server: str) -> None:
    started = time.monotonic()
    with new_client(0.5) as client, pytest.raises(CollectorError, match=r"longer than 0\.5 s"):
        fetch_text(client, f"{server}/drip")
    assert time.monotonic() - started < 10  # each byte beats the read timeout; the total must not


def test_dead_endpoint_is_a_collector_error() -> None:
    with new_client(1.0) as client, pytest.raises(CollectorError, match="failed"):
        DcgmCollector(dead_url(), client=client).collect(NOW)


def test_http_error_status_is_a_collector_error(server: str) -> None:
    with new_client(1.0) as client:
        with pytest.raises(CollectorError, match="answered HTTP 500"):
            DcgmCollector(f"{server}/error", client=client).collect(NOW)
        with pytest.raises(CollectorError, match="answered HTTP 404"):
            DcgmCollector(f"{server}/dcgm/nothing.prom", client=client).collect(NOW)


@pytest.mark.parametrize("path", ["/huge", "/huge-streamed"])
def test_oversized_body_is_a_collector_error(server: str, path: str) -> None:
    with new_client(2.0) as client, pytest.raises(CollectorError, match="exceeds 1000 bytes"):
        DcgmCollector(f"{server}{path}", client=client, max_bytes=1000).collect(NOW)


def test_body_shorter_than_promised_is_a_collector_error(server: str) -> None:
    with new_client(2.0) as client, pytest.raises(CollectorError, match="failed"):
        DcgmCollector(f"{server}/short", client=client).collect(NOW)


def test_body_cut_mid_line_keeps_the_complete_lines(server: str) -> None:
    with new_client(2.0) as client:
        result = DcgmCollector(f"{server}/cut", client=client).collect(NOW)
    (row,) = result.tables["gpu_samples"].to_pylist()
    assert row["gpu_temp_c"] == 40.0 and row["power_w"] is None  # not the cut "16.3"
    assert result.dropped == {UNTERMINATED: 1}


# -- the CLI --------------------------------------------------------------------------------


@pytest.mark.shared_data
def test_cli_ingests_a_url_into_duckdb(server: str, tmp_path: Path) -> None:
    """Checks ``h100-k8s-sampled.prom`` scraped by ``sits-observe ingest dcgm URL``."""
    db = tmp_path / "sits.duckdb"
    url = f"{server}/dcgm/h100-k8s-sampled.prom"
    result = CliRunner().invoke(app, ["ingest", "dcgm", url, "--db", str(db), "--timeout-s", "2"])
    assert result.exit_code == 0, result.output
    assert "gpu_samples" in result.output and "rejected: nothing" in result.output
    with Store.open(db, read_only=True) as store:
        assert store.count("gpu_samples") == 8
        assert store.count("collector_drops") == 0
        pods = store.query(
            "SELECT gpu_index, namespace, pod, container FROM gpu_samples "
            "WHERE pod IS NOT NULL ORDER BY gpu_index"
        ).to_pylist()
    assert pods == [
        {
            "gpu_index": 0,
            "namespace": "dynamo-workload",
            "pod": "vllm-agg-0-vllmdecodeworker-s65j5",
            "container": "main",
        }
    ]


@pytest.mark.shared_data
def test_cli_ingests_a_file_and_records_rejections(shared_data: Path, tmp_path: Path) -> None:
    """Checks ``l4-kops-aws-default-counters.prom`` read by ``sits-observe ingest dcgm FILE``."""
    db = tmp_path / "sits.duckdb"
    prom = shared_data / "dcgm" / "l4-kops-aws-default-counters.prom"
    args = ["ingest", "dcgm", str(prom), "--db", str(db), "--node", "kube-l4"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert UNMAPPED_FAMILY in result.output
    with Store.open(db, read_only=True) as store:
        (row,) = store.query(
            "SELECT node, fb_free_bytes, fb_reserved_bytes, fb_total_bytes, source FROM gpu_samples"
        ).to_pylist()
        drops = store.query(
            "SELECT node, collector, reason, count FROM collector_drops"
        ).to_pylist()
    assert row == {
        "node": "kube-l4",
        "fb_free_bytes": 22563 * MIB,
        "fb_reserved_bytes": 470 * MIB,
        "fb_total_bytes": 23033 * MIB,
        "source": "dcgm",
    }
    assert drops == []  # the 7 samples of families without a column are ignored, not bad


def test_cli_reports_a_dead_endpoint_and_exits_2(tmp_path: Path) -> None:
    db = tmp_path / "sits.duckdb"
    result = CliRunner().invoke(
        app, ["ingest", "dcgm", dead_url(), "--db", str(db), "--timeout-s", "1"]
    )
    assert result.exit_code == 2
    assert "error:" in result.output and "Connection refused" in result.output
    assert not db.exists()  # nothing was opened or stored
