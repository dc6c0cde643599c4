"""The simulator on the Alibaba default trace reproduces the ATC'23 ordering and numbers.

Published (SPEC, means of 10 seeds at 130% arrived): GPU allocation Random 87.47%, DotProd
90.85%, GpuClustering 91.88%, GpuPacking 92.00%, BestFit 93.08%, FGD 95.39%; fragmentation
ratio at 90% arrived FGD ~50%, BestFit ~74%, DotProd ~94%. Two seeds keep this under a
minute on two cores; the ten-seed figures are in docs/analytics/simulator.md.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from sits_observe.analytics.traces.cluster_trace import load_node_list, load_pod_list
from sits_observe.analytics.traces.variants import make_variant
from sits_observe.lab.replay.engine.replay import PolicyResult, policy_names, simulate

PUBLISHED_ALLOC = {
    "random": 0.8747,
    "dotprod": 0.9085,
    "clustering": 0.9188,
    "packing": 0.9200,
    "bestfit": 0.9308,
    "fgd": 0.9539,
}
PUBLISHED_FRAG_AT_90 = {"fgd": 0.50, "bestfit": 0.74, "dotprod": 0.94}


@functools.cache
def _replay_all(shared: Path) -> dict[str, PolicyResult]:
    """Every score-plugin policy, seeds 0 and 1, once per test session (the kube-* policies
    are measured in bench/bench_schedsim.py)."""
    trace = shared / "traces" / "alibaba-gpu-v2023"
    nodes = load_node_list(trace / "openb_node_list_gpu_node.csv")
    pods = load_pod_list(trace / "openb_pod_list_default.csv")
    paper_and_sits = [n for n in policy_names() if not n.startswith("kube-")]
    done = simulate(nodes, pods, paper_and_sits, [0, 1], workers=2)
    return {r.policy: r for r in done}


@pytest.fixture
def results(shared_data: Path) -> dict[str, PolicyResult]:
    return _replay_all(shared_data)


@pytest.mark.slow
@pytest.mark.shared_data
def test_published_ordering_of_gpu_allocation_at_130_percent(
    results: dict[str, PolicyResult],
) -> None:
    alloc = {name: r.final_alloc_ratio.mean for name, r in results.items()}
    assert alloc["random"] < alloc["dotprod"]
    assert alloc["dotprod"] < min(alloc["clustering"], alloc["packing"])
    assert max(alloc["clustering"], alloc["packing"]) < alloc["bestfit"]
    assert alloc["bestfit"] < alloc["fgd"]
    unallocated = {name: r.unallocated_gpus.mean for name, r in results.items()}
    assert unallocated["fgd"] < unallocated["bestfit"] - 100  # paper: 286 vs 430
    # On the default workload sits ties FGD (within its seed spread, docs/analytics/
    # simulator.md); its tie levels pay on the variants (the next test).
    assert alloc["sits"] == pytest.approx(alloc["fgd"], abs=0.002)


@pytest.mark.slow
@pytest.mark.shared_data
def test_sits_beats_fgd_on_every_seed_with_gpu_type_constraints(shared_data: Path) -> None:
    """gpuspec33 (a third of the GPU pods pinned to a GPU model): the tie levels (CPU pods on
    busy nodes, tightest share) gain 0.2-1.9 points per seed over FGD
    (bench_schedsim.py --part levels); each of two seeds must gain at least 0.3."""
    trace = shared_data / "traces" / "alibaba-gpu-v2023"
    nodes = load_node_list(trace / "openb_node_list_gpu_node.csv")
    pods = make_variant(load_pod_list(trace / "openb_pod_list_default.csv"), nodes, "gpuspec33")
    fgd, sits = simulate(nodes, pods, ["fgd", "sits"], [0, 1], workers=2)
    per_seed = {r.seed: r.final_alloc_ratio for r in fgd.replays}
    for replay in sits.replays:
        assert replay.final_alloc_ratio > per_seed[replay.seed] + 0.003, replay.seed


@pytest.mark.slow
@pytest.mark.shared_data
def test_allocation_is_within_a_point_of_the_paper(results: dict[str, PolicyResult]) -> None:
    for name, published in PUBLISHED_ALLOC.items():
        assert results[name].final_alloc_ratio.mean == pytest.approx(published, abs=0.0075), name


@pytest.mark.slow
@pytest.mark.shared_data
def test_fragmentation_matches_the_paper(results: dict[str, PolicyResult]) -> None:
    for name, published in PUBLISHED_FRAG_AT_90.items():
        assert results[name].frag_ratio[0, 90] == pytest.approx(published, abs=0.05), name
    # Empty cluster: 13.9% of capacity is fragment (the CPU-only share of M).
    assert results["fgd"].frag_amount_ratio[0, 0] == pytest.approx(0.139, abs=0.002)
    # The 6,212 GPUs and the arrived load end at 130%.
    r = results["fgd"]
    assert r.arrived_ratio[-1] == pytest.approx(1.3)
    assert r.unallocated_gpus.mean == pytest.approx(6212 * (1 - r.final_alloc_ratio.mean))
