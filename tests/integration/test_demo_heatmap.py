"""The demo's load ramp crosses its servers' knee: ``heatmap`` finds a knee and a safe maximum.

The default demo's two inference servers (one H100, one A100, tensor parallel 4) are run on the
simulated clock for one cycle of the load wave (6 minutes, far faster than real time); their
exact request records go into a DuckDB file and the ``heatmap`` report reads them with the
settings the demo prints (10 s time bins, 1 rps bins, the 60 s SLO).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest

from sits_observe.reports import heatmap as heatmap_report
from sits_observe.reports.window import Window
from sits_observe.simulator.cluster import SimulatedCluster
from sits_observe.simulator.workload import LoadProfile
from sits_observe.store import Store
from sits_observe.surfaces.demo import DEMO_HEATMAP, DEMO_SLO_S

pytestmark = pytest.mark.slow

START = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


def one_cycle_of_requests(seed: int) -> pa.Table:
    cluster = SimulatedCluster(nodes=2, gpus_per_node=8, seed=seed)
    rows: dict[str, list[object]] = {"ts": [], "model": [], "latency_s": [], "ok": [], "pod": []}
    for _ in range(int(LoadProfile().period_s / 0.1)):
        cluster.step(0.1)
        for node in cluster.nodes:
            for pod, record in cluster.finished_requests(node):
                rows["ts"].append(START + timedelta(seconds=record.finished_at_s))
                rows["model"].append(record.model)
                rows["latency_s"].append(record.latency_s)
                rows["ok"].append(True)
                rows["pod"].append(pod.name)
    return pa.table(rows)


@pytest.mark.parametrize("seed", [7, 11])
def test_one_load_cycle_shows_a_knee_and_a_safe_maximum(tmp_path: Path, seed: int) -> None:
    query = heatmap_report.HeatmapQuery(
        bin_s=DEMO_HEATMAP.window_s,
        throughput_bin_rps=DEMO_HEATMAP.throughput_bin_rps,
        min_bin_requests=DEMO_HEATMAP.min_bin_requests,
        slo_ms=DEMO_HEATMAP.slo_ms,
    )
    requests = one_cycle_of_requests(seed)
    end = START.replace(tzinfo=None) + timedelta(seconds=LoadProfile().period_s + 60)
    with Store.open(tmp_path / "sits.duckdb") as store:
        store.append("requests", requests)
        report = heatmap_report.build(store, Window(None, end, "given"), query)
    (heatmap,) = report.facts["heatmaps"]
    assert heatmap["requests"] == requests.num_rows
    knee, safe = heatmap["knee"], heatmap["safe_max"]
    assert knee is not None, heatmap["notes"]
    assert safe is not None, heatmap["notes"]
    assert safe["slo_ms"] == DEMO_SLO_S * 1000
    # The ramp went past it: a higher throughput bin broke the SLO.
    assert safe["exceeded_from_rps"] is not None
    assert safe["exceeded_from_rps"] > safe["throughput_lo_rps"]
    # Below the knee P95 is the servers' own pace, well inside the SLO.
    assert knee["p95_s"] < DEMO_SLO_S
    (limits,) = report.table("limits").records()
    assert limits["knee_rps"] == knee["throughput_lo_rps"]
    assert limits["safe_max_rps"] == safe["throughput_lo_rps"]
