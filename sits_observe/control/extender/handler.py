"""The extender's request handling, bytes in and bytes out: one code path for ``serve`` and the
replay.

``serve``'s routes (:mod:`sits_observe.surfaces.service.extender`) read the HTTP body, enforce
size limits and pick the current view; the replay (:mod:`sits_observe.lab.replay.extender`)
hands kube-scheduler's request bodies over in process. Both call :class:`ExtenderHandler`,
which parses the body as kube-scheduler writes it (:mod:`extender_wire`), scores against the
view (:mod:`extender_scoring`) and returns the answer body with its HTTP status and an
outcome for the metrics:

- filter: HTTP 200 always (an unreadable body or an internal error carries its reason in
  ``Error``, which kube-scheduler reports); ``fail_open`` (every node passes) without a usable
  view;
- prioritize: HTTP 400 for an unreadable body (kube-scheduler ignores a failed prioritize);
  every node 0 (no effect on the ranking) without a usable view, and, HTTP 200, after an
  internal error;
- bind (:mod:`extender_bind`): HTTP 200 with ``ExtenderBindingResult`` (an internal error in
  ``Error``); only when a binder is configured (``serve`` with Kubernetes API access), else 404.

No exception leaves a verb: an unexpected one is logged and answered as above with the
outcome ``error`` (``sits_extender_calls_total{outcome="error"}``), never a bare HTTP 500.

A view is *usable* when it has an inventory snapshot younger than ``max_snapshot_age_s``. The
pods of filter and prioritize calls are remembered for the bind verb of the same cycle.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from sits_observe.control.extender.bind import Binder
from sits_observe.control.extender.clusterview.view import ClusterView
from sits_observe.control.extender.gpus import GpuChoice
from sits_observe.control.extender.scoring import filter_nodes, prioritize
from sits_observe.control.extender.scoring_settings import ScoringSettings
from sits_observe.control.extender.wire import (
    ExtenderCall,
    binding_result,
    encode,
    filter_error,
    filter_result,
    host_priority_json,
    parse_extender_args,
)
from sits_observe.domain.strict_json import dumps
from sits_observe.errors import ParseError

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]
Verb = Literal["filter", "prioritize", "bind"]


@dataclass(frozen=True)
class Answer:
    """One handled call: HTTP status, body, outcome (``scored``, ``fail_open``,
    ``bad_request``, ``error``, ``bound``) and, for filter, the candidates by result."""

    status: int
    body: bytes
    outcome: str
    passed: int = 0
    failed: int = 0
    unresolvable: int = 0


class ExtenderHandler:
    """Filter, prioritize and bind over bytes (see the module docstring)."""

    def __init__(
        self,
        scoring: ScoringSettings,
        *,
        max_snapshot_age_s: float,
        clock: Clock,
        binder: Binder | None = None,
        on_view_age: Callable[[float], None] | None = None,
    ) -> None:
        self.scoring = scoring
        self.max_snapshot_age_s = max_snapshot_age_s
        self.clock = clock
        self.binder = binder
        self._on_view_age = on_view_age

    @property
    def gpu_choice(self) -> GpuChoice:
        """Which GPU of a node a share is scored for: FGD's while the bind verb hints it."""
        return "fgd" if self.binder is not None and self.binder.hinting() else "device_plugin"

    def usable(self, view: ClusterView | None) -> ClusterView | None:
        """``view`` when it has a fresh enough inventory snapshot, else None (fail open)."""
        age_s = view.age_s(self.clock()) if view is not None else None
        if age_s is None:
            return None
        if self._on_view_age is not None:
            self._on_view_age(age_s)
        return view if age_s <= self.max_snapshot_age_s else None

    def filter(self, body: bytes, view: ClusterView | None) -> Answer:
        """``POST .../filter``: an ``ExtenderFilterResult``."""
        try:
            call = parse_extender_args(body)
        except ParseError as exc:
            return Answer(200, encode(filter_error(str(exc))), "bad_request")
        except Exception as exc:
            return self._failed("filter", None, exc)
        try:
            return self._filter(call, view)
        except Exception as exc:
            return self._failed("filter", call, exc)

    def _filter(self, call: ExtenderCall, view: ClusterView | None) -> Answer:
        self._remember(call)
        usable = self.usable(view)
        if usable is None:
            passing = encode(filter_result(call, call.nodes, {}, {}))
            return Answer(200, passing, "fail_open", passed=len(call.nodes))
        outcome = filter_nodes(call.pod, usable, call.nodes, self.scoring)
        result = filter_result(call, outcome.passing, outcome.failed, outcome.unresolvable)
        return Answer(
            200,
            encode(result),
            "scored",
            passed=len(outcome.passing),
            failed=len(outcome.failed),
            unresolvable=len(outcome.unresolvable),
        )

    def prioritize(self, body: bytes, view: ClusterView | None) -> Answer:
        """``POST .../prioritize``: a ``HostPriorityList``."""
        try:
            call = parse_extender_args(body)
        except ParseError as exc:
            return Answer(400, problem_json("bad_request", str(exc)), "bad_request")
        except Exception as exc:
            return self._failed("prioritize", None, exc)
        try:
            return self._prioritize(call, view)
        except Exception as exc:
            return self._failed("prioritize", call, exc)

    def _prioritize(self, call: ExtenderCall, view: ClusterView | None) -> Answer:
        self._remember(call)
        usable = self.usable(view)
        if usable is None:
            return Answer(200, host_priority_json(call.nodes, [0] * len(call.nodes)), "fail_open")
        result = prioritize(
            call.pod,
            usable,
            call.nodes,
            self.scoring,
            gpu_choice=self.gpu_choice,
        )
        return Answer(200, host_priority_json(result.hosts, result.scores.tolist()), "scored")

    def bind(self, body: bytes, view: ClusterView | None) -> Answer:
        """``POST .../bind``: an ``ExtenderBindingResult`` (404 without a binder)."""
        if self.binder is None:
            message = "this sits-observe service has no Kubernetes API access: no bind verb"
            return Answer(404, problem_json("not_found", message), "bad_request")
        try:
            outcome = self.binder.bind(body, self.usable(view))
        except Exception as exc:
            return self._failed("bind", None, exc)
        return Answer(200, outcome.body, outcome.outcome)

    def _failed(self, verb: Verb, call: ExtenderCall | None, exc: Exception) -> Answer:
        """The verb's answer to an unexpected error (one bad call must not take the endpoint
        down): filter and bind report it in ``Error``, prioritize scores every node 0."""
        who = _who(call) if call is not None else "(not parsed)"
        log.exception("extender %s failed for pod %s", verb, who)
        message = f"sits-observe extender internal error: {type(exc).__name__}: {exc}"
        if verb == "filter":
            return Answer(200, encode(filter_error(message)), "error")
        if verb == "bind":
            return Answer(200, binding_result(message), "error")
        nodes = call.nodes if call is not None else ()
        return Answer(200, host_priority_json(nodes, [0] * len(nodes)), "error")

    def _remember(self, call: ExtenderCall) -> None:
        if self.binder is not None:
            self.binder.recent.remember(call.pod)


def problem_json(reason: str, detail: str) -> bytes:
    """The service's JSON error body ``{"detail", "reason"}``."""
    return dumps({"detail": detail, "reason": reason}, separators=(",", ":")).encode("utf-8")


def _who(call: ExtenderCall) -> str:
    return f"{call.pod.namespace}/{call.pod.name}"
