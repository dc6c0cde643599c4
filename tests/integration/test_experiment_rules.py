"""The controller's rules earn their place in the experiment's workload: a short seeded run
(2 nodes x 8 GPUs, 9 simulated minutes) of ``kube-sits`` against the arm without one rule.

- the namespace quota rule takes back the GPU quota team-a and training hold but do not use,
  never below what their pods request and never, in sum, beyond the cluster (it no longer
  lends team-b more in a cluster whose running pods fill it: docs/evidence/controller-ablation.md);
- the time-slice rule finds the inference servers' P95 above 10 ms and writes 25 ms for them
  (the demo's ConfigMap starts them at 15 ms), which the simulated servers then run under.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sits_observe.lab.experiment.experiment import run_job
from sits_observe.lab.experiment.measures import RunMeasures, run_measures
from sits_observe.lab.experiment.run import RunResult
from sits_observe.lab.experiment.settings import ExperimentSettings
from sits_observe.store import Store

pytestmark = [pytest.mark.slow, pytest.mark.k8s]


Run = tuple[RunResult, RunMeasures, Path]


def run(arm: str, workdir: Path) -> Run:
    """One run of ``arm`` on seed 0; its DuckDB file stays under ``workdir``."""
    settings = ExperimentSettings(
        arms=(arm,), seeds=1, hours=0.15, nodes=2, gpus_per_node=8, workdir=workdir
    )
    result = run_job(settings, arm, 0)
    return result, run_measures(result.timeline), workdir / f"{arm}-seed0" / "sits.duckdb"


@pytest.fixture(scope="module")
def sits(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """The ``kube-sits`` run both tests read."""
    return run("kube-sits", tmp_path_factory.mktemp("experiment"))


def test_the_quota_rule_reclaims_idle_quota_within_the_cluster(sits: Run, tmp_path: Path) -> None:
    with_rule, _, db = sits
    without, _, _ = run("kube-sits-no-namespace-quota", tmp_path)
    assert with_rule.arrivals == without.arrivals  # the same workload
    applied = dict(with_rule.timeline.controller_applied)
    assert applied.get("quota-gpu", 0) > 0 and "quota-gpu" not in dict(
        without.timeline.controller_applied
    )
    with Store.open(db, read_only=True) as store:
        rows = store.query(
            "SELECT namespace, current, proposed FROM decisions "
            "WHERE action = 'quota-gpu' AND outcome = 'applied' ORDER BY ts"
        ).to_pylist()
    reclaimed = {r["namespace"] for r in rows if int(r["proposed"]) < int(r["current"])}
    assert {"team-a", "training"} <= reclaimed
    latest = {r["namespace"]: int(r["proposed"]) for r in rows}
    assert sum(latest.values()) <= 2 * 8  # the cluster's GPUs


def test_the_time_slice_rule_lengthens_the_servers_slice(sits: Run) -> None:
    result, _, db = sits
    assert dict(result.timeline.controller_applied).get("time-slice", 0) > 0
    with Store.open(db, read_only=True) as store:
        rows = store.query(
            "SELECT name, current, proposed, reason FROM decisions "
            "WHERE action = 'time-slice' AND outcome = 'applied'"
        ).to_pylist()
    assert rows
    for row in rows:
        assert (row["current"], row["proposed"]) == ("15ms", "25ms")
        assert "> 10 ms" in row["reason"]
