"""Spans out: ``serve`` and ``agent`` export their pipeline spans over OTLP/HTTP.

A small loopback OTLP receiver (http.server + opentelemetry-proto) stands in for the
collector. The real CLI runs as child processes with ``--otlp-endpoint`` (and, for the
agent, the standard ``OTEL_EXPORTER_OTLP_ENDPOINT`` variable): an ingest, a ``/metrics``
scrape and agent ticks must arrive as spans named ``sits.ingest``, ``sits.analyse`` and
``sits.scrape`` with their ``scheduler.task.type``, the agent's spool depth as
``scheduler.task.queue.depth``, and the ``service.name`` of each process.
"""

from __future__ import annotations

import gzip
import os
import signal
import subprocess
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pyarrow as pa
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from sits_observe.collectors.agent.wire import (
    CONTENT_TYPE,
    HEADER_BATCH_ID,
    HEADER_NODE,
    encode_batch,
)
from sits_observe.tracing import QUEUE_DEPTH, TASK_TYPE
from tests.integration.test_service_agent import (
    TOKEN,
    ServiceProcess,
    cli_command,
    free_port,
    wait_until,
)

pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class ReceivedSpan:
    """One span as the receiver decoded it, with its resource's attributes."""

    name: str
    attributes: dict[str, object]
    resource: dict[str, object]
    error: bool


def _value(value: AnyValue) -> object:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None


class SpanReceiver:
    """An OTLP/HTTP trace receiver on 127.0.0.1 that keeps every span it is sent."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.requests = 0
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                export = ExportTraceServiceRequest.FromString(body)
                receiver.add(export)
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200 if self.path == "/v1/traces" else 404)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def add(self, export: ExportTraceServiceRequest) -> None:
        with self._lock:
            self.requests += 1
            for resource_spans in export.resource_spans:
                resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
                for scope in resource_spans.scope_spans:
                    for span in scope.spans:
                        attributes = {a.key: _value(a.value) for a in span.attributes}
                        error = span.status.code == span.status.STATUS_CODE_ERROR
                        self.spans.append(ReceivedSpan(span.name, attributes, resource, error))

    def named(self, name: str) -> list[ReceivedSpan]:
        with self._lock:
            return [s for s in self.spans if s.name == name]

    def __enter__(self) -> SpanReceiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[SpanReceiver]:
    with SpanReceiver() as r:
        yield r


def one_gpu_batch() -> bytes:
    table = pa.table(
        {
            "ts": pa.array([1_767_225_600_000_000], pa.timestamp("us")),
            "node": ["n1"],
            "gpu_uuid": ["GPU-1"],
            "fb_used_bytes": pa.array([1024], pa.int64()),
        }
    )
    return encode_batch({"gpu_samples": table})


def test_serve_exports_ingest_and_analyse_spans(tmp_path: Path, receiver: SpanReceiver) -> None:
    service = ServiceProcess(tmp_path)
    try:
        start_with_flags(service, ["--otlp-endpoint", receiver.url])
        answer = httpx.post(
            service.url + "/api/v1/ingest",
            content=one_gpu_batch(),
            headers={
                "Authorization": f"Bearer {TOKEN}",
                "Content-Type": CONTENT_TYPE,
                HEADER_BATCH_ID: uuid.uuid4().hex,
                HEADER_NODE: "n1",
            },
        )
        assert answer.status_code == 200, answer.text
        refused = httpx.post(service.url + "/api/v1/ingest", content=b"x")
        assert refused.status_code == 401
        assert httpx.get(service.url + "/metrics").status_code == 200
        # SIGTERM: uvicorn drains, the process exits, the SDK flushes its queue at exit.
        assert service.signal(signal.SIGTERM) == 0, service.logs()
    finally:
        service.stop()
    ingest = receiver.named("sits.ingest")
    assert len(ingest) == 2, receiver.spans
    stored = next(s for s in ingest if "sits.ingest.rows" in s.attributes)
    assert stored.attributes[TASK_TYPE] == "ingest"
    assert stored.attributes["sits.ingest.rows"] == 1
    assert stored.resource["service.name"] == "sits-observe-serve"
    assert any(s.attributes.get("sits.ingest.refused") == "unauthorized" for s in ingest)
    analyse = receiver.named("sits.analyse")
    assert analyse and {s.attributes[TASK_TYPE] for s in analyse} == {"analyse"}


def start_with_flags(service: ServiceProcess, extra: list[str]) -> None:
    """``ServiceProcess.start`` with extra ``serve`` flags."""
    args = [
        *cli_command(),
        "serve",
        "--db",
        str(service.db),
        "--port",
        str(service.port),
        "--token-file",
        str(service.token_file),
        "--log-level",
        "warning",
        *extra,
    ]
    with service.log.open("ab") as log:
        service.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    service.wait_ready()


DCGM_TEXT = """\
# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).
# TYPE DCGM_FI_DEV_FB_USED gauge
DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-0a1b",device="nvidia0",modelName="NVIDIA L4"} 2048
# HELP DCGM_FI_DEV_FB_FREE Framebuffer memory free (in MiB).
# TYPE DCGM_FI_DEV_FB_FREE gauge
DCGM_FI_DEV_FB_FREE{gpu="0",UUID="GPU-0a1b",device="nvidia0",modelName="NVIDIA L4"} 20000
"""


def test_agent_exports_scrape_spans_with_the_spool_depth(
    tmp_path: Path, receiver: SpanReceiver
) -> None:
    pytest.importorskip("sits_observe.collectors.dcgm")
    prom = tmp_path / "dcgm.prom"
    prom.write_text(DCGM_TEXT)
    log = tmp_path / "agent.log"
    # No service listens on this port: every batch is spooled, so the queue grows.
    dead_service = f"http://127.0.0.1:{free_port()}"
    env = {
        **os.environ,
        "SITS_TOKEN": TOKEN,
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,  # the standard variable, no flag
    }
    env.pop("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", None)
    env.pop("OTEL_SDK_DISABLED", None)
    env.pop("OTEL_SERVICE_NAME", None)
    args = [
        *cli_command(),
        "agent",
        "--service",
        dead_service,
        "--node",
        "n1",
        "--interval-s",
        "0.2",
        "--dcgm-url",
        str(prom),
        "--no-nvml",
        "--ship-retries",
        "0",
        "--spool-dir",
        str(tmp_path / "spool"),
    ]
    with log.open("wb") as out:
        agent = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        spool = tmp_path / "spool"
        wait_until(
            lambda: agent.poll() is not None or len(list(spool.glob("*.batch"))) >= 3,
            60,
            "three spooled batches",
        )
        assert agent.poll() is None, log.read_text()
        agent.send_signal(signal.SIGTERM)
        assert agent.wait(timeout=30) == 0, log.read_text()
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait(timeout=10)
    scrapes = receiver.named("sits.scrape")
    assert len(scrapes) >= 3, (receiver.spans, log.read_text())
    assert {s.attributes[TASK_TYPE] for s in scrapes} == {"scrape"}
    assert {s.attributes["sits.collector.name"] for s in scrapes} == {"dcgm"}
    depths = [s.attributes[QUEUE_DEPTH] for s in scrapes]
    # Each tick spools one more batch: the depth seen by the scrapes counts up from 0.
    assert depths[:3] == [0, 1, 2], depths
    resource = scrapes[0].resource
    assert resource["service.name"] == "sits-observe-agent"
    assert resource["k8s.node.name"] == "n1"
