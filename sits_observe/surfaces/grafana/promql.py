"""Small PromQL builders, so panel expressions are assembled from metric-name constants.

The helpers only format text; they do not parse or validate PromQL (Prometheus does, and the
integration test runs every generated expression against a real one). A :class:`Var`
matcher renders as a regex match on a Grafana template variable (``model=~"$model"``), which
is what Grafana's "All" value (``.*``) and multi-value selections (``(a|b)``) need.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

#: Grafana's range for ``rate``/``increase``: at least four scrape intervals (Grafana docs,
#: "$__rate_interval"), so a panel never asks for a window with fewer than two samples.
RATE_INTERVAL = "$__rate_interval"


@dataclass(frozen=True)
class Var:
    """A Grafana template variable used as a regex label matcher."""

    name: str

    def matcher(self, label: str) -> str:
        """``label=~"$name"``."""
        return f'{label}=~"${self.name}"'


MODEL = Var("model")
NODE = Var("node")
NAMESPACE = Var("namespace")
#: The Kubernetes cluster: every selector of every dashboard is scoped by it (:func:`scoped`).
CLUSTER = Var("cluster")

#: A selector of a metric the dashboards read (``sits_*`` or ``DCGM_FI_*``) with its optional
#: matcher list; names inside a matcher value or a string (``"cluster"``) are not matched.
_SELECTOR = re.compile(r'(?<![\w"$])((?:sits|DCGM_FI)_[A-Za-z0-9_]*)(\{[^{}]*\})?')


def scoped(expr: str, var: Var = CLUSTER, label: str = "cluster") -> str:
    """``expr`` with ``label=~"$var"`` added to every selector of a ``sits_*`` or
    ``DCGM_FI_*`` metric, so a dashboard over a store of several clusters shows one (or
    "All": ``.*`` also matches series without the label, a single-cluster Prometheus)."""
    matcher = var.matcher(label)

    def scope(match: re.Match[str]) -> str:
        name, braces = match.group(1), match.group(2)
        inner = (braces or "{}")[1:-1].strip()
        return f"{name}{{{matcher}, {inner}}}" if inner else f"{name}{{{matcher}}}"

    return _SELECTOR.sub(scope, expr)


def sel(metric: str, **labels: str | Var) -> str:
    """``metric{label="value", other=~"$var"}`` (no braces without labels)."""
    parts = [
        value.matcher(label) if isinstance(value, Var) else f'{label}="{value}"'
        for label, value in labels.items()
    ]
    return f"{metric}{{{', '.join(parts)}}}" if parts else metric


def agg(op: str, by: tuple[str, ...], expr: str) -> str:
    """``op by (labels) (expr)``; ``op(expr)`` when ``by`` is empty."""
    return f"{op} by ({', '.join(by)}) ({expr})" if by else f"{op}({expr})"


def rate(selector: str, window: str = RATE_INTERVAL) -> str:
    """``rate(selector[window])``."""
    return f"rate({selector}[{window}])"


def increase(selector: str, window: str) -> str:
    """``increase(selector[window])``."""
    return f"increase({selector}[{window}])"


def label_values(metric: str, label: str) -> str:
    """A Grafana variable query: every value of ``label`` on ``metric``."""
    return f"label_values({metric}, {label})"


#: Values of Grafana's built-in interval variables when an expression is run outside
#: Grafana (tests, ``promtool``): a 1 s scrape gives a $__rate_interval of at least 4 s.
GRAFANA_BUILTINS: dict[str, str] = {
    "__rate_interval": "1m",
    "__interval": "15s",
    "__range": "1h",
}

_VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)")


def expand(expr: str, variables: Mapping[str, str]) -> str:
    """``expr`` with ``$name`` / ``${name}`` replaced from ``variables`` (then Grafana's
    built-ins); raises :class:`KeyError` naming a variable that has no value."""
    values = {**GRAFANA_BUILTINS, **variables}

    def value(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        if name not in values:
            raise KeyError(f"no value for ${name} in {expr!r}; known: {sorted(values)}")
        return values[name]

    return _VARIABLE.sub(value, expr)
