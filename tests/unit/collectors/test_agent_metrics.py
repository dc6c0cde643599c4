"""The agent's /metrics serves the latest GPU samples in dcgm-exporter's format.

The honest check is a round trip: rows -> the agent's exposition -> the dcgm-exporter parser
the service uses must give back the same rows (values, units, labels, timestamps).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pytest
from prometheus_client import generate_latest

from sits_observe.collectors.agent import AgentMetrics
from sits_observe.collectors.agent.latest import LABELS
from sits_observe.collectors.dcgm import parse_dcgm
from sits_observe.domain.schema.dcgm_fields import FIELDS
from sits_observe.lab.cluster.cluster import SimulatedCluster
from sits_observe.lab.cluster.render import dcgm_text
from tests.unit.collectors.test_agent_loop import FakeService, GpuCounter, make_loop, metric

AT = datetime(2026, 11, 1, 12, 0, 0, 250_000)


def _round_trip(table: pa.Table) -> pa.Table:
    metrics = AgentMetrics()
    metrics.latest.publish({"gpu_samples": table})
    text = generate_latest(metrics.registry).decode()
    later = datetime(2030, 1, 1, tzinfo=UTC)  # rows must keep their own time, not this one
    return parse_dcgm(text, now=later, node=None).tables["gpu_samples"]


def _sorted(table: pa.Table) -> list[dict[str, object]]:
    rows = table.drop_columns(["source"]).to_pylist()
    return sorted(rows, key=lambda r: (str(r["gpu_uuid"]), str(r["pod"])))


def test_simulated_gpus_round_trip_through_the_dcgm_parser() -> None:
    cluster = SimulatedCluster(nodes=1, gpus_per_node=8, seed=4)
    cluster.step(30)
    node = sorted(cluster.nodes)[0]
    original = parse_dcgm(dcgm_text(cluster, node), now=AT, node=None).tables["gpu_samples"]
    back = _round_trip(original)
    assert back.num_rows == original.num_rows == 8
    assert _sorted(back) == _sorted(original)


def test_shared_h100_sample_round_trips(shared_data: Path) -> None:
    """Real dcgm-exporter output of 8 H100s with pod labels (shared/data/dcgm)."""
    files = sorted((shared_data / "dcgm").glob("h100-k8s-sampled.prom"))
    if not files:
        pytest.skip("no H100 dcgm-exporter sample in the shared data")
    original = parse_dcgm(files[0].read_text(), now=AT, node=None).tables["gpu_samples"]
    back = _round_trip(original)
    assert back.num_rows == original.num_rows > 0
    for left, right in zip(_sorted(back), _sorted(original), strict=True):
        for key, value in right.items():
            if isinstance(value, float):
                assert left[key] == pytest.approx(value, rel=1e-12), key
            else:
                assert left[key] == value, key


def test_families_use_dcgm_exporter_names_and_units() -> None:
    table = pa.table(
        {
            "ts": pa.array([AT], pa.timestamp("us")),
            "node": ["n1"],
            "gpu_uuid": ["GPU-a"],
            "gpu_index": pa.array([0], pa.int16()),
            "fb_used_bytes": [3 * 2**20],
            "gpu_util_ratio": [0.5],
            "sm_clock_hz": [1.98e9],
        }
    )
    metrics = AgentMetrics()
    metrics.latest.publish({"gpu_samples": table})
    text = generate_latest(metrics.registry).decode()
    ms = round(AT.replace(tzinfo=UTC).timestamp() * 1000)
    lines = {line.split("{")[0]: line for line in text.splitlines() if line.startswith("DCGM")}
    assert lines["DCGM_FI_DEV_FB_USED"].endswith(f"}} 3.0 {ms}")
    assert lines["DCGM_FI_DEV_GPU_UTIL"].endswith(f"}} 50.0 {ms}")
    assert lines["DCGM_FI_DEV_SM_CLOCK"].endswith(f"}} 1980.0 {ms}")
    for label in ('Hostname="n1"', 'UUID="GPU-a"', 'gpu="0"'):
        assert label in lines["DCGM_FI_DEV_FB_USED"]
    assert {name for name, _ in LABELS} >= {"UUID", "Hostname", "GPU_I_ID", "pod"}
    assert set(lines) <= {spec.families[0] for spec in FIELDS}


def test_a_tick_without_gpu_rows_clears_the_series() -> None:
    metrics = AgentMetrics()
    metrics.latest.publish({"gpu_samples": pa.table({"fb_used_bytes": [1]})})
    metrics.latest.publish({})
    assert b"DCGM_FI" not in generate_latest(metrics.registry)


def test_a_broken_table_is_counted_and_the_scrape_still_answers() -> None:
    metrics = AgentMetrics()
    # a ts column of strings cannot be turned into a sample time
    metrics.latest.publish({"gpu_samples": pa.table({"ts": ["x"], "fb_used_bytes": [1]})})
    text = generate_latest(metrics.registry).decode()
    assert "sits_agent_samples_shipped_total" in text and "DCGM_FI" not in text
    value = metrics.registry.get_sample_value(
        "sits_agent_metrics_errors_total", {"table": "gpu_samples"}
    )
    assert value == 1.0


def test_the_loop_publishes_each_tick(tmp_path: Path) -> None:
    loop = make_loop(tmp_path, FakeService(), GpuCounter(gpus=3))
    loop.tick()
    loop.tick()
    text = generate_latest(loop.metrics.registry).decode()
    used = [line for line in text.splitlines() if line.startswith("DCGM_FI_DEV_FB_USED")]
    assert len(used) == 3
    # second tick: fb_used_bytes = 2000 + i bytes, served in MiB
    assert any(f"}} {2000 / 2**20!r} " in line for line in used)


class Exploding:
    def publish(self, tables: object) -> None:
        raise RuntimeError("boom")


def test_a_failing_publish_never_costs_the_batch(tmp_path: Path) -> None:
    service = FakeService()
    loop = make_loop(tmp_path, service, GpuCounter(gpus=2))
    loop.metrics.latest = Exploding()  # type: ignore[assignment]
    report = loop.tick()
    assert report.result == "shipped"
    assert service.rows() == 2
    assert metric(loop, "sits_agent_metrics_errors_total", table="publish") == 1.0
