"""``sits-observe serve`` as a real child process on loopback, and raw-socket clients.

Used by the ``test_service_*`` integration tests: the service is started exactly as users
start it (the installed entry point, flags, a token file, a DuckDB file in ``tmp_path``),
and its log is a file the tests read.
"""

from __future__ import annotations

import select
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

TOKEN = "service-limits-token"
READY_TIMEOUT_S = 60.0


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


class ServeProcess:
    """``sits-observe serve`` with extra flags; ``command`` replaces the entry point."""

    def __init__(
        self, tmp_path: Path, *flags: str, command: list[str] | None = None, name: str = "serve"
    ) -> None:
        self.db = tmp_path / f"{name}.duckdb"
        self.port = free_port()
        self.token_file = tmp_path / f"{name}.token"
        self.token_file.write_text(TOKEN + "\n", encoding="utf-8")
        self.log = tmp_path / f"{name}.log"
        self.flags = list(flags)
        self.command = command
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def args(self) -> list[str]:
        if self.command is not None:
            return self.command
        return [
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
            *self.flags,
        ]

    def start(self) -> ServeProcess:
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(self.args(), stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"serve exited with {self.proc.returncode}:\n{self.logs()}")
            try:
                if httpx.get(self.url + "/readyz", timeout=1.0).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"serve not ready after {READY_TIMEOUT_S} s:\n{self.logs()}")

    def stop(self) -> None:
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

    def metric(self, name: str, **labels: str) -> float:
        text = httpx.get(self.url + "/metrics", timeout=10).text
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and all(
                    sample.labels.get(k) == v for k, v in labels.items()
                ):
                    return float(sample.value)
        return 0.0


@contextmanager
def serving(tmp_path: Path, *flags: str) -> Iterator[ServeProcess]:
    service = ServeProcess(tmp_path, *flags)
    try:
        yield service.start()
    finally:
        service.stop()


def connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def read_until_closed(sock: socket.socket, timeout_s: float) -> tuple[bytes, bool]:
    """What the server sends until it closes (True) or ``timeout_s`` passes (False)."""
    data = b""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ready, _, _ = select.select([sock], [], [], 0.1)
        if not ready:
            continue
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return data, True
        if not chunk:
            return data, True
        data += chunk
    return data, False


def trickle(
    sock: socket.socket, data: bytes, period_s: float, timeout_s: float
) -> tuple[bytes, bool]:
    """Send ``data`` one byte every ``period_s`` (a slowloris client) until the server answers
    and closes (returns what it sent, True) or ``timeout_s`` passes (False)."""
    answer = b""
    deadline = time.monotonic() + timeout_s
    position = 0
    while time.monotonic() < deadline:
        if position < len(data):
            try:
                sock.send(data[position : position + 1])
            except OSError:
                return answer + read_until_closed(sock, 1.0)[0], True
            position += 1
        ready, _, _ = select.select([sock], [], [], period_s)
        if ready:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                return answer, True
            if not chunk:
                return answer, True
            answer += chunk
    return answer, False
