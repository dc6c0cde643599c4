"""The exporter's DRA fragmentation families, per node, from the ``fragmentation`` report's
``dra_nodes`` table of the newest DRA snapshot
(:func:`~sits_observe.reports.fragmentation_dra.latest_dra_nodes`).

Nothing is exported, and no error counted, while the store holds no DRA snapshot (a cluster
without DRA GPUs). Units: memory slices (one per ``memory-slice-<i>`` counter of a
partitionable GPU), bytes.
"""

from __future__ import annotations

from prometheus_client.core import Metric

from sits_observe.reports.fragmentation_dra import latest_dra_nodes
from sits_observe.surfaces.service.exporter.cache import GaugeRows
from sits_observe.surfaces.service.exporter.signals.labels import NODE
from sits_observe.surfaces.service.exporter.signals.requests import PassInputs, capped

#: Family -> (the ``dra_nodes`` column, help).
FAMILIES = {
    "sits_dra_memory_slices_free": (
        "slices_free",
        "free memory slices of the node's partitionable GPUs (DRA, newest snapshot)",
    ),
    "sits_dra_memory_slices_stranded": (
        "slices_stranded",
        "free memory slices of the node's partitionable GPUs that no device still fitting "
        "can use (DRA, newest snapshot)",
    ),
    "sits_dra_first_fit_wasted_slices": (
        "first_fit_wasted_slices",
        "memory slices the DRA allocator's first-fit device choice strands beyond a best-fit "
        "choice for the node's claims (newest snapshot)",
    ),
    "sits_dra_shared_free_bytes": (
        "shared_free_bytes",
        "memory of the node's consumable-capacity GPUs that no share consumes, bytes",
    ),
    "sits_dra_shared_stranded_bytes": (
        "shared_stranded_bytes",
        "memory left on the node's consumable-capacity GPUs in pieces smaller than the "
        "typical share, bytes",
    ),
}


def dra(p: PassInputs) -> list[Metric]:
    """One gauge per :data:`FAMILIES` entry, one series per node (at most ``max_nodes``,
    most first-fit waste first)."""
    rows = latest_dra_nodes(p.store)
    if rows is None:
        return []
    kept = capped(rows, p.settings.max_nodes, lambda r: (-r["first_fit_wasted_slices"], r["node"]))
    return [
        GaugeRows(name, text, (NODE,), (((r["node"],), float(r[column])) for r in kept))
        for name, (column, text) in FAMILIES.items()
    ]
