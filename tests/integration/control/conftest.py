"""Fixtures for controller tests against the kmock Kubernetes emulator on loopback."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client import CollectorRegistry

from sits_observe.collectors.kube_api import KubeJson
from sits_observe.control.record import ControllerMetrics, StoreRecorder
from sits_observe.simulator.kube_emulator import KubeEmulator
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
