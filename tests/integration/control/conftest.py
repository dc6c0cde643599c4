"""Fixtures for controller tests against the kmock Kubernetes emulator on loopback."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client import CollectorRegistry

from sits_observe.collectors.kube.api import KubeJson
from sits_observe.control.controller.record import ControllerMetrics, StoreRecorder
from sits_observe.lab.kube.emulator import KubeEmulator
from sits_observe.store import Store


@dataclass
class FakeClock:
    """A shared wall clock (UTC) and monotonic clock that tests move by hand."""

    now: datetime = field(default_factory=lambda: datetime(2026, 11, 1, 12, 0, tzinfo=UTC))
    slept: list[float] = field(default_factory=list)

    def __call__(self) -> datetime:
        return self.now

    def monotonic(self) -> float:
        return self.now.timestamp()

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)


@pytest.fixture
def emu() -> Iterator[KubeEmulator]:
    """A fresh emulator on 127.0.0.1 and a free port."""
    with KubeEmulator() as emulator:
        yield emulator


@pytest.fixture
def kube(emu: KubeEmulator) -> Iterator[KubeJson]:
    """The controller's JSON client on the emulator."""
    api = emu.api_client()
    try:
        yield KubeJson(api, timeout_s=10)
    finally:
        api.close()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def store() -> Iterator[Store]:
    s = Store.open(":memory:")
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def recorder(store: Store, registry: CollectorRegistry) -> StoreRecorder:
    return StoreRecorder(store, ControllerMetrics(registry), "replica-a")


def seed(kube: KubeJson, *, opt_out_node: bool = False) -> None:
    """Two nodes, a namespace with a managed quota, two pods and a time-slicing ConfigMap."""
    annotations = {"sits.io/opt-out": "true"} if opt_out_node else {}
    kube.request(
        "POST", "/api/v1/nodes", body={"metadata": {"name": "n1", "labels": {"zone": "a"}}}
    )
    kube.request(
        "POST", "/api/v1/nodes", body={"metadata": {"name": "n2", "annotations": annotations}}
    )
    kube.request("POST", "/api/v1/namespaces", body={"metadata": {"name": "team"}})
    for pod, priority in (("p1", "throughput-guaranteed"), ("p2", "ultra-low-latency")):
        kube.request(
            "POST",
            "/api/v1/namespaces/team/pods",
            body={
                "metadata": {"name": pod, "labels": {"app": "chat"}},
                "spec": {"nodeName": "n1", "priorityClassName": priority, "containers": []},
            },
        )
    kube.request(
        "POST",
        "/api/v1/namespaces/team/resourcequotas",
        body={
            "metadata": {"name": "sits-quota"},
            "spec": {"hard": {"requests.nvidia.com/gpu": "4", "requests.cpu": "8"}},
        },
    )
    kube.request(
        "POST",
        "/api/v1/namespaces/gpu-operator/configmaps",
        body={
            "metadata": {"name": "time-slicing"},
            "data": {
                "any": "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
                "    - name: nvidia.com/gpu\n      replicas: 4\n"
            },
        },
    )


#: Pods :func:`seed_workloads` creates: name -> (owner kind, owner name) the controller should
#: resolve (None: the pod keeps its own recommendations).
WORKLOAD_PODS: dict[str, tuple[str, str] | None] = {
    "web-5d8f7-a": ("Deployment", "web"),
    "web-5d8f7-b": ("Deployment", "web"),
    "web-5d8f7-c": ("Deployment", "web"),
    "db-0": ("StatefulSet", "db"),
    "agent-x1": ("DaemonSet", "agent"),
    "nightly-29000000-q": ("CronJob", "nightly"),
    "train-0": ("Job", "train"),
    "solo": None,
}


def _owned(kind: str, name: str, uid: str) -> list[dict[str, object]]:
    api = "batch/v1" if kind in ("Job", "CronJob") else "apps/v1"
    return [{"apiVersion": api, "kind": kind, "name": name, "uid": uid, "controller": True}]


def seed_workloads(kube: KubeJson, namespace: str, labels: dict[str, str] | None = None) -> None:
    """A namespace (with ``labels``) holding a Deployment (ReplicaSet, three pods), a
    StatefulSet, a DaemonSet, a CronJob (its Job and pod), a bare Job and a bare pod, the way
    their controllers create them (:data:`WORKLOAD_PODS`)."""
    kube.request(
        "POST",
        "/api/v1/namespaces",
        body={"metadata": {"name": namespace, "labels": labels or {}}},
    )

    def create(path: str, name: str, **meta: object) -> None:
        body = {"metadata": {"name": name, "namespace": namespace, **meta}}
        kube.request("POST", path.format(ns=namespace), body=body)

    apps, batch = "/apis/apps/v1/namespaces/{ns}", "/apis/batch/v1/namespaces/{ns}"
    create(f"{apps}/deployments", "web", uid=f"{namespace}-u-web")
    create(
        f"{apps}/replicasets",
        "web-5d8f7",
        uid=f"{namespace}-u-rs",
        ownerReferences=_owned("Deployment", "web", f"{namespace}-u-web"),
    )
    create(f"{apps}/statefulsets", "db", uid=f"{namespace}-u-db")
    create(f"{apps}/daemonsets", "agent", uid=f"{namespace}-u-agent")
    create(f"{batch}/cronjobs", "nightly", uid=f"{namespace}-u-cron")
    create(
        f"{batch}/jobs",
        "nightly-29000000",
        uid=f"{namespace}-u-cronjob-run",
        ownerReferences=_owned("CronJob", "nightly", f"{namespace}-u-cron"),
    )
    create(f"{batch}/jobs", "train", uid=f"{namespace}-u-train")
    owners = {
        "web-5d8f7-a": ("ReplicaSet", "web-5d8f7", "u-rs"),
        "web-5d8f7-b": ("ReplicaSet", "web-5d8f7", "u-rs"),
        "web-5d8f7-c": ("ReplicaSet", "web-5d8f7", "u-rs"),
        "db-0": ("StatefulSet", "db", "u-db"),
        "agent-x1": ("DaemonSet", "agent", "u-agent"),
        "nightly-29000000-q": ("Job", "nightly-29000000", "u-cronjob-run"),
        "train-0": ("Job", "train", "u-train"),
    }
    for pod in WORKLOAD_PODS:
        meta: dict[str, object] = {"labels": {"app": pod.split("-")[0]}}
        if pod in owners:
            kind, name, uid = owners[pod]
            meta["ownerReferences"] = _owned(kind, name, f"{namespace}-{uid}")
        if pod.startswith("web-"):
            meta["labels"] = {"app": "web", "pod-template-hash": "5d8f7"}
        kube.request(
            "POST",
            f"/api/v1/namespaces/{namespace}/pods",
            body={
                "metadata": {"name": pod, "namespace": namespace, **meta},
                "spec": {"nodeName": "n1", "containers": []},
            },
        )
