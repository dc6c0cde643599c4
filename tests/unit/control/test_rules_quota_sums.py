"""Namespace quotas that a cluster can honour: their sum within its allocatable, never under
what the namespaces' pods request now, no CPU or memory key where no pod asks for one or the
managed quota is GPU-only, and VPA's confidence in the history's length.

The case is the demo's after six minutes: a 16-GPU cluster, inference running its two 4-GPU
servers, research a GPU notebook with no CPU or memory requests, training one 4-GPU Job. One
snapshot-day of peaks each; alone, each quota would be held at twice its peak or at the
cluster (16 + 2 + 8 = 26 GPUs, and the old rule's 16 + 8 + 8 with a day's confidence).
"""

from __future__ import annotations

import json
from typing import Any

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sits_observe.control.controller.rules import quotas as rules_quotas
from sits_observe.control.controller.settings import (
    QUOTA_CPU,
    QUOTA_GPU,
    QUOTA_MEMORY,
    ControllerSettings,
)

S = ControllerSettings()
GIB = 1024**3
SIX_MINUTES_S = 360.0


def frame(rows: list[dict[str, Any]]) -> pl.DataFrame:
    defaults = {
        "quota_kind": "Namespace",
        "current": None,
        "recommended": None,
        "history_s": SIX_MINUTES_S,
    }
    return pl.DataFrame(
        [{**defaults, **r} for r in rows],
        schema_overrides={
            "current": pl.String,
            "recommended": pl.String,
            "allocatable": pl.Float64,
            "running": pl.Float64,
            "history_s": pl.Float64,
            "daily_peaks": pl.List(pl.Float64),
        },
    )


def demo_namespaces() -> pl.DataFrame:
    rows = []
    for ns, gpu, cpu, mem in (
        ("inference", 8.0, 32_000.0, 128 * GIB),
        ("research", 1.0, 0.0, 0.0),
        ("training", 4.0, 21_000.0, 48 * GIB),
    ):
        for resource, peak, held in (
            (QUOTA_GPU, gpu, 16.0),
            (QUOTA_CPU, cpu, 128_000.0),
            (QUOTA_MEMORY, mem, 1024.0 * GIB),
        ):
            rows.append(
                {"namespace": ns, "quota_name": ns, "resource": resource,
                 "daily_peaks": [peak], "allocatable": held, "running": peak}
            )  # fmt: skip
    return frame(rows)


def proposals(namespaces: pl.DataFrame) -> dict[tuple[str, str], dict[str, Any]]:
    out = rules_quotas.namespace_quotas(namespaces, S).collect().to_dicts()
    return {(r["name"], r["action"]): r for r in out}


def test_gpu_quotas_sum_to_the_cluster_and_keep_what_runs() -> None:
    rows = proposals(demo_namespaces())
    gpus = {
        ns: rows[(ns, "quota-gpu")]["proposed_value"]
        for ns in ("inference", "research", "training")
    }
    assert sum(gpus.values()) <= 16
    # Each keeps the GPUs its pods request now; the rest is shared by what each asked above.
    assert gpus["inference"] >= 8 and gpus["research"] >= 1 and gpus["training"] >= 4
    assert all(float(g).is_integer() for g in gpus.values())
    shared = json.loads(rows[("inference", "quota-gpu")]["evidence"])["capped_by"]
    assert shared == "the cluster's allocatable, shared among the namespaces"


def test_no_cpu_or_memory_key_where_no_pod_asks_for_one() -> None:
    """research's notebook requests a GPU and no CPU or memory: a 1-CPU / 1Gi quota (the
    bounds' minimum over a zero peak) would refuse every pod that does not state them."""
    rows = proposals(demo_namespaces())
    assert ("research", "quota-gpu") in rows
    assert ("research", "quota-cpu") not in rows and ("research", "quota-memory") not in rows
    assert ("training", "quota-cpu") in rows and ("training", "quota-memory") in rows


def test_a_gpu_only_quota_stays_gpu_only() -> None:
    managed = frame(
        [
            {"namespace": "team", "quota_kind": "ResourceQuota", "quota_name": "sits-quota",
             "resource": resource, "daily_peaks": [peak], "allocatable": held, "running": peak,
             "current": current}
            for resource, peak, held, current in (
                (QUOTA_GPU, 2.0, 16.0, "4"),
                (QUOTA_CPU, 8_000.0, 128_000.0, None),
                (QUOTA_MEMORY, 16.0 * GIB, 1024.0 * GIB, None),
            )
        ]
    )  # fmt: skip
    assert set(proposals(managed)) == {("sits-quota", "quota-gpu")}
    # A managed quota with every key is advised on every key.
    full = managed.with_columns(pl.lit("1").alias("current"))
    assert len(proposals(full)) == 3


def test_confidence_grows_with_the_history_as_vpa_s() -> None:
    """VPA's recommender scales the upper bound by (1 + multiplier / confidence) ** exponent
    with the confidence in days of history (estimator.go): six minutes widen the estimate
    x 241, fourteen days x 1.07; one peak per daily snapshot no longer counts as a day."""
    one = frame(
        [{"namespace": "a", "quota_name": "a", "resource": QUOTA_GPU, "daily_peaks": [4.0],
          "allocatable": None, "running": 4.0}]
    )  # fmt: skip
    short = json.loads(proposals(one)[("a", "quota-gpu")]["evidence"])
    assert short["confidence_factor"] == pytest.approx(1 + 1 / (SIX_MINUTES_S / 86_400))
    assert short["history_s"] == SIX_MINUTES_S
    long = json.loads(
        proposals(one.with_columns(pl.lit(14 * 86_400.0).alias("history_s")))[("a", "quota-gpu")][
            "evidence"
        ]
    )
    assert long["confidence_factor"] == pytest.approx(1 + 1 / 14)
    assert rules_quotas.confidence_factor(0.0, S) == pytest.approx(1441)  # one sample a minute


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 12), st.integers(0, 12), st.floats(60, 30 * 86_400)),
        min_size=1,
        max_size=6,
    ),
    st.integers(1, 64),
)
def test_the_sum_never_passes_the_allocatable_unless_what_runs_does(
    spaces: list[tuple[int, int, float]], allocatable: int
) -> None:
    rows = [
        {"namespace": f"n{i}", "quota_name": f"n{i}", "resource": QUOTA_GPU,
         "daily_peaks": [float(max(peak, running, 1))], "allocatable": float(allocatable),
         "running": float(running), "history_s": history}
        for i, (peak, running, history) in enumerate(spaces)
    ]  # fmt: skip
    got = proposals(frame(rows))
    values = [got[(r["namespace"], "quota-gpu")]["proposed_value"] for r in rows]
    running = sum(min(r["running"], allocatable) for r in rows)
    assert sum(values) <= max(allocatable, running)
    for r, v in zip(rows, values, strict=True):
        assert v >= min(r["running"], allocatable) and v <= allocatable
