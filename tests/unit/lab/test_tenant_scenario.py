"""The workload's two tenants: team-a holding quota it does not use, team-b's sweeps beyond
its quota; they come on top of the seeded arrivals without changing them."""

from __future__ import annotations

from sits_observe.lab.cluster.pods.generator import WorkloadGenerator
from sits_observe.lab.cluster.pods.tenants import TENANT_BURST, TENANT_IDLE, TENANT_SWEEPS_AT_S

PRODUCTS = ["NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB"] * 4


def generator(*, tenants: bool = True, seed: int = 3) -> WorkloadGenerator:
    return WorkloadGenerator(products=PRODUCTS, gpus_per_node=8, seed=seed, tenants=tenants)


def test_team_b_asks_for_more_than_its_quota_and_team_a_for_less() -> None:
    scenario = generator().tenants
    assert scenario is not None
    quotas = {q.namespace: q.gpus for q in scenario.quotas}
    assert quotas == {TENANT_IDLE: 8, TENANT_BURST: 2}
    pods = scenario.arrivals(0.0, 3600.0)
    sweep = [p for p in pods if p.namespace == TENANT_BURST]
    assert len(sweep) == 8 * len(TENANT_SWEEPS_AT_S)
    first = scenario.arrivals(TENANT_SWEEPS_AT_S[0], TENANT_SWEEPS_AT_S[0] + 2.0)
    assert sum(p.num_gpu for p in first) == 8 > quotas[TENANT_BURST]
    assert all(600 <= (p.duration_s or 0) <= 900 and p.owner.kind == "Job" for p in sweep)
    idle = [p for p in pods if p.namespace == TENANT_IDLE]
    assert sum(p.num_gpu for p in idle) == 1 < quotas[TENANT_IDLE]


def test_the_tenants_leave_the_seeded_arrivals_as_they_were() -> None:
    with_tenants, without = generator(), generator(tenants=False)
    assert without.tenants is None
    mixed = with_tenants.arrivals(0.0, 600.0)
    plain = without.arrivals(0.0, 600.0)
    tenants = {TENANT_IDLE, TENANT_BURST}
    assert [p.uid for p in mixed if p.namespace not in tenants] == [p.uid for p in plain]
    assert {p.namespace for p in mixed} >= tenants
    # The same seed gives the same tenants' pods.
    assert [p.uid for p in generator().arrivals(0.0, 600.0)] == [p.uid for p in mixed]


def test_a_cluster_with_few_spare_gpus_has_no_tenants() -> None:
    small = WorkloadGenerator(products=PRODUCTS[:2], gpus_per_node=4, seed=3)
    assert small.spare_gpus == 4 and small.tenants is None
    assert {p.namespace for p in small.arrivals(0.0, 600.0)} <= {"training", "research"}
