"""The live scheduler against the emulator, with an extender on real HTTP over loopback.

The extender here is a small recording HTTP server (what kube-scheduler sends is the subject);
the demo tests run the service's own extender.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from kubernetes import client as k8s_client
from prometheus_client import CollectorRegistry

from sits_observe.collectors.kube.api import KubeJson
from sits_observe.lab.kube.emulator import KubeEmulator
from sits_observe.lab.scheduler.config import ExtenderConfig, SchedulerConfig
from sits_observe.lab.scheduler.http import HttpExtenderTransport
from sits_observe.lab.scheduler.loop import LiveScheduler
from sits_observe.lab.scheduler.model import Extender, KubeScheduler

pytestmark = pytest.mark.k8s

Answer = Callable[[str, dict[str, Any]], Any]


@dataclass
class RecordingExtender:
    """An HTTP extender that records each call and answers with ``answer(verb, body)``."""

    answer: Answer
    calls: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    server: ThreadingHTTPServer = field(init=False)

    def __post_init__(self) -> None:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                verb = self.path.rsplit("/", 1)[-1]
                outer.calls.append((verb, self.headers.get("Content-Type", ""), body))
                data = json.dumps(outer.answer(verb, body)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:
                """Quiet."""

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def prefix(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}/scheduler"

    def verbs(self) -> list[str]:
        return [verb for verb, _, _ in self.calls]


@pytest.fixture
def extender_factory() -> Iterator[Callable[[Answer], RecordingExtender]]:
    made: list[RecordingExtender] = []

    def make(answer: Answer) -> RecordingExtender:
        made.append(RecordingExtender(answer))
        return made[-1]

    yield make
    for extender in made:
        extender.server.shutdown()
        extender.server.server_close()


def node(name: str, gpus: int = 4) -> dict[str, Any]:
    capacity = {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": str(gpus), "pods": "110"}
    return {
        "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": "NVIDIA-A100"}},
        "status": {"allocatable": capacity, "capacity": capacity},
    }


def pod(name: str, gpus: int = 1) -> dict[str, Any]:
    resources: dict[str, Any] = {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {}}
    if gpus:
        resources["requests"]["nvidia.com/gpu"] = resources["limits"]["nvidia.com/gpu"] = str(gpus)
    return {
        "metadata": {"name": name, "uid": f"uid-{name}"},
        "spec": {"containers": [{"name": "main", "resources": resources}]},
        "status": {"phase": "Pending"},
    }


def cluster(core: k8s_client.CoreV1Api, *names: str) -> None:
    for name in names:
        core.create_node(node(name))  # type: ignore[arg-type]


def sits_extender(prefix: str, *, bind: bool = False) -> ExtenderConfig:
    """deploy/scheduler-config.yaml's extender, pointed at ``prefix``."""
    return ExtenderConfig(
        url_prefix=prefix,
        filter_verb="filter",
        prioritize_verb="prioritize",
        bind_verb="bind" if bind else "",
        weight=5,
        node_cache_capable=True,
        managed_resources=("nvidia.com/gpu",),
        ignorable=True,
        http_timeout_s=2.0,
    )


class Clock:
    def __init__(self) -> None:
        self.now_s = 1000.0

    def __call__(self) -> float:
        return self.now_s


def scheduler(
    kube: KubeEmulator, *extenders: ExtenderConfig, clock: Clock | None = None
) -> tuple[LiveScheduler, HttpExtenderTransport]:
    transport = HttpExtenderTransport(registry=CollectorRegistry())
    config = SchedulerConfig(extenders=extenders)
    live = LiveScheduler(
        KubeJson(kube.api_client()),
        KubeScheduler(config, [Extender(e, transport) for e in extenders]),
        monotonic=clock or Clock(),
    )
    return live, transport


def test_a_pending_pod_is_bound_where_the_extender_sends_it(
    kube: KubeEmulator, core: k8s_client.CoreV1Api, extender_factory: Any
) -> None:
    def answer(verb: str, body: dict[str, Any]) -> Any:
        names = body["NodeNames"]
        if verb == "filter":  # n1 fails; n2 and n3 pass
            return {
                "NodeNames": [n for n in names if n != "n1"],
                "FailedNodes": {"n1": "sits: fragmentation"},
                "Error": "",
            }
        return [{"Host": n, "Score": 10 if n == "n3" else 0} for n in names]

    extender = extender_factory(answer)
    cluster(core, "n1", "n2", "n3")
    core.create_namespaced_pod("ml", pod("p1"))
    live, _ = scheduler(kube, sits_extender(extender.prefix))
    result = live.run_once()
    assert result.scheduled == [("ml/p1", "n3")]
    bound = core.read_namespaced_pod("p1", "ml")
    assert bound.spec.node_name == "n3"
    assert [c.status for c in bound.status.conditions if c.type == "PodScheduled"] == ["True"]
    # kube-scheduler's payload: the pod as the API holds it, node names only (nodeCacheCapable).
    assert extender.verbs() == ["filter", "prioritize"]
    _, content_type, body = extender.calls[0]
    assert content_type == "application/json"
    assert body["Nodes"] is None and body["NodeNames"] == ["n1", "n2", "n3"]
    assert body["Pod"]["metadata"]["name"] == "p1" and body["Pod"]["metadata"]["uid"] == "uid-p1"
    assert extender.calls[1][2]["NodeNames"] == ["n2", "n3"]  # only the filter's survivors
    assert live.totals["scheduled_extender"] == 1


def test_a_cpu_only_pod_never_reaches_a_gpu_extender(
    kube: KubeEmulator, core: k8s_client.CoreV1Api, extender_factory: Any
) -> None:
    extender = extender_factory(lambda verb, body: {})
    cluster(core, "n1", "n2")
    core.create_namespaced_pod("ml", pod("cpu", gpus=0))
    live, _ = scheduler(kube, sits_extender(extender.prefix))
    assert [name for name, _ in live.run_once().scheduled] == ["ml/cpu"]
    assert extender.calls == [] and live.totals["scheduled_default"] == 1


def test_an_unreachable_ignorable_extender_is_skipped(
    kube: KubeEmulator, core: k8s_client.CoreV1Api
) -> None:
    cluster(core, "n1", "n2")
    core.create_namespaced_pod("ml", pod("p1"))
    live, transport = scheduler(kube, sits_extender("http://127.0.0.1:9/scheduler"))
    assert len(live.run_once().scheduled) == 1
    assert live.totals["scheduled_default"] == 1
    assert transport.calls.labels("filter", "error")._value.get() == 1


def test_an_unschedulable_pod_stays_pending_with_kube_schedulers_event_and_backs_off(
    kube: KubeEmulator, core: k8s_client.CoreV1Api
) -> None:
    cluster(core, "n1", "n2")
    core.create_namespaced_pod("ml", pod("huge", gpus=8))
    clock = Clock()
    live, _ = scheduler(kube, clock=clock)
    result = live.run_once()
    message = "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."
    assert result.unschedulable == {"ml/huge": message}
    stored = core.read_namespaced_pod("huge", "ml")
    assert stored.spec.node_name is None and stored.status.phase == "Pending"
    (condition,) = [c for c in stored.status.conditions if c.type == "PodScheduled"]
    assert (condition.status, condition.reason, condition.message) == (
        "False",
        "Unschedulable",
        message,
    )
    (event,) = kube.objects("events")
    assert (event["reason"], event["type"], event["message"], event["count"]) == (
        "FailedScheduling",
        "Warning",
        message,
        1,
    )
    assert event["source"] == {"component": "default-scheduler"}
    assert event["involvedObject"]["name"] == "huge"

    # Retries wait 1 s, then 2, 4, 8 and 10 s (podMaxBackoffSeconds) between attempts.
    tried_at = []
    for _ in range(240):
        clock.now_s += 0.25
        if live.run_once().unschedulable:
            tried_at.append(clock.now_s)
    gaps = [round(b - a, 2) for a, b in zip([1000.0, *tried_at], tried_at, strict=False)]
    assert gaps[:7] == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0, 10.0]
    # The same message is one Event series (client-go's tools/events): the second occurrence
    # writes count 2, later ones count in memory until the 30-minute heartbeat.
    (event,) = kube.objects("events")
    assert event["count"] == 2 and len(tried_at) > 5
    attempts = 1 + len(tried_at)
    written: tuple[float, int] | None = None
    while written is None and clock.now_s < 1000.0 + 1900.0:
        clock.now_s += 10.0
        attempts += bool(live.run_once().unschedulable)
        (event,) = kube.objects("events")
        if event["count"] != 2:
            written = (clock.now_s, event["count"])
    assert written is not None
    assert written[0] >= 1000.0 + 1800.0 and written[1] == attempts
    # A series not observed for 6 minutes ends: the next attempt is a new Event.
    clock.now_s += 400.0
    assert live.run_once().unschedulable
    assert sorted(e["count"] for e in kube.objects("events")) == [1, attempts]


def test_a_pod_that_fits_once_gpus_free_is_bound_on_its_next_attempt(
    kube: KubeEmulator, core: k8s_client.CoreV1Api
) -> None:
    cluster(core, "n1")
    core.create_namespaced_pod("ml", pod("first", gpus=4))
    core.create_namespaced_pod("ml", pod("second", gpus=2))
    clock = Clock()
    live, _ = scheduler(kube, clock=clock)
    result = live.run_once()
    assert result.scheduled == [("ml/first", "n1")]  # assumed at once: second does not fit
    assert list(result.unschedulable) == ["ml/second"]
    core.delete_namespaced_pod("first", "ml")
    clock.now_s += 1.0
    assert live.run_once().scheduled == [("ml/second", "n1")]


def test_an_extender_with_a_bind_verb_binds_the_pod_itself(
    kube: KubeEmulator, core: k8s_client.CoreV1Api, extender_factory: Any
) -> None:
    api = kube.api_client()

    def answer(verb: str, body: dict[str, Any]) -> Any:
        if verb == "filter":
            return {"NodeNames": body["NodeNames"], "Error": ""}
        if verb == "prioritize":
            return [{"Host": n, "Score": 0} for n in body["NodeNames"]]
        KubeJson(api).request(
            "POST",
            f"/api/v1/namespaces/{body['PodNamespace']}/pods/{body['PodName']}/binding",
            body={
                "metadata": {
                    "name": body["PodName"],
                    "annotations": {"nvidia.com/use-gpuuuid": "GPU-n1-1"},
                },
                "target": {"kind": "Node", "name": body["Node"]},
            },
        )
        return {"Error": ""}

    extender = extender_factory(answer)
    cluster(core, "n1")
    core.create_namespaced_pod("ml", pod("p1"))
    live, _ = scheduler(kube, sits_extender(extender.prefix, bind=True))
    assert live.run_once().scheduled == [("ml/p1", "n1")]
    assert extender.verbs() == ["filter", "bind"]  # one feasible node: no prioritize
    assert extender.calls[1][2] == {
        "PodName": "p1",
        "PodNamespace": "ml",
        "PodUID": "uid-p1",
        "Node": "n1",
    }
    bound = core.read_namespaced_pod("p1", "ml")
    assert bound.metadata.annotations == {"nvidia.com/use-gpuuuid": "GPU-n1-1"}
    assert live.totals["scheduled_extender_bind"] == 1
