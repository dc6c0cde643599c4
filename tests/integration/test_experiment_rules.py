"""The controller's rules act in the experiment's workload: a short seeded run (4 nodes x 8
GPUs, 18 simulated minutes) of ``kube-sits-with-namespace-quota`` (kube-sits with the
namespace quota rule, off by default, switched on).

- the namespace quota rule waits out ``quota.lower_after_s`` (15 minutes), then takes back the
  GPU quota team-a holds and does not use and lends it to team-b, whose sweeps queue behind
  its quota, though running pods fill the cluster; the managed quotas together never grow
  past what they held (docs/evidence/controller-ablation.md measures what it is worth, and
  why it is off by default);
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
        arms=(arm,), seeds=1, hours=0.3, nodes=4, gpus_per_node=8, workdir=workdir
    )
    result = run_job(settings, arm, 0)
    return result, run_measures(result.timeline), workdir / f"{arm}-seed0" / "sits.duckdb"


@pytest.fixture(scope="module")
def sits(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """The run both tests read."""
    return run("kube-sits-with-namespace-quota", tmp_path_factory.mktemp("experiment"))


def test_the_quota_rule_lends_idle_quota_to_the_tenant_that_queues(sits: Run) -> None:
    result, _, db = sits
    assert dict(result.timeline.controller_applied).get("quota-gpu", 0) > 0
    with Store.open(db, read_only=True) as store:
        rows = store.query(
            "SELECT ts, namespace, current, proposed FROM decisions "
            "WHERE action = 'quota-gpu' AND outcome = 'applied' ORDER BY ts"
        ).to_pylist()
        start = store.query("SELECT min(ts) AS t FROM pod_snapshots").to_pylist()[0]["t"]
    first = {}
    for r in rows:
        first.setdefault(r["namespace"], r)
    lowered = {ns for ns, r in first.items() if int(r["proposed"]) < int(r["current"])}
    raised = {ns for ns, r in first.items() if int(r["proposed"]) > int(r["current"])}
    assert "team-a" in lowered and "team-b" in raised
    # Nothing is lowered before 15 minutes of history.
    assert all(
        (r["ts"] - start).total_seconds() >= 900
        for r in rows
        if int(r["proposed"]) < int(r["current"])
    )
    # Lent, not added: the managed quotas together hold no more than they did.
    before = {ns: int(r["current"]) for ns, r in first.items()}
    latest = {r["namespace"]: int(r["proposed"]) for r in rows}
    assert sum(latest.values()) <= sum(before.values())


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
