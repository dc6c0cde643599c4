"""The simulated workloads' controllers: they create Pending pods in a Kubernetes API.

What the ReplicaSet, Job and StatefulSet controllers would do for the workloads of
:mod:`sits_observe.lab.cluster.pods.generator`, one pass (:meth:`WorkloadDriver.sync_once`)
every ``tick_s``:

- the inference Deployments (with their ReplicaSets) are created once and kept at their
  replicas (one per node of their GPU product): a replica that is missing, or that failed, is
  replaced by a new Pending pod; the idle notebooks' StatefulSets (none unless the generator
  has some) are kept at their one pod the same way;
- Jobs and notebooks arrive on the simulated clock (the cluster's ``now_s``); each arrival
  creates its owner (Job or StatefulSet) and its Pending pod. A creation the API refuses, a
  ResourceQuota's 403 above all, is counted and retried as its controller requeues a failed
  sync: a Job's pod as the Job controller does (its own limiter: 1 s doubling per failure to
  1 min, ``DefaultJobApiBackOff`` / ``MaxJobApiBackOff``, so a Job refused for half an hour has
  tried about 34 times and learns that quota freed up within a minute), the other owners' as
  the ReplicaSet and StatefulSet controllers do (client-go's default controller rate limiter,
  5 ms doubling to 1,000 s), oldest first; at most ``max_waiting`` refused creations wait,
  beyond that the newest arrival is dropped and counted;
- finished pods (``Succeeded`` / ``Failed``) of Jobs and notebooks are deleted with their
  owner, as a Job with ``ttlSecondsAfterFinished: 0`` is.
- the tenants of the generator's :class:`~sits_observe.lab.cluster.pods.tenants.TenantScenario`
  (when it has them and arrivals are on) get their namespace and a ResourceQuota
  ``sits-quota`` holding ``requests.nvidia.com/gpu`` at their starting quota, created once:
  the controller's opt-in, which its namespace quota rule then sizes from measured use.

Placement is not this module's business: the pods stay Pending until a scheduler binds them,
and the simulated kubelet (:mod:`.kubelet`) starts them. Outcomes count in
``sits_sim_pod_creations_total{namespace, outcome}`` (created, rejected_quota, rejected,
dropped) and failures in ``sits_sim_workload_errors_total{stage}``; the loop carries on.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import Counter as Tally
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client as k8s_client
from kubernetes.client.exceptions import ApiException
from prometheus_client import CollectorRegistry, Counter
from pydantic import BaseModel, ConfigDict, Field

from sits_observe.lab.cluster.pods.generator import WorkloadGenerator
from sits_observe.lab.cluster.pods.specs import PodSpec
from sits_observe.lab.cluster.pods.tenants import TENANT_QUOTA_NAME, TenantQuota
from sits_observe.lab.kube.publish import owner_bodies, pending_pod_body
from sits_observe.lab.kube.raw import call

log = logging.getLogger(__name__)

JsonObject = dict[str, Any]
NAMESPACES = ("inference", "training", "research")
_TERMINAL = frozenset({"Succeeded", "Failed"})
_GROUPS = {"deployments": "apps", "replicasets": "apps", "statefulsets": "apps", "jobs": "batch"}


class DriverSettings(BaseModel):
    """How often the controllers act and how they retry."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tick_s: float = Field(0.5, gt=0, le=60, description="seconds between two passes")
    retry_initial_s: float = Field(
        0.005,
        gt=0,
        le=600,
        description="first retry delay of a refused creation, seconds (client-go's default "
        "controller rate limiter, which the Job and ReplicaSet controllers requeue with)",
    )
    retry_max_s: float = Field(
        1000.0, gt=0, le=3600, description="longest retry delay, seconds (the same limiter's)"
    )
    job_retry_initial_s: float = Field(
        1.0,
        gt=0,
        le=600,
        description="first retry delay of a Job's refused pod, seconds (the Job controller's "
        "own limiter: DefaultJobApiBackOff)",
    )
    job_retry_max_s: float = Field(
        60.0,
        gt=0,
        le=3600,
        description="longest retry delay of a Job's refused pod, seconds (MaxJobApiBackOff)",
    )
    max_waiting: int = Field(
        100, ge=1, le=100_000, description="refused creations that may wait for a retry"
    )
    arrivals: bool = Field(
        True, description="random Job and notebook arrivals (off: only submitted pods)"
    )
    inference: bool = Field(True, description="create and keep the inference Deployments")


@dataclass
class _Waiting:
    spec: PodSpec
    due_s: float
    attempts: int = 0
    owners_created: bool = False


@dataclass
class DriverCounts:
    """What the controllers did, for a summary (the metrics carry the same counts)."""

    outcomes: Tally[str] = field(default_factory=Tally)
    last_rejection: str = ""


class WorkloadDriver:
    """Creates and retires the workloads' pods (see the module docstring). Thread-safe."""

    def __init__(
        self,
        api: k8s_client.ApiClient,
        generator: WorkloadGenerator,
        *,
        sim_now: Callable[[], float],
        settings: DriverSettings | None = None,
        registry: CollectorRegistry | None = None,
        pods: Callable[[], list[JsonObject]] | None = None,
    ) -> None:
        self.api = api
        #: Reads the pods from an informer when given (:mod:`.informer`); lists them otherwise.
        self.pods = pods
        self.core = k8s_client.CoreV1Api(api)
        self.generator = generator
        self.sim_now = sim_now
        self.settings = settings or DriverSettings()
        registry = registry or CollectorRegistry()
        self._creations = Counter(
            "sits_sim_pod_creations_total",
            "pod creations by the simulated workloads, by namespace and outcome: created, "
            "rejected_quota, rejected, dropped",
            ("namespace", "outcome"),
            registry=registry,
        )
        self._errors = Counter(
            "sits_sim_workload_errors_total",
            "failures of the simulated workload controllers by stage: list, create, delete",
            ("stage",),
            registry=registry,
        )
        self.counts = DriverCounts()
        self._waiting: deque[_Waiting] = deque()
        self._last_s: float | None = None
        self._bootstrapped = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sim-workloads", daemon=True)

    # -- life cycle -------------------------------------------------------------------

    def start(self) -> WorkloadDriver:
        """Run the controllers in a background thread every ``tick_s``."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the thread (prompt: it waits on an event)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def _run(self) -> None:
        while True:
            try:
                self.sync_once()
            except Exception:  # one bad pass must not end the workloads
                self._errors.labels("sync").inc()
                log.exception("workload controllers' pass failed; continuing")
            if self._stop.wait(self.settings.tick_s):
                return

    # -- one pass ---------------------------------------------------------------------

    def sync_once(self) -> None:
        """Bootstrap, keep the replicas, take arrivals, retry refusals, retire finished pods."""
        with self._lock:
            now = self.sim_now()
            if not self._bootstrapped:
                self._bootstrap()
            try:
                pods = self._list_pods()
            except (ApiException, OSError, ValueError) as exc:
                self._errors.labels("list").inc()
                log.warning("workload controllers cannot list pods: %s", exc)
                return
            self._retire(pods)
            self._keep_replicas(pods, now)
            start = now if self._last_s is None else self._last_s
            for spec in self.generator.arrivals(start, now) if self.settings.arrivals else ():
                self._enqueue(spec, now)
            self._last_s = now
            self._create_due(now)

    def submit(self, spec: PodSpec) -> None:
        """Create ``spec``'s pod on the next pass (tests and the experiment inject pods)."""
        with self._lock:
            self._enqueue(spec, self.sim_now())

    def _bootstrap(self) -> None:
        for namespace in NAMESPACES:
            body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
            try:
                self.core.create_namespace(body, _preload_content=False)  # type: ignore[arg-type]
            except ApiException as exc:
                if exc.status != 409:
                    self._errors.labels("create").inc()
                    log.warning("creating namespace %s failed: %s", namespace, exc.status)
        tenants = self.generator.tenants if self.settings.arrivals else None
        for quota in tenants.quotas if tenants is not None else ():
            self._create_tenant(quota)
        # The Deployments and their ReplicaSets; the replicas come from _keep_replicas.
        for deployment in self.generator.deployments if self.settings.inference else ():
            template = self.generator.llm_replica(deployment)
            for plural, body in owner_bodies(template, deployment.deployment):
                self._create_object(plural, template.namespace, body)
        self._bootstrapped = True

    def _create_tenant(self, quota: TenantQuota) -> None:
        """The tenant's namespace and its GPU quota (an existing one is left as it is)."""
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": quota.namespace}}
        body = {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": TENANT_QUOTA_NAME, "namespace": quota.namespace},
            "spec": {"hard": {"requests.nvidia.com/gpu": str(quota.gpus)}},
        }
        for path, document in (
            ("/api/v1/namespaces", namespace),
            (f"/api/v1/namespaces/{quota.namespace}/resourcequotas", body),
        ):
            try:
                call(self.api, "POST", path, document)
            except ApiException as exc:
                if exc.status != 409:
                    self._errors.labels("create").inc()
                    log.warning("creating %s failed: %s", path, exc.status)

    def _list_pods(self) -> list[JsonObject]:
        if self.pods is not None:
            return self.pods()
        response: Any = self.core.list_pod_for_all_namespaces(_preload_content=False)
        document = json.loads(response.data)
        items = document.get("items") if isinstance(document, dict) else None
        return [i for i in items or () if isinstance(i, dict)]

    def _keep_replicas(self, pods: list[JsonObject], now: float) -> None:
        for deployment in self.generator.deployments if self.settings.inference else ():
            owner = deployment.replica_set.name
            live = sum(
                1
                for p in pods
                if _owner_name(p) == owner and (p.get("status") or {}).get("phase") not in _TERMINAL
            )
            queued = sum(1 for w in self._waiting if w.spec.owner.name == owner)
            for _ in range(deployment.replicas - live - queued):
                self._enqueue(self.generator.llm_replica(deployment), now)
        for notebook in self.generator.idle_notebook_owners:
            if not any(
                _owner_name(p) == notebook.name
                and (p.get("status") or {}).get("phase") not in _TERMINAL
                for p in pods
            ) and not any(w.spec.owner == notebook for w in self._waiting):
                self._enqueue(self.generator.idle_notebook(notebook), now)

    def _retire(self, pods: list[JsonObject]) -> None:
        for pod in pods:
            phase = (pod.get("status") or {}).get("phase")
            if phase not in _TERMINAL:
                continue
            meta = pod.get("metadata") or {}
            namespace, name = str(meta.get("namespace")), str(meta.get("name"))
            refs = meta.get("ownerReferences") or [{}]
            kind = refs[0].get("kind")
            self._delete_pod(namespace, name)
            if kind == "Job":
                self._delete_object("jobs", namespace, str(refs[0].get("name")))
            elif kind == "StatefulSet":
                self._delete_object("statefulsets", namespace, str(refs[0].get("name")))

    # -- creation with retries ----------------------------------------------------------

    def _enqueue(self, spec: PodSpec, now: float) -> None:
        if len(self._waiting) >= self.settings.max_waiting:
            self._count(spec.namespace, "dropped")
            return
        self._waiting.append(_Waiting(spec, now))

    def _create_due(self, now: float) -> None:
        for _ in range(len(self._waiting)):
            item = self._waiting.popleft()
            if item.due_s > now:
                self._waiting.append(item)
                continue
            if not self._try_create(item):
                item.attempts += 1
                item.due_s = now + self._retry_delay_s(item)
                self._waiting.append(item)

    def _retry_delay_s(self, item: _Waiting) -> float:
        """The owner's controller's delay before its next try (module docstring)."""
        s = self.settings
        initial, longest = (
            (s.job_retry_initial_s, s.job_retry_max_s)
            if item.spec.owner.kind == "Job"
            else (s.retry_initial_s, s.retry_max_s)
        )
        return float(min(longest, initial * 2 ** (item.attempts - 1)))

    def _try_create(self, item: _Waiting) -> bool:
        spec = item.spec
        if not item.owners_created and spec.owner.kind in ("Job", "StatefulSet"):
            for plural, body in owner_bodies(spec):
                self._create_object(plural, spec.namespace, body)
            item.owners_created = True
        try:
            call(
                self.api,
                "POST",
                f"/api/v1/namespaces/{spec.namespace}/pods",
                pending_pod_body(spec),
            )
        except ApiException as exc:
            if exc.status == 409:  # created by an earlier try whose answer was lost
                self._count(spec.namespace, "created")
                return True
            message = _message(exc)
            quota = exc.status == 403 and "exceeded quota" in message
            self._count(spec.namespace, "rejected_quota" if quota else "rejected")
            self.counts.last_rejection = message
            log.info("creating pod %s/%s refused: %s", spec.namespace, spec.name, message)
            return False
        except OSError as exc:
            self._errors.labels("create").inc()
            log.warning("creating pod %s/%s failed: %s", spec.namespace, spec.name, exc)
            return False
        self._count(spec.namespace, "created")
        return True

    def _count(self, namespace: str, outcome: str) -> None:
        self._creations.labels(namespace, outcome).inc()
        self.counts.outcomes[outcome] += 1

    @property
    def waiting(self) -> int:
        """Creations queued (not yet made, or refused and waiting for their retry)."""
        with self._lock:
            return len(self._waiting)

    # -- generic objects ----------------------------------------------------------------

    def _path(self, plural: str, namespace: str, name: str | None = None) -> str:
        base = f"/apis/{_GROUPS[plural]}/v1/namespaces/{namespace}/{plural}"
        return f"{base}/{name}" if name else base

    def _create_object(self, plural: str, namespace: str, body: JsonObject) -> None:
        try:
            call(self.api, "POST", self._path(plural, namespace), body)
        except ApiException as exc:
            if exc.status != 409:
                self._errors.labels("create").inc()
                log.warning("creating %s in %s failed: %s", plural, namespace, exc.status)

    def _delete_object(self, plural: str, namespace: str, name: str) -> None:
        try:
            call(self.api, "DELETE", self._path(plural, namespace, name))
        except ApiException as exc:
            if exc.status != 404:
                self._errors.labels("delete").inc()
                log.warning("deleting %s %s/%s failed: %s", plural, namespace, name, exc.status)

    def _delete_pod(self, namespace: str, name: str) -> None:
        try:
            call(self.api, "DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}")
        except ApiException as exc:
            if exc.status != 404:
                self._errors.labels("delete").inc()
                log.warning("deleting pod %s/%s failed: %s", namespace, name, exc.status)


def _owner_name(pod: JsonObject) -> str:
    refs = (pod.get("metadata") or {}).get("ownerReferences") or [{}]
    return str(refs[0].get("name") or "")


def _message(exc: ApiException) -> str:
    try:
        document = json.loads(exc.body) if exc.body else {}
    except (TypeError, ValueError):
        return str(exc.reason or exc.status)
    message = document.get("message") if isinstance(document, dict) else None
    return str(message) if message else str(exc.reason or exc.status)
