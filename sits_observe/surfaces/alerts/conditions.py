"""Alert conditions that are both a PromQL expression and an in-process evaluation.

Each condition renders the PromQL of the Prometheus rules file (:meth:`promql`) and
evaluates the same test over the service's current samples (:meth:`evaluate`), returning the
series that hold with the value PromQL would give ``$value`` and the labels an alert would
carry (the metric name dropped, as Prometheus does for alerts). The one rule a process cannot
evaluate on itself (``up == 0``, a property of scraping) is :class:`PromQLOnly`.

Samples are ``{sample name: [(labels, value), ...]}`` where the sample name is what PromQL
sees (``sits_controller_errors_total`` for a counter), labels a sorted tuple of pairs.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from sits_observe.surfaces.durations import prom_duration

Labels = tuple[tuple[str, str], ...]
Samples = Mapping[str, Sequence[tuple[Labels, float]]]
#: Past samples of the metrics a condition asks for: name -> labels -> [(unix s, value)].
History = Mapping[str, Mapping[Labels, Sequence[tuple[float, float]]]]
Hit = tuple[Labels, float]


def labels_of(mapping: Mapping[str, str]) -> Labels:
    """A sorted label tuple."""
    return tuple(sorted(mapping.items()))


def _selector(metric: str, matchers: Mapping[str, str]) -> str:
    if not matchers:
        return metric
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(matchers.items()))
    return f"{metric}{{{inner}}}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    return repr(float(value)).removesuffix(".0")


def _matching(samples: Samples, metric: str, matchers: Mapping[str, str]) -> list[Hit]:
    return [
        (labels, value)
        for labels, value in samples.get(metric, ())
        if all(dict(labels).get(k) == v for k, v in matchers.items()) and not math.isnan(value)
    ]


class Condition(Protocol):
    """What an alert rule tests."""

    def promql(self) -> str:
        """The expression for the Prometheus rules file."""
        ...

    def evaluate(self, samples: Samples, history: History, now_s: float) -> list[Hit]:
        """The series for which the condition holds now, with their ``$value``."""
        ...

    def history_needs(self) -> tuple[tuple[str, float], ...]:
        """``(metric, seconds)`` of past samples :meth:`evaluate` needs (kept by the
        evaluator)."""
        ...


@dataclass(frozen=True)
class Above:
    """``metric{matchers} > threshold``."""

    metric: str
    threshold: float
    matchers: Mapping[str, str] = field(default_factory=dict)

    def promql(self) -> str:
        return f"{_selector(self.metric, self.matchers)} > {_number(self.threshold)}"

    def evaluate(self, samples: Samples, history: History, now_s: float) -> list[Hit]:
        return [h for h in _matching(samples, self.metric, self.matchers) if h[1] > self.threshold]

    def history_needs(self) -> tuple[tuple[str, float], ...]:
        return ()


@dataclass(frozen=True)
class AbovePeer:
    """``metric{matchers} > on(on) group_left() peer``: above a per-group limit series.

    ``$value`` is the left-hand value; a series without a peer (no SLO for that model) never
    fires, as in PromQL.
    """

    metric: str
    peer: str
    on: tuple[str, ...]
    matchers: Mapping[str, str] = field(default_factory=dict)

    def promql(self) -> str:
        on = ", ".join(self.on)
        return f"{_selector(self.metric, self.matchers)} > on({on}) group_left() {self.peer}"

    def evaluate(self, samples: Samples, history: History, now_s: float) -> list[Hit]:
        limits = {
            tuple(dict(labels).get(k, "") for k in self.on): value
            for labels, value in _matching(samples, self.peer, {})
        }
        hits = []
        for labels, value in _matching(samples, self.metric, self.matchers):
            limit = limits.get(tuple(dict(labels).get(k, "") for k in self.on))
            if limit is not None and value > limit:
                hits.append((labels, value))
        return hits

    def history_needs(self) -> tuple[tuple[str, float], ...]:
        return ()


@dataclass(frozen=True)
class OlderThan:
    """``time() - metric > max_age_s``: a unix-seconds timestamp gauge is too old.

    ``$value`` is the age in seconds.
    """

    metric: str
    max_age_s: float

    def promql(self) -> str:
        return f"time() - {self.metric} > {_number(self.max_age_s)}"

    def evaluate(self, samples: Samples, history: History, now_s: float) -> list[Hit]:
        ages = [(labels, now_s - value) for labels, value in _matching(samples, self.metric, {})]
        return [(labels, age) for labels, age in ages if age > self.max_age_s]

    def history_needs(self) -> tuple[tuple[str, float], ...]:
        return ()


@dataclass(frozen=True)
class Increased:
    """``increase(counter[window_s]) > 0``: a counter went up within the window.

    In process, the increase is the sum of the rises between the samples the evaluator kept
    over the window (a drop is a counter reset: the new value counts as the rise), without
    PromQL's extrapolation; only its sign matters here.
    """

    metric: str
    window_s: float

    def promql(self) -> str:
        return f"increase({self.metric}[{prom_duration(self.window_s)}]) > 0"

    def evaluate(self, samples: Samples, history: History, now_s: float) -> list[Hit]:
        hits = []
        for labels, points in history.get(self.metric, {}).items():
            recent = [v for t, v in points if now_s - self.window_s <= t <= now_s]
            rise = sum(b - a if b >= a else b for a, b in itertools.pairwise(recent))
            if rise > 0:
                hits.append((labels, rise))
        return hits

    def history_needs(self) -> tuple[tuple[str, float], ...]:
        return ((self.metric, self.window_s),)


@dataclass(frozen=True)
class PromQLOnly:
    """An expression only Prometheus can evaluate (e.g. ``up``); never fires in process."""

    expr: str

    def promql(self) -> str:
        return self.expr

    def evaluate(self, samples: Samples, history: History, now_s: float) -> list[Hit]:
        return []

    def history_needs(self) -> tuple[tuple[str, float], ...]:
        return ()
