"""Cost-latency Pareto frontier (SPEC "Cost") and GPU sizing from the safe maximum."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pytest
from pydantic import ValidationError

from sits_observe.analytics.serving.capacity import (
    CostLatencyPoint,
    dominates,
    load_pool_inputs,
    pareto_frontier,
    pool_latency,
    replica_shapes,
    replicas_needed,
    size_model,
)
from sits_observe.analytics.serving.settings import NodePoolPrice, PriceTable, load_price_table
from sits_observe.errors import ConfigError
from sits_observe.store import Store

T0 = datetime(2026, 1, 1)


def point(pool: str, price: float, latency: float, model: str = "m") -> CostLatencyPoint:
    return CostLatencyPoint(model, pool, price, latency, requests=100, nodes=1)


def test_spec_example_both_on_the_frontier() -> None:
    """$32.77/h at 12.8 s vs $41.20/h at 10.3 s: neither dominates, so both stay (the source
    document wrongly kept only the first)."""
    cheap, fast = point("a100", 32.77, 12.8), point("h100", 41.20, 10.3)
    assert not dominates(cheap, fast) and not dominates(fast, cheap)
    result = pareto_frontier([fast, cheap])
    assert [(p.point.pool, p.on_frontier) for p in result] == [("a100", True), ("h100", True)]


def test_dominated_points_name_who_dominates_them() -> None:
    points = [
        point("a100", 32.77, 12.8),
        point("h100", 41.20, 10.3),
        point("l40s", 45.00, 13.0),  # dearer and slower than both
        point("same-price-slower", 32.77, 13.5),  # equal price, slower: dominated
        point("twin", 41.20, 10.3),  # identical to h100: neither dominates
    ]
    result = {p.point.pool: p for p in pareto_frontier(points)}
    assert {k for k, p in result.items() if p.on_frontier} == {"a100", "h100", "twin"}
    assert result["l40s"].dominated_by == "a100"
    assert result["same-price-slower"].dominated_by == "a100"


def test_frontier_is_per_model() -> None:
    points = [point("a", 10, 1.0, model="x"), point("b", 20, 2.0, model="y")]
    assert all(p.on_frontier for p in pareto_frontier(points))


@pytest.mark.parametrize(
    ("target", "safe", "replicas"),
    [
        (100, 12.5, 8),
        (100, 12.0, 9),
        (0.3, 0.1, 3),  # 0.3 / 0.1 = 2.9999999999999996 in floating point
        (0.7, 0.1, 7),
        (12.5, 12.5, 1),
        (12.51, 12.5, 2),
        (0, 5, 0),
    ],
)
def test_replicas_needed(target: float, safe: float, replicas: int) -> None:
    assert replicas_needed(target, safe) == replicas


def test_replicas_needed_rejects_bad_rates() -> None:
    with pytest.raises(ValueError, match="safe maximum must be > 0"):
        replicas_needed(10, 0)
    with pytest.raises(ValueError, match="target must be >= 0"):
        replicas_needed(-1, 1)


def test_size_model_multiplies_by_gpus_per_replica() -> None:
    sizing = size_model("llama", 100, {"H100": 25.0, "A100": 12.0}, {"H100": 2}, source="flags")
    got = {s.gpu_product: (s.replicas, s.gpus_per_replica, s.gpus) for s in sizing}
    assert got == {"A100": (9, 1, 9), "H100": (4, 2, 8)}


def test_price_table_matching_and_validation(tmp_path: Path) -> None:
    table = PriceTable(
        pools=(
            NodePoolPrice(pool="spot", price_usd_per_hour=10, node_labels={"spot": "true"}),
            NodePoolPrice(pool="h100", price_usd_per_hour=41.2, gpu_product="NVIDIA-H100"),
        )
    )
    assert table.pool_of("nvidia-h100", {}) == "h100"  # product match ignores case
    assert table.pool_of("NVIDIA-H100", {"spot": "true"}) == "spot"  # first match wins
    assert table.pool_of("NVIDIA-A100", {}) is None
    with pytest.raises(ValidationError, match="repeated: a"):
        PriceTable(
            pools=(
                NodePoolPrice(pool="a", price_usd_per_hour=1),
                NodePoolPrice(pool="a", price_usd_per_hour=2),
            )
        )
    path = tmp_path / "prices.json"
    path.write_text(json.dumps({"pools": [{"pool": "x", "price_usd_per_hour": 3.5}]}))
    assert load_price_table(path).price_of("x") == 3.5
    path.write_text(json.dumps({"pools": [{"pool": "x", "price_usd_per_hour": -1}]}))
    with pytest.raises(ConfigError, match="is invalid"):
        load_price_table(path)
    with pytest.raises(ConfigError, match="cannot read"):
        load_price_table(tmp_path / "missing.yaml")


def test_pool_latency_from_frames() -> None:
    prices = PriceTable(
        pools=(
            NodePoolPrice(pool="a100", price_usd_per_hour=32.77, gpu_product="A100"),
            NodePoolPrice(pool="h100", price_usd_per_hour=41.20, gpu_product="H100"),
        )
    )
    a100 = [10.0, 11.0, 12.0, 13.0, 14.0]
    h100 = [9.0, 10.0, 10.5]
    requests = pl.DataFrame(
        {
            "model": ["m"] * 9,
            "node": ["n1"] * 5 + ["n2"] * 3 + ["n3"],
            "latency_s": [*a100, *h100, 1.0],
        }
    )
    nodes = pl.DataFrame(
        {
            "node": ["n1", "n2", "n3"],
            "gpu_product": ["A100", "H100", "L4"],
            "labels_json": ["{}", "not json", None],
        }
    )
    points, unpriced = pool_latency(requests, nodes, prices)
    got = {p.pool: p for p in points}
    assert got["a100"].latency_p95_s == pytest.approx(float(np.quantile(a100, 0.95)))
    assert got["h100"].latency_p95_s == pytest.approx(float(np.quantile(h100, 0.95)))
    assert (got["a100"].requests, got["a100"].price_usd_per_hour) == (5, 32.77)
    assert unpriced == ("n3",)


def test_store_readers_place_requests_on_nodes_and_pods() -> None:
    with Store.open(":memory:") as store:
        store.append(
            "nodes",
            pa.Table.from_pylist(
                [
                    {"ts": T0, "node": "n1", "gpu_product": "A100", "labels_json": "{}"},
                    {"ts": T0, "node": "n2", "gpu_product": "H100", "labels_json": "{}"},
                ]
            ),
        )
        store.append(
            "pods",
            pa.Table.from_pylist(
                [
                    {
                        "ts": T0,
                        "pod_uid": "u1",
                        "namespace": "ns",
                        "pod": "p1",
                        "node": "n1",
                        "gpu_request": 2,
                    },
                    {
                        "ts": T0,
                        "pod_uid": "u2",
                        "namespace": "ns",
                        "pod": "p2",
                        "node": "n2",
                        "gpu_request": 1,
                    },
                ]
            ),
        )
        store.append(
            "requests",
            pa.Table.from_pylist(
                [
                    {
                        "ts": T0 + timedelta(seconds=i),
                        "model": "m",
                        "latency_s": 1.0 + i,
                        "namespace": "ns",
                        "pod": "p1" if i < 3 else "p2",
                        "node": "n2" if i == 0 else None,
                        "ok": i != 4,
                    }
                    for i in range(6)
                ]
            ),
        )
        requests, nodes = load_pool_inputs(store, model="m")
        assert requests.height == 5  # the failed request is left out
        by_node = requests.group_by("node").len().sort("node").rows()
        assert by_node == [("n1", 2), ("n2", 3)]  # row 0 names its node; others from the pod
        shapes = replica_shapes(store, "m")
        assert {p: (s.pods, s.gpus_per_replica) for p, s in shapes.items()} == {
            "A100": (("p1",), 2),
            "H100": (("p1", "p2"), 2),
        }
        assert nodes.height == 2
