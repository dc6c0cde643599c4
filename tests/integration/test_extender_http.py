"""The scheduler extender over real HTTP on loopback: the service app served by uvicorn (and
``sits-observe serve`` as a process), posted kube-scheduler-shaped bodies with httpx.

Bodies are built from the fixtures in :mod:`tests.unit.control.extender_payloads` (PascalCase
``Pod`` / ``Nodes`` / ``NodeNames`` around camelCase v1 objects, as kube-scheduler marshals
them); the cluster behind the store is :mod:`tests.unit.control.extender_support`.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from sits_observe.store import Store
from sits_observe.surfaces.service import ServiceSettings, create_app
from tests.integration.serve_process import TOKEN as SERVE_TOKEN
from tests.integration.serve_process import ServeProcess
from tests.unit.control.extender_payloads import (
    CANDIDATES,
    POD_1GPU_JSON,
    POD_4GPU_JSON,
    POD_CPU_JSON,
    args_by_name,
    args_with_nodes,
    node_object,
)
from tests.unit.control.extender_support import NOW, write_cluster

TOKEN = "extender-test-token"
FILTER = "/scheduler/filter"
PRIORITIZE = "/scheduler/prioritize"
# What kube-scheduler's HTTPExtender sends: JSON, and no Authorization header.
KUBE_SCHEDULER_HEADERS = {"Content-Type": "application/json"}


class ServedApp:
    """An app served by uvicorn on 127.0.0.1, port chosen by the OS, in a thread."""

    def __init__(self, app: Any) -> None:
        config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> httpx.Client:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise AssertionError("uvicorn did not start")
            time.sleep(0.01)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10)
        return self.client

    def __exit__(self, *exc: object) -> None:
        self.client.close()
        self.server.should_exit = True
        self.thread.join(timeout=30)


def serve(store: Store, clock: Callable[[], datetime] = lambda: NOW) -> ServedApp:
    settings = ServiceSettings(token=TOKEN, retention_interval_s=0)  # type: ignore[arg-type]
    return ServedApp(create_app(settings, store, clock=clock))


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path / "extender.duckdb") as s:
        write_cluster(s)
        yield s


@pytest.fixture
def client(store: Store) -> Iterator[httpx.Client]:
    with serve(store) as c:
        yield c


def post(client: httpx.Client, path: str, body: str) -> httpx.Response:
    return client.post(path, content=body.encode(), headers=KUBE_SCHEDULER_HEADERS)


def test_filter_by_name_one_gpu(client: httpx.Client) -> None:
    """The pod is a new replica of serve/llm, whose pods use 60 GiB per GPU: with the 10%
    margin it needs 66 GiB, more than the L40S node's 47 GiB free, so gpu-c fails too."""
    response = post(client, FILTER, args_by_name(POD_1GPU_JSON))
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    result = response.json()
    assert set(result) == {
        "Nodes",
        "NodeNames",
        "FailedNodes",
        "FailedAndUnresolvableNodes",
        "Error",
    }
    assert result["Error"] == ""
    assert result["Nodes"] is None
    assert result["NodeNames"] == ["gpu-a", "gpu-b", "new-node"]
    assert set(result["FailedNodes"]) == {"gpu-c", "gpu-d"}
    assert (
        "66.0 GiB free, pod needs 1 (memory need measured for serve/llm)"
        in (result["FailedNodes"]["gpu-c"])
    )
    assert result["FailedAndUnresolvableNodes"] == {
        "cpu-1": "node has no allocatable nvidia.com/gpu"
    }


def test_filter_with_node_objects_four_gpus(client: httpx.Client) -> None:
    """nodeCacheCapable: false: full Node objects in, the passing ones back unchanged.
    The 4-GPU pod also declares 60 GiB per GPU; gpu-a's free H100s have 79 GiB."""
    result = post(client, FILTER, args_with_nodes(POD_4GPU_JSON)).json()
    assert result["NodeNames"] is None
    assert result["Nodes"]["items"] == [node_object("gpu-a"), node_object("new-node")]
    assert set(result["FailedNodes"]) == {"gpu-b", "gpu-c", "gpu-d"}
    assert set(result["FailedAndUnresolvableNodes"]) == {"cpu-1"}


def test_filter_passes_every_node_for_a_cpu_pod(client: httpx.Client) -> None:
    result = post(client, FILTER, args_by_name(POD_CPU_JSON)).json()
    assert result["NodeNames"] == CANDIDATES
    assert result["FailedNodes"] == result["FailedAndUnresolvableNodes"] == {}


def test_prioritize_both_modes(client: httpx.Client) -> None:
    """The 1-GPU pod is a replica of serve/llm (measured 60 GiB -> 66 GiB need with margin):
    H100s with 79 GiB free (79/66 = 1.2 of the need) outscore the L40S (47/66 = 0.71)."""
    by_name = post(client, PRIORITIZE, args_by_name(POD_1GPU_JSON))
    assert by_name.status_code == 200
    scores = by_name.json()
    assert [s["Host"] for s in scores] == CANDIDATES
    assert all(set(s) == {"Host", "Score"} and 0 <= s["Score"] <= 10 for s in scores)
    as_dict = {s["Host"]: s["Score"] for s in scores}
    assert as_dict["gpu-d"] == as_dict["cpu-1"] == as_dict["new-node"] == 0
    assert as_dict["gpu-a"] > 0 and as_dict["gpu-b"] > 0
    assert as_dict["gpu-c"] < as_dict["gpu-b"]
    with_nodes = post(client, PRIORITIZE, args_with_nodes(POD_1GPU_JSON)).json()
    assert with_nodes == scores


def test_bad_bodies(client: httpx.Client) -> None:
    """filter: 200 with Error (kube-scheduler reports it); prioritize: 400 (it is ignored)."""
    filtered = post(client, FILTER, '{"Pod": null, "NodeNames": ["gpu-a"]}')
    assert filtered.status_code == 200
    assert "no Pod" in filtered.json()["Error"]
    assert filtered.json()["NodeNames"] is None
    bad = post(client, PRIORITIZE, "{not json")
    assert bad.status_code == 400
    assert "ExtenderArgs" in bad.json()["detail"]


def test_a_pod_asking_1e16_gpus_gets_protocol_answers(client: httpx.Client) -> None:
    """The reported case: prioritize answered HTTP 500 (OverflowError) for 1e16 nvidia.com/gpu
    while filter answered. Both verbs answer the protocol: every GPU node unresolvable, every
    node 0 (the unknown new-node passes the filter, ``unknown_nodes: pass``)."""
    manifest = json.loads(POD_1GPU_JSON)
    manifest["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "1e16"
    body = json.dumps({"Pod": manifest, "Nodes": None, "NodeNames": CANDIDATES})
    scored = post(client, PRIORITIZE, body)
    assert scored.status_code == 200
    assert scored.json() == [{"Host": n, "Score": 0} for n in CANDIDATES]
    filtered = post(client, FILTER, body).json()
    assert filtered["Error"] == ""
    assert filtered["NodeNames"] == ["new-node"]
    assert set(filtered["FailedAndUnresolvableNodes"]) == set(CANDIDATES) - {"new-node"}
    metrics = client.get("/metrics").text
    assert 'sits_extender_calls_total{outcome="scored",verb="prioritize"} 1.0' in metrics


def test_an_internal_error_is_answered_and_counted(
    client: httpx.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A scorer bug is no HTTP 500 with a text traceback: filter carries it in ``Error``,
    prioritize scores every node 0, and ``outcome="error"`` counts both."""
    import sits_observe.control.extender.handler as handler

    def broken(*_: object, **__: object) -> None:
        raise RuntimeError("scorer bug")

    monkeypatch.setattr(handler, "filter_nodes", broken)
    monkeypatch.setattr(handler, "prioritize", broken)
    filtered = post(client, FILTER, args_by_name(POD_1GPU_JSON))
    assert filtered.status_code == 200
    assert filtered.json()["Error"] == (
        "sits-observe extender internal error: RuntimeError: scorer bug"
    )
    scored = post(client, PRIORITIZE, args_by_name(POD_1GPU_JSON))
    assert scored.status_code == 200
    assert scored.json() == [{"Host": n, "Score": 0} for n in CANDIDATES]
    metrics = client.get("/metrics").text
    assert 'sits_extender_calls_total{outcome="error",verb="filter"} 1.0' in metrics
    assert 'sits_extender_calls_total{outcome="error",verb="prioritize"} 1.0' in metrics


def test_no_token_on_extender_but_reads_still_need_one(client: httpx.Client) -> None:
    assert client.get("/api/v1/tables").status_code == 401
    assert post(client, FILTER, args_by_name(POD_1GPU_JSON)).status_code == 200
    metrics = client.get("/metrics").text
    assert 'sits_extender_calls_total{outcome="scored",verb="filter"} 1.0' in metrics
    assert 'sits_extender_view_builds_total{result="ok"}' in metrics


def test_a_warm_view_is_built_before_the_first_call(store: Store) -> None:
    """With ``warm_view`` the view is built when the app is created, before any call; without,
    nothing reads the store until the first call."""
    from sits_observe.surfaces.service.extender import ExtenderSettings

    settings = ServiceSettings(token=TOKEN, retention_interval_s=0)  # type: ignore[arg-type]
    built = 'sits_extender_view_builds_total{result="ok"} 1.0'
    for warm in (True, False):
        app = create_app(
            settings, store, clock=lambda: NOW, extender=ExtenderSettings(warm_view=warm)
        )
        with ServedApp(app) as c:
            deadline = time.monotonic() + 20
            while warm and built not in c.get("/metrics").text:
                assert time.monotonic() < deadline, "no view built at start-up"
                time.sleep(0.02)
            time.sleep(0.2)
            assert (built in c.get("/metrics").text) is warm
            assert post(c, FILTER, args_by_name(POD_1GPU_JSON)).status_code == 200


def test_fail_open_without_inventory(tmp_path: Path) -> None:
    with Store.open(tmp_path / "empty.duckdb") as empty, serve(empty) as c:
        result = post(c, FILTER, args_by_name(POD_4GPU_JSON)).json()
        assert result["NodeNames"] == CANDIDATES
        assert result["Error"] == ""
        scores = post(c, PRIORITIZE, args_by_name(POD_4GPU_JSON)).json()
        assert scores == [{"Host": n, "Score": 0} for n in CANDIDATES]
        assert 'outcome="fail_open"' in c.get("/metrics").text


def test_fail_open_on_a_stale_inventory(store: Store) -> None:
    with serve(store, clock=lambda: NOW + timedelta(hours=1)) as c:
        result = post(c, FILTER, args_by_name(POD_4GPU_JSON)).json()
        assert result["NodeNames"] == CANDIDATES


# -- the real CLI ------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("warm", [False, True], ids=["view-on-first-call", "warm-staged"])
def test_sits_observe_serve_answers_kube_scheduler(tmp_path: Path, warm: bool) -> None:
    """``sits-observe serve`` on a store whose inventory is seconds old (real clock); with
    ``--extender-warm-view`` the start is staged (the extender first); either way, once ready
    the reads answer and ``/metrics`` counts the extender's calls. Started as users start it
    (:class:`~tests.integration.serve_process.ServeProcess`: the entry point, a token file)."""
    served = ServeProcess(tmp_path, *(["--extender-warm-view"] if warm else []))
    with Store.open(served.db) as s:
        write_cluster(s, datetime.now(UTC))
    try:
        served.start()  # until /readyz answers 200
        url = served.url
        body = args_by_name(POD_1GPU_JSON).encode()
        result = httpx.post(url + FILTER, content=body, headers=KUBE_SCHEDULER_HEADERS).json()
        assert result["NodeNames"] == ["gpu-a", "gpu-b", "new-node"]
        scores = httpx.post(url + PRIORITIZE, content=body, headers=KUBE_SCHEDULER_HEADERS)
        assert json.loads(scores.content)[0]["Host"] == "gpu-a"
        read = {"Authorization": f"Bearer {SERVE_TOKEN}"}
        tables = httpx.get(url + "/api/v1/tables", headers=read)
        assert tables.status_code == 200 and "gpu_samples" in tables.text
        assert served.metric("sits_extender_calls_total", outcome="scored", verb="filter") == 1
    finally:
        served.stop()


# -- the bind verb (issue 10, item 3) -----------------------------------------------------------

BIND = "/scheduler/bind"
HINT = "nvidia.com/use-gpuuuid"


def share_pod(name: str, milli: int) -> dict[str, Any]:
    """A Pending pod asking for ``milli`` of one GPU (the trace's annotation)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "serve",
            "uid": f"uid-{name}",
            "annotations": {"alibabacloud.com/gpu-milli": str(milli)},
        },
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "resources": {
                        "requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"},
                        "limits": {"nvidia.com/gpu": "1"},
                    },
                }
            ]
        },
        "status": {"phase": "Pending"},
    }


def binding_args(name: str, node: str) -> str:
    return json.dumps(
        {"PodName": name, "PodNamespace": "serve", "PodUID": f"uid-{name}", "Node": node}
    )


@pytest.mark.k8s
def test_bind_writes_the_hint_binds_through_the_api_and_assumes_the_pod(store: Store) -> None:
    """gpu-c's GPUs 1-3 are free (GPU 0 is embed-0's). A 300-milli share: FGD's GPU is the
    lowest of three equal ones, GPU 1 -> hint GPU-gpu-c-1, bound through pods/binding. The
    view has the share at once: an 800-milli share no longer fits GPU 1 (700 left), so its
    hint is GPU 2 (without the assumed pod it would be GPU 1 again). Binding a bound pod
    again is refused by the API server (409) and answered in ExtenderBindingResult.Error."""
    from kubernetes import client as k8s_client

    from sits_observe.control.extender.kube import KubePodApi
    from sits_observe.lab.kube.emulator import KubeEmulator
    from sits_observe.surfaces.service.extender import ExtenderSettings

    with KubeEmulator() as kube:
        api = kube.api_client()
        core = k8s_client.CoreV1Api(api)
        settings = ServiceSettings(token=TOKEN, retention_interval_s=0)  # type: ignore[arg-type]
        app = create_app(
            settings,
            store,
            clock=lambda: NOW,
            extender=ExtenderSettings(gpu_hint=True),
            extender_pods=KubePodApi(api),
        )
        with ServedApp(app) as client:
            for name, milli, want in (
                ("share-a", 300, "GPU-gpu-c-1"),
                ("share-b", 800, "GPU-gpu-c-2"),
            ):
                manifest = share_pod(name, milli)
                core.create_namespaced_pod("serve", manifest)  # type: ignore[arg-type]
                args = json.dumps({"Pod": manifest, "Nodes": None, "NodeNames": ["gpu-c"]})
                assert post(client, PRIORITIZE, args).status_code == 200
                answer = post(client, BIND, binding_args(name, "gpu-c"))
                assert (answer.status_code, answer.json()) == (200, {"Error": ""})
                stored = core.read_namespaced_pod(name, "serve")
                assert stored.spec.node_name == "gpu-c"
                assert stored.metadata.annotations[HINT] == want
            again = post(client, BIND, binding_args("share-a", "gpu-c")).json()["Error"]
            assert again.startswith(
                "binding serve/share-a to gpu-c: "
                "POST /api/v1/namespaces/serve/pods/share-a/binding: 409"
            )
            view = app.state.extender.cache.get()
            row = view.index["gpu-c"]
            assert view.state.gpu_free_milli[row, :4].tolist() == [0, 700, 200, 1000]
            metrics = client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"}).text
            assert 'sits_extender_calls_total{outcome="bound",verb="bind"} 2.0' in metrics
            assert 'sits_extender_calls_total{outcome="error",verb="bind"} 1.0' in metrics


def test_without_kubernetes_access_there_is_no_bind_verb(client: httpx.Client) -> None:
    answer = post(client, BIND, binding_args("share-a", "gpu-c"))
    assert answer.status_code == 404
