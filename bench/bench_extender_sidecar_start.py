"""The scheduler-sidecar start: when kube-scheduler's first call can come, and what it gets.

deploy/overlays/scheduler-sidecar runs ``serve --extender-warm-view --extender-port`` as a
native sidecar whose startupProbe is ``GET /scheduler/readyz`` (every second); the kubelet
starts kube-scheduler once that probe succeeds. Here a ``serve`` child starts with those
flags on a DuckDB file of N nodes x 8 GPUs (``bench_extender.fill_store``), and, timed from
the spawn, per run:

- **warm**: the first 200 from ``/scheduler/readyz``, polled every 5 ms;
- **probe passes**: the first probe of a kubelet that probes at the spawn and every
  ``--period-s`` after it that falls at or after *warm* (the kubelet's own start of the
  container and of kube-scheduler come on top, and are not measured here);
- **first call**: a ``POST /scheduler/prioritize`` sent once *warm*: its latency, and
  whether its answer is the correct one (the handler's answer on a view of the same file, as
  bench_extender_cold_start checks it).

Children run with their bytecode cached, as in the image (bench_extender_cold_start).

Run: ``.venv/bin/python bench/bench_extender_sidecar_start.py [--nodes 1024] [--runs 5]``.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
from bench_extender import TOKEN, fill_store, free_port
from bench_extender_cold_start import bytecode_env, expected_answer

from sits_observe.store import Store

HEADERS = {"Content-Type": "application/json"}


def sidecar_start(
    db: Path, body: bytes, expected: object, env: dict[str, str]
) -> tuple[float, float, bool]:
    """(warm ms from the spawn, first call's latency ms, was its answer correct)."""
    port, extender_port = free_port(), free_port()
    serve = [
        str(Path(sys.executable).with_name("sits-observe")), "serve", "--db", str(db),
        "--port", str(port), "--extender-port", str(extender_port), "--extender-warm-view",
        "--log-level", "warning",
    ]  # fmt: skip
    started = time.perf_counter()
    proc = subprocess.Popen(
        serve,
        env={**env, "SITS_TOKEN": TOKEN},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{extender_port}", timeout=30) as client:
            while time.perf_counter() < started + 120:
                try:
                    ready = client.get("/scheduler/readyz").status_code == 200
                except httpx.TransportError:
                    ready = False
                if ready:
                    warm = time.perf_counter()
                    answer = client.post("/scheduler/prioritize", content=body, headers=HEADERS)
                    called_s = time.perf_counter() - warm
                    correct = answer.status_code == 200 and answer.json() == expected
                    return (warm - started) * 1000, called_s * 1000, correct
                time.sleep(0.005)
            raise RuntimeError("/scheduler/readyz never answered 200 in 120 s")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1024)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--period-s", type=float, default=1.0, help="the probe's periodSeconds")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "sidecar.duckdb"
        now = datetime.now(UTC)
        with Store.open(db) as store:
            fill_store(store, args.nodes, now)
        body, expected, _ = expected_answer(db, now)
        env = bytecode_env(Path(tmp) / "pyc")
        sidecar_start(db, body, expected, env)  # a discarded start: the bytecode cache is full
        warm, call, probe = [], [], []
        for run in range(args.runs):
            warm_ms, call_ms, correct = sidecar_start(db, body, expected, env)
            passes_ms = math.ceil(warm_ms / 1000 / args.period_s) * args.period_s * 1000
            warm.append(warm_ms)
            call.append(call_ms)
            probe.append(passes_ms)
            print(
                f"run {run + 1}: warm {warm_ms:.0f} ms, probe passes {passes_ms:.0f} ms, "
                f"first call {call_ms:.1f} ms ({'correct' if correct else 'WRONG'})",
                flush=True,
            )
            assert correct, "the first call after /scheduler/readyz said 200 was not correct"
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"Date {datetime.now(UTC):%Y-%m-%d}; machine: {os.cpu_count()} cores, "
        f"{platform.system()} {platform.machine()}, Python {platform.python_version()}; load "
        f"average {load} at the end; {args.nodes:,} nodes x 8 GPUs, median of {args.runs}: "
        f"warm {statistics.median(warm):.0f} ms, probe passes "
        f"{statistics.median(probe):.0f} ms, first call {statistics.median(call):.1f} ms "
        f"(max {max(call):.1f} ms), every first call correct"
    )


if __name__ == "__main__":
    main()
