"""Grafana dashboards and provisioning files, generated from the exported metric names."""

from sits_observe.surfaces.grafana.promql import expand
from sits_observe.surfaces.grafana.render import (
    BUILDERS,
    PanelQuery,
    dashboards,
    differences,
    queries,
    render,
    variable_queries,
    write,
)

__all__ = [
    "BUILDERS",
    "PanelQuery",
    "dashboards",
    "differences",
    "expand",
    "queries",
    "render",
    "variable_queries",
    "write",
]
