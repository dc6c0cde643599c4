"""Report ``affinity``: workloads placed across GPU generations, and pods placed against the
device affinity rules.

The documents ask that GPU generations not be mixed in one job and that each model run on the
GPU type and precision it was sized for (docs/analytics/affinity.md). From the inventory in
the window (:mod:`sits_observe.analytics.topology.affinity_placement`): every GPU pod seen bound,
its node's GPU product and generation, and the ``sits.io/model`` / ``sits.io/precision`` it
declares. Tables:

- ``mixed`` (the main table): workloads whose pods sit on more than one GPU product, those
  spanning generations first (``mixed gen``: the documents' finding);
- ``violations``: with ``--rules FILE`` (the extender's affinity rules file), the pods whose
  node the rule for their model and precision does not allow;
- ``generations``: GPU pods, GPUs and workloads per generation.

Amounts are whole GPUs as requested; times UTC.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
from pydantic import BaseModel, ConfigDict, Field

from sits_observe.analytics.topology.affinity import AffinityRules, load_affinity_rules
from sits_observe.analytics.topology.affinity_placement import (
    mixed_workloads,
    placed_pods,
    rule_violations,
)
from sits_observe.domain.units import Unit
from sits_observe.reports.result import Report, ReportTable, col, table_of
from sits_observe.reports.spec import ReportSpec, require_rows
from sits_observe.reports.window import Window
from sits_observe.store import Store

FILLED_BY = "`sits-observe ingest k8s` (or `serve` / `demo`, which snapshot the inventory)"


class AffinityQuery(BaseModel):
    """Settings of the ``affinity`` report."""

    model_config = ConfigDict(frozen=True)

    rules: Path | None = Field(
        None,
        description="device affinity rules YAML (as --extender-scoring-affinity-file) to "
        "check placed pods against; 'example': the example rules the package ships; none: no "
        "violations table rows",
    )


_MIXED = (
    col("namespace", "namespace"),
    col("workload", "workload"),
    col("pods", "pods", Unit.integer),
    col("gpus", "GPUs", Unit.integer),
    col("nodes", "nodes", Unit.integer, wide=True),
    col("generations", "generations"),
    col("products", "products"),
    col("mixed_generations", "mixed gen", Unit.flag),
)
_VIOLATIONS = (
    col("namespace", "namespace"),
    col("pod", "pod"),
    col("workload", "workload", wide=True),
    col("model", "model"),
    col("precision", "precision"),
    col("node", "node"),
    col("product", "product"),
    col("generation", "generation"),
    col("rule", "rule", wide=True),
)
_GENERATIONS = (
    col("generation", "generation"),
    col("pods", "pods", Unit.integer),
    col("gpus", "GPUs", Unit.integer),
    col("workloads", "workloads", Unit.integer),
)


def build(store: Store, window: Window, query: AffinityQuery) -> Report:
    """The ``affinity`` report over the GPU pods seen bound in ``window``."""
    require_rows(store, window, "pods", FILLED_BY)
    rules = load_affinity_rules(query.rules) if query.rules is not None else None
    placed = placed_pods(store, window.since, window.until)
    mixed = mixed_workloads(placed)
    violations = rule_violations(placed, rules or AffinityRules())
    notes = [
        "GPU pods seen bound in the window (finished ones too), each on its node's GPU product "
        "(nodes.gpu_product, else the GPU samples' model name)"
    ]
    if rules is None:
        notes.append("no --rules file: the violations table is empty")
    unknown = placed.filter(pl.col("product").is_null()).height
    if unknown:
        notes.append(f"{unknown} pod(s) on nodes of unknown GPU product: generation none")
    cross = mixed.filter(pl.col("mixed_generations")).height
    facts = {
        "gpu_pods": placed.height,
        "workloads": placed.select("namespace", "workload").n_unique() if placed.height else 0,
        "mixed_product_workloads": mixed.height,
        "mixed_generation_workloads": cross,
        "violations": violations.height if rules is not None else None,
        "rules": None if query.rules is None else str(query.rules),
    }
    title = f"Workloads on more than one GPU product ({cross} across generations)"
    main = table_of("mixed", title, mixed.select([c.name for c in _MIXED]).to_arrow(), _MIXED)
    others = (_violations(violations), _generations(placed))
    return Report("affinity", window, main, others, tuple(notes), facts)


def _violations(violations: pl.DataFrame) -> ReportTable:
    rows = violations.select([c.name for c in _VIOLATIONS]).to_arrow()
    return table_of(
        "violations", "Pods on GPUs their affinity rule does not allow", rows, _VIOLATIONS
    )


def _generations(placed: pl.DataFrame) -> ReportTable:
    by_generation = (
        placed.group_by("generation")
        .agg(
            pl.len().alias("pods"),
            pl.col("gpus").sum().alias("gpus"),
            pl.struct("namespace", "workload").n_unique().alias("workloads"),
        )
        .sort("generation")
    )
    rows = by_generation.select([c.name for c in _GENERATIONS]).to_arrow()
    return table_of("generations", "GPU pods by GPU generation", rows, _GENERATIONS)


SPEC = ReportSpec(
    name="affinity",
    summary="Workloads placed across GPU generations and pods placed against the device "
    "affinity rules (model pattern -> GPU products / generations, precision).",
    settings=AffinityQuery,
    reads=("pods", "nodes", "gpu_samples"),
    build=build,
    local_files=("rules",),
)
