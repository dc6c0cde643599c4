"""Where GPU pods were placed, by GPU product and generation, and by precision class.

The inputs of the ``affinity`` report and of the ``fragmentation`` report's precision split,
read from the inventory tables of a store within a window (``since <= ts < until``):

- :func:`placed_pods`: every GPU pod seen bound in the window (its latest row), with its
  workload, the ``sits.io/model`` / ``sits.io/precision`` it declares (kept in
  ``pods.gpu_stack_json`` by :mod:`sits_observe.collectors.kube.gpu_stack`), and its node's GPU
  product: the node's latest ``nodes.gpu_product``, else the latest
  ``gpu_samples.model_name`` of the node (NVML's name), and the product's generation
  (:func:`sits_observe.analytics.topology.affinity.generation_of`). Finished pods count: a Job whose
  pods ran on two generations was placed across them. A node's ``nodes`` rows count from
  before ``since`` too (its product does not change while it lives); its samples only
  within the window.
- :func:`mixed_workloads`: the workloads whose pods sit on more than one GPU product; the
  documents' rule is "no mixing of GPU generations in one job", so ``generation_count > 1``
  is the finding and several products of one generation (A100 40 GB and 80 GB) the milder one.
- :func:`rule_violations`: placed pods whose node the affinity rules do not allow.
- :func:`precision_shapes` / :func:`precision_holdings`: per precision class, the pods' FGD
  shapes (the workload M of that class) and what the class holds in the newest pods snapshot.

Units: GPUs and milli-GPU (1000 = one GPU); times UTC.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime

import polars as pl

from sits_observe.analytics.fragmentation.fgd.model import (
    MILLI_PER_GPU,
    PodShape,
    normalise_gpu_types,
)
from sits_observe.analytics.topology.affinity import AffinityRules, generation_of
from sits_observe.collectors.kube.gpu_stack import MODEL_KEY, PRECISION_KEY
from sits_observe.store.duck import Store
from sits_observe.store.gpu_identity import identity_sql
from sits_observe.store.inventory_reads import last_seen_params, last_seen_sql

#: The class of a pod that declares no precision.
UNDECLARED = "undeclared"
_DONE_PHASES = ("Succeeded", "Failed")


def _declared(key: str) -> tuple[str, list[object]]:
    """SQL for a ``sits.io/...`` key of the pruned pod (annotation, else label) and its
    parameters."""
    sql = (
        "nullif(trim(coalesce(json_extract_string(gpu_stack_json, ?), "
        "json_extract_string(gpu_stack_json, ?))), '')"
    )
    return sql, [f'$.metadata.annotations."{key}"', f'$.metadata.labels."{key}"']


def _window(since: datetime | None, until: datetime | None) -> tuple[str, list[object]]:
    return "(? IS NULL OR ts >= ?) AND (? IS NULL OR ts < ?)", [since, since, until, until]


def placed_pods(store: Store, since: datetime | None, until: datetime | None) -> pl.DataFrame:
    """One row per GPU pod seen bound in the window (see the module docstring)."""
    model_sql, model_params = _declared(MODEL_KEY)
    precision_sql, precision_params = _declared(PRECISION_KEY)
    window, bounds = _window(since, until)
    sql = (
        "WITH p AS (SELECT namespace, pod, workload, node, coalesce(gpu_request, 0) AS gpus, "
        f"{model_sql} AS model, lower({precision_sql}) AS precision FROM pods "
        f"WHERE {window} AND node IS NOT NULL AND coalesce(gpu_request, 0) > 0 "
        "QUALIFY row_number() OVER ("
        "PARTITION BY coalesce(pod_uid, namespace || '/' || pod) ORDER BY ts DESC) = 1), "
        "n AS (SELECT node, arg_max(gpu_product, ts) AS product FROM nodes "
        "WHERE (? IS NULL OR ts < ?) AND gpu_product IS NOT NULL GROUP BY node), "
        # gpu_samples is the largest table: only the window's rows, as other reports read it.
        # A node's product: its most recently sampled GPU's model (each GPU's latest identity).
        "s AS (SELECT node, arg_max(model_name, seen_at) AS product "
        f"FROM ({identity_sql(window)}) "
        "WHERE model_name IS NOT NULL AND node IS NOT NULL GROUP BY node) "
        "SELECT p.namespace, p.pod, coalesce(p.workload, p.pod) AS workload, p.node, p.gpus, "
        "p.model, p.precision, coalesce(n.product, s.product) AS product FROM p "
        "LEFT JOIN n ON n.node = p.node LEFT JOIN s ON s.node = p.node "
        "ORDER BY p.namespace, workload, p.pod"
    )
    params = [*model_params, *precision_params, *bounds, until, until, *bounds]
    frame = pl.from_arrow(store.query(sql, params))
    assert isinstance(frame, pl.DataFrame)
    products = frame["product"].unique().to_list()
    generations = {p: generation_of(p) for p in products}
    return frame.with_columns(
        pl.col("product").replace_strict(generations, default="none").alias("generation")
    )


def mixed_workloads(placed: pl.DataFrame) -> pl.DataFrame:
    """Workloads whose pods sit on more than one GPU product, most generations first."""
    grouped = placed.group_by("namespace", "workload").agg(
        pl.len().alias("pods"),
        pl.col("gpus").sum().alias("gpus"),
        pl.col("product").drop_nulls().unique().sort().alias("products"),
        pl.col("generation").unique().sort().alias("generations"),
        pl.col("node").n_unique().alias("nodes"),
    )
    return (
        grouped.with_columns(
            pl.col("products").list.len().alias("product_count"),
            pl.col("generations").list.len().alias("generation_count"),
            pl.col("products").list.join(" | "),
            pl.col("generations").list.join(" | "),
        )
        .filter(pl.col("product_count") > 1)
        .with_columns((pl.col("generation_count") > 1).alias("mixed_generations"))
        .sort(
            ["generation_count", "pods", "namespace", "workload"],
            descending=[True, True, False, False],
        )
    )


def rule_violations(placed: pl.DataFrame, rules: AffinityRules) -> pl.DataFrame:
    """Placed pods whose node's GPU product the rule for their model does not allow."""
    verdicts: dict[tuple[str | None, str | None, str | None], str | None] = {}
    broken: list[str | None] = []
    for model, precision, product in placed.select("model", "precision", "product").iter_rows():
        key = (model, precision, product)
        if key not in verdicts:
            rule = rules.rule_for(model, precision)
            verdicts[key] = None if rule is None or rule.allows(product) else rule.describe()
        broken.append(verdicts[key])
    with_rule = placed.with_columns(pl.Series("rule", broken, dtype=pl.String))
    return with_rule.filter(pl.col("rule").is_not_null())


#: The pod columns :func:`precision_shapes` reads.
_SHAPE_COLUMNS = (
    "pod_uid",
    "namespace",
    "pod",
    "gpu_request",
    "gpu_milli",
    "gpu_types",
    "cpu_request_milli",
    "gpu_stack_json",
)


def precision_shapes(
    store: Store, since: datetime | None, until: datetime | None
) -> dict[str, tuple[PodShape, ...]]:
    """Per precision class (``undeclared`` for the rest), the FGD shapes of the GPU pods seen
    in the window (each pod's latest row), as :func:`sits_observe.analytics.fragmentation.fgd_live.
    live_cluster` builds the workload M; empty when no pod declares a precision."""
    precision_sql, precision_params = _declared(PRECISION_KEY)
    # Each version at its latest snapshot in the window: as the pods view, without expanding
    # every snapshot (sits_observe.store.inventory_reads).
    seen = last_seen_sql("pods", _SHAPE_COLUMNS)
    rows = store.query(
        f"SELECT lower({precision_sql}) AS precision, coalesce(cpu_request_milli, 0) AS cpu, "
        f"gpu_request AS gpus, gpu_milli AS milli, gpu_types AS types FROM ({seen}) "
        "WHERE coalesce(gpu_request, 0) > 0 QUALIFY row_number() OVER ("
        "PARTITION BY coalesce(pod_uid, namespace || '/' || pod) ORDER BY ts DESC) = 1",
        [*precision_params, *last_seen_params(since, until)],
    ).to_pylist()
    if not any(r["precision"] for r in rows):
        return {}
    shapes: dict[str, list[PodShape]] = defaultdict(list)
    for r in rows:
        gpus = int(r["gpus"])
        milli = r["milli"]
        # As live_cluster: NULL (rows before schema 4) or an impossible share is whole GPUs.
        share = int(milli) if milli is not None and 1 <= milli <= MILLI_PER_GPU else MILLI_PER_GPU
        if gpus > 1:
            share = MILLI_PER_GPU
        shape = PodShape(max(int(r["cpu"]), 0), gpus, share, normalise_gpu_types(r["types"]))
        shapes[r["precision"] or UNDECLARED].append(shape)
    return {k: tuple(v) for k, v in sorted(shapes.items())}


@dataclass(frozen=True)
class Holding:
    """What one precision class holds in the newest pods snapshot of the window."""

    pods: int
    gpu_milli: int
    nodes: int
    shared_nodes: int


def precision_holdings(store: Store, at: datetime | None) -> dict[str, Holding]:
    """Per precision class: bound, unfinished GPU pods in the pods snapshot at ``at``, the
    milli-GPU they hold, their nodes and how many of those host another class too."""
    if at is None:
        return {}
    precision_sql, precision_params = _declared(PRECISION_KEY)
    rows = store.query(
        f"WITH p AS (SELECT coalesce(lower({precision_sql}), ?) AS precision, node, "
        "gpu_request * coalesce(gpu_milli, 1000) AS milli FROM pods WHERE ts = ? "
        "AND node IS NOT NULL AND coalesce(gpu_request, 0) > 0 "
        "AND coalesce(phase, '') NOT IN (?, ?)), "
        "k AS (SELECT node, count(DISTINCT precision) AS classes FROM p GROUP BY node) "
        "SELECT precision, count(*) AS pods, sum(milli) AS milli, "
        "count(DISTINCT p.node) AS nodes, "
        "count(DISTINCT CASE WHEN k.classes > 1 THEN p.node END) AS shared "
        "FROM p JOIN k ON k.node = p.node GROUP BY precision ORDER BY precision",
        [*precision_params, UNDECLARED, at, *_DONE_PHASES],
    ).to_pylist()
    return {
        str(r["precision"]): Holding(
            int(r["pods"]), int(r["milli"]), int(r["nodes"]), int(r["shared"])
        )
        for r in rows
    }
