"""``apply()``: write a plan's decisions through the Kubernetes API, safely, and record them.

What each mode writes (docs/controller.md has the table):

- ``dry-run``: nothing. Every decision is recorded with outcome ``recommended``.
- ``annotate``: per decision, one merge patch of the object it concerns setting the
  ``sits.io/recommendation.<action>`` annotation (JSON: proposed, current, reason, evidence,
  at, mode) and one Event (reason ``SitsRecommendation``). Outcome ``recommended``. For a
  pod-level action that object is the pod's owner workload where one is known
  (:mod:`.combine`): a Deployment, StatefulSet, DaemonSet, Job or CronJob.
- ``act``: as ``annotate``, and in the same patch the change itself where the API can carry
  it: the ``sits.io/memory-class`` / ``sits.io/fragmentation`` label, the
  ``sits.io/qos-*-quota-*`` annotation, the managed ResourceQuota's ``spec.hard`` key, a Kueue
  ClusterQueue's or KAI Queue's GPU quota field (:mod:`.kube_queues`: a ClusterQueue is read,
  then patched with its ``resourceVersion``); and for
  time slices (with a ConfigMap configured) the workload's entry in the ConfigMap's
  ``sits-time-slices.yaml`` key (read, modify, replace with ``resourceVersion``). Outcome
  ``applied``; recommendation-only actions (TopologyManager policy, priority class, quota
  advice for a namespace without the managed ResourceQuota, a workload's label / annotation
  action) stay ``recommended``. Event reason ``SitsApplied``. A pod's label or annotation of
  a workload's action is its own decision (``owner`` set): the change only, no
  recommendation annotation (that is on the workload).

Safety: skipped decisions write nothing. Every API request sent here (PATCH, ConfigMap and
ClusterQueue GET, ConfigMap PUT, Event POST), each retry included, takes one token from the
:class:`~sits_observe.control.controller.planning.safety.TokenBucket`: the budget bounds what the
API server sees, not how many decisions were made. A decision starts only when the requests it sends
without retries (or a full bucket, if it needs more) are available, else it is
``skipped:rate-limited`` and planned again next pass. A retry without a token waits for one,
at most ``backoff_max_s`` (as long as a backoff); longer, and the decision is deferred the same
way (``skipped:rate-limited``; an Event without budget is counted as an ``event`` error and the
change it reports stays). A replica that lost the Lease mid-pass writes nothing more
(``skipped:not-leader``); 404 means the object is gone (``skipped:gone``, not retried);
409 / 429 / 5xx / unreachable are retried with exponential backoff up to ``max_attempts``
(then ``failed:http-<status>`` or ``failed:unreachable``); other errors fail at once. One
decision's failure never stops the others. A failed Event is counted as an error but does not
undo the change.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

import yaml

from sits_observe.collectors.kube.api import MERGE_PATCH, JsonObject, KubeJson, object_path
from sits_observe.control.controller.actions import Action
from sits_observe.control.controller.kube import (
    QUEUE_RESOURCES,
    api_version_of,
    path_of,
    with_retries,
)
from sits_observe.control.controller.planning.model import (
    ACTIONS,
    Change,
    Decision,
    ObjectRef,
    Outcome,
    Plan,
    recommendation_annotation,
)
from sits_observe.control.controller.planning.proposals import actuable
from sits_observe.control.controller.planning.safety import TokenBucket
from sits_observe.control.controller.settings import ControllerSettings, Mode
from sits_observe.control.signals.kube_queues import FIELDS, queue_patch
from sits_observe.errors import KubeApiError
from sits_observe.tracing import span

if TYPE_CHECKING:
    from kubernetes import client as k8s_client

log = logging.getLogger(__name__)

EVENT_COMPONENT = "sits-observe-controller"
_MESSAGE_MAX = 1024  # the API server truncates Event messages past 1 KiB


class _BudgetSpent(Exception):
    """No token for the next API request within ``backoff_max_s``: defer the rest."""


@dataclass(frozen=True)
class _Written:
    """How one object write ended: its last error, the tries sent, deferred for budget."""

    error: KubeApiError | None
    attempts: int
    deferred: bool = False


class Recorder(Protocol):
    """Where outcomes go (the ``decisions`` table and metrics) and errors are counted."""

    def record(self, outcomes: Sequence[Outcome]) -> None:
        """Store and count ``outcomes``."""

    def count_error(self, where: str) -> None:
        """Count one error in ``where`` (``apply``, ``event``, ``plan`` ...)."""


def _utc_now() -> datetime:
    return datetime.now(UTC)


def rfc3339(at: datetime) -> str:
    """``at`` as the API's MicroTime text (always 6 fractional digits, ``Z``)."""
    utc = at.astimezone(UTC) if at.tzinfo else at.replace(tzinfo=UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def rfc3339_seconds(at: datetime) -> str:
    """``at`` as the API's Time text (whole seconds, ``Z``), e.g. an Event's timestamps."""
    utc = at.astimezone(UTC) if at.tzinfo else at.replace(tzinfo=UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%SZ")


def recommendation_json(decision: Decision, settings: ControllerSettings, at: datetime) -> str:
    """The value of the ``sits.io/recommendation.<action>`` annotation."""
    rec = decision.recommendation
    return json.dumps(
        {
            "proposed": rec.proposed,
            "current": rec.current,
            "reason": rec.reason,
            "evidence": dict(rec.evidence),
            "mode": str(settings.mode),
            "at": rfc3339(at),
        },
        sort_keys=True,
        separators=(",", ":"),
    )


def _quota_quantity(action: Action, value: str) -> str:
    """A proposed base-unit value as a ResourceQuota quantity (milli-CPU gets ``m``)."""
    return f"{value}m" if action is Action.QUOTA_CPU else value


def writes_for(
    decision: Decision, settings: ControllerSettings, at: datetime
) -> tuple[Change, ...]:
    """Exactly what applying ``decision`` writes in ``settings.mode`` (Events aside)."""
    if settings.mode is Mode.DRY_RUN or decision.skip is not None:
        return ()
    rec = decision.recommendation
    changes = []
    if rec.owner is None:  # else the recommendation is on the owner workload's decision
        changes.append(
            Change(
                rec.ref,
                "annotation",
                recommendation_annotation(rec.action),
                recommendation_json(decision, settings, at),
            )
        )
    if not actuable(rec.action, rec.ref.kind, settings):
        return tuple(changes)
    spec = ACTIONS[rec.action]
    if spec.actuator == "label" and spec.key:
        changes.append(Change(rec.ref, "label", spec.key, rec.proposed))
    elif spec.actuator == "annotation" and spec.key:
        changes.append(Change(rec.ref, "annotation", spec.key, rec.proposed))
    elif spec.actuator == "quota" and spec.key:
        changes.append(
            Change(rec.ref, "quota", spec.key, _quota_quantity(rec.action, rec.proposed))
        )
    elif spec.actuator == "queue" and rec.action in FIELDS.get(rec.ref.kind, {}):
        changes.append(Change(rec.ref, "queue", FIELDS[rec.ref.kind][rec.action], rec.proposed))
    elif spec.actuator == "configmap":
        where = settings.time_slicing_ref()
        assert where is not None  # actuable() checked it
        key = rec.workload or f"{rec.ref.namespace}/{rec.ref.name}"
        configmap = ObjectRef("ConfigMap", where[0], where[1])
        # The ConfigMap entry first: the pod's annotation then reports a change that holds.
        changes.insert(0, Change(configmap, "configmap", key, rec.proposed))
    return tuple(changes)


def _merge_patch(changes: Sequence[Change]) -> JsonObject:
    meta: JsonObject = {}
    body: JsonObject = {"metadata": meta}
    for change in changes:
        if change.field == "label":
            meta.setdefault("labels", {})[change.key] = change.value
        elif change.field == "annotation":
            meta.setdefault("annotations", {})[change.key] = change.value
        elif change.field == "quota":
            body.setdefault("spec", {}).setdefault("hard", {})[change.key] = change.value
    return body


class Applier:
    """Applies decisions one by one; holds the API, the write budget and the clock."""

    def __init__(
        self,
        kube: KubeJson,
        settings: ControllerSettings,
        recorder: Recorder,
        *,
        limiter: TokenBucket | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], datetime] = _utc_now,
    ) -> None:
        self.kube = kube
        self.settings = settings
        self.recorder = recorder
        self.limiter = limiter or TokenBucket(
            settings.writes_per_minute / 60.0, settings.write_burst
        )
        self.sleep = sleep
        self.clock = clock
        #: Checked before every write: a replica that lost the Lease mid-pass stops writing.
        self.may_write: Callable[[], bool] = lambda: True
        #: API requests sent (each paid with a token), over the Applier's life.
        self.requests_sent = 0

    def apply(self, plan: Plan) -> list[Outcome]:
        """Apply every decision of ``plan``; record and return the outcomes."""
        with span("sits.apply", task_type="apply", queue_depth=len(plan)):
            return self._apply(plan)

    def _apply(self, plan: Plan) -> list[Outcome]:
        decisions = list(plan.decisions())
        done: dict[int, Outcome] = {}
        for index in interleaved(decisions):
            decision = decisions[index]
            try:
                outcome = self.apply_one(decision)
            except Exception as exc:  # one object's surprise must not stop the pass
                log.exception("applying %s %s failed", decision.action, decision.ref)
                self.recorder.count_error("apply")
                outcome = Outcome(
                    decision,
                    "failed:internal",
                    0,
                    self.clock(),
                    str(self.settings.mode),
                    f"{type(exc).__name__}: {exc}",
                )
            done[index] = outcome
        outcomes = [done[i] for i in range(len(decisions))]
        self.recorder.record(outcomes)
        return outcomes

    def apply_one(self, decision: Decision) -> Outcome:
        """Apply one decision (see the module docstring for the outcomes)."""
        mode = str(self.settings.mode)
        at = self.clock()
        if decision.skip is not None:
            return Outcome(decision, f"skipped:{decision.skip}", 0, at, mode)
        if self.settings.mode is Mode.DRY_RUN:
            return Outcome(decision, "recommended", 0, at, mode)
        if not self.may_write():
            return Outcome(decision, "skipped:not-leader", 0, at, mode)
        changes = writes_for(decision, self.settings, at)
        by_target: dict[ObjectRef, list[Change]] = {}
        for change in changes:
            by_target.setdefault(change.target, []).append(change)
        if not self._affordable(by_target):
            return Outcome(decision, "skipped:rate-limited", 0, at, mode)
        attempts = 0
        for target, group in by_target.items():
            result = self._write_with_retries(target, group)
            attempts += result.attempts
            if result.deferred:
                detail = f"{target}: no API request budget left for a retry"
                return Outcome(decision, "skipped:rate-limited", attempts, at, mode, detail)
            if result.error is not None:
                return self._failure(decision, result.error, attempts, at, target)
        applied = actuable(decision.action, decision.ref.kind, self.settings)
        self._event(decision, applied, at)
        return Outcome(decision, "applied" if applied else "recommended", attempts, at, mode)

    def _affordable(self, by_target: dict[ObjectRef, list[Change]]) -> bool:
        """Whether the requests of one decision without retries (each write, a ConfigMap's
        GET and PUT, a ClusterQueue's GET and PATCH, the Event) fit in the bucket now; a full
        bucket always may start."""
        reads = ("ConfigMap", "ClusterQueue")  # read, then written
        return self.limiter.has(1 + sum(2 if t.kind in reads else 1 for t in by_target))

    def _write_with_retries(self, target: ObjectRef, changes: Sequence[Change]) -> _Written:
        """The object write, retried; ``attempts`` counts the tries that sent a request."""
        tries = 0

        def once() -> None:
            nonlocal tries
            before = self.requests_sent
            try:
                self._write(target, changes)
            finally:
                tries += self.requests_sent > before

        try:
            result = with_retries(
                once,
                max_attempts=self.settings.max_attempts,
                backoff_base_s=self.settings.backoff_base_s,
                backoff_max_s=self.settings.backoff_max_s,
                sleep=self.sleep,
            )
        except _BudgetSpent:
            return _Written(None, tries, deferred=True)
        return _Written(result.error, result.attempts)

    def _send(self, method: str, path: str, **options: Any) -> JsonObject:
        """One API request of the apply path, paid with one token first."""
        if not self.limiter.try_take():
            wait_s = self.limiter.wait_s()
            if wait_s > self.settings.backoff_max_s:
                raise _BudgetSpent(f"{method} {path}: next token in {wait_s:.1f} s")
            self.sleep(wait_s)
            if not self.limiter.try_take():
                raise _BudgetSpent(f"{method} {path}: no token after waiting {wait_s:.1f} s")
        self.requests_sent += 1
        return self.kube.request(method, path, **options)

    def _failure(
        self,
        decision: Decision,
        error: KubeApiError,
        attempts: int,
        at: datetime,
        target: ObjectRef,
    ) -> Outcome:
        mode = str(self.settings.mode)
        if error.status == 404:
            return Outcome(decision, "skipped:gone", attempts, at, mode, f"{target}: {error}")
        self.recorder.count_error("apply")
        log.warning("writing %s for %s failed: %s", decision.action, decision.ref, error)
        why = "unreachable" if error.status == 0 else f"http-{error.status}"
        return Outcome(decision, f"failed:{why}", attempts, at, mode, str(error))

    def _write(self, target: ObjectRef, changes: Sequence[Change]) -> None:
        if target.kind == "ConfigMap":
            self._write_configmap(target, changes)
            return
        if target.kind in QUEUE_RESOURCES:
            self._write_queue(target, changes)
            return
        self._send(
            "PATCH",
            path_of(target.kind, target.namespace, target.name),
            body=_merge_patch(changes),
            content_type=MERGE_PATCH,
        )

    def _write_queue(self, target: ObjectRef, changes: Sequence[Change]) -> None:
        """One merge patch: the annotations and the queue's GPU quota fields (a ClusterQueue
        is read first: its quotas sit in lists, sent back whole, :func:`.queue_patch`)."""
        path = path_of(target.kind, target.namespace, target.name)
        body = _merge_patch(changes)
        fields = {c.key: str(c.value) for c in changes if c.field == "queue"}
        if fields:
            read = self._send("GET", path) if target.kind == "ClusterQueue" else {}
            patch = queue_patch(target.kind, read, fields)
            body["metadata"].update(patch.get("metadata") or {})
            body["spec"] = patch["spec"]
        self._send("PATCH", path, body=body, content_type=MERGE_PATCH)

    def _write_configmap(self, target: ObjectRef, changes: Sequence[Change]) -> None:
        """Read, set our entries in our data key, replace with the read resourceVersion."""
        path = object_path("ConfigMap", target.namespace, target.name)
        current = self._send("GET", path)
        found = current.get("data")
        data: dict[str, str] = dict(found) if isinstance(found, dict) else {}
        key = self.settings.time_slicing_key
        try:
            entries = yaml.safe_load(data.get(key) or "") or {}
        except yaml.YAMLError:
            entries = {}  # ours to own: a corrupted entry is rewritten, never merged
        if not isinstance(entries, dict):
            entries = {}
        wanted = {c.key: c.value for c in changes if c.field == "configmap"}
        if all(entries.get(k) == v for k, v in wanted.items()):
            return
        entries.update(wanted)
        body = dict(current)
        body["data"] = {**data, key: yaml.safe_dump(entries, sort_keys=True)}
        self._send("PUT", path, body=body)

    def _event(self, decision: Decision, applied: bool, at: datetime) -> None:
        rec = decision.recommendation
        ref = rec.ref
        namespace = ref.namespace or (ref.name if ref.kind == "Namespace" else None)
        namespace = namespace or self.settings.event_namespace
        verb = "applied" if applied else "recommended"
        message = (
            f"{rec.action} {verb}: {rec.current or '(none)'} -> {rec.proposed}: {rec.reason}"
        )[:_MESSAGE_MAX]
        body: JsonObject = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{ref.name}.sits-", "namespace": namespace},
            "involvedObject": {
                "apiVersion": api_version_of(ref.kind),
                "kind": ref.kind,
                "name": ref.name,
                **({"namespace": ref.namespace} if ref.namespace else {}),
            },
            "reason": "SitsApplied" if applied else "SitsRecommendation",
            "action": str(rec.action),
            "message": message,
            "type": "Normal",
            "source": {"component": EVENT_COMPONENT},
            "reportingComponent": EVENT_COMPONENT,
            "reportingInstance": self.settings.replica_id,
            "firstTimestamp": rfc3339_seconds(at),
            "lastTimestamp": rfc3339_seconds(at),
            "count": 1,
        }
        try:
            result = with_retries(
                lambda: self._send("POST", f"/api/v1/namespaces/{namespace}/events", body=body),
                max_attempts=self.settings.max_attempts,
                backoff_base_s=self.settings.backoff_base_s,
                backoff_max_s=self.settings.backoff_max_s,
                sleep=self.sleep,
            )
        except _BudgetSpent as exc:
            self.recorder.count_error("event")
            log.warning("event for %s %s not sent, rate limit: %s", rec.action, ref, exc)
            return
        if result.error is not None:
            self.recorder.count_error("event")
            log.warning("event for %s %s failed: %s", rec.action, ref, result.error)


def interleaved(decisions: Sequence[Decision]) -> list[int]:
    """Indices of ``decisions`` in the order they are applied: one of each action in turn
    (actions in plan order, each action's decisions in plan order), so that under the write
    budget no rule's decisions wait behind another's. In plan order, a rule that decides
    once per short Job (a label per pod) had taken every token of a pass before the quota
    and time-slice decisions were reached, pass after pass."""
    queues: dict[str, list[int]] = {}
    for i, decision in enumerate(decisions):
        queues.setdefault(str(decision.action), []).append(i)
    order: list[int] = []
    depth = 0
    while len(order) < len(decisions):
        order.extend(q[depth] for q in queues.values() if depth < len(q))
        depth += 1
    return order


def apply(
    plan: Plan,
    api: k8s_client.ApiClient | KubeJson,
    settings: ControllerSettings,
    recorder: Recorder,
    *,
    limiter: TokenBucket | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], datetime] = _utc_now,
) -> list[Outcome]:
    """Apply ``plan`` once (a fresh write budget unless ``limiter`` is given)."""
    kube = api if isinstance(api, KubeJson) else KubeJson(api, timeout_s=settings.request_timeout_s)
    applier = Applier(kube, settings, recorder, limiter=limiter, sleep=sleep, clock=clock)
    return applier.apply(plan)
