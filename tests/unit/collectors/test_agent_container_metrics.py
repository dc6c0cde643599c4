"""The agent's /metrics serves the latest cgroup samples under cAdvisor's names.

Round trip: a cgroup tree on disk -> the cgroup collector's rows -> the agent's exposition ->
prometheus-client's text parser -> rows rebuilt with the shared family table must give back
the collector's values, labels and sample times.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from sits_observe.collectors.agent import AgentMetrics
from sits_observe.collectors.cgroup.collector import CgroupCollector
from sits_observe.domain.schema.container_fields import FAMILIES, LABELS
from sits_observe.lab.cluster.cgroupfs import CgroupTree, CgroupValues, QosClass
from tests.unit.collectors.test_agent_loop import FakeService, make_loop

NOW = datetime(2026, 11, 1, 12, 0, 0, 250_000, tzinfo=UTC)
UID_A = "6f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0"
UID_B = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"


def _rows(root: Path) -> pa.Table:
    return CgroupCollector(root, node="node-1").collect(NOW).tables["container_samples"]


def _exposition(tables: dict[str, pa.Table]) -> str:
    metrics = AgentMetrics()
    metrics.latest.publish(tables)
    return generate_latest(metrics.registry).decode()


def _parsed(text: str) -> dict[str, dict[str, tuple[float, float | None, dict[str, str]]]]:
    """``{family name: {container_id: (value, timestamp_s, labels)}}`` of the sample lines."""
    out: dict[str, dict[str, tuple[float, float | None, dict[str, str]]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue
            out.setdefault(sample.name, {})[sample.labels.get("container_id", "")] = (
                sample.value,
                None if sample.timestamp is None else float(sample.timestamp),
                dict(sample.labels),
            )
    return out


def _tree(root: Path) -> CgroupTree:
    tree = CgroupTree(root)
    tree.add_container(
        UID_A,
        "a" * 64,
        values=CgroupValues(
            memory_current_bytes=157_286_400,
            memory_max_bytes=268_435_456,
            memory_anon_bytes=104_857_600,
            memory_file_bytes=41_943_040,
            memory_kernel_bytes=5_242_880,
            oom_events_total=2,
            oom_kill_events_total=1,
            memory_pressure_some_avg10_ratio=0.035,
            memory_pressure_full_avg10_ratio=0.0125,
            memory_pressure_some_total_s=4.5,
            cpu_pressure_some_avg10_ratio=0.12,
            cpu_pressure_some_total_s=90.0,
            cpu_usage_s=123.456789,
            cpu_throttled_s=7.5,
            cpu_periods_total=5000,
            cpu_throttled_periods_total=250,
            cpu_limit_cores=2.0,
        ),
    )
    tree.add_container(
        UID_B,
        "b" * 64,
        qos=QosClass.BEST_EFFORT,
        values=CgroupValues(memory_current_bytes=4096, cpu_usage_s=0.5),
    )
    return tree


def test_collector_rows_round_trip_through_the_exposition(tmp_path: Path) -> None:
    _tree(tmp_path)
    rows = _rows(tmp_path)
    assert rows.num_rows == 2
    parsed = _parsed(_exposition({"container_samples": rows}))
    for row in rows.to_pylist():
        cid = row["container_id"]
        for spec in FAMILIES:
            want = row[spec.column]
            if want is None and not spec.zero_is_null:
                assert cid not in parsed.get(spec.name, {}), spec.name  # NULL: no sample
                continue
            value, stamp, labels = parsed[spec.name][cid]
            assert value == (0 if want is None else want), spec.name
            assert stamp == NOW.timestamp(), spec.name  # the row's time, to the millisecond
            for label, column in LABELS:
                assert labels[label] == (row[column] or ""), (spec.name, label)


def test_cadvisor_names_where_cadvisor_has_the_quantity(tmp_path: Path) -> None:
    _tree(tmp_path)
    text = _exposition({"container_samples": _rows(tmp_path)})
    parsed = _parsed(text)
    a = "a" * 64
    assert parsed["container_memory_usage_bytes"][a][0] == 157_286_400
    assert parsed["container_memory_rss"][a][0] == 104_857_600  # memory.stat anon
    assert parsed["container_memory_cache"][a][0] == 41_943_040  # memory.stat file
    assert parsed["container_oom_events_total"][a][0] == 1  # OOM kills, as cAdvisor counts
    assert parsed["sits_container_memory_oom_events_total"][a][0] == 2
    assert parsed["container_pressure_memory_waiting_seconds_total"][a][0] == 4.5
    assert parsed["sits_container_cpu_pressure_some_avg10_ratio"][a][0] == 0.12
    assert "# TYPE container_cpu_usage_seconds_total counter" in text
    # The second container has no memory.max: cAdvisor writes unlimited as 0.
    assert parsed["container_spec_memory_limit_bytes"]["b" * 64][0] == 0
    # No working set: the agent does not read inactive_file, and would only be guessing.
    assert "container_memory_working_set_bytes" not in text
    assert set(parsed) <= {f.name for f in FAMILIES} | {
        n for n in parsed if n.startswith("sits_agent_")
    }


def test_one_series_per_family_per_container(tmp_path: Path) -> None:
    _tree(tmp_path)
    rows = _rows(tmp_path)
    older = rows.set_column(
        0, "ts", pa.array([datetime(2026, 11, 1, 11, 59)] * rows.num_rows, pa.timestamp("us"))
    )
    parsed = _parsed(_exposition({"container_samples": pa.concat_tables([older, rows])}))
    usage = parsed["container_memory_usage_bytes"]
    assert len(usage) == 2  # two containers, two series, whatever the rows
    assert {stamp for _, stamp, _ in usage.values()} == {NOW.timestamp()}  # the newest wins


def test_psi_off_serves_no_pressure_series(tmp_path: Path) -> None:
    CgroupTree(tmp_path, psi=False).add_container(
        UID_A, "a" * 64, values=CgroupValues(memory_current_bytes=1)
    )
    text = _exposition({"container_samples": _rows(tmp_path)})
    assert "container_memory_usage_bytes{" in text
    samples = [line for line in text.splitlines() if not line.startswith("#")]
    assert not [line for line in samples if "pressure" in line]


def test_a_broken_container_table_is_counted_and_the_gpu_families_still_served() -> None:
    metrics = AgentMetrics()
    gpu = pa.table({"gpu_uuid": ["GPU-a"], "fb_used_bytes": [2**20]})
    broken = pa.table({"ts": ["x"], "memory_current_bytes": [1]})
    metrics.latest.publish({"gpu_samples": gpu, "container_samples": broken})
    text = generate_latest(metrics.registry).decode()
    assert "DCGM_FI_DEV_FB_USED" in text and "container_memory_usage_bytes" not in text
    errors = metrics.registry.get_sample_value(
        "sits_agent_metrics_errors_total", {"table": "container_samples"}
    )
    assert errors == 1.0
    good = pa.table({"container_id": ["c1"], "memory_current_bytes": [1]})
    metrics.latest.publish({"gpu_samples": gpu, "container_samples": good})
    assert "container_memory_usage_bytes{" in generate_latest(metrics.registry).decode()
    metrics.latest.publish({"gpu_samples": gpu})  # a tick without cgroup rows clears them
    assert "container_memory_usage_bytes{" not in generate_latest(metrics.registry).decode()


def test_the_loop_serves_each_tick_s_cgroup_rows(tmp_path: Path) -> None:
    tree = _tree(tmp_path / "cgroup")
    loop = make_loop(tmp_path, FakeService(), CgroupCollector(tmp_path / "cgroup", node="n1"))
    loop.tick()
    tree.advance("a" * 64, memory_delta_bytes=4096)
    loop.tick()
    usage = _parsed(generate_latest(loop.metrics.registry).decode())["container_memory_usage_bytes"]
    assert usage["a" * 64][0] == 157_286_400 + 4096  # the second tick's value
    assert usage["a" * 64][2]["node"] == "n1"
