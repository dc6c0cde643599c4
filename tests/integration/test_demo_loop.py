"""The embedded default's closed loop, end to end on loopback.

Workloads create Pending pods in the Kubernetes emulator; the live kube-scheduler calls the
demo service's extender over HTTP and binds them; the simulated nodes give them GPUs and run
them; the controller acts on the emulator and its time slice reaches the simulated servers.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from sits_observe.analytics.serving.step_profiles import GPU_PRODUCTS
from sits_observe.collectors.exposition import parse_exposition
from sits_observe.collectors.kube.gpu import pod_gpu_request
from sits_observe.lab.demo.demo import Demo, DemoSettings

pytestmark = [pytest.mark.slow, pytest.mark.k8s]


def wait(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(0.25)


def metric(text: str, name: str, **labels: str) -> float:
    return sum(
        s.value
        for s in parse_exposition(text).samples
        if s.name == name and all(s.label(k) == v for k, v in labels.items())
    )


def settings(tmp_path: Path, **extra: Any) -> DemoSettings:
    return DemoSettings(
        nodes=2,
        gpus_per_node=4,
        db_path=tmp_path / "demo.duckdb",
        workdir=tmp_path,
        seed=3,
        inventory_interval_s=1,
        **extra,
    )


def test_the_demo_schedules_its_pods_through_the_extender_over_http(tmp_path: Path) -> None:
    with Demo(settings(tmp_path)) as demo:
        assert demo.loop is not None
        workloads = demo.cluster.workloads
        wait(lambda: demo.counts()["pods"] > 0, 30, "an inventory snapshot")
        jobs: list[Any] = []
        while len(jobs) < 3:  # three one-GPU Jobs or notebooks, for the extender to place
            spec = workloads.next_pod()
            if spec.num_gpu == 1:
                jobs.append(spec)
        # Outside the quota'd namespace: the quota would refuse it before the scheduler.
        huge = dataclasses.replace(
            workloads.cpu_job(), num_gpu=16, name="huge-0", uid="uid-huge", namespace="research"
        )
        for spec in (*jobs, huge):
            demo.loop.driver.submit(spec)
        wanted = {s.uid for s in jobs}
        wait(
            lambda: wanted <= {u for n in demo.cluster.nodes.values() for u in n.pods},
            60,
            "the submitted Jobs to run",
        )
        wait(
            lambda: any(e["reason"] == "FailedScheduling" for e in demo.emulator.objects("events")),
            30,
            "a FailedScheduling event",
        )
        metrics = httpx.get(f"{demo.service_url}/metrics", timeout=10).text
        counts = demo.loop_counts()
        binds = any(e.bind_verb for e in demo.loop.config.extenders)
        pods = {p["metadata"]["uid"]: p for p in demo.emulator.objects("pods")}
        events = demo.emulator.objects("events")
        with demo.cluster.lock():
            running = [p for n in demo.cluster.nodes.values() for p in n.pods.values()]
            held = {
                p.uid: tuple(demo.cluster.nodes[p.node].gpus[g].uuid for g in p.gpu_indices)
                for p in running
            }
            kinds = {n.name: n.kind for n in demo.cluster.nodes.values()}

    # kube-scheduler's calls reached the service's extender over HTTP, and were scored.
    assert metric(metrics, "sits_extender_calls_total", verb="filter", outcome="scored") >= 3
    assert metric(metrics, "sits_extender_calls_total", verb="prioritize") >= 1
    # The scheduler counted the same pods, on the same /metrics.
    assert counts is not None and counts.scheduled_via_extender >= 3
    scheduled = sum(
        metric(metrics, "sits_scheduler_pods_scheduled_total", path=path)
        for path in ("extender", "extender_bind")
    )
    assert scheduled == counts.scheduled_via_extender
    assert metric(metrics, "sits_scheduler_extender_calls_total", verb="filter", result="ok") >= 3
    if binds:  # the shipped configuration binds GPU pods through the service
        assert metric(metrics, "sits_extender_calls_total", verb="bind", outcome="bound") >= 3
    # Every pod running on a simulated node was bound through the API and told its GPUs.
    assert running
    for pod in running:
        stored = pods[pod.uid]
        assert stored["spec"]["nodeName"] == pod.node
        scheduled = [c for c in stored["status"]["conditions"] if c["type"] == "PodScheduled"]
        assert [c["status"] for c in scheduled] == ["True"]
        gpus = pod_gpu_request(stored, len(pod.gpu_indices))
        assert gpus.allocated_uuids == held[pod.uid]
        if pod.kind == "llm":  # each inference Deployment stays on its GPU product
            assert gpus.gpu_types == (GPU_PRODUCTS[kinds[pod.node]],)
    # A pod that fits nowhere stays Pending with kube-scheduler's words.
    assert "nodeName" not in pods["uid-huge"]["spec"]
    (event,) = [e for e in events if e["reason"] == "FailedScheduling"]
    assert event["message"] == "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."
    assert event["involvedObject"]["name"] == "huge-0"


def test_the_controller_acts_on_the_emulator_and_its_time_slice_reaches_the_servers(
    tmp_path: Path,
) -> None:
    with Demo(settings(tmp_path, controller_interval_s=2)) as demo:
        wait(
            lambda: "time-slice" in demo.applied_decisions(),
            90,
            "the controller to apply a time slice",
        )
        (configmap,) = [
            c
            for c in demo.emulator.objects("configmaps")
            if c["metadata"]["name"] == "sits-time-slicing"
        ]
        written = configmap["data"]["sits-time-slices.yaml"]

        def servers_at_25ms() -> bool:
            with demo.cluster.lock():
                slices = [
                    p.server.time_slice_s
                    for n in demo.cluster.nodes.values()
                    for p in n.pods.values()
                    if p.server is not None
                ]
            return bool(slices) and any(s == pytest.approx(0.025) for s in slices)

        wait(servers_at_25ms, 15, "the simulated kubelet to read the new slice")
        labels = [p["metadata"].get("labels") or {} for p in demo.emulator.objects("pods")]
        applied = demo.applied_decisions()
        modes = demo.store.query("SELECT DISTINCT mode FROM decisions").column("mode").to_pylist()
    assert "25ms" in written
    assert modes == ["act"]
    # The label rules (fragmentation, memory class) are off by default in act mode (the demo
    # switches only the namespace quota rule on).
    assert not any("sits.io/memory-class" in pod_labels for pod_labels in labels)
    assert applied.get("memory-class", 0) == 0 and applied.get("fragmentation", 0) == 0


def test_the_closing_summary_says_what_the_loop_did(tmp_path: Path) -> None:
    env = {**os.environ, "COLUMNS": "200"}
    result = subprocess.run(
        [
            str(Path(sys.executable).with_name("sits-observe")),
            "demo",
            "--duration",
            "12",
            "--no-ui",
            "--nodes",
            "1",
            "--gpus-per-node",
            "4",
            "--workdir",
            str(tmp_path / "demo"),
            "--db",
            str(tmp_path / "demo" / "sits.duckdb"),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "--act against the Kubernetes emulator (not a cluster)" in result.stderr
    out = result.stdout
    assert "pods through the sits extender" in out
    assert "controller decisions applied in the emulator:" in out
    assert "sits-observe experiment --arms kube-default,kube-sits" in out
    assert "sits-observe heatmap --db " in out and " --slo-ms 40000 " in out
    assert "P95 end-to-end <= 40 s, P95 time to first token <= 2 s" in out
