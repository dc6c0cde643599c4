"""The bind verb (control.extender_bind) with an injected Kubernetes API: what it writes, in
which order, what it assumes, and how a failure is answered.

Cluster: tests.unit.control.extender_support; gpu-c's GPUs 1-3 are free (GPU 0 is embed-0's)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from sits_observe.control.extender.bind import Binder
from sits_observe.control.extender.clusterview.view import ClusterView, build_view
from sits_observe.control.extender.clusterview.view_settings import ViewSettings
from sits_observe.control.extender.overlay import Placement
from sits_observe.control.extender.scoring import PodRequest
from sits_observe.control.extender.scoring_settings import ScoringSettings
from sits_observe.errors import KubeApiError
from sits_observe.store import Store
from tests.unit.control.extender_support import NOW, write_cluster

HINT = "nvidia.com/use-gpuuuid"


class FakeApi:
    """Records the calls; ``fail`` names a call that raises a 409."""

    def __init__(self, pods: Mapping[str, Mapping[str, Any]] | None = None, fail: str = "") -> None:
        self.pods = dict(pods or {})
        self.fail = fail
        self.calls: list[tuple[str, ...]] = []

    def read_pod(self, namespace: str, name: str) -> Mapping[str, Any]:
        self.calls.append(("read", name))
        return self.pods[name]

    def annotate_pod(self, namespace: str, name: str, annotations: Mapping[str, str]) -> None:
        self.calls.append(("annotate", name, json.dumps(dict(annotations))))
        if self.fail == "annotate":
            raise KubeApiError("PATCH pod: 409 Conflict", status=409)

    def bind_pod(self, namespace: str, name: str, uid: str, node: str) -> None:
        self.calls.append(("bind", name, uid, node))
        if self.fail == "bind":
            raise KubeApiError("POST pods/x/binding: 409 Conflict", status=409)


@pytest.fixture(scope="module")
def view(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterView]:
    path: Path = tmp_path_factory.mktemp("bind") / "cluster.duckdb"
    with Store.open(path) as store:
        write_cluster(store)
        yield build_view(store, NOW, ViewSettings())


def args(name: str, node: str = "gpu-c") -> bytes:
    body = {"PodName": name, "PodNamespace": "serve", "PodUID": f"uid-{name}", "Node": node}
    return json.dumps(body).encode()


def binder(api: FakeApi, assumed: list[Placement], *, hint: bool = True) -> Binder:
    return Binder(api, scoring=ScoringSettings(), gpu_hint=hint, assume=assumed.append)


def share(name: str, milli: int = 300, **extra: Any) -> PodRequest:
    return PodRequest("serve", name, 1, 1000, gpu_milli=milli, uid=f"uid-{name}", **extra)


def test_the_hint_comes_before_the_binding_and_the_pod_is_assumed(view: ClusterView) -> None:
    api, assumed = FakeApi(), []
    verb = binder(api, assumed)
    verb.recent.remember(share("a"))
    outcome = verb.bind(args("a"), view)
    assert (outcome.body, outcome.outcome, outcome.hinted) == (b'{"Error":""}', "bound", True)
    assert api.calls == [
        ("annotate", "a", json.dumps({HINT: "GPU-gpu-c-1"})),
        ("bind", "a", "uid-a", "gpu-c"),
    ]
    assert [(p.node, p.gpus, p.shape.gpu_milli) for p in assumed] == [("gpu-c", (1,), 300)]
    assert verb.hinting()  # kube-scheduler binds through the verb: shares scored for FGD's GPU


def test_whole_gpus_and_pods_with_their_own_hint_get_no_hint(view: ClusterView) -> None:
    api, assumed = FakeApi(), []
    verb = binder(api, assumed)
    verb.recent.remember(PodRequest("serve", "w", 2, 1000, uid="uid-w"))
    verb.recent.remember(share("own", hint_uuids=("GPU-gpu-c-3",)))
    assert verb.bind(args("w"), view).outcome == "bound"
    assert verb.bind(args("own"), view).outcome == "bound"
    assert [c[0] for c in api.calls] == ["bind", "bind"]
    # The assumed GPUs: the lowest free whole GPUs; for the share the device plugin's choice
    # within its own hint.
    assert [p.gpus for p in assumed] == [(1, 2), (3,)]


def test_an_unknown_pod_is_read_from_the_api(view: ClusterView) -> None:
    manifest = {
        "metadata": {"name": "b", "namespace": "serve", "uid": "uid-b",
                     "annotations": {"alibabacloud.com/gpu-milli": "500"}},
        "spec": {"containers": [{"name": "m", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
    }  # fmt: skip
    api, assumed = FakeApi({"b": manifest}), []
    assert binder(api, assumed).bind(args("b"), view).outcome == "bound"
    assert api.calls[0] == ("read", "b")
    assert assumed[0].shape.gpu_milli == 500


@pytest.mark.parametrize("fail", ["annotate", "bind"])
def test_an_api_error_is_the_answer_and_nothing_is_assumed(view: ClusterView, fail: str) -> None:
    api, assumed = FakeApi(fail=fail), []
    verb = binder(api, assumed)
    verb.recent.remember(share("a"))
    outcome = verb.bind(args("a"), view)
    error = json.loads(outcome.body)["Error"]
    assert outcome.outcome == "error" and error.startswith("binding serve/a to gpu-c: ")
    assert "409" in error and assumed == []


def test_a_bad_body_and_a_missing_view(view: ClusterView) -> None:
    api, assumed = FakeApi(), []
    verb = binder(api, assumed)
    bad = verb.bind(b'{"PodName": "a"}', view)
    assert bad.outcome == "bad_request"
    assert "not a kube-scheduler ExtenderBindingArgs" in json.loads(bad.body)["Error"]
    verb.recent.remember(share("a"))
    blind = verb.bind(args("a"), None)  # no usable view: bind, no hint, nothing assumed
    assert blind.outcome == "bound" and assumed == [] and api.calls[0][0] == "bind"
    off = binder(FakeApi(), [], hint=False)
    assert not off.hinting()
