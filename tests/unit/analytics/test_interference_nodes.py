"""``node_scores`` applies the node rule to the per-GPU results of ``interference_report``.

Both aggregate in DuckDB, whose parallel group-by may sum a mean's terms in another order
from one run to the next (the last bit of a mean), so the scores are compared to 1e-12
relative.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import numpy as np
import polars as pl
import pytest

from sits_observe.analytics.topology.interference import (
    SAMPLE_COLUMNS,
    GpuInterference,
    interference_report,
    interference_score,
    node_scores,
)
from sits_observe.analytics.topology.settings import InterferenceSettings, NvlinkScope

T0 = datetime(2026, 1, 1)
MODELS = ("NVIDIA H100 80GB HBM3", "NVIDIA L4", "Some Unknown GPU", None)


def fleet(seed: int, nodes: int = 12) -> pl.DataFrame:
    """Random GPU samples: shared and idle GPUs, DRAM or copy counters or neither, NVLink
    counters on some products, values outside 0-1, a node with no name."""
    rng = np.random.default_rng(seed)
    rows: list[dict[str, Any]] = []
    for n in range(nodes):
        node = None if n == nodes - 1 else f"node-{n}"
        for g in range(int(rng.integers(1, 6))):
            model = MODELS[int(rng.integers(0, len(MODELS)))]
            has_dram, has_copy = rng.random() < 0.7, rng.random() < 0.5
            has_nvlink = rng.random() < 0.6
            pods: list[str | None] = [f"p{n}-{g}-{k}" for k in range(int(rng.integers(0, 3)))]
            for i in range(int(rng.integers(1, 12))):
                for pod in pods or [None]:
                    rows.append(
                        {
                            "ts": T0 + timedelta(seconds=15 * i),
                            "node": node,
                            "gpu_uuid": f"GPU-{n}-{g}",
                            "model_name": model,
                            "pod": pod,
                            "dram_active_ratio": float(rng.uniform(0, 1.2)) if has_dram else None,
                            "mem_copy_util_ratio": float(rng.uniform(0, 1)) if has_copy else None,
                            "nvlink_tx_bytes_per_s": float(rng.uniform(0, 5e11))
                            if has_nvlink
                            else None,
                            "nvlink_rx_bytes_per_s": float(rng.uniform(0, 5e11))
                            if has_nvlink
                            else None,
                        }
                    )
    schema: dict[str, pl.DataType] = {
        c: pl.Float64() if c.endswith(("_ratio", "_per_s")) else pl.String() for c in SAMPLE_COLUMNS
    }
    schema["ts"] = pl.Datetime("us")
    return pl.DataFrame(rows, schema=schema)


def _mean_present(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("scope", list(NvlinkScope))
def test_node_scores_are_the_means_over_the_reports_gpus(seed: int, scope: NvlinkScope) -> None:
    """A node's inputs are the means of its GPUs' (clipped) inputs over the GPUs that have
    them: computed here in Python from the report's per-GPU rows, in SQL by node_scores."""
    samples = fleet(seed)
    settings = InterferenceSettings(nvlink_conflict_scope=scope)
    numa = {"node-0": 0.3, "node-2": 1.4}  # one outside 0-1: clipped the same way
    report = interference_report(samples, settings, numa_miss_ratio=numa)
    scores = node_scores(samples, settings, numa_miss_ratio=numa)
    by_node: dict[str | None, list[GpuInterference]] = {}
    for gpu in report.gpus:
        by_node.setdefault(gpu.node, []).append(gpu)
    assert list(scores) == list(by_node) == [n.node for n in report.nodes]
    for node, gpus in by_node.items():
        old = interference_score(
            _mean_present([g.score.bandwidth_util_ratio for g in gpus]),
            _mean_present([g.score.nvlink_conflict_ratio for g in gpus]),
            numa.get(node) if node is not None else None,
            settings,
        )
        new = scores[node]
        assert new.missing_inputs == old.missing_inputs, node
        for field in ("score", "bandwidth_util_ratio", "nvlink_conflict_ratio", "numa_miss_ratio"):
            was, now = getattr(old, field), getattr(new, field)
            assert (now is None) == (was is None), (node, field)
            if was is not None:
                assert now == pytest.approx(was, rel=1e-12, abs=1e-15), (node, field)


def test_no_samples_no_scores() -> None:
    assert node_scores(fleet(0).clear(), InterferenceSettings()) == {}


def test_the_extenders_scores_equal_the_reports() -> None:
    """The extender's slow signals score nodes through ``node_scores``: the report's node
    scores, the unnamed node left out."""
    from sits_observe.control.extender.clusterview.slow import node_interference

    samples, settings = fleet(4), InterferenceSettings()
    numa = {"node-1": 0.5}
    report = interference_report(samples, settings, numa_miss_ratio=numa)
    scores = node_interference(samples, settings, numa)
    expected = {n.node: n.score.score for n in report.nodes if n.node is not None}
    assert list(scores) == sorted(expected) and len(expected) == 11
    for node, score in expected.items():
        assert scores[node] == pytest.approx(score, rel=1e-12, abs=1e-15), node
