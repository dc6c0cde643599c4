"""Panel, variable and dashboard helpers that emit Grafana's dashboard JSON model.

Targets Grafana 10/11 (``schemaVersion`` 39): the Prometheus data source is chosen by the
``datasource`` template variable, every panel and target refers to it as ``${datasource}``,
and panels are laid out on Grafana's 24-column grid by :func:`dashboard` (left to right,
wrapping, one ``row`` panel per section), so no helper hand-places coordinates. Every
dashboard has a ``cluster`` variable, and :func:`dashboard` scopes every expression and
variable query by it (:func:`.promql.scoped`), so no builder can forget it. The JSON is
plain data (``Json``) because Grafana's model is open-ended; it never leaves this package
except as a file.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from sits_observe.surfaces.grafana import names as m
from sits_observe.surfaces.grafana.promql import CLUSTER, label_values, scoped

Json = dict[str, Any]

SCHEMA_VERSION = 39
GRID_COLUMNS = 24
#: Every dashboard carries this tag; the dashboards' link bar lists the tagged set.
TAG = "sits-observe"
DATASOURCE: Json = {"type": "prometheus", "uid": "${datasource}"}

QueryFormat = Literal["time_series", "table", "heatmap"]


@dataclass(frozen=True)
class Query:
    """One Prometheus target of a panel."""

    expr: str
    legend: str = "__auto"
    instant: bool = False
    fmt: QueryFormat = "time_series"

    def to_json(self, ref_id: str) -> Json:
        """The target object, with its ``refId``."""
        return {
            "datasource": DATASOURCE,
            "editorMode": "code",
            "expr": self.expr,
            "format": self.fmt,
            "instant": self.instant,
            "legendFormat": self.legend,
            "range": not self.instant,
            "refId": ref_id,
        }


@dataclass(frozen=True)
class Panel:
    """A panel before layout: kind, text, targets, size and type-specific JSON."""

    kind: str
    title: str
    description: str
    queries: tuple[Query, ...]
    width: int
    height: int
    options: Json = field(default_factory=dict)
    field_config: Json = field(default_factory=dict)
    extra: Json = field(default_factory=dict)

    def to_json(self, panel_id: int, x: int, y: int) -> Json:
        """The panel object placed at grid column ``x``, row ``y``."""
        return {
            "datasource": DATASOURCE,
            "description": self.description,
            "fieldConfig": self.field_config or {"defaults": {}, "overrides": []},
            "gridPos": {"h": self.height, "w": self.width, "x": x, "y": y},
            "id": panel_id,
            "options": self.options,
            "targets": [q.to_json(chr(ord("A") + i)) for i, q in enumerate(self.queries)],
            "title": self.title,
            "type": self.kind,
            **self.extra,
        }


Threshold = tuple[float | None, str]
#: Green below, red from the value on (a 0-1 ratio where high is bad, by default).
HIGH_IS_BAD: tuple[Threshold, ...] = ((None, "green"), (0.5, "orange"), (0.8, "red"))
NEUTRAL: tuple[Threshold, ...] = ((None, "blue"),)


def _defaults(
    unit: str, thresholds: Sequence[Threshold], minimum: float | None, maximum: float | None
) -> Json:
    defaults: Json = {
        "unit": unit,
        "thresholds": {
            "mode": "absolute",
            "steps": [{"color": color, "value": value} for value, color in thresholds],
        },
    }
    if minimum is not None:
        defaults["min"] = minimum
    if maximum is not None:
        defaults["max"] = maximum
    return defaults


def dashed(regex: str, color: str = "red") -> Json:
    """A field override drawing the series whose name matches ``regex`` as a dashed line
    (SLOs, knees, limits: references, not measurements)."""
    return {
        "matcher": {"id": "byRegexp", "options": regex},
        "properties": [
            {"id": "custom.lineStyle", "value": {"dash": [10, 10], "fill": "dash"}},
            {"id": "color", "value": {"fixedColor": color, "mode": "fixed"}},
        ],
    }


def timeseries(
    title: str,
    description: str,
    *queries: Query,
    unit: str,
    minimum: float | None = None,
    maximum: float | None = None,
    overrides: Sequence[Json] = (),
    width: int = 12,
    height: int = 8,
) -> Panel:
    """A line chart over time."""
    defaults = _defaults(unit, NEUTRAL, minimum, maximum)
    defaults["color"] = {"mode": "palette-classic"}
    defaults["custom"] = {"drawStyle": "line", "lineWidth": 1, "fillOpacity": 0, "spanNulls": True}
    return Panel(
        "timeseries",
        title,
        description,
        queries,
        width,
        height,
        options={
            "legend": {"displayMode": "table", "placement": "bottom", "calcs": ["lastNotNull"]},
            "tooltip": {"mode": "multi", "sort": "desc"},
        },
        field_config={"defaults": defaults, "overrides": list(overrides)},
    )


def stat(
    title: str,
    description: str,
    *queries: Query,
    unit: str,
    thresholds: Sequence[Threshold] = NEUTRAL,
    minimum: float | None = None,
    maximum: float | None = None,
    width: int = 6,
    height: int = 4,
) -> Panel:
    """The latest value(s), large, coloured by ``thresholds``."""
    defaults = _defaults(unit, thresholds, minimum, maximum)
    defaults["color"] = {"mode": "thresholds"}
    return Panel(
        "stat",
        title,
        description,
        queries,
        width,
        height,
        options={
            "colorMode": "value",
            "graphMode": "area",
            "justifyMode": "auto",
            "orientation": "auto",
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "textMode": "auto",
        },
        field_config={"defaults": defaults, "overrides": []},
    )


def table(
    title: str,
    description: str,
    *queries: Query,
    unit: str,
    transformations: Sequence[Json] = (),
    width: int = 12,
    height: int = 8,
) -> Panel:
    """The latest value of each series as a table row (instant, table-format targets)."""
    return Panel(
        "table",
        title,
        description,
        queries,
        width,
        height,
        options={"cellHeight": "sm", "showHeader": True, "footer": {"show": False}},
        field_config={"defaults": _defaults(unit, NEUTRAL, None, None), "overrides": []},
        extra={"transformations": list(transformations)} if transformations else {},
    )


def heatmap(
    title: str,
    description: str,
    query: Query,
    *,
    unit: str,
    repeat: str | None = None,
    width: int = 12,
    height: int = 9,
) -> Panel:
    """A heatmap of pre-bucketed (``le``) series: Grafana de-accumulates the cumulative
    buckets itself when the target's format is ``heatmap`` (``calculate`` stays off)."""
    extra: Json = {}
    if repeat is not None:
        extra = {"repeat": repeat, "repeatDirection": "h", "maxPerRow": 2}
    return Panel(
        "heatmap",
        title,
        description,
        (query,),
        width,
        height,
        options={
            "calculate": False,
            "cellGap": 1,
            "color": {
                "mode": "scheme",
                "scheme": "Oranges",
                "scale": "exponential",
                "exponent": 0.5,
                "steps": 64,
                "fill": "dark-orange",
                "reverse": False,
            },
            "filterValues": {"le": 1e-9},
            "legend": {"show": True},
            "rowsFrame": {"layout": "auto"},
            "showValue": "never",
            "tooltip": {"mode": "single", "showColorScale": False, "yHistogram": True},
            "yAxis": {"axisPlacement": "left", "reverse": False, "unit": unit},
        },
        field_config={"defaults": {}, "overrides": []},
        extra=extra,
    )


# -- template variables -------------------------------------------------------------------------


def datasource_variable() -> Json:
    """The ``datasource`` variable: any Prometheus-type data source."""
    return {
        "current": {},
        "hide": 0,
        "includeAll": False,
        "label": "Prometheus",
        "multi": False,
        "name": "datasource",
        "options": [],
        "query": "prometheus",
        "refresh": 1,
        "regex": "",
        "type": "datasource",
    }


def cluster_variable() -> Json:
    """The ``cluster`` variable: the values of the ``cluster`` label on the service's own
    always-exported series; "All" (``.*``) also matches series without the label."""
    return query_variable(CLUSTER.name, "Cluster", label_values(m.EXPORTER_ERRORS, m.CLUSTER_LABEL))


def query_variable(name: str, label: str, query: str) -> Json:
    """A multi-value variable filled by ``query`` (``label_values(...)``); "All" is ``.*``."""
    return {
        "allValue": ".*",
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "datasource": DATASOURCE,
        "definition": query,
        "hide": 0,
        "includeAll": True,
        "label": label,
        "multi": True,
        "name": name,
        "options": [],
        "query": {"query": query, "refId": "PrometheusVariableQueryEditor-VariableQuery"},
        "refresh": 2,
        "regex": "",
        "sort": 1,
        "type": "query",
    }


# -- dashboards -------------------------------------------------------------------------------

Section = tuple[str, Sequence[Panel]]


def _layout(sections: Sequence[Section]) -> list[Json]:
    """Place each section's row header, then its panels left to right, wrapping at 24."""
    placed: list[Json] = []
    y = 0
    panel_id = 1
    for title, panels in sections:
        placed.append(
            {
                "collapsed": False,
                "gridPos": {"h": 1, "w": GRID_COLUMNS, "x": 0, "y": y},
                "id": panel_id,
                "panels": [],
                "title": title,
                "type": "row",
            }
        )
        panel_id += 1
        y += 1
        x = 0
        line_height = 0
        for panel in panels:
            if x + panel.width > GRID_COLUMNS:
                x, y, line_height = 0, y + line_height, 0
            placed.append(panel.to_json(panel_id, x, y))
            panel_id += 1
            x += panel.width
            line_height = max(line_height, panel.height)
        y += line_height
    return placed


def dashboard(
    uid: str,
    title: str,
    description: str,
    sections: Sequence[Section],
    *,
    variables: Sequence[Json] = (),
    tags: Sequence[str] = (),
) -> Json:
    """A whole dashboard: the ``datasource`` and ``cluster`` variables first, then
    ``variables``; every target expression and variable query scoped by ``cluster``."""
    panels = _layout(sections)
    for panel in panels:
        for target in panel.get("targets", []):
            target["expr"] = scoped(target["expr"])
    scoped_variables = []
    for variable in variables:
        query = scoped(variable["query"]["query"])
        scoped_variables.append(
            {**variable, "definition": query, "query": {**variable["query"], "query": query}}
        )
    return {
        "annotations": {
            "list": [
                {
                    "builtIn": 1,
                    "datasource": {"type": "grafana", "uid": "-- Grafana --"},
                    "enable": True,
                    "hide": True,
                    "iconColor": "rgba(0, 211, 255, 1)",
                    "name": "Annotations & Alerts",
                    "type": "dashboard",
                }
            ]
        },
        "description": description,
        "editable": True,
        "fiscalYearStartMonth": 0,
        "graphTooltip": 1,
        "id": None,
        "links": [
            {
                "asDropdown": True,
                "includeVars": False,
                "keepTime": True,
                "tags": [TAG],
                "targetBlank": False,
                "title": "sits-observe",
                "type": "dashboards",
            }
        ],
        "panels": panels,
        "refresh": "30s",
        "schemaVersion": SCHEMA_VERSION,
        "tags": [TAG, *tags],
        "templating": {"list": [datasource_variable(), cluster_variable(), *scoped_variables]},
        "time": {"from": "now-6h", "to": "now"},
        "timepicker": {},
        "timezone": "utc",
        "title": title,
        "uid": uid,
        "version": 1,
        "weekStart": "",
    }
