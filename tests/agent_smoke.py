"""Smoke test of the node agent's install, for interpreters the full suite does not run on.

``make test`` runs the whole suite on Python 3.11 and, for 3.12 and 3.13, installs the
``agent`` extra alone into a fresh virtual environment and runs this script with it (no
pytest there: the agent's install carries no test tools). It checks what a GPU node needs:

1. the install is the agent's (``--slim``): none of the packages the agent must not carry
   (:data:`FORBIDDEN`) can even be found;
2. a real ``sits-observe-agent`` process (the agent image's entry point) reads a
   dcgm-exporter body from a file, ships a batch to a stub service on loopback with its
   bearer token, the batch decodes to ``gpu_samples`` rows of this node, and the agent exits
   0 on SIGTERM.

Anything else is a failure with a one-line reason on stderr and exit status 1. Also run by
``tests/integration/test_install_smoke.py`` under the suite's own interpreter.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import queue
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

#: Top-level packages a node agent's install must not contain (docs/install.md, "Images").
FORBIDDEN = ("duckdb", "polars", "streamlit", "sklearn", "kmock", "fastapi", "uvicorn", "pandas")
NODE = "smoke-node"
WAIT_S = 60.0

_GPUS = (
    ('gpu="0",UUID="GPU-00000000-0000-0000-0000-000000000001",device="nvidia0"', 37, 1024),
    ('gpu="1",UUID="GPU-00000000-0000-0000-0000-000000000002",device="nvidia1"', 0, 0),
)
_NODE_LABELS = f'modelName="NVIDIA L4",Hostname="{NODE}"'
#: Two L4s as dcgm-exporter labels them: utilisation (%) and framebuffer used (MiB).
DCGM_BODY = "".join(
    f"# TYPE {family} gauge\n"
    + "".join(f"{family}{{{gpu},{_NODE_LABELS}}} {values[i]}\n" for gpu, *values in _GPUS)
    for i, family in enumerate(("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED"))
)


class Failed(Exception):
    """The smoke test failed; the message says why."""


def check_slim() -> None:
    found = [name for name in FORBIDDEN if importlib.util.find_spec(name) is not None]
    if found:
        raise Failed(f"the agent's install carries {', '.join(found)}")


def stub_service(
    token: str,
) -> tuple[ThreadingHTTPServer, queue.Queue[tuple[dict[str, str], bytes]]]:
    """A service that takes ingest batches with the right token and hands them to a queue."""
    batches: queue.Queue[tuple[dict[str, str], bytes]] = queue.Queue()

    class Ingest(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if self.path != "/api/v1/ingest" or self.headers.get("Authorization") != (
                f"Bearer {token}"
            ):
                self.send_response(401)
                self.end_headers()
                return
            batches.put((dict(self.headers.items()), body))
            answer = b'{"stored": true, "duplicate": false}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Ingest)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, batches


def agent_command() -> list[str]:
    """The agent image's entry point, beside this interpreter (a venv's bin/)."""
    entry = Path(sys.executable).with_name("sits-observe-agent")
    if not entry.is_file():
        raise Failed(f"{entry} is missing: the install has no sits-observe-agent entry point")
    return [str(entry)]


def run_agent(work: Path) -> None:
    token = secrets.token_hex(16)
    (work / "token").write_text(token, encoding="utf-8")
    dcgm = work / "dcgm.prom"
    dcgm.write_text(DCGM_BODY, encoding="utf-8")
    server, batches = stub_service(token)
    url = f"http://127.0.0.1:{server.server_address[1]}"
    args = [
        *agent_command(),
        f"--service={url}",
        f"--node={NODE}",
        f"--token-file={work / 'token'}",
        f"--dcgm-url={dcgm}",
        "--no-nvml",
        "--interval-s=0.5",
        f"--spool-dir={work / 'spool'}",
        "--log-level=warning",
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    proc = subprocess.Popen(args, env=env, stderr=subprocess.PIPE, text=True)
    try:
        try:
            headers, body = batches.get(timeout=WAIT_S)
        except queue.Empty:
            proc.poll()
            raise Failed(
                f"no batch within {WAIT_S:.0f} s (agent exit status {proc.returncode})"
            ) from None
        check_batch(headers, body)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            _, stderr = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, stderr = proc.communicate()
        server.shutdown()
    if proc.returncode != 0:
        raise Failed(f"agent exited {proc.returncode} on SIGTERM: {stderr.strip()[-500:]}")


def check_batch(headers: dict[str, str], body: bytes) -> None:
    from sits_observe.collectors.agent.wire import HEADER_NODE, decode_batch

    if headers.get(HEADER_NODE) != NODE:
        raise Failed(f"batch from node {headers.get(HEADER_NODE)!r}, expected {NODE!r}")
    tables = decode_batch(body)
    gpu = tables.get("gpu_samples")
    if gpu is None or gpu.num_rows == 0:
        raise Failed(f"the batch holds no gpu_samples rows (tables: {sorted(tables)})")
    nodes = set(gpu.column("node").to_pylist())
    if nodes != {NODE}:
        raise Failed(f"gpu_samples rows of nodes {sorted(nodes)}, expected only {NODE}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--slim",
        action="store_true",
        help="also fail when a package the agent must not carry is found",
    )
    args = parser.parse_args()
    version = ".".join(map(str, sys.version_info[:3]))
    try:
        if args.slim:
            check_slim()
        import sits_observe.surfaces.cli.agent  # noqa: F401  (the import the image runs)

        with tempfile.TemporaryDirectory(prefix="sits-agent-smoke-") as tmp:
            run_agent(Path(tmp))
    except Failed as exc:
        print(f"agent smoke test on Python {version}: FAILED: {exc}", file=sys.stderr)
        return 1
    print(f"agent smoke test on Python {version}: passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
