"""Capacity: the cost-latency Pareto frontier across node pools, and GPUs needed for a target.

SPEC "Cost": "Cost-latency Pareto frontier across node pools (price per hour vs latency); the
documents' example: $32.77/h at 12.8 s vs $41.20/h at 10.3 s. Neither dominates the other, so
both are on the frontier." Issue 3: "how many GPUs of each type a model needs for a target
request rate at its P95 SLO, from the measured safe maximum throughput".

- A point is (model, pool): the pool's price per node-hour from the price table
  (:class:`~sits_observe.analytics.settings.PriceTable`) and the exact P95 latency of the
  model's successful requests served on the pool's nodes. Requests are placed on a node by
  ``requests.node``, else by their pod's node in the inventory; nodes by the latest ``nodes``
  snapshot (``gpu_product`` and labels), each in the first pool it matches.
- Point A dominates B when A costs no more and is no slower, and is better in one of the two.
  The frontier (per model) is every point nothing dominates; equal points are both on it.
- Sizing: replicas = ceil(target rps / safe maximum rps per replica), GPUs = replicas x GPUs
  per replica (the pods' ``gpu_request``). The safe maximum per replica is measured per pod
  by the heatmap's rule (:mod:`sits_observe.analytics.heatmap.knee`) and, per GPU product, the
  lowest of its pods (conservative), or given by the caller.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np
import polars as pl

from sits_observe.analytics.heatmap.grid import compute_heatmaps
from sits_observe.analytics.heatmap.settings import HeatmapSettings
from sits_observe.analytics.serving.latency import RequestSelection
from sits_observe.analytics.serving.settings import PriceTable
from sits_observe.domain.times import utc_naive
from sits_observe.store.duck import Store

#: Relative slack when dividing target by capacity, so 0.3 / 0.1 = 2.9999999999999996 is 3.
_CEIL_SLACK = 1e-9


@dataclass(frozen=True)
class CostLatencyPoint:
    """One pool's price and measured latency for one model."""

    model: str | None
    pool: str
    price_usd_per_hour: float
    latency_p95_s: float
    requests: int
    nodes: int


@dataclass(frozen=True)
class ParetoPoint:
    """A point and whether it is on the frontier (else who dominates it)."""

    point: CostLatencyPoint
    on_frontier: bool
    dominated_by: str | None


def dominates(a: CostLatencyPoint, b: CostLatencyPoint) -> bool:
    """True when ``a`` costs no more and is no slower than ``b``, and is better in one."""
    no_worse = a.price_usd_per_hour <= b.price_usd_per_hour and a.latency_p95_s <= b.latency_p95_s
    better = a.price_usd_per_hour < b.price_usd_per_hour or a.latency_p95_s < b.latency_p95_s
    return no_worse and better


def pareto_frontier(points: Sequence[CostLatencyPoint]) -> tuple[ParetoPoint, ...]:
    """Every point, marked on or off its model's frontier, sorted by model, price, latency.

    ``dominated_by`` names the cheapest pool (then the fastest) that dominates the point.
    """
    out: list[ParetoPoint] = []
    ordered = sorted(
        points, key=lambda p: (p.model or "", p.price_usd_per_hour, p.latency_p95_s, p.pool)
    )
    for p in ordered:
        rivals = [q for q in ordered if q.model == p.model and dominates(q, p)]
        out.append(ParetoPoint(p, not rivals, rivals[0].pool if rivals else None))
    return tuple(out)


def pool_latency(
    requests: pl.DataFrame,
    nodes: pl.DataFrame,
    prices: PriceTable,
    *,
    quantile: float = 0.95,
) -> tuple[tuple[CostLatencyPoint, ...], tuple[str, ...]]:
    """Points per (model, pool) and the nodes that serve requests but match no pool.

    ``requests``: ``model``, ``node``, ``latency_s`` (successful requests only);
    ``nodes``: one row per node with ``node``, ``gpu_product``, ``labels_json``.
    """
    pools: dict[str, str] = {}
    unpriced: list[str] = []
    served = set(requests.get_column("node").drop_nulls().unique().to_list())
    for row in nodes.iter_rows(named=True):
        labels = _labels(row.get("labels_json"))
        pool = prices.pool_of(row.get("gpu_product"), labels)
        if pool is not None:
            pools[str(row["node"])] = pool
        elif row["node"] in served:
            unpriced.append(str(row["node"]))
    tagged = requests.filter(pl.col("latency_s").is_not_null()).with_columns(
        pool=pl.col("node").replace_strict(pools, default=None, return_dtype=pl.String)
    )
    tagged = tagged.filter(pl.col("pool").is_not_null())
    points = []
    for (model, pool), part in tagged.partition_by(["model", "pool"], as_dict=True).items():
        latencies = part.get_column("latency_s").to_numpy()
        points.append(
            CostLatencyPoint(
                model=None if model is None else str(model),
                pool=str(pool),
                price_usd_per_hour=prices.price_of(str(pool)),
                latency_p95_s=float(np.quantile(latencies, quantile)),
                requests=part.height,
                nodes=part.get_column("node").n_unique(),
            )
        )
    missing = sorted(served - set(pools) - set(unpriced))
    return tuple(points), tuple(sorted(unpriced) + missing)


def _labels(raw: object) -> dict[str, str]:
    if not isinstance(raw, str):
        return {}
    try:
        data = json.loads(raw)
    except json.JSONDecodeError:
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


# -- sizing ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuSizing:
    """GPUs of one product a model needs for a target request rate."""

    model: str | None
    gpu_product: str | None
    target_rps: float
    safe_max_rps_per_replica: float
    gpus_per_replica: int
    replicas: int
    gpus: int
    source: str


def replicas_needed(target_rps: float, safe_max_rps_per_replica: float) -> int:
    """ceil(target / safe maximum per replica); 0 for a zero target."""
    if safe_max_rps_per_replica <= 0:
        raise ValueError(f"safe maximum must be > 0 rps, got {safe_max_rps_per_replica!r}")
    if target_rps < 0:
        raise ValueError(f"target must be >= 0 rps, got {target_rps!r}")
    ratio = target_rps / safe_max_rps_per_replica
    return max(0, math.ceil(ratio - _CEIL_SLACK * max(1.0, ratio)))


def size_model(
    model: str | None,
    target_rps: float,
    safe_max_rps: Mapping[str | None, float],
    gpus_per_replica: Mapping[str | None, int],
    *,
    source: str,
) -> tuple[GpuSizing, ...]:
    """One :class:`GpuSizing` per GPU product in ``safe_max_rps`` (per-replica safe maxima).

    A product missing from ``gpus_per_replica`` counts 1 GPU per replica.
    """
    out = []
    for product, safe in sorted(safe_max_rps.items(), key=lambda kv: kv[0] or ""):
        per = gpus_per_replica.get(product, 1)
        replicas = replicas_needed(target_rps, safe)
        out.append(
            GpuSizing(model, product, target_rps, safe, per, replicas, replicas * per, source)
        )
    return tuple(out)


# -- reading the store -------------------------------------------------------------------------

# The latest snapshot before ``until`` (one ``?`` pair: ``[until, until]``, None = newest).
_LATEST_NODES = (
    "SELECT node, gpu_product, labels_json FROM nodes WHERE node IS NOT NULL "
    "AND (?::TIMESTAMP IS NULL OR ts < ?) "
    "QUALIFY row_number() OVER (PARTITION BY node ORDER BY ts DESC) = 1"
)
_LATEST_PODS = (
    "SELECT namespace, pod, node, gpu_request FROM pods WHERE pod IS NOT NULL "
    "AND (?::TIMESTAMP IS NULL OR ts < ?) "
    "QUALIFY row_number() OVER (PARTITION BY namespace, pod ORDER BY ts DESC) = 1"
)


def load_pool_inputs(
    store: Store,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    model: str | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """``(requests in [since, until) with their node, latest nodes before until)`` for
    :func:`pool_latency`."""
    lo = utc_naive(since) if since is not None else None
    hi = utc_naive(until) if until is not None else None
    sql = (
        "SELECT r.model, coalesce(r.node, p.node) AS node, r.latency_s FROM requests r "
        f"LEFT JOIN ({_LATEST_PODS}) p ON r.namespace IS NOT DISTINCT FROM p.namespace "
        "AND r.pod = p.pod "
        "WHERE r.ok IS NOT FALSE AND isfinite(r.latency_s) "
        "AND (?::TIMESTAMP IS NULL OR r.ts >= ?) AND (?::TIMESTAMP IS NULL OR r.ts < ?) "
        "AND (?::VARCHAR IS NULL OR r.model = ?)"
    )
    requests = pl.DataFrame(store.query(sql, [hi, hi, lo, lo, hi, hi, model, model]))
    return requests, pl.DataFrame(store.query(_LATEST_NODES, [hi, hi]))


@dataclass(frozen=True)
class ReplicaShape:
    """The model's serving pods on one GPU product."""

    gpu_product: str | None
    pods: tuple[str, ...]
    gpus_per_replica: int | None


def replica_shapes(
    store: Store, model: str, *, since: datetime | None = None, until: datetime | None = None
) -> dict[str | None, ReplicaShape]:
    """Per GPU product: the pods that served ``model`` in ``[since, until)`` and their largest
    ``gpu_request`` (latest snapshots before ``until``)."""
    lo = utc_naive(since) if since is not None else None
    hi = utc_naive(until) if until is not None else None
    sql = (
        "SELECT DISTINCT r.pod, coalesce(r.node, p.node) AS node, p.gpu_request, n.gpu_product "
        f"FROM requests r LEFT JOIN ({_LATEST_PODS}) p "
        "ON r.namespace IS NOT DISTINCT FROM p.namespace AND r.pod = p.pod "
        f"LEFT JOIN ({_LATEST_NODES}) n ON n.node = coalesce(r.node, p.node) "
        "WHERE r.model = ? AND r.pod IS NOT NULL "
        "AND (?::TIMESTAMP IS NULL OR r.ts >= ?) AND (?::TIMESTAMP IS NULL OR r.ts < ?)"
    )
    rows = store.query(sql, [hi, hi, hi, hi, model, lo, lo, hi, hi]).to_pylist()
    shapes: dict[str | None, ReplicaShape] = {}
    for product in {r["gpu_product"] for r in rows}:
        mine = [r for r in rows if r["gpu_product"] == product]
        requests = [int(r["gpu_request"]) for r in mine if r["gpu_request"]]
        shapes[product] = ReplicaShape(
            product, tuple(sorted({str(r["pod"]) for r in mine})), max(requests, default=None)
        )
    return shapes


@dataclass(frozen=True)
class MeasuredSafeMax:
    """The per-replica safe maximum of one GPU product and the evidence behind it."""

    gpu_product: str | None
    safe_max_rps: float | None
    pods_measured: int
    note: str


def measured_safe_max(
    store: Store,
    model: str,
    slo_s: float,
    shapes: Mapping[str | None, ReplicaShape],
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    heatmap: HeatmapSettings | None = None,
) -> dict[str | None, MeasuredSafeMax]:
    """Safe maximum throughput per replica and GPU product, through the heatmap's rule.

    Adapter over :func:`sits_observe.analytics.heatmap.grid.compute_heatmaps` grouped by pod (a pod
    is one replica): per product, the lowest safe maximum among its pods that have one.
    """
    base = heatmap or HeatmapSettings()
    settings = HeatmapSettings.model_validate({**base.model_dump(), "slo_ms": slo_s * 1000})
    maps = compute_heatmaps(
        store, settings, selection=RequestSelection(model=model, since=since, until=until), by="pod"
    )
    by_pod = {m.group: m.safe_max for m in maps}
    out: dict[str | None, MeasuredSafeMax] = {}
    for product, shape in shapes.items():
        values = [
            v.value.throughput_lo_rps
            for pod in shape.pods
            if (v := by_pod.get(pod)) is not None and v.value is not None
        ]
        notes = [v.note for pod in shape.pods if (v := by_pod.get(pod)) is not None]
        safe = min(values) if values else None
        out[product] = MeasuredSafeMax(
            product,
            safe if safe else None,  # a safe maximum of 0 rps cannot size anything
            len(values),
            "; ".join(dict.fromkeys(notes)) or "no heatmap for these pods",
        )
    return out
