"""``node_scores`` equals the node scores of ``interference_report`` on the same rows.

The report's per-GPU means come from a parallel polars group-by, so two reports of the same
rows may differ in the last bit of a mean (measured: 62 of 1,000 nodes between two runs,
relative difference 3e-16); the scores are compared to 1e-12 relative.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import numpy as np
import polars as pl
import pytest

from sits_observe.analytics.interference import (
    SAMPLE_COLUMNS,
    interference_report,
    node_scores,
)
from sits_observe.analytics.settings import InterferenceSettings, NvlinkScope

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


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("scope", list(NvlinkScope))
def test_node_scores_equal_the_reports(seed: int, scope: NvlinkScope) -> None:
    samples = fleet(seed)
    settings = InterferenceSettings(nvlink_conflict_scope=scope)
    numa = {"node-0": 0.3, "node-2": 1.4}  # one outside 0-1: clipped the same way
    report = interference_report(samples, settings, numa_miss_ratio=numa)
    scores = node_scores(samples, settings, numa_miss_ratio=numa)
    assert list(scores) == [n.node for n in report.nodes]
    for node in report.nodes:
        new, old = scores[node.node], node.score
        assert new.missing_inputs == old.missing_inputs, node.node
        for field in ("score", "bandwidth_util_ratio", "nvlink_conflict_ratio", "numa_miss_ratio"):
            was, now = getattr(old, field), getattr(new, field)
            assert (now is None) == (was is None), (node.node, field)
            if was is not None:
                assert now == pytest.approx(was, rel=1e-12, abs=1e-15), (node.node, field)


def test_no_samples_no_scores() -> None:
    assert node_scores(fleet(0).clear(), InterferenceSettings()) == {}


@pytest.mark.parametrize("chunk_nodes", [1, 3, 100])
def test_the_extenders_chunked_scores_equal_the_reports(chunk_nodes: int) -> None:
    """The extender's slow signals score a few nodes at a time through ``node_scores``: any
    chunk size gives the report's node scores (the unnamed node left out)."""
    from sits_observe.control.extender_slow import node_interference

    samples, settings = fleet(4), InterferenceSettings()
    numa = {"node-1": 0.5}
    report = interference_report(samples, settings, numa_miss_ratio=numa)
    chunked = node_interference(samples, chunk_nodes, settings, numa)
    expected = {n.node: n.score.score for n in report.nodes if n.node is not None}
    assert list(chunked) == sorted(expected) and len(expected) == 11
    for node, score in expected.items():
        assert chunked[node] == pytest.approx(score, rel=1e-12, abs=1e-15), node
