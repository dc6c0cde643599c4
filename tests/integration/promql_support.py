"""Test support: a throw-away VictoriaMetrics on loopback and the data both stores receive.

VictoriaMetrics is the Debian package's single-node binary (``/usr/bin/victoria-metrics``),
started as in ``bench/bench_ingest_dcgm.py``; tests skip when it is absent.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from datetime import datetime, timedelta
from pathlib import Path

import httpx
import numpy as np
import pytest

VM_BINARY = shutil.which("victoria-metrics") or "/usr/bin/victoria-metrics"


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class VictoriaMetrics:
    """A single-node VictoriaMetrics writing to ``data_dir`` (optionally scraping)."""

    def __init__(self, data_dir: Path, *, scrape_config: Path | None = None) -> None:
        if not Path(VM_BINARY).is_file():
            pytest.skip(f"victoria-metrics binary not found at {VM_BINARY} (Debian package)")
        self.base = f"http://127.0.0.1:{free_port()}"
        args = [
            VM_BINARY,
            f"-storageDataPath={data_dir}",
            f"-httpListenAddr={self.base.removeprefix('http://')}",
            "-search.latencyOffset=0s",
            "-search.disableCache",
            "-loggerLevel=ERROR",
            "-retentionPeriod=100y",
        ]
        if scrape_config is not None:
            args.append(f"-promscrape.config={scrape_config}")
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.client = httpx.Client(timeout=60.0)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if self.client.get(f"{self.base}/health").status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("VictoriaMetrics did not answer /health within 30 s")

    def import_text(self, body: str) -> None:
        """Import exposition text (with timestamps) and make it searchable."""
        response = self.client.post(f"{self.base}/api/v1/import/prometheus", content=body)
        assert response.status_code == 204, response.text
        self.client.get(f"{self.base}/internal/force_flush").raise_for_status()

    def stop(self) -> None:
        """Stop the server (the process this object started)."""
        self.client.close()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def stamped(text: str, at: datetime) -> str:
    """Exposition ``text`` with every sample line stamped at ``at`` (naive = UTC), in ms."""
    ms = round((at - datetime(1970, 1, 1)).total_seconds() * 1000)
    lines = [
        line if not line or line.startswith("#") else f"{line} {ms}" for line in text.splitlines()
    ]
    return "\n".join(lines) + "\n"


#: vLLM's e2e latency bucket bounds (a subset of vllm/v1/metrics/loggers.py's), seconds.
E2E_BOUNDS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 60.0)


class VllmServer:
    """A deterministic vLLM ``/metrics`` body generator: cumulative histograms that grow."""

    def __init__(self, model: str, seed: int) -> None:
        self.model = model
        self.rng = np.random.default_rng(seed)
        self.counts = np.zeros(len(E2E_BOUNDS) + 1)
        self.total_s = 0.0
        self.n = 0

    def advance(self, load: float) -> None:
        """Serve a window of requests; ``load`` scales both count and latency."""
        n = int(self.rng.integers(20, 60) * load)
        latencies = self.rng.lognormal(mean=np.log(0.6 * load), sigma=0.6, size=n)
        for value in latencies:  # per-bucket counts; text() makes them cumulative
            index = int(np.searchsorted(E2E_BOUNDS, value, side="left"))
            self.counts[index] += 1
        self.total_s += float(latencies.sum())
        self.n += n

    def text(self) -> str:
        """The exposition body of the current state."""
        name = "vllm:e2e_request_latency_seconds"
        labels = f'model_name="{self.model}"'
        cumulative = np.cumsum(self.counts)
        lines = [f"# TYPE {name} histogram"]
        for bound, count in zip(E2E_BOUNDS, cumulative[:-1], strict=True):
            lines.append(f'{name}_bucket{{{labels},le="{bound}"}} {count:.0f}')
        lines.append(f'{name}_bucket{{{labels},le="+Inf"}} {cumulative[-1]:.0f}')
        lines.append(f"{name}_sum{{{labels}}} {self.total_s!r}")
        lines.append(f"{name}_count{{{labels}}} {self.n}")
        lines += [
            "# TYPE vllm:num_requests_running gauge",
            f"vllm:num_requests_running{{{labels}}} {float(self.n % 7)}",
            "# TYPE vllm:num_requests_waiting gauge",
            f"vllm:num_requests_waiting{{{labels}}} {float(self.n % 3)}",
            "# TYPE vllm:kv_cache_usage_perc gauge",
            f"vllm:kv_cache_usage_perc{{{labels}}} {(self.n % 10) / 10}",
        ]
        return "\n".join(lines) + "\n"


def grid_start(now: datetime, step_s: int, back: timedelta) -> datetime:
    """A naive UTC time ``back`` before ``now``, on a multiple of ``step_s`` since the epoch."""
    epoch = datetime(1970, 1, 1)
    seconds = int((now.replace(tzinfo=None) - back - epoch).total_seconds())
    return epoch + timedelta(seconds=seconds - seconds % step_s)
