"""The controller's retries around the Kubernetes JSON adapter.

The adapter itself (:class:`KubeJson`, :func:`object_path`) is
:mod:`sits_observe.collectors.kube.api`, shared with the inventory collector; it is
re-exported here for the callers that import it from the controller. :func:`with_retries`
retries 409 / 429 / 5xx / unreachable with exponential backoff for a bounded number of tries;
404 and other client errors are never retried.

:data:`WORKLOAD_RESOURCES` are the owner workloads recommendation annotations of pod-level
actions go on, :data:`QUEUE_RESOURCES` the Kueue / KAI queues whose GPU quota is advised;
:func:`path_of` is :func:`object_path` extended to them (the collectors never write
workloads or queues, so their paths live with the controller).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar
from urllib.parse import quote

from sits_observe.collectors.kube.api import MERGE_PATCH, JsonObject, KubeJson, object_path
from sits_observe.errors import KubeApiError

__all__ = [
    "MERGE_PATCH",
    "QUEUE_RESOURCES",
    "WORKLOAD_RESOURCES",
    "JsonObject",
    "KubeJson",
    "RetryResult",
    "api_version_of",
    "list_path",
    "object_path",
    "path_of",
    "retryable",
    "with_retries",
]

#: Owner workload kind -> (apiVersion, plural), in the order the cluster is read.
WORKLOAD_RESOURCES: dict[str, tuple[str, str]] = {
    "Deployment": ("apps/v1", "deployments"),
    "StatefulSet": ("apps/v1", "statefulsets"),
    "DaemonSet": ("apps/v1", "daemonsets"),
    "Job": ("batch/v1", "jobs"),
    "CronJob": ("batch/v1", "cronjobs"),
}


#: Scheduler queue kind -> (apiVersion, plural); both cluster-scoped (:mod:`.kube_queues`).
QUEUE_RESOURCES: dict[str, tuple[str, str]] = {
    "ClusterQueue": ("kueue.x-k8s.io/v1beta1", "clusterqueues"),
    "Queue": ("scheduling.run.ai/v2", "queues"),
}


def list_path(kind: str) -> str:
    """Cluster-wide list path of a workload kind (``/apis/apps/v1/deployments``)."""
    api_version, plural = WORKLOAD_RESOURCES[kind]
    return f"/apis/{api_version}/{plural}"


def path_of(kind: str, namespace: str | None, name: str) -> str:
    """REST path of one object the controller writes: :func:`object_path`'s kinds, the
    :data:`WORKLOAD_RESOURCES` and the (cluster-scoped) :data:`QUEUE_RESOURCES`."""
    if kind in QUEUE_RESOURCES:
        api_version, plural = QUEUE_RESOURCES[kind]
        return f"/apis/{api_version}/{plural}/{quote(name, safe='')}"
    if kind not in WORKLOAD_RESOURCES:
        return object_path(kind, namespace, name)
    if not namespace:
        raise ValueError(f"a {kind} needs a namespace")
    api_version, plural = WORKLOAD_RESOURCES[kind]
    where = f"/apis/{api_version}/namespaces/{quote(namespace, safe='')}"
    return f"{where}/{plural}/{quote(name, safe='')}"


def api_version_of(kind: str) -> str:
    """The ``apiVersion`` of a kind the controller writes (an Event's ``involvedObject``)."""
    known = {**WORKLOAD_RESOURCES, **QUEUE_RESOURCES}
    return known[kind][0] if kind in known else "v1"


T = TypeVar("T")


def retryable(status: int) -> bool:
    """409 Conflict, 429 Too Many Requests, 5xx and unreachable (0) are worth another try."""
    return status in (0, 409, 429) or status >= 500


@dataclass(frozen=True)
class RetryResult(Generic[T]):
    """The value of the last try, or the error that ended the tries; and how many were made."""

    value: T | None
    error: KubeApiError | None
    attempts: int


def with_retries(
    call: Callable[[], T],
    *,
    max_attempts: int,
    backoff_base_s: float,
    backoff_max_s: float,
    sleep: Callable[[float], None] = time.sleep,
) -> RetryResult[T]:
    """Call ``call`` until it succeeds, fails for good, or ``max_attempts`` tries are spent.

    The n-th retry waits ``min(backoff_max_s, backoff_base_s x 2^(n-1))``, or the server's
    ``Retry-After`` when longer (still capped). ``call`` re-reads what it needs on each try,
    so a 409 on an optimistic-concurrency write is retried against the latest version.
    """
    attempt = 0
    while True:
        attempt += 1
        try:
            return RetryResult(call(), None, attempt)
        except KubeApiError as exc:
            if not retryable(exc.status) or attempt >= max_attempts:
                return RetryResult(None, exc, attempt)
            delay = min(backoff_max_s, backoff_base_s * 2 ** (attempt - 1))
            if exc.retry_after_s is not None:
                delay = min(backoff_max_s, max(delay, exc.retry_after_s))
            sleep(delay)
