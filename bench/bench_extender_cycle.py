"""The extender end to end under kube-scheduler's call pattern: 5,000 nodes, filter + prioritize
per pod, over HTTP, against ``sits-observe serve``.

``bench_extender.py`` times one call at a time with a fixed body. Here the kube-scheduler model
(:class:`sits_observe.lab.scheduler.model.KubeScheduler`, the one the replay and the demo
run) schedules a stream of pods onto the same 5,000-node cluster (``bench_extender.fill_store``:
8 GPUs per node, about 11,000 pods already bound), with the shipped
``deploy/scheduler-config.yaml`` pointed at a ``serve`` child process on loopback
(``bindVerb`` dropped: this service has no Kubernetes API to bind through). Each pod's cycle is
what kube-scheduler does: its own filter over every node, the adaptive
``percentageOfNodesToScore`` sample (about 500 names at 5,000 nodes), ``POST /scheduler/filter``
with those ``NodeNames``, its own scores, ``POST /scheduler/prioritize`` with the survivors,
the choice. The scheduler's cache assumes each placement, as kube-scheduler's does; the
service's view learns them only from its next inventory snapshot, which never comes here (the
worst case for a burst: docs/extender.md, "Limits").

Pods, in a fixed seeded order: 1-GPU and 2-GPU inference pods, half-GPU shares
(the trace's ``alibabacloud.com/gpu-milli`` annotation), 4-GPU jobs
and CPU-only pods, all with CPU and memory requests.

Timed per pod (ms, p50 / p99 / max): the extender's two calls together (the time the
extender adds to a cycle), each call, and the whole cycle; the peer, side by side in the same
process on the same pods and cache: the same model with no extender (kube-scheduler's
defaults), whose cycle is the baseline the extender is added to.

Run: ``.venv/bin/python bench/bench_extender_cycle.py [--nodes 5000] [--pods 400] [--record]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from _docs import write_block
from bench_extender import GIB, PRODUCTS, TOKEN, fill_store, free_port, summary

from sits_observe.analytics.placement.device_plugin import allocate_gpus
from sits_observe.lab.demo.loop import demo_scheduler_config
from sits_observe.lab.replay.extender import DEFAULT_SCHEDULER_CONFIG
from sits_observe.lab.scheduler.http import HttpExtenderTransport
from sits_observe.lab.scheduler.kube_nodes import NodeInfos, SchedPod
from sits_observe.lab.scheduler.model import Extender, KubeScheduler
from sits_observe.lab.scheduler.nodes import sched_pod
from sits_observe.store import Store

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "benchmarks.md"
BEGIN = "<!-- extender-cycle-bench:begin -->"
END = "<!-- extender-cycle-bench:end -->"
SECTION = "## Extender under kube-scheduler's call pattern (`bench/bench_extender_cycle.py`)"

#: (share of the stream, GPUs, milli-GPU each, CPU milli, memory GiB).
MIX = (
    (0.35, 1, 1000, 8_000, 64),
    (0.15, 2, 1000, 16_000, 128),
    (0.20, 1, 500, 4_000, 32),
    (0.05, 4, 1000, 32_000, 256),
    (0.25, 0, 0, 2_000, 8),
)


class TimedTransport(HttpExtenderTransport):
    """The live scheduler's HTTP transport, recording each call's wall time by verb."""

    def __init__(self, client: httpx.Client) -> None:
        super().__init__(client)
        self.times: dict[str, list[float]] = {"filter": [], "prioritize": []}

    def post(self, url: str, body: bytes, timeout_s: float) -> bytes:
        started = time.perf_counter()
        try:
            return super().post(url, body, timeout_s)
        finally:
            verb = url.rstrip("/").rsplit("/", 1)[-1]
            self.times.setdefault(verb, []).append((time.perf_counter() - started) * 1000)


def manifest(i: int, num_gpu: int, milli: int, cpu: int, mem_gib: int) -> dict[str, Any]:
    """A Pending pod as kube-scheduler sends it to an extender."""
    limits: dict[str, str] = {}
    annotations: dict[str, str] = {}
    if num_gpu:
        limits["nvidia.com/gpu"] = str(num_gpu)
        if milli < 1000:
            annotations["alibabacloud.com/gpu-milli"] = str(milli)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"bench-{i:05d}",
            "namespace": "bench",
            "uid": f"00000000-0000-0000-0000-{i:012d}",
            "annotations": annotations,
        },
        "spec": {
            "schedulerName": "default-scheduler",
            "containers": [
                {
                    "name": "main",
                    "image": "bench",
                    "resources": {
                        "requests": {"cpu": f"{cpu}m", "memory": f"{mem_gib}Gi", **limits},
                        "limits": limits,
                    },
                }
            ],
        },
        "status": {"phase": "Pending"},
    }


def stream(count: int, seed: int = 3) -> list[SchedPod]:
    """``count`` pods drawn from :data:`MIX`."""
    rng = np.random.default_rng(seed)
    shares = np.array([m[0] for m in MIX])
    kinds = rng.choice(len(MIX), size=count, p=shares / shares.sum())
    return [sched_pod(manifest(i, *MIX[k][1:]))[0] for i, k in enumerate(kinds)]


def cache(store: Store) -> NodeInfos:
    """The scheduler's cache of the store's cluster: its nodes and the pods bound to them."""
    nodes = store.query(
        "SELECT node, gpu_allocatable AS gpus, gpu_product AS model, cpu_allocatable_milli AS cpu "
        "FROM nodes ORDER BY node"
    ).to_pylist()
    infos = NodeInfos.empty(
        [n["node"] for n in nodes],
        cpu_milli=[n["cpu"] for n in nodes],
        memory_bytes=[2048 * GIB] * len(nodes),
        gpu_count=[n["gpus"] for n in nodes],
        gpu_model=[n["model"] for n in nodes],
    )
    for p in store.query(
        "SELECT node, gpu_request AS gpus, cpu_request_milli AS cpu FROM pods ORDER BY node, pod"
    ).to_pylist():
        pod = SchedPod("bench", "bound", "", int(p["cpu"]), 0, int(p["gpus"]), 1000, (), {})
        row = infos.node_of(p["node"])
        free = np.flatnonzero(infos.gpu_free_milli[row] == 1000)[: pod.num_gpu]
        infos.assume(row, pod, [int(g) for g in free])
    return infos


def run(
    scheduler: KubeScheduler, infos: NodeInfos, pods: Sequence[SchedPod], seed: int
) -> tuple[list[float], int]:
    """Schedule ``pods`` in order; each cycle's wall time (ms) and how many were placed."""
    rng = np.random.default_rng(seed)
    cycles: list[float] = []
    placed = 0
    for pod in pods:
        started = time.perf_counter()
        decision = scheduler.schedule(infos, pod, rng)
        cycles.append((time.perf_counter() - started) * 1000)
        if decision.node is None:
            continue
        gpus = allocate_gpus(
            infos.gpu_free_milli[decision.node],
            infos.gpu_pods[decision.node],
            infos.gpu_uuids[decision.node],
            num_gpu=pod.num_gpu,
            gpu_milli=pod.gpu_milli,
        )
        infos.assume(decision.node, pod, gpus)
        placed += 1
    return cycles, placed


def wait_for_view(client: httpx.Client, pod: SchedPod) -> None:
    """Until the service's first view is built (the first extender call starts the build)."""
    body = json.dumps({"Pod": pod.manifest, "Nodes": None, "NodeNames": []}).encode()
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            if 'sits_extender_view_builds_total{result="ok"}' in client.get("/metrics").text:
                return
            client.post("/scheduler/prioritize", content=body)
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise SystemExit("the service did not build its extender view in 180 s")


def line(label: str, samples: list[float]) -> str:
    s = summary(samples)
    return f"| {label} | {len(samples):,} | {s['p50']:.2f} | {s['p99']:.2f} | {s['max']:.2f} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=400)
    parser.add_argument("--record", action="store_true", help="write docs/benchmarks.md")
    args = parser.parse_args()
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())

    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "bench.duckdb"
        with Store.open(db) as store:
            bound = fill_store(store, args.nodes, datetime.now(UTC))
            infos_sits, infos_default = cache(store), cache(store)
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        serve = [
            str(Path(sys.executable).with_name("sits-observe")), "serve", "--db", str(db),
            "--port", str(port), "--log-level", "warning",
        ]  # fmt: skip
        proc = subprocess.Popen(
            serve,
            env={**os.environ, "SITS_TOKEN": TOKEN},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            with httpx.Client(base_url=url, timeout=30) as client:
                wait_for_view(client, stream(1)[0])
                config = demo_scheduler_config(DEFAULT_SCHEDULER_CONFIG, url, serves_bind=False)
                transport = TimedTransport(httpx.Client())
                sits = KubeScheduler(config, [Extender(e, transport) for e in config.extenders])
                default = KubeScheduler(config.without_extenders())
                pods = stream(args.pods)
                warm = stream(20, seed=99)
                run(sits, infos_sits, warm, seed=1)  # warm-up, not reported
                transport.times = {"filter": [], "prioritize": []}
                sits_cycles, sits_placed = run(sits, infos_sits, pods, seed=2)
                run(default, infos_default, warm, seed=1)
                default_cycles, default_placed = run(default, infos_default, pods, seed=2)
                transport.close()
        finally:
            proc.terminate()
            proc.wait(timeout=30)

    filt, prio = transport.times["filter"], transport.times["prioritize"]
    extender = [f + p for f, p in zip(filt, prio, strict=False)]
    ratio = statistics.median(sits_cycles) / statistics.median(default_cycles)
    lines = [
        f"Date {datetime.now(UTC):%Y-%m-%d}; {os.cpu_count()} cores, {platform.system()} "
        f"{platform.machine()}, Python {platform.python_version()}; load average {load} at the "
        "start (a shared machine). Cluster: "
        f"{args.nodes:,} nodes x 8 GPUs ({' / '.join(p.split()[1] for p in PRODUCTS)}), "
        f"{bound:,} pods bound; {args.pods} pods scheduled one after another (plus 20 warm-up), "
        "mix: 35% 1 GPU, 15% 2 GPUs, 20% half a GPU, 5% 4 GPUs, 25% CPU only.",
        "",
        "| what is timed, per pod | calls | p50 ms | p99 ms | max ms |",
        "|---|---:|---:|---:|---:|",
        line("extender: filter + prioritize (both calls, over HTTP)", extender),
        line("extender: filter call", filt),
        line("extender: prioritize call", prio),
        line("kube-sits cycle (model's own work + both calls)", sits_cycles),
        line("kube-default cycle (no extender; the peer)", default_cycles),
        "",
        f"Cycle ratio kube-sits / kube-default (p50): {ratio:.1f}x; placed {sits_placed} / "
        f"{default_placed} of {args.pods}. Each call carries the adaptive sample "
        "(`percentageOfNodesToScore`, about 500 of 5,000 names); prioritize gets the names "
        "that passed the filter. Client and `serve` share the cores.",
        "",
        f"Command: `.venv/bin/python bench/bench_extender_cycle.py --nodes {args.nodes} "
        f"--pods {args.pods}{' --record' if args.record else ''}`.",
    ]
    body = "\n".join(lines)
    print(body)
    if args.record:
        write_block(DOCS, BEGIN, END, body, SECTION)


if __name__ == "__main__":
    main()
