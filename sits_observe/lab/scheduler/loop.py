"""A live kube-scheduler: the scheduler model run against a Kubernetes API, binding pods.

What kube-scheduler's ``scheduleOne`` loop does, one pass (:meth:`LiveScheduler.run_once`)
every ``interval_s``, using the one model of its cycle
(:class:`~sits_observe.lab.scheduler.model.KubeScheduler`) with the extenders of a
``KubeSchedulerConfiguration`` (called over HTTP by
:class:`~sits_observe.lab.scheduler.http.HttpExtenderTransport` with kube-scheduler's
payload):

1. list Nodes and Pods (or read them from informers, as kube-scheduler does: ``nodes`` and
   ``pods``, :mod:`sits_observe.lab.kube.informer`) and build the cache (:mod:`.nodes`); take
   the Pending pods
   in queue order (priority, then age) whose backoff has expired;
2. run one scheduling cycle per pod, against the cache with the pods placed earlier in this
   pass assumed (kube-scheduler assumes a pod on its node before the bind completes);
3. a pod that got a node is bound: by the extender with a ``bindVerb`` when the model says so
   (it creates the Binding itself), else through the ``pods/binding`` subresource (409: it was
   bound meanwhile, nothing to do);
4. a pod that fits nowhere stays Pending: its ``PodScheduled`` condition becomes False with
   reason ``Unschedulable`` and the cycle's message, and a ``FailedScheduling`` Event (type
   Warning, from ``default-scheduler``) says it as kube-scheduler words it (``0/N nodes are
   available: ...``); a repeat of the same message is counted as client-go's events library
   (``tools/events``, which kube-scheduler records with) counts an isomorphic event: the
   second occurrence writes the Event's ``count`` (the series starts), later ones only count
   in memory and are written on the library's 30-minute series heartbeat, and a series not
   seen for 6 minutes ends (the next occurrence is a new Event);
5. a pod that failed (unschedulable, or its bind failed) is retried after a backoff of
   ``initial_backoff_s`` doubling to ``max_backoff_s`` per attempt (kube-scheduler's
   ``podInitialBackoffSeconds`` 1 and ``podMaxBackoffSeconds`` 10).

Counters (on an injected registry): ``sits_scheduler_attempts_total{result}`` (scheduled,
unschedulable, bind_error), ``sits_scheduler_pods_scheduled_total{path}`` (``extender_bind``:
an extender bound it; ``extender``: an extender's filter or prioritize answered in its cycle;
``default``: no extender answered), ``sits_scheduler_errors_total{stage}`` (list, bind, event,
status). An API failure ends the pass, never the loop.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter as Tally
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

import numpy as np
from prometheus_client import CollectorRegistry, Counter
from pydantic import BaseModel, ConfigDict, Field

from sits_observe.analytics.placement.device_plugin import DeviceAllocationError, parse_hint
from sits_observe.collectors.kube.api import MERGE_PATCH, JsonObject, KubeJson
from sits_observe.errors import KubeApiError
from sits_observe.lab.scheduler.kube_nodes import SchedPod
from sits_observe.lab.scheduler.model import Decision, KubeScheduler
from sits_observe.lab.scheduler.nodes import (
    DEFAULT_SCHEDULER,
    ClusterState,
    ParsedPods,
    cluster_state,
    predicted_gpus,
)

log = logging.getLogger(__name__)

#: Every object of one resource, as a list (or an informer) answers.
Lister = Callable[[], list[JsonObject]]

_HINT = "nvidia.com/use-gpuuuid"


class SchedulerLoopSettings(BaseModel):
    """The live scheduler's timing and identity."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    interval_s: float = Field(0.25, gt=0, le=60, description="seconds between two passes")
    initial_backoff_s: float = Field(
        1.0,
        gt=0,
        le=600,
        description="first retry delay of a pod that failed, seconds "
        "(kube-scheduler's podInitialBackoffSeconds)",
    )
    max_backoff_s: float = Field(
        10.0, gt=0, le=3600, description="longest retry delay, seconds (podMaxBackoffSeconds)"
    )
    scheduler_name: str = Field(
        DEFAULT_SCHEDULER, min_length=1, description="the spec.schedulerName it schedules for"
    )
    seed: int = Field(0, ge=0, description="seed of the random choice among tied nodes")
    page_size: int = Field(500, ge=1, le=10_000, description="objects per list page")


@dataclass
class _Backoff:
    attempts: int = 0
    due_s: float = 0.0


#: client-go ``tools/events``: a series is written again every 30 minutes and ends when not
#: observed for 6 minutes.
SERIES_HEARTBEAT_S = 1800.0
SERIES_FINISH_S = 360.0


@dataclass
class _Reported:
    event: str
    message: str
    seen_s: float
    count: int = 1
    written: int = 1  # the count the API has
    written_s: float = 0.0


@dataclass
class PassResult:
    """What one pass did."""

    scheduled: list[tuple[str, str]] = field(default_factory=list)  # (namespace/name, node)
    unschedulable: dict[str, str] = field(default_factory=dict)  # namespace/name -> message
    waiting: int = 0  # pending pods still in backoff


class SchedulerMetrics:
    """The live scheduler's counters."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.attempts = Counter(
            "sits_scheduler_attempts_total",
            "scheduling attempts by result: scheduled, unschedulable, bind_error",
            ("result",),
            registry=registry,
        )
        self.scheduled = Counter(
            "sits_scheduler_pods_scheduled_total",
            "pods bound, by path: extender_bind, extender (an extender answered), default",
            ("path",),
            registry=registry,
        )
        self.errors = Counter(
            "sits_scheduler_errors_total",
            "live scheduler failures by stage: list, bind, event, status",
            ("stage",),
            registry=registry,
        )


def _utc_now() -> datetime:
    return datetime.now(UTC)


def _key(pod: SchedPod) -> str:
    return f"{pod.namespace}/{pod.name}"


class LiveScheduler:
    """kube-scheduler against an API, one pass at a time (see the module docstring)."""

    def __init__(
        self,
        kube: KubeJson,
        scheduler: KubeScheduler,
        *,
        settings: SchedulerLoopSettings | None = None,
        registry: CollectorRegistry | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        clock: Callable[[], datetime] = _utc_now,
        nodes: Lister | None = None,
        pods: Lister | None = None,
    ) -> None:
        self.kube = kube
        self.scheduler = scheduler
        page = (settings or SchedulerLoopSettings()).page_size
        self._nodes = nodes or (lambda: kube.list_all("/api/v1/nodes", page_size=page))
        self._pods = pods or (lambda: kube.list_all("/api/v1/pods", page_size=page))
        self.settings = settings or SchedulerLoopSettings()
        self.metrics = SchedulerMetrics(registry or CollectorRegistry())
        self.monotonic = monotonic
        self.clock = clock
        self.rng = np.random.default_rng(self.settings.seed)
        #: Pods bound by path, and attempts by result (the counters' values, for a summary).
        self.totals: Tally[str] = Tally()
        #: Pods left Pending after the last pass.
        self.pending = 0
        self._backoff: dict[str, _Backoff] = {}
        self._parsed: ParsedPods = {}
        self._reported: dict[str, _Reported] = {}

    # -- loop -------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Pass after pass until ``stop`` is set (prompt: it waits on the event)."""
        while not stop.is_set():
            try:
                self.run_once()
            except Exception:  # one bad pass must not end scheduling
                self.metrics.errors.labels("pass").inc()
                log.exception("scheduler pass failed; continuing")
            stop.wait(self.settings.interval_s)

    def run_once(self) -> PassResult:
        """One pass over the Pending pods (see the module docstring)."""
        result = PassResult()
        try:
            state = self._state()
        except KubeApiError as exc:
            self.metrics.errors.labels("list").inc()
            log.warning("scheduler cannot list the cluster: %s", exc)
            return result
        now_s = self.monotonic()
        pending = {p.uid for p in state.pending}
        for uid in [u for u in self._backoff if u not in pending]:
            del self._backoff[uid]
        for pod in state.pending:
            backoff = self._backoff.get(pod.uid)
            if backoff is not None and backoff.due_s > now_s:
                result.waiting += 1
                continue
            self._schedule_one(state, pod, result, now_s)
        self.pending = len(state.pending) - len(result.scheduled)
        return result

    def _state(self) -> ClusterState:
        return cluster_state(
            self._nodes(),
            self._pods(),
            scheduler_name=self.settings.scheduler_name,
            parsed=self._parsed,
        )

    # -- one pod ----------------------------------------------------------------------

    def _schedule_one(
        self, state: ClusterState, pod: SchedPod, result: PassResult, now_s: float
    ) -> None:
        decision = self.scheduler.schedule(state.nodes, pod, self.rng)
        if decision.node is None or decision.node_name is None:
            self._count_attempt("unschedulable")
            result.unschedulable[_key(pod)] = decision.message
            self._report_unschedulable(pod, decision.message, now_s)
            self._back_off(pod, now_s)
            return
        if not decision.bound_by and not self._bind(pod, decision.node_name):
            self._count_attempt("bind_error")
            self._back_off(pod, now_s)
            return
        self._assume(state, pod, decision)
        self._count_attempt("scheduled")
        path = (
            "extender_bind"
            if decision.bound_by
            else "extender"
            if decision.calls["filter"] or decision.calls["prioritize"]
            else "default"
        )
        self.metrics.scheduled.labels(path).inc()
        self.totals[f"scheduled_{path}"] += 1
        self._backoff.pop(pod.uid, None)
        self._reported.pop(pod.uid, None)
        result.scheduled.append((_key(pod), decision.node_name))

    def _count_attempt(self, outcome: str) -> None:
        self.metrics.attempts.labels(outcome).inc()
        self.totals[outcome] += 1

    def _back_off(self, pod: SchedPod, now_s: float) -> None:
        backoff = self._backoff.setdefault(pod.uid, _Backoff())
        backoff.attempts += 1
        delay = min(
            self.settings.max_backoff_s,
            self.settings.initial_backoff_s * 2 ** (backoff.attempts - 1),
        )
        backoff.due_s = now_s + delay

    def _assume(self, state: ClusterState, pod: SchedPod, decision: Decision) -> None:
        """Account the pod on its node for the rest of the pass (GPUs as the device plugin
        model would pick them, honouring a hint the pod carries)."""
        assert decision.node is not None
        gpus: tuple[int, ...] = ()
        if pod.num_gpu:
            meta = pod.manifest.get("metadata")
            annotations = meta.get("annotations") if isinstance(meta, dict) else None
            hint = parse_hint(annotations.get(_HINT) if isinstance(annotations, dict) else None)
            try:
                gpus = predicted_gpus(
                    state.nodes, decision.node, pod, hint, self.scheduler.split_count
                )
            except DeviceAllocationError:
                return  # the cache disagrees with the filter; the next pass rebuilds it
        state.nodes.assume(decision.node, pod, gpus)

    # -- API writes -------------------------------------------------------------------

    def _bind(self, pod: SchedPod, node: str) -> bool:
        body: JsonObject = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        path = f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/binding"
        try:
            self.kube.request("POST", path, body=body)
        except KubeApiError as exc:
            if exc.status == 409 and "already assigned" in str(exc):
                return True  # bound meanwhile (another scheduler, an extender's retry)
            self.metrics.errors.labels("bind").inc()
            log.warning("binding %s to %s failed: %s", _key(pod), node, exc)
            return False
        return True

    def _report_unschedulable(self, pod: SchedPod, message: str, now_s: float) -> None:
        previous = self._reported.get(pod.uid)
        if previous is not None and previous.message == message:
            if now_s - previous.seen_s < SERIES_FINISH_S:
                previous.count += 1
                previous.seen_s = now_s
                if previous.written == 1 or now_s - previous.written_s >= SERIES_HEARTBEAT_S:
                    self._bump_event(pod, previous)
                    previous.written, previous.written_s = previous.count, now_s
                return
        else:
            self._set_condition(pod, message)
        name = self._create_event(pod, message)
        if name:
            self._reported[pod.uid] = _Reported(name, message, now_s, written_s=now_s)

    def _set_condition(self, pod: SchedPod, message: str) -> None:
        at = self.clock().strftime("%Y-%m-%dT%H:%M:%SZ")
        condition = {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": message,
            "lastProbeTime": None,
            "lastTransitionTime": at,
        }
        path = f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/status"
        try:
            self.kube.request(
                "PATCH",
                path,
                body={"status": {"conditions": [condition]}},
                content_type=MERGE_PATCH,
            )
        except KubeApiError as exc:
            self.metrics.errors.labels("status").inc()
            log.warning("updating the status of %s failed: %s", _key(pod), exc)

    def _create_event(self, pod: SchedPod, message: str) -> str:
        at = self.clock().strftime("%Y-%m-%dT%H:%M:%SZ")
        body: JsonObject = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{pod.name}.", "namespace": pod.namespace},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": pod.name,
                "namespace": pod.namespace,
                "uid": pod.uid,
            },
            "reason": "FailedScheduling",
            "message": message,
            "type": "Warning",
            "action": "Scheduling",
            "source": {"component": self.settings.scheduler_name},
            "reportingComponent": self.settings.scheduler_name,
            "reportingInstance": self.settings.scheduler_name,
            "firstTimestamp": at,
            "lastTimestamp": at,
            "count": 1,
        }
        try:
            created = self.kube.request(
                "POST", f"/api/v1/namespaces/{pod.namespace}/events", body=body
            )
        except KubeApiError as exc:
            self.metrics.errors.labels("event").inc()
            log.warning("FailedScheduling event for %s failed: %s", _key(pod), exc)
            return ""
        meta = created.get("metadata")
        return str(meta.get("name") or "") if isinstance(meta, dict) else ""

    def _bump_event(self, pod: SchedPod, reported: _Reported) -> None:
        at = self.clock().strftime("%Y-%m-%dT%H:%M:%SZ")
        path = f"/api/v1/namespaces/{pod.namespace}/events/{reported.event}"
        try:
            self.kube.request(
                "PATCH",
                path,
                body={"count": reported.count, "lastTimestamp": at},
                content_type=MERGE_PATCH,
            )
        except KubeApiError as exc:
            self.metrics.errors.labels("event").inc()
            log.warning("FailedScheduling event for %s not updated: %s", _key(pod), exc)
