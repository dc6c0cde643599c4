"""Interference score, TopologyManager rule and their inputs measured from gpu_samples rows.

Expected values come from SPEC "Topology and interference": score = 0.4 x bandwidth + 0.35 x
NVLink conflict + 0.25 x NUMA miss; > 0.65 -> single-numa-node; three consecutive sync delays
above 80 ms -> best-effort.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from pydantic import ValidationError

from sits_observe.analytics.topology.interference import (
    BEST_EFFORT,
    SINGLE_NUMA_NODE,
    InterferenceScore,
    interference_report,
    interference_score,
    recommend_topology,
    sync_delay_breached,
)
from sits_observe.analytics.topology.settings import (
    DEFAULT_LINKS,
    InterferenceSettings,
    find_link_capacity,
)

S = InterferenceSettings()
T0 = datetime(2026, 1, 1)
H100 = "NVIDIA H100 80GB HBM3"


def sample(i: int, gpu: str, pod: str | None, **values: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "ts": T0 + timedelta(seconds=i),
        "node": "n1",
        "gpu_uuid": gpu,
        "model_name": H100,
        "pod": pod,
        "dram_active_ratio": None,
        "mem_copy_util_ratio": None,
        "nvlink_tx_bytes_per_s": None,
        "nvlink_rx_bytes_per_s": None,
    }
    row.update(values)
    return row


def frame(rows: list[dict[str, Any]]) -> pl.DataFrame:
    return pl.DataFrame(
        rows,
        schema={
            "ts": pl.Datetime("us"),
            "node": pl.String,
            "gpu_uuid": pl.String,
            "model_name": pl.String,
            "pod": pl.String,
            "dram_active_ratio": pl.Float64,
            "mem_copy_util_ratio": pl.Float64,
            "nvlink_tx_bytes_per_s": pl.Float64,
            "nvlink_rx_bytes_per_s": pl.Float64,
        },
    )


def score(value: float, missing: tuple[str, ...] = ()) -> InterferenceScore:
    return InterferenceScore(value, None, None, None, missing)


# -- the score and the rule ---------------------------------------------------------------------


def test_weights_are_the_specs() -> None:
    assert (S.bandwidth_weight, S.nvlink_weight, S.numa_weight) == (0.4, 0.35, 0.25)
    assert S.threshold_ratio == 0.65
    assert (S.sync_delay_threshold_s, S.sync_delay_consecutive) == (0.080, 3)


@pytest.mark.parametrize(
    ("inputs", "expected"),
    [
        ((1.0, 1.0, 1.0), 1.0),
        ((0.0, 0.0, 0.0), 0.0),
        ((1.0, 0.0, 0.0), 0.4),
        ((0.0, 1.0, 0.0), 0.35),
        ((0.0, 0.0, 1.0), 0.25),
        ((0.5, 0.5, 0.2), 0.4 * 0.5 + 0.35 * 0.5 + 0.25 * 0.2),  # 0.425
    ],
)
def test_score_is_the_weighted_sum(inputs: tuple[float, float, float], expected: float) -> None:
    result = interference_score(*inputs, S)
    assert result.score == pytest.approx(expected, abs=1e-12)
    assert result.missing_inputs == ()
    assert not result.partial


def test_inputs_outside_0_1_are_clipped() -> None:
    result = interference_score(1.7, -0.2, 0.5, S)
    assert (result.bandwidth_util_ratio, result.nvlink_conflict_ratio) == (1.0, 0.0)
    assert result.score == pytest.approx(0.4 + 0.125)


def test_missing_input_counts_zero_and_is_named() -> None:
    result = interference_score(1.0, 1.0, None, S)
    assert result.score == pytest.approx(0.75)
    assert result.missing_inputs == ("numa_miss_ratio",)
    rec = recommend_topology(result, None, S)
    assert rec.policy == SINGLE_NUMA_NODE
    assert rec.partial_data
    assert "partial data: numa_miss_ratio missing" in rec.reason


def test_exactly_0_65_is_not_above_the_threshold() -> None:
    at = interference_score(1.0, 0.0, 1.0, S)  # 0.4 + 0.25
    assert at.score == 0.65
    assert recommend_topology(at, None, S).policy is None
    assert recommend_topology(score(0.6500001), None, S).policy == SINGLE_NUMA_NODE


@pytest.mark.parametrize(
    ("delays_ms", "breached"),
    [
        ([90, 90, 90], True),
        ([90, 90], False),
        ([90, 90, 80, 90], False),  # exactly 80 ms is not above
        ([80.001, 81, 200], True),
        ([90, 50, 90, 90, 90], True),  # a later run of three
        ([90, 90, 50, 90, 90], False),
        ([], False),
    ],
)
def test_three_consecutive_sync_delays(delays_ms: list[float], breached: bool) -> None:
    assert sync_delay_breached([d / 1000 for d in delays_ms], S) is breached


def test_sync_fallback_wins_over_a_high_score() -> None:
    rec = recommend_topology(score(0.9), [0.1, 0.1, 0.1], S)
    assert rec.policy == BEST_EFFORT
    assert "3 consecutive sync delays above 80 ms" in rec.reason
    assert recommend_topology(score(0.9), [0.1, 0.01, 0.1], S).policy == SINGLE_NUMA_NODE


def test_weights_must_sum_to_one() -> None:
    with pytest.raises(ValidationError, match="sum to 1"):
        InterferenceSettings(bandwidth_weight=0.5)


# -- link capacities -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "nvlink", "pcie"),
    [
        ("NVIDIA H100 80GB HBM3", 900e9, 128e9),
        ("NVIDIA H100 PCIe", 600e9, 128e9),
        ("NVIDIA H200", 900e9, 128e9),
        ("NVIDIA A100-SXM4-80GB", 600e9, 64e9),
        ("GRID A100-10C", 600e9, 64e9),
        ("NVIDIA L40S", 0.0, 64e9),
        ("NVIDIA L4", 0.0, 64e9),
        ("Tesla T4", 0.0, 32e9),
    ],
)
def test_link_table(name: str, nvlink: float, pcie: float) -> None:
    link = find_link_capacity(DEFAULT_LINKS, name)
    assert link is not None
    assert (link.nvlink_bytes_per_s, link.pcie_bytes_per_s) == (nvlink, pcie)


def test_unknown_product_has_no_link_entry() -> None:
    assert find_link_capacity(DEFAULT_LINKS, "Radeon Instinct MI300X") is None
    assert find_link_capacity(DEFAULT_LINKS, None) is None


# -- measurement ---------------------------------------------------------------------------------


def test_nvlink_conflict_counts_only_samples_where_the_gpu_is_shared() -> None:
    # H100: 900 GB/s both ways; tx = rx = 225 GB/s -> utilisation 0.5. Two pods share the GPU
    # in 2 of 4 samples, so conflict = (0.5 + 0.5 + 0 + 0) / 4 = 0.25.
    link = {"nvlink_tx_bytes_per_s": 225e9, "nvlink_rx_bytes_per_s": 225e9}
    rows = []
    for i in range(4):
        rows.append(sample(i, "G1", "a", dram_active_ratio=0.6, **link))
        if i < 2:
            rows.append(sample(i, "G1", "b", dram_active_ratio=0.6, **link))
    report = interference_report(frame(rows), S, numa_miss_ratio={"n1": 0.2})
    (gpu,) = report.gpus
    assert gpu.samples == 4
    assert gpu.pods == ("a", "b")
    assert gpu.bandwidth_source == "dram_active_ratio"
    assert gpu.nvlink_capacity_bytes_per_s == 900e9
    assert gpu.score.nvlink_conflict_ratio == pytest.approx(0.25)
    assert gpu.score.bandwidth_util_ratio == pytest.approx(0.6)
    assert gpu.score.score == pytest.approx(0.4 * 0.6 + 0.35 * 0.25 + 0.25 * 0.2)
    assert gpu.score.missing_inputs == ()


def test_node_scope_counts_pods_on_different_gpus() -> None:
    link = {"nvlink_tx_bytes_per_s": 90e9, "nvlink_rx_bytes_per_s": 0.0}  # 0.1 of 900 GB/s
    rows = [sample(0, "G1", "a", **link), sample(0, "G2", "b", **link)]
    gpu_scope = interference_report(frame(rows), S)
    assert [g.score.nvlink_conflict_ratio for g in gpu_scope.gpus] == [0.0, 0.0]
    node = InterferenceSettings(nvlink_conflict_scope="node")
    node_scope = interference_report(frame(rows), node)
    assert [g.score.nvlink_conflict_ratio for g in node_scope.gpus] == pytest.approx([0.1, 0.1])
    # One pod alone on the node moving traffic is no conflict, even at node scope.
    alone = interference_report(
        frame([sample(0, "G1", "a", **link), sample(0, "G2", "b")]),
        InterferenceSettings(nvlink_conflict_scope="node"),
    )
    assert alone.gpus[0].score.nvlink_conflict_ratio == 0.0


def test_bandwidth_falls_back_to_mem_copy_and_missing_inputs_are_named() -> None:
    rows = [
        # L4: no NVLink, so conflict is a true 0; only MEM_COPY_UTIL present.
        sample(0, "G1", "a", model_name="NVIDIA L4", mem_copy_util_ratio=0.3),
        # H100 without NVLink counters: the conflict input is missing.
        sample(0, "G2", "b", dram_active_ratio=0.5),
        # An unknown product with counters: capacity unknown, so missing too.
        sample(0, "G3", "c", model_name="Mystery", nvlink_tx_bytes_per_s=1e9),
    ]
    gpus = {g.gpu_uuid: g for g in interference_report(frame(rows), S).gpus}
    assert gpus["G1"].bandwidth_source == "mem_copy_util_ratio"
    assert gpus["G1"].score.nvlink_conflict_ratio == 0.0
    assert gpus["G1"].score.missing_inputs == ("numa_miss_ratio",)
    assert gpus["G2"].score.missing_inputs == ("nvlink_conflict_ratio", "numa_miss_ratio")
    assert gpus["G3"].bandwidth_source is None
    assert gpus["G3"].score.missing_inputs == (
        "bandwidth_util_ratio",
        "nvlink_conflict_ratio",
        "numa_miss_ratio",
    )


def test_node_inputs_are_means_over_gpus_that_have_them() -> None:
    rows = [
        sample(0, "G1", "a", dram_active_ratio=0.9, nvlink_tx_bytes_per_s=0.0),
        sample(0, "G2", "b", dram_active_ratio=0.5),  # no NVLink counters
    ]
    report = interference_report(
        frame(rows), S, numa_miss_ratio={"n1": 1.0}, sync_delays_s={"n1": [0.09] * 3}
    )
    (node,) = report.nodes
    assert node.gpus == 2
    assert node.score.bandwidth_util_ratio == pytest.approx(0.7)
    assert node.score.nvlink_conflict_ratio == 0.0  # from G1 alone
    assert node.score.numa_miss_ratio == 1.0
    assert node.score.missing_inputs == ()
    assert node.score.score == pytest.approx(0.4 * 0.7 + 0.25)
    assert node.hottest_gpu_uuid == "G1"
    assert node.max_gpu_score == pytest.approx(0.4 * 0.9 + 0.25)
    assert node.sync_delays_seen == 3
    assert node.recommendation.policy == BEST_EFFORT


def test_gpus_whose_scores_differ_only_in_the_last_bits_tie_for_hottest() -> None:
    """G1's mean of 0.1, 0.2 and 0.3 comes out an ulp off 0.2 (below it here), G2's is 0.2:
    equal inputs, so the first GPU in order is the hottest whichever way the sum rounded (a
    report over the store and one over PromQL must name the same GPU)."""
    rows = [sample(i, "G1", "a", dram_active_ratio=v) for i, v in enumerate((0.1, 0.2, 0.3))]
    rows += [sample(0, "G2", "b", dram_active_ratio=0.2)]
    report = interference_report(frame(rows), S)
    g1, g2 = report.gpus
    assert g2.score.score != g1.score.score  # the last bits differ ...
    assert g2.score.score == pytest.approx(g1.score.score, rel=1e-12)  # ... and only they
    (node,) = report.nodes
    assert node.hottest_gpu_uuid == "G1"


def test_hot_node_gets_single_numa_node() -> None:
    full = {"nvlink_tx_bytes_per_s": 450e9, "nvlink_rx_bytes_per_s": 450e9}
    rows = [
        sample(0, "G1", "a", dram_active_ratio=1.0, **full),
        sample(0, "G1", "b", dram_active_ratio=1.0, **full),
    ]
    (node,) = interference_report(frame(rows), S).nodes
    assert node.score.score == pytest.approx(0.75)
    assert node.recommendation.policy == SINGLE_NUMA_NODE
    assert node.recommendation.partial_data


def test_empty_frame_gives_an_empty_report() -> None:
    report = interference_report(frame([]), S)
    assert (report.nodes, report.gpus) == ((), ())


@pytest.mark.shared_data
def test_real_dcgm_exports(shared_data: Path) -> None:
    """Checks ``dcgm/h100-k8s-sampled.prom`` (8x H100 without profiling or NVLink counters;
    the sample has MEM_COPY_UTIL for 6 of them) and ``dcgm/l40s-upcloud-default-counters.prom``
    (L40S with DRAM activity)."""
    from sits_observe.collectors.dcgm import parse_dcgm

    now = datetime(2026, 1, 1, tzinfo=UTC)
    frames = []
    for name in ("h100-k8s-sampled.prom", "l40s-upcloud-default-counters.prom"):
        text = (shared_data / "dcgm" / name).read_text()
        table = parse_dcgm(text, now=now, node=None).tables["gpu_samples"]
        frames.append(pl.DataFrame(table).select(frame([]).columns))
    report = interference_report(pl.concat(frames), S)
    by_model: dict[str | None, list[Any]] = {}
    for gpu in report.gpus:
        by_model.setdefault(gpu.model_name, []).append(gpu)
    h100 = by_model["NVIDIA H100 80GB HBM3"]
    assert len(h100) == 8
    sources = [g.bandwidth_source for g in h100]
    assert (sources.count("mem_copy_util_ratio"), sources.count(None)) == (6, 2)
    for g in h100:
        bandwidth = () if g.bandwidth_source else ("bandwidth_util_ratio",)
        assert g.score.missing_inputs == (*bandwidth, "nvlink_conflict_ratio", "numa_miss_ratio")
    (l40s,) = by_model["NVIDIA L40S"]
    assert l40s.bandwidth_source == "dram_active_ratio"
    assert l40s.score.bandwidth_util_ratio == pytest.approx(0.000131)
    assert l40s.score.nvlink_conflict_ratio == 0.0  # the L40S has no NVLink
    assert l40s.score.missing_inputs == ("numa_miss_ratio",)


def test_a_node_first_seen_by_the_second_read_is_left_for_the_next_pass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The report reads its samples twice (per GPU, then per node); on a live store an agent's
    batch can land between the reads. The demo raised KeyError for such a node."""
    from sits_observe.analytics.topology import interference

    rows = [sample(i, "GPU-a", "p1", dram_active_ratio=0.5) for i in range(3)]
    first_read = interference.node_scores(frame(rows), S)
    late = {**first_read, "n2": score(0.9)}
    monkeypatch.setattr(interference, "node_scores", lambda *args, **kwargs: late)
    report = interference_report(frame(rows), S)
    assert [n.node for n in report.nodes] == ["n1"]
    assert [g.node for g in report.gpus] == ["n1"]
