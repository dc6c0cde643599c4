"""The demo's load ramp crosses its servers' knee: ``heatmap`` finds a knee and a safe maximum.

The default demo's two inference servers (one H100, one A100, tensor parallel 4) are run on the
simulated clock for one cycle of the load wave (10 % to 110 % of capacity over 6 minutes, far
faster than real time); their exact request records go into a DuckDB file and the ``heatmap``
report reads them with the settings the demo prints (20 s time bins, 1 rps bins, 20 requests a
bin, the 40 s SLO).
"""

from __future__ import annotations

import functools
import json
import math
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from sits_observe.collectors.kube.pods import pod_row
from sits_observe.lab.cluster.cluster import SimulatedCluster
from sits_observe.lab.cluster.serving.workload import LoadProfile
from sits_observe.lab.demo.demo import DEMO_HEATMAP, DEMO_RECOMMEND_ARGS, DEMO_SLO_S
from sits_observe.lab.kube.publish import pod_body
from sits_observe.reports.serving import heatmap as heatmap_report
from sits_observe.reports.serving import heatmap_query
from sits_observe.reports.window import Window
from sits_observe.store import Store
from sits_observe.surfaces.cli.main import app

pytestmark = pytest.mark.slow

START = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


def one_cycle_of_requests(seed: int) -> pa.Table:
    return one_cycle(seed)[0]


@functools.cache
def one_cycle(seed: int) -> tuple[pa.Table, pa.Table]:
    """The servers' requests over one load cycle, and their ``pods`` rows as the inventory
    reads them from the servers' Pod objects (once per seed: the table is not changed)."""
    cluster = SimulatedCluster(nodes=2, gpus_per_node=8, seed=seed)
    servers = [p for n in cluster.nodes.values() for p in n.pods.values() if p.server]
    pods = [
        {"ts": START.replace(tzinfo=None), **pod_row(pod_body(p, START), Counter())}
        for p in servers
    ]
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
    return pa.table(rows), pa.Table.from_pylist(pods)


@pytest.mark.parametrize("seed", [7, 11])
def test_one_load_cycle_shows_a_knee_and_a_safe_maximum(tmp_path: Path, seed: int) -> None:
    query = heatmap_query.HeatmapQuery(
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


@pytest.mark.parametrize("seed", [7, 11])
def test_one_load_cycle_on_the_heatmap_s_defaults_and_the_demo_s_slo(
    tmp_path: Path, seed: int
) -> None:
    """The command the demo prints, ``heatmap --slo-ms 40000`` with no bin flags: the bins
    from the data find the knee and the safe maximum the demo's own bins do."""
    requests = one_cycle_of_requests(seed)
    end = START.replace(tzinfo=None) + timedelta(seconds=LoadProfile().period_s + 60)
    query = heatmap_query.HeatmapQuery(slo_ms=DEMO_SLO_S * 1000)
    with Store.open(tmp_path / "sits.duckdb") as store:
        store.append("requests", requests)
        report = heatmap_report.build(store, Window(None, end, "given"), query)
    (heatmap,) = report.facts["heatmaps"]
    knee, safe = heatmap["knee"], heatmap["safe_max"]
    assert knee is not None, heatmap["notes"]
    assert safe is not None and safe["exceeded_from_rps"] is not None, heatmap["notes"]
    assert knee["p95_s"] < DEMO_SLO_S
    assert report.facts["bin_s"] >= 5 and report.facts["throughput_bin_rps"] <= 1


def test_the_demo_s_recommend_settings_size_replicas_at_the_slo_over_one_cycle(
    tmp_path: Path,
) -> None:
    """``recommend`` with the flags the demo prints (DEMO_RECOMMEND_ARGS: its SLO), over one
    load cycle of its servers: the replicas row has a proposal, max(1, ceil(peak / safe
    maximum)), with its evidence, from the bins the rule takes from the pods' requests. With
    fixed bins of 1 s windows and 10 rps every window falls in the lowest bin: the rule can
    only read that bin's upper edge as the safe maximum, an upper bound."""
    requests, pods = one_cycle(7)
    db = tmp_path / "sits.duckdb"
    with Store.open(db) as store:
        store.append_batch({"requests": requests, "pods": pods})
    args = ["recommend", "--db", str(db), *DEMO_RECOMMEND_ARGS, "--action", "replicas"]
    outcome = CliRunner().invoke(app, [*args, "-o", "json"])
    assert outcome.exit_code == 0, outcome.output
    (row,) = json.loads(outcome.stdout)["rows"]
    evidence = json.loads(row["evidence"])
    assert (row["namespace"], row["name"], row["current_value"]) == ("inference", "llama2-70b", 2)
    assert sorted(evidence["pods"]) == sorted(pods.column("pod").to_pylist())
    assert evidence["slo_s"] == DEMO_SLO_S and evidence["gpus_per_replica"] == 4
    safe, peak = evidence["safe_max_rps"], evidence["peak_rps"]
    assert safe is not None and safe > 0 and peak > 0, row["reason"]
    assert not evidence["upper_bound"], row["reason"]
    assert row["proposed_value"] == max(1, math.ceil(peak / safe - 1e-9))
    assert evidence["proposed_gpus"] == 4 * row["proposed_value"]
    # The same with fixed bins: one 10 rps bin holds every window.
    fixed = ["--heatmap-bin-s", "1", "--heatmap-throughput-bin-rps", "10"]
    outcome = CliRunner().invoke(app, [*args, *fixed, "-o", "json"])
    assert outcome.exit_code == 0, outcome.output
    (row,) = json.loads(outcome.stdout)["rows"]
    coarse = json.loads(row["evidence"])
    assert coarse["upper_bound"] and coarse["safe_max_rps"] == 10 > safe, row
