"""The demo's service exports every derived-signal family of the metric contract.

Real everything on loopback: the simulated cluster, agents, Kubernetes emulator, the dry-run
controller and the service; the test scrapes ``/metrics`` over HTTP until each family has at
least one sample (the exporter caches passes for 15 s, so this takes a few passes).
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from sits_observe.collectors.exposition import parse_exposition
from sits_observe.lab.demo.demo import Demo, DemoSettings

pytestmark = [pytest.mark.slow, pytest.mark.k8s]

#: Every family of docs/metrics.md's contract, as sample names.
CONTRACT = (
    "sits_latency_seconds",
    "sits_requests_per_second",
    "sits_fgd_fragmentation_ratio",
    "sits_fgd_fragmentation_amount_ratio",
    "sits_interference_score_ratio",
    "sits_collector_drops_total",
    "sits_controller_decisions_total",
    "sits_exporter_errors_total",
    "sits_smf_ratio",
    "sits_smf_node_ratio",
    "sits_smf_namespace_ratio",
    "sits_fgd_node_fragmentation_gpus",
    "sits_latency_estimate_seconds",
    "sits_latency_slo_seconds",
    "sits_knee_requests_per_second",
    "sits_safe_max_requests_per_second",
    "sits_memory_class_workloads",
    "sits_quota",
    "sits_controller_errors_total",
    "sits_controller_last_decision_timestamp_seconds",
    "sits_collector_last_seen_timestamp_seconds",
    "sits_gpu_framebuffer_used_ratio",
    "sits_gpu_trend_cluster",
    "sits_pod_start_seconds",
    "sits_request_latency_window_seconds_bucket",
    "sits_gpu_idle_gpus",
    "sits_gpu_idle_wasted_gpu_hours",
    "sits_gpu_idle_ratio",
)
#: Families the demo cannot fill today, with why (the lead may change the demo).
NOT_IN_DEMO: dict[str, str] = {
    # The simulated drivers never drop a sample (test_demo asserts it).
    "sits_collector_drops_total": "no collector drops in the simulation",
    # The demo's load wave passes the servers' capacity after 95 s and the knee shows only
    # once the queues build (about 3 minutes in), past this test's 150 s; the family is
    # tested on a stored curve in tests/unit/surfaces/test_exporter_signals.py and the
    # demo's knee by tests/integration/test_demo_heatmap.py.
    "sits_knee_requests_per_second": "the load wave reaches the knee after this test's window",
}


def test_demo_service_exports_every_contract_family(tmp_path: Path) -> None:
    settings = DemoSettings(
        nodes=2,
        gpus_per_node=4,
        db_path=tmp_path / "demo.duckdb",
        workdir=tmp_path,
        seed=11,
        controller_interval_s=2,
        inventory_interval_s=1,
    )
    wanted = set(CONTRACT) - set(NOT_IN_DEMO)
    missing = wanted
    errors: dict[str, float] = {}
    with Demo(settings) as demo, httpx.Client(base_url=demo.service_url, timeout=30) as client:
        deadline = time.monotonic() + 150
        while missing and time.monotonic() < deadline:
            response = client.get("/metrics")
            assert response.status_code == 200
            expo = parse_exposition(response.text)
            present = {s.name for s in expo.samples}
            missing = wanted - present
            errors = {
                s.label("signal"): s.value
                for s in expo.samples
                if s.name == "sits_exporter_errors_total" and s.value
            }
            time.sleep(2)
    assert not missing, f"families without samples: {sorted(missing)}; errors: {errors}"
    assert not errors, errors
