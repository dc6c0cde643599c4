"""The simulated cluster's model: calibration, load, latency under load, memory churn."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from sits_observe.analytics.serving.step_profiles import A100, H100, KV_BYTES_PER_TOKEN
from sits_observe.lab.cluster.cluster import SimulatedCluster
from sits_observe.lab.cluster.serving.server import InferenceServer
from sits_observe.lab.cluster.serving.workload import ArrivalGenerator, LoadProfile


def test_calibration_reproduces_measured_points() -> None:
    """Interpolation passes through the Splitwise medians it was built from."""
    assert H100.prefill_s(512) == pytest.approx(0.0597)
    assert A100.decode_step_s(64) == pytest.approx(0.0729)
    assert 0.0314 < H100.decode_step_s(12) < 0.0328  # between the measured 8 and 16
    assert H100.prefill_s(10) == pytest.approx(H100.prefill_s(128))  # clamped below the grid
    assert KV_BYTES_PER_TOKEN == 327_680


def test_arrivals_follow_the_profile_rate() -> None:
    profile = LoadProfile(base_rps=10, low=1.0, high=1.0)
    gen = ArrivalGenerator(profile, np.random.default_rng(3))
    arrivals = gen.between(0.0, 200.0)
    assert len(arrivals) == pytest.approx(2000, rel=0.1)
    assert all(0 <= a.at_s < 200 for a in arrivals)
    prompts = np.array([a.prompt_tokens for a in arrivals])
    assert 600 < np.median(prompts) < 1200  # Azure conversation median ~ exp(6.71) = 820


def _run_server(rate_rps: float, seconds: float = 300.0) -> list[float]:
    server = InferenceServer("m", H100, tensor_parallel=4, kv_capacity_bytes=10**12)
    gen = ArrivalGenerator(LoadProfile(base_rps=rate_rps, low=1, high=1), np.random.default_rng(1))
    t, dt = 0.0, 0.1
    while t < seconds:
        for a in gen.between(t, t + dt):
            server.submit(a.at_s, a.prompt_tokens, a.output_tokens)
        t += dt
        server.advance(t, dt)
    return [r.latency_s for r in server.take_finished()]


def test_p95_latency_rises_with_load_and_explodes_past_capacity() -> None:
    p95 = [float(np.percentile(_run_server(rate), 95)) for rate in (1.0, 4.0, 9.0)]
    assert p95[0] < p95[1] < p95[2]
    assert p95[2] > 2 * p95[0]  # queueing past the ~5 req/s capacity of a batch of 64


def test_request_timings_are_consistent() -> None:
    server = InferenceServer("m", A100, tensor_parallel=4, kv_capacity_bytes=10**12)
    server.submit(0.0, 512, 10)
    t = 0.0
    while t < 5:
        t += 0.05
        server.advance(t, 0.05)
    (record,) = server.take_finished()
    assert 0 < record.ttft_s < record.latency_s
    # one request alone: prefill + 10 decode steps at batch 1
    expected = A100.prefill_s(512) + 10 * A100.decode_step_s(1)
    assert record.latency_s == pytest.approx(expected, abs=2 * A100.decode_step_s(1))
    snap = server.snapshot()
    assert snap.e2e.count == 1 and snap.success_total == 1


def test_cluster_churns_gpu_memory_and_is_deterministic() -> None:
    def run(seed: int) -> list[int]:
        c = SimulatedCluster(nodes=2, gpus_per_node=8, seed=seed)
        used = []
        for _ in range(1500):
            c.step(0.2)
            used.append(sum(g.fb_used_bytes for n in c.nodes.values() for g in n.gpus))
        events = c.take_events()
        assert {e.kind for e in events} == {"added", "deleted"}
        return used

    first = run(5)
    assert first == run(5)
    assert len(set(first[-500:])) > 10  # memory moves as jobs come and go
    for node in SimulatedCluster(nodes=1, gpus_per_node=8).nodes.values():
        assert all(
            g.fb_free_bytes + g.fb_used_bytes + g.reserved_bytes == g.total_bytes for g in node.gpus
        )


# -- capacity, the load ramp and time slicing ----------------------------------------------


def test_capacity_is_what_a_full_batch_sustains() -> None:
    h100 = InferenceServer("m", H100, tensor_parallel=4, kv_capacity_bytes=10**12)
    a100 = InferenceServer("m", A100, tensor_parallel=4, kv_capacity_bytes=10**12)
    # 1 / (decode step at 64 x mean output tokens ~221 / 64 + mean prefill): the Azure
    # prompts' prefill is about half a request's GPU time.
    assert h100.capacity_rps() == pytest.approx(3.44, abs=0.02)
    assert a100.capacity_rps() == pytest.approx(1.90, abs=0.02)


def test_default_load_sweeps_each_server_from_well_below_to_past_its_capacity() -> None:
    profile = LoadProfile()
    rates = [profile.rate_rps(t, capacity_rps=4.0) for t in range(0, 361, 10)]
    assert min(rates) == pytest.approx(0.4)  # 10 % of capacity at the start of a cycle
    assert max(rates) == pytest.approx(4.4)  # 110 % at the middle
    assert rates[0] < 4.0 < max(rates)
    assert np.mean(rates) < 4.0  # the mean stays below capacity: queues drain every cycle
    with pytest.raises(ValueError, match="capacity"):
        profile.rate_rps(0.0)


def _latencies(time_slice_s: float | None, seed: int = 4) -> list[float]:
    server = InferenceServer("m", A100, tensor_parallel=4, kv_capacity_bytes=10**12)
    server.time_slice_s = time_slice_s
    # A sixth of the A100 server's capacity (1.9 requests/s): the batch stays small, so a
    # step's overhead is the latency's (at higher loads prefill's share of the GPU grows it).
    gen = ArrivalGenerator(LoadProfile(base_rps=0.3, low=1, high=1), np.random.default_rng(seed))
    t, dt = 0.0, 0.1
    while t < 400:  # arrivals for 200 s, then every request finishes
        for a in gen.between(t, t + dt) if t < 200 else ():
            server.submit(a.at_s, a.prompt_tokens, a.output_tokens)
        t += dt
        server.advance(t, dt)
    return [r.latency_s for r in server.take_finished()]


def test_a_longer_time_slice_lowers_latency_and_none_is_fastest() -> None:
    short, long_, exclusive = _latencies(0.010), _latencies(0.025), _latencies(None)
    assert len(short) == len(long_) == len(exclusive)  # same arrivals
    assert np.mean(exclusive) < np.mean(long_) < np.mean(short)
    # 2 ms per slice boundary: +20 % of every step at 10 ms, +8 % at 25 ms.
    assert np.mean(short) / np.mean(exclusive) == pytest.approx(1.2, abs=0.05)


def test_a_cluster_that_is_not_standalone_runs_nothing_until_a_node_starts_a_pod() -> None:
    cluster = SimulatedCluster(nodes=2, gpus_per_node=4, seed=1, standalone=False)
    for _ in range(600):
        cluster.step(0.5)
    assert all(not n.pods for n in cluster.nodes.values())
    assert cluster.take_events() == []
    spec = cluster.workloads.llm_replica()
    pod = cluster.start_pod(spec, "gpu-node-2", [1, 3])
    node = cluster.nodes["gpu-node-2"]
    assert pod.server is not None and pod.gpu_indices == [1, 3]
    assert [g.free_milli for g in node.gpus] == [1000, 0, 1000, 0]
    with pytest.raises(ValueError, match="already running"):
        cluster.start_pod(spec, "gpu-node-1", [0, 1])
    cluster.set_time_slices({f"inference/{spec.workload}": 0.025})
    assert pod.server.time_slice_s == 0.025
    assert cluster.stop_pod(pod.uid) is pod
    assert all(g.free_milli == 1000 and not g.used_bytes for g in node.gpus)
    assert [e.kind for e in cluster.take_events()] == ["added", "deleted"]


def test_a_finished_job_is_reported_completed_and_frees_its_share() -> None:
    cluster = SimulatedCluster(nodes=1, gpus_per_node=2, seed=2, standalone=False)
    spec = next(s for s in iter(cluster.workloads.next_pod, None) if s.kind == "notebook")
    cluster.start_pod(spec, "gpu-node-1", [0])
    gpu = cluster.nodes["gpu-node-1"].gpus[0]
    assert gpu.free_milli == 1000 - spec.gpu_percent * 10
    assert spec.duration_s is not None
    for _ in range(int(spec.duration_s) + 2):
        cluster.step(1.0)
    events = cluster.take_events()
    assert [(e.kind, e.completed) for e in events] == [("added", False), ("deleted", True)]
    assert gpu.free_milli == 1000


def test_a_server_claims_what_its_vllm_argument_says() -> None:
    """The replica's ``--gpu-memory-utilization`` sets its claim on each GPU (0.9 as written,
    vLLM's default; another value is honoured)."""
    cluster = SimulatedCluster(nodes=1, gpus_per_node=4, seed=3, standalone=False)
    replica = cluster.workloads.llm_replica()
    flag = replica.args.index("--gpu-memory-utilization")
    assert replica.args[flag + 1] == "0.9" and replica.gpu_memory_utilization == 0.9
    lower = replace(replica, args=(*replica.args[:flag], "--gpu-memory-utilization=0.6"))
    pod = cluster.start_pod(lower, "gpu-node-1", [0, 1])
    gpu = cluster.nodes["gpu-node-1"].gpus[0]
    assert gpu.used_bytes[pod.uid] == int(gpu.total_bytes * 0.6)


def test_an_idle_notebook_holds_a_whole_gpu_and_its_model_and_runs_nothing() -> None:
    cluster = SimulatedCluster(nodes=1, gpus_per_node=4, seed=3, standalone=False, idle_notebooks=1)
    (owner,) = cluster.workloads.idle_notebook_owners
    spec = cluster.workloads.idle_notebook(owner)
    assert (spec.namespace, spec.name, spec.owner.kind) == (
        "research",
        "jupyter-1-0",
        "StatefulSet",
    )
    assert (spec.num_gpu, spec.shared, spec.duration_s, spec.kind) == (1, False, None, "notebook")
    assert 2 * 2**30 <= spec.gpu_peak_bytes <= 14 * 2**30
    # Its GPU comes out of the spare ones the arrivals are sized on (4 - tensor parallel 2).
    assert cluster.workloads.spare_gpus == 1
    pod = cluster.start_pod(spec, "gpu-node-1", [3])
    gpu = cluster.nodes["gpu-node-1"].gpus[3]
    for _ in range(600):
        cluster.step(1.0)
    assert cluster.running(pod.uid) is pod  # runs until deleted
    assert (gpu.util_ratio, gpu.used_bytes[pod.uid], gpu.free_milli) == (
        0.0,
        spec.gpu_peak_bytes,
        0,
    )
    # Its kernel's memory stays flat: no growth towards a limit it does not have.
    assert pod.containers[0].memory_bytes < 2 * 2**30
    # A second pod of the StatefulSet (after a failure) has its name and a new UID.
    again = cluster.workloads.idle_notebook(owner)
    assert (again.name, again.uid != spec.uid) == (spec.name, True)
