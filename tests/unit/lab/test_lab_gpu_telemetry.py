"""The simulated DCGM telemetry stays inside each GPU model's physical envelope and moves the
way the work on the card says it should (sits_observe.lab.cluster.activity / gpu_models)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from sits_observe.analytics.serving.step_profiles import MIB
from sits_observe.lab.cluster.activity import (
    PodDemand,
    gpu_activity,
    open_loop_demand,
    steady_temp_c,
    training_demand,
)
from sits_observe.lab.cluster.cluster import SimulatedCluster
from sits_observe.lab.cluster.gpu_models import A100_SXM4, ENVELOPES, H100_SXM5, GpuEnvelope
from sits_observe.lab.cluster.pods.specs import PodSpec
from sits_observe.lab.cluster.render import MODEL_NAMES, dcgm_text

BY_NAME = {MODEL_NAMES[k]: e for k, e in ENVELOPES.items()}


def _rows(text: str) -> dict[tuple[str, str], dict[str, float]]:
    """``{(Hostname, gpu): {field: value}}`` plus the modelName under ``"model"``."""
    rows: dict[tuple[str, str], dict[str, float]] = {}
    models: dict[tuple[str, str], str] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            key = (s.labels["Hostname"], s.labels["gpu"])
            rows.setdefault(key, {})[s.name] = s.value
            models[key] = s.labels["modelName"]
    for key, name in models.items():
        rows[key]["model"] = list(BY_NAME).index(name)
    return rows


def _training_spec(c: SimulatedCluster) -> PodSpec:
    while True:
        spec = c.workloads.next_pod()
        if spec.kind == "batch" and spec.num_gpu >= 1 and spec.gpu_percent == 100:
            return dataclasses.replace(spec, num_gpu=1, duration_s=1e6)


def _eval_spec(c: SimulatedCluster) -> PodSpec:
    while True:
        spec = c.workloads.next_pod()
        if spec.kind == "batch" and spec.num_gpu == 1 and spec.gpu_percent < 100:
            return dataclasses.replace(spec, gpu_percent=50, duration_s=1e6)


def test_every_rendered_sample_is_inside_its_models_envelope() -> None:
    c = SimulatedCluster(nodes=2, gpus_per_node=8, seed=11, idle_notebooks=1)
    seen = 0
    for _ in range(12):
        for _ in range(5):
            c.step(1.0)
        for node in c.nodes:
            for row in _rows(dcgm_text(c, node)).values():
                env = list(BY_NAME.values())[int(row["model"])]
                assert env.idle_w * 0.9 <= row["DCGM_FI_DEV_POWER_USAGE"] < env.tdp_w
                assert row["DCGM_FI_DEV_SM_CLOCK"] <= env.max_sm_clock_mhz
                assert row["DCGM_FI_DEV_MEM_CLOCK"] <= env.mem_clock_mhz
                assert 0 <= row["DCGM_FI_DEV_GPU_UTIL"] <= 100
                assert 0 <= row["DCGM_FI_DEV_MEM_COPY_UTIL"] <= 100
                assert row["DCGM_FI_DEV_GPU_TEMP"] < env.max_temp_c
                fb = (
                    row["DCGM_FI_DEV_FB_USED"]
                    + row["DCGM_FI_DEV_FB_FREE"]
                    + row["DCGM_FI_DEV_FB_RESERVED"]
                )
                assert fb == env.fb_total_bytes // MIB
                for ratio in (
                    "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
                    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
                    "DCGM_FI_PROF_DRAM_ACTIVE",
                ):
                    assert 0.0 <= row[ratio] <= 1.0
                for link, cap in (
                    ("DCGM_FI_PROF_PCIE_TX_BYTES", env.pcie_bytes_per_s),
                    ("DCGM_FI_PROF_PCIE_RX_BYTES", env.pcie_bytes_per_s),
                    ("DCGM_FI_PROF_NVLINK_TX_BYTES", env.nvlink_bytes_per_s),
                ):
                    assert 0 <= row[link] <= cap
                seen += 1
    assert seen == 12 * 16


def _one_node(seed: int = 5) -> SimulatedCluster:
    return SimulatedCluster(nodes=1, gpus_per_node=8, seed=seed, standalone=False)


def test_decode_server_training_job_and_idle_notebook_differ_as_the_work_says() -> None:
    c = SimulatedCluster(nodes=1, gpus_per_node=8, seed=5, standalone=False, idle_notebooks=1)
    node = "gpu-node-1"
    c.start_pod(c.workloads.llm_replica(), node, [0, 1, 2, 3])
    c.start_pod(_training_spec(c), node, [4])
    c.start_pod(c.workloads.idle_notebook(c.workloads.idle_notebook_owners[0]), node, [5])
    server, train, idle = [], [], []
    for _ in range(150):
        c.step(1.0)
        server.append(c.gpu_activity(node, 0))
        train.append(c.gpu_activity(node, 4))
        idle.append(c.gpu_activity(node, 5))
    env = H100_SXM5

    def mean(xs: list[float]) -> float:
        return sum(xs) / len(xs)

    s_dram = mean([a.dram_active_ratio for a in server[30:]])
    s_tensor = mean([a.tensor_active_ratio for a in server[30:]])
    s_power = mean([a.power_w for a in server[30:]])
    t = train[-1]
    # Decode is memory-bound: the memory interface works harder than the tensor pipes.
    assert s_dram > s_tensor
    assert 0.3 * env.tdp_w < s_power < 0.75 * env.tdp_w
    # Training is compute-bound and near (never at) the power limit.
    assert t.tensor_active_ratio > t.dram_active_ratio
    assert 0.8 * env.tdp_w < t.power_w < env.tdp_w
    assert t.power_w > s_power
    # The idle notebook holds a context: P0 idle power, idle clock, no activity.
    i = idle[-1]
    assert i.util_ratio == 0.0 and i.tensor_active_ratio == 0.0
    assert i.sm_clock_mhz == env.idle_sm_clock_mhz
    assert i.power_w == pytest.approx(env.context_idle_w)
    assert i.temp_c < t.temp_c


def test_the_same_work_on_h100_and_a100_looks_different() -> None:
    """Same evaluation job (fixed work per second) and same training job on each model."""
    c = SimulatedCluster(nodes=2, gpus_per_node=8, seed=3, standalone=False)
    spec = _eval_spec(c)
    c.start_pod(spec, "gpu-node-1", [6])  # h100
    c.start_pod(dataclasses.replace(spec, uid=spec.uid + "-2"), "gpu-node-2", [6])  # a100
    for _ in range(20):
        c.step(0.5)
    h, a = c.gpu_activity("gpu-node-1", 6), c.gpu_activity("gpu-node-2", 6)
    assert a.util_ratio > h.util_ratio  # the slower card is busier for the same work
    assert a.dram_active_ratio > h.dram_active_ratio
    assert a.power_w != pytest.approx(h.power_w, rel=0.05)
    th = gpu_activity(H100_SXM5, [training_demand(H100_SXM5, gpus=1)], previous_temp_c=None, dt_s=1)
    ta = gpu_activity(A100_SXM4, [training_demand(A100_SXM4, gpus=1)], previous_temp_c=None, dt_s=1)
    assert ta.power_w < A100_SXM4.tdp_w < th.power_w < H100_SXM5.tdp_w


def test_power_capping_lowers_the_clock_and_never_reaches_tdp() -> None:
    for env in ENVELOPES.values():
        flat_out = PodDemand(busy_ratio=1.0, tensor_ratio=1.0, dram_ratio=1.0)
        a = gpu_activity(env, [flat_out, flat_out], previous_temp_c=None, dt_s=1)
        assert a.power_w < env.tdp_w
        assert env.min_loaded_sm_clock_mhz <= a.sm_clock_mhz < env.max_sm_clock_mhz
        assert a.util_ratio == 1.0 and a.served_ratio == 0.5


def test_open_loop_work_is_capped_at_the_core_share() -> None:
    d = open_loop_demand(
        A100_SXM4, flops_per_s=300e12, dram_bytes_per_s=1e12, pcie_bytes_per_s=0, core_share=0.25
    )
    assert d.busy_ratio == 0.25
    assert d.tensor_ratio < 300e12 / A100_SXM4.bf16_dense_flops


# -- calibration against real captures -------------------------------------------------------


def _prom_json(shared_data: Path, name: str) -> dict[tuple[str, str], float]:
    path = shared_data / "dcgm" / name
    body = json.loads(path.read_text())
    return {
        (r["metric"]["Hostname"], r["metric"]["gpu"]): float(r["value"][1])
        for r in body["data"]["result"]
    }


def _envelope_ranges(env: GpuEnvelope) -> tuple[float, float]:
    idle = gpu_activity(env, [], previous_temp_c=None, dt_s=1)
    return idle.power_w, idle.temp_c


def test_idle_and_context_power_and_temperature_match_the_h100_capture(
    shared_data: Path,
) -> None:
    """Checks against shared/data/dcgm/h100-k8s-prometheus-query-{power_usage,gpu_temp,
    fb_used,gpu_util}.json: 16 real H100 SXM5, 15 without a process, one holding a loaded
    vLLM model at 0 % utilisation."""
    power = _prom_json(shared_data, "h100-k8s-prometheus-query-power_usage.json")
    temp = _prom_json(shared_data, "h100-k8s-prometheus-query-gpu_temp.json")
    fb = _prom_json(shared_data, "h100-k8s-prometheus-query-fb_used.json")
    util = _prom_json(shared_data, "h100-k8s-prometheus-query-gpu_util.json")
    assert set(util.values()) == {0.0}
    idle = [power[k] for k in power if fb[k] == 0]
    held = [power[k] for k in power if fb[k] > 0]
    idle_temps = [temp[k] for k in temp if fb[k] == 0]
    sim_power, sim_temp = _envelope_ranges(H100_SXM5)
    assert min(idle) <= sim_power <= max(idle)
    assert min(idle_temps) <= sim_temp <= max(idle_temps)
    context = gpu_activity(H100_SXM5, [PodDemand(holds_context=True)], previous_temp_c=None, dt_s=1)
    assert context.power_w == pytest.approx(held[0], rel=0.02)
    assert context.sm_clock_mhz == H100_SXM5.idle_sm_clock_mhz


def test_a_power_capped_a100_matches_the_busy_a100_capture(shared_data: Path) -> None:
    """Checks against shared/data/dcgm/a100-40gb-mig-1g5gb-nvidia-docs.prom: an A100 at its
    400 W limit (409.7 W read), SM clock 1,215 of 1,410 MHz, 61 C, tensor 0.93, DRAM 0.69."""
    path = shared_data / "dcgm" / "a100-40gb-mig-1g5gb-nvidia-docs.prom"
    real: dict[str, float] = {}
    for family in text_string_to_metric_families(path.read_text()):
        for s in family.samples:
            if "GPU_I_ID" not in s.labels:
                real.setdefault(s.name, s.value)
    load = PodDemand(
        busy_ratio=real["DCGM_FI_PROF_GR_ENGINE_ACTIVE"],
        tensor_ratio=real["DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"],
        dram_ratio=real["DCGM_FI_PROF_DRAM_ACTIVE"],
    )
    a = gpu_activity(A100_SXM4, [load], previous_temp_c=None, dt_s=1)
    assert a.power_w < A100_SXM4.tdp_w
    assert a.power_w == pytest.approx(real["DCGM_FI_DEV_POWER_USAGE"], rel=0.1)
    assert a.sm_clock_mhz == pytest.approx(real["DCGM_FI_DEV_SM_CLOCK"], rel=0.1)
    assert a.temp_c == pytest.approx(real["DCGM_FI_DEV_GPU_TEMP"], abs=5)
    assert steady_temp_c(A100_SXM4, a.power_w) == a.temp_c
