"""The demo's load ramp crosses its servers' knee: ``heatmap`` finds a knee and a safe maximum.

The default demo's two inference servers (one H100, one A100, tensor parallel 4) are run on the
simulated clock for one cycle of the load wave (6 minutes, far faster than real time); their
exact request records go into a DuckDB file and the heatmap analytics read them with the
settings the demo prints (10 s windows, 1 rps bins, the 60 s SLO).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest

from sits_observe.analytics.heatmap import compute_heatmaps
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
    with Store.open(tmp_path / "sits.duckdb") as store:
        store.append("requests", one_cycle_of_requests(seed))
        (heatmap,) = compute_heatmaps(store, DEMO_HEATMAP)
    assert heatmap.knee.value is not None, heatmap.knee.note
    assert heatmap.safe_max is not None and heatmap.safe_max.value is not None
    safe = heatmap.safe_max.value
    assert safe.slo_s == DEMO_SLO_S
    # The ramp went past it: a higher throughput bin broke the SLO.
    assert safe.exceeded_from_rps is not None and safe.exceeded_from_rps > safe.throughput_lo_rps
    # Below the knee P95 is the servers' own pace, well inside the SLO.
    assert heatmap.knee.value.p95_s < DEMO_SLO_S
