"""The class inputs rebuilt from series (analytics/classes/series.py): the requests placed at
their buckets' upper bounds keep the counts, and the P95 and SLA-violation bounds the module
states hold for any latencies; the pods' workloads follow the collector's rule."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from sits_observe.analytics.classes.series import (
    estimated_pods,
    node_gpu_memory,
    pods_of,
    requests_from_histograms,
)
from sits_observe.domain.tables import NODES, PODS

BOUNDS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, math.inf)
TOKENS = (10.0, 100.0, 1000.0, 10000.0, math.inf)


def _buckets(
    pod: str, quantity: str, values: list[float], bounds: tuple[float, ...]
) -> list[dict[str, object]]:
    array = np.asarray(values, dtype=float)
    return [
        {
            "namespace": "ns",
            "pod": pod,
            "quantity": quantity,
            "le": b,
            "requests": float((array <= b).sum()),
            "estimated": False,
        }
        for b in bounds
    ]


def _frame(rows: list[dict[str, object]]) -> pl.DataFrame:
    return pl.DataFrame(
        rows,
        schema={
            "namespace": pl.String,
            "pod": pl.String,
            "quantity": pl.String,
            "le": pl.Float64,
            "requests": pl.Float64,
            "estimated": pl.Boolean,
        },
    )


latencies = st.lists(st.floats(0.01, 9.99), min_size=1, max_size=200)


@settings(max_examples=60, deadline=None)
@given(latencies)
def test_p95_at_most_one_bucket_above_the_exact(values: list[float]) -> None:
    rows = requests_from_histograms(_frame(_buckets("p", "latency_s", values, BOUNDS)))
    assert rows.height == len(values) and rows.get_column("ok").all()
    estimate = rows.get_column("latency_s").quantile(0.95, "linear")
    exact = float(np.quantile(values, 0.95))
    edges = np.asarray((0.0, *BOUNDS))
    ordered = np.sort(values)
    h = (len(values) - 1) * 0.95
    widest = max(
        float(np.diff(edges)[np.searchsorted(edges[1:], ordered[i], side="left")])
        for i in {math.floor(h), math.ceil(h)}
    )
    assert estimate is not None
    assert exact - 1e-12 <= estimate < exact + widest


@settings(max_examples=60, deadline=None)
@given(latencies, st.sampled_from([0.5, 1.0, 2.5]), st.sampled_from([0.4, 1.2, 3.0]))
def test_slow_share_exact_on_a_bound_else_within_the_bucket(
    values: list[float], on_bound: float, inside: float
) -> None:
    rows = requests_from_histograms(_frame(_buckets("p", "latency_s", values, BOUNDS)))
    placed = rows.get_column("latency_s").to_numpy()
    array = np.asarray(values)
    assert (placed > on_bound).sum() == (array > on_bound).sum()
    lo = max(b for b in (0.0, *BOUNDS) if b < inside)
    hi = min(b for b in BOUNDS if b >= inside)
    holding = ((array > lo) & (array <= hi)).sum()
    extra = int((placed > inside).sum() - (array > inside).sum())
    assert 0 <= extra <= holding


def test_tokens_pair_by_rank_and_inf_reads_as_the_largest_bound() -> None:
    rows = _buckets("p", "latency_s", [0.2, 0.6, 20.0], BOUNDS)
    rows += _buckets("p", "prompt_tokens", [5, 50, 500], TOKENS)
    rows += _buckets("p", "output_tokens", [5000, 7, 20000], TOKENS)
    out = requests_from_histograms(_frame(rows))
    assert out.get_column("latency_s").to_list() == [0.3, 0.8, 10.0]  # 20 s: above 10 s
    assert out.get_column("prompt_tokens").to_list() == [10, 100, 1000]
    assert out.get_column("output_tokens").to_list() == [10, 10000, 10000]


def test_a_pod_with_token_histograms_only_has_no_requests() -> None:
    out = requests_from_histograms(_frame(_buckets("p", "prompt_tokens", [5, 50], TOKENS)))
    assert out.height == 0


def test_token_counts_that_differ_are_stretched_by_rank() -> None:
    rows = _buckets("p", "latency_s", [0.2, 0.2, 0.2, 0.2], BOUNDS)
    rows += _buckets("p", "prompt_tokens", [5, 5000], TOKENS)
    out = requests_from_histograms(_frame(rows))
    assert out.get_column("prompt_tokens").to_list() == [10, 10, 10000, 10000]
    assert out.get_column("output_tokens").null_count() == 4


def test_estimated_pods_are_named() -> None:
    rows = _buckets("a", "latency_s", [0.2], BOUNDS) + _buckets("b", "latency_s", [0.2], BOUNDS)
    frame = _frame(rows).with_columns(estimated=pl.col("pod") == "b")
    assert estimated_pods(frame) == ["ns/b"]


def test_pods_take_the_collectors_workload_rule() -> None:
    pods = pa.Table.from_pylist(
        [
            {
                "pod_uid": "1",
                "namespace": "ns",
                "pod": "web-5d8f7c9b4-q2x7v",
                "owner_kind": "ReplicaSet",
                "owner_name": "web-5d8f7c9b4",
                "gpu_request": 1,
            },
            {
                "pod_uid": "2",
                "namespace": "ns",
                "pod": "job-1",
                "owner_kind": "Job",
                "owner_name": "job",
                "gpu_request": 0,
            },
            {"pod_uid": "3", "namespace": "ns", "pod": "bare", "gpu_request": 0},
        ],
        schema=PODS.schema,
    )
    out = pods_of(pods)
    assert out.get_column("workload").to_list() == ["web", "job", "bare"]
    assert {"qos_class", "priority_class", "node", "gpu_request"} <= set(out.columns)


def test_node_gpu_memory_leaves_unknown_nodes_out() -> None:
    nodes = pa.Table.from_pylist(
        [{"node": "a", "gpu_memory_bytes": 80 << 30}, {"node": "b"}], schema=NODES.schema
    )
    assert node_gpu_memory(nodes) == {"a": 80 << 30}
