"""The ``fragmentation`` report's DRA tables: shares left over, slices stranded, first fit's waste.

Read from the newest DRA snapshot in the report's window
(:func:`~sits_observe.analytics.fragmentation.dra.dra_fragmentation_at`; measures and
formulas in docs/analytics/fragmentation-fgd.md, "Under DRA"): one cluster row (``dra``) and
one row per node with DRA GPUs (``dra_nodes``). None when the store holds no DRA snapshot in
the window (clusters without DRA: the report keeps its FGD tables only).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from sits_observe.analytics.fragmentation.dra import DraFragmentation, dra_fragmentation_at
from sits_observe.domain.units import Unit
from sits_observe.reports.result import ReportTable, col, table_of
from sits_observe.reports.window import Window
from sits_observe.store import Store

_CLUSTER = (
    col("partitionable_gpus", "partitionable GPUs", Unit.integer),
    col("slices_free", "free slices", Unit.integer),
    col("slices_stranded", "stranded slices", Unit.integer),
    col("first_fit_wasted_slices", "first-fit waste", Unit.integer),
    col("shared_devices", "shared GPUs", Unit.integer),
    col("shared_free_bytes", "shared free", Unit.bytes),
    col("shared_stranded_bytes", "shared stranded", Unit.bytes),
    col("typical_share_bytes", "typical share", Unit.bytes, wide=True),
)
_NODES = (
    col("node", "node"),
    col("partitionable_gpus", "partitionable GPUs", Unit.integer),
    col("slices_free", "free slices", Unit.integer),
    col("slices_stranded", "stranded slices", Unit.integer),
    col("first_fit_stranded_slices", "first fit", Unit.integer, wide=True),
    col("best_fit_stranded_slices", "best fit", Unit.integer, wide=True),
    col("first_fit_wasted_slices", "first-fit waste", Unit.integer),
    col("first_fit_split_gpus", "split (first fit)", Unit.integer, wide=True),
    col("best_fit_split_gpus", "split (best fit)", Unit.integer, wide=True),
    col("shared_free_bytes", "shared free", Unit.bytes),
    col("shared_stranded_bytes", "shared stranded", Unit.bytes),
)


def dra_tables(store: Store, window: Window) -> tuple[ReportTable, ...]:
    """The ``dra`` and ``dra_nodes`` tables of the newest DRA snapshot in ``window`` (none
    when there is no such snapshot)."""
    found = dra_fragmentation_at(store, since=window.since, until=window.until)
    if found is None:
        return ()
    return (cluster_table(found), node_table(found))


def cluster_table(found: DraFragmentation) -> ReportTable:
    """The one-row ``dra`` table."""
    row = {
        "partitionable_gpus": len(found.partitioned),
        "slices_free": found.slices_free,
        "slices_stranded": found.slices_stranded,
        "first_fit_wasted_slices": found.first_fit_wasted_slices,
        "shared_devices": len(found.shared),
        "shared_free_bytes": found.shared_free_bytes,
        "shared_stranded_bytes": found.shared_stranded_bytes,
        "typical_share_bytes": found.typical_share_bytes,
    }
    return table_of("dra", "DRA: memory slices and consumable shares", [row], _CLUSTER)


def node_table(found: DraFragmentation) -> ReportTable:
    """One ``dra_nodes`` row per node with a partitionable or shared GPU or a claim, most
    first-fit waste first, then most stranded slices."""
    rows: dict[str, dict[str, Any]] = defaultdict(lambda: dict.fromkeys(_ZERO, 0))
    for p in found.partitioned:
        row = rows[p.node or ""]
        row["partitionable_gpus"] += 1
        row["slices_free"] += p.slices_free
        row["slices_stranded"] += p.slices_stranded
    for w in found.first_fit:
        row = rows[w.node]
        row["first_fit_stranded_slices"] = w.first_fit.slices_stranded
        row["best_fit_stranded_slices"] = w.best_fit.slices_stranded
        row["first_fit_wasted_slices"] = w.wasted_slices
        row["first_fit_split_gpus"] = w.first_fit.split_gpus
        row["best_fit_split_gpus"] = w.best_fit.split_gpus
    typical = found.typical_share_bytes
    for d in found.shared:
        row = rows[d.node or ""]
        row["shared_free_bytes"] += d.free_bytes
        if typical is not None and d.free_bytes < typical:
            row["shared_stranded_bytes"] += d.free_bytes
    out = [{"node": node, **row} for node, row in rows.items()]
    out.sort(key=lambda r: (-r["first_fit_wasted_slices"], -r["slices_stranded"], r["node"]))
    return table_of("dra_nodes", "DRA by node", out, _NODES)


_ZERO = tuple(c.name for c in _NODES if c.name != "node")


def latest_dra_nodes(store: Store) -> list[dict[str, Any]] | None:
    """The ``dra_nodes`` rows of the newest DRA snapshot whatever its time (the exporter's
    ``sits_dra_*`` families); None when the store holds none."""
    found = dra_fragmentation_at(store)
    return None if found is None else node_table(found).rows.to_pylist()
