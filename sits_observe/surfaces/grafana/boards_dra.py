"""The fragmentation dashboard's DRA row: GPUs handed out through Dynamic Resource Allocation
(docs/grafana.md, "Fragmentation")."""

from __future__ import annotations

from sits_observe.surfaces.grafana import names as m
from sits_observe.surfaces.grafana.panels import HIGH_IS_BAD, Panel, Query, stat, timeseries
from sits_observe.surfaces.grafana.promql import NODE, agg, sel


def dra_panels() -> tuple[Panel, ...]:
    """GPUs handed out through DRA: memory slices of partitionable GPUs, consumable shares."""
    return (
        stat(
            "Stranded memory slices (DRA)",
            "Free memory slices of partitionable GPUs that no device still fitting can use, "
            "over the selected nodes (newest DRA snapshot).",
            Query(agg("sum", (), sel(m.DRA_SLICES_STRANDED, Hostname=NODE)), legend="slices"),
            unit="short",
            thresholds=HIGH_IS_BAD,
            minimum=0,
        ),
        stat(
            "First-fit waste (DRA)",
            "Memory slices the scheduler's first-fit device choice strands beyond a best-fit "
            "choice for the same claims; the extender's node choice cannot steer it.",
            Query(agg("sum", (), sel(m.DRA_FIRST_FIT_WASTE, Hostname=NODE)), legend="slices"),
            unit="short",
            thresholds=HIGH_IS_BAD,
            minimum=0,
        ),
        stat(
            "Stranded share memory (DRA)",
            "Memory left on consumable-capacity GPUs in pieces smaller than the typical share.",
            Query(agg("sum", (), sel(m.DRA_SHARED_STRANDED_BYTES, Hostname=NODE)), legend="bytes"),
            unit="bytes",
            width=12,
        ),
        timeseries(
            "Free and stranded memory slices per node (DRA)",
            "Each node's free memory slices of partitionable GPUs and the stranded part.",
            Query(sel(m.DRA_SLICES_FREE, Hostname=NODE), legend="{{Hostname}} free"),
            Query(sel(m.DRA_SLICES_STRANDED, Hostname=NODE), legend="{{Hostname}} stranded"),
            unit="short",
            minimum=0,
        ),
        timeseries(
            "Free share memory per node (DRA)",
            "Memory of each node's consumable-capacity GPUs that no share consumes.",
            Query(sel(m.DRA_SHARED_FREE_BYTES, Hostname=NODE), legend="{{Hostname}}"),
            unit="bytes",
            minimum=0,
        ),
    )
