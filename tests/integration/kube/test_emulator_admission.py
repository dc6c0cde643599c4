"""The emulator's Binding subresource and ResourceQuota admission, through the official client."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client as k8s_client
from kubernetes.client.exceptions import ApiException

from sits_observe.lab.kube.emulator import KubeEmulator

pytestmark = pytest.mark.k8s


def pod(name: str, *, gpus: int = 0, cpu: str = "1", node: str | None = None) -> dict[str, Any]:
    requests = {"cpu": cpu, "memory": "1Gi"}
    limits: dict[str, str] = {}
    if gpus:
        requests["nvidia.com/gpu"] = limits["nvidia.com/gpu"] = str(gpus)
    spec: dict[str, Any] = {
        "containers": [{"name": "main", "resources": {"requests": requests, "limits": limits}}]
    }
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": name, "uid": f"uid-{name}"}, "spec": spec}


def binding(name: str, node: str, **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": name, **meta},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }


def post_binding(api: k8s_client.ApiClient, name: str, body: dict[str, Any]) -> tuple[int, Any]:
    host = api.configuration.host
    response = api.call_api(
        "POST",
        f"{host}/api/v1/namespaces/ns/pods/{name}/binding",
        header_params={"Content-Type": "application/json"},
        body=body,
    )
    response.read()
    return response.status, json.loads(response.data)


def error(exc: pytest.ExceptionInfo[ApiException]) -> tuple[int, str]:
    return exc.value.status, json.loads(exc.value.body)["message"]


# -- pods/binding ---------------------------------------------------------------------------


def test_binding_assigns_the_node_and_marks_the_pod_scheduled(
    api: k8s_client.ApiClient, core: k8s_client.CoreV1Api
) -> None:
    core.create_namespaced_pod("ns", pod("p1"))
    annotated = binding("p1", "gpu-node-2", annotations={"nvidia.com/use-gpuuuid": "GPU-a"})
    status, answer = post_binding(api, "p1", annotated)
    assert (status, answer["kind"], answer["status"], answer["code"]) == (
        201,
        "Status",
        "Success",
        201,
    )
    bound = core.read_namespaced_pod("p1", "ns")
    assert bound.spec.node_name == "gpu-node-2"
    assert bound.metadata.annotations == {"nvidia.com/use-gpuuuid": "GPU-a"}
    (condition,) = [c for c in bound.status.conditions if c.type == "PodScheduled"]
    assert condition.status == "True" and condition.last_transition_time is not None


def test_binding_a_bound_pod_or_the_wrong_uid_conflicts(
    api: k8s_client.ApiClient, core: k8s_client.CoreV1Api
) -> None:
    core.create_namespaced_pod("ns", pod("p1"))
    assert post_binding(api, "p1", binding("p1", "gpu-node-1"))[0] == 201
    status, answer = post_binding(api, "p1", binding("p1", "gpu-node-2"))
    assert (status, answer["reason"]) == (409, "Conflict")
    assert answer["message"] == (
        'Operation cannot be fulfilled on pods/binding "p1": pod p1 is already assigned to '
        'node "gpu-node-1"'
    )
    core.create_namespaced_pod("ns", pod("p2"))
    status, answer = post_binding(api, "p2", binding("p2", "gpu-node-1", uid="someone-else"))
    assert (
        status == 409
        and "Precondition failed: UID in precondition: someone-else" in (answer["message"])
    )
    assert core.read_namespaced_pod("p2", "ns").spec.node_name is None


def test_binding_a_missing_pod_or_a_non_node_target_is_refused(
    api: k8s_client.ApiClient, core: k8s_client.CoreV1Api
) -> None:
    assert post_binding(api, "ghost", binding("ghost", "gpu-node-1"))[0] == 404
    core.create_namespaced_pod("ns", pod("p1"))
    body = binding("p1", "gpu-node-1")
    body["target"]["kind"] = "Pod"
    status, answer = post_binding(api, "p1", body)
    assert (status, answer["reason"]) == (422, "Invalid")
    del body["target"]["kind"]
    body["target"]["name"] = ""
    assert post_binding(api, "p1", body)[0] == 422


def test_discovery_lists_the_binding_subresource(api: k8s_client.ApiClient) -> None:
    names = {r.name for r in k8s_client.CoreV1Api(api).get_api_resources().resources}
    assert "pods/binding" in names


def test_binding_is_seen_by_a_watch(kube: KubeEmulator, api: k8s_client.ApiClient) -> None:
    core = k8s_client.CoreV1Api(api)
    core.create_namespaced_pod("ns", pod("p1"))
    post_binding(api, "p1", binding("p1", "gpu-node-1"))
    (stored,) = kube.objects("pods")
    assert stored["spec"]["nodeName"] == "gpu-node-1"
    assert int(stored["metadata"]["resourceVersion"]) > 1


# -- ResourceQuota ----------------------------------------------------------------------------


def quota(hard: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": "sits-quota"}, "spec": {"hard": hard}}


def test_a_creation_past_the_quota_answers_403_with_the_api_servers_message(
    core: k8s_client.CoreV1Api,
) -> None:
    core.create_namespaced_resource_quota(
        "ns", quota({"requests.nvidia.com/gpu": "2", "requests.cpu": "8", "pods": "10"})
    )
    core.create_namespaced_pod("ns", pod("a", gpus=1))
    core.create_namespaced_pod("ns", pod("b", gpus=1, cpu="500m"))
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_pod("ns", pod("c", gpus=1))
    assert error(refused) == (
        403,
        'pods "c" is forbidden: exceeded quota: sits-quota, requested: '
        "requests.nvidia.com/gpu=1, used: requests.nvidia.com/gpu=2, limited: "
        "requests.nvidia.com/gpu=2",
    )
    assert json.loads(refused.value.body)["reason"] == "Forbidden"
    # Nothing was stored, and a pod that asks for no GPU still fits.
    assert {p.metadata.name for p in core.list_namespaced_pod("ns").items} == {"a", "b"}
    core.create_namespaced_pod("ns", pod("cpu-only"))


def test_every_exceeded_key_is_listed_sorted(core: k8s_client.CoreV1Api) -> None:
    core.create_namespaced_resource_quota(
        "ns", quota({"requests.memory": "1Gi", "requests.cpu": "1", "pods": "5"})
    )
    core.create_namespaced_pod("ns", pod("a"))
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_pod("ns", pod("b", cpu="250m"))
    assert error(refused)[1] == (
        'pods "b" is forbidden: exceeded quota: sits-quota, requested: '
        "requests.cpu=250m,requests.memory=1Gi, used: requests.cpu=1,requests.memory=1Gi, "
        "limited: requests.cpu=1,requests.memory=1Gi"
    )


def test_status_used_follows_creations_deletions_and_finished_pods(
    core: k8s_client.CoreV1Api,
) -> None:
    core.create_namespaced_resource_quota(
        "ns", quota({"requests.nvidia.com/gpu": "4", "pods": "10", "requests.memory": "8Gi"})
    )
    for name in ("a", "b"):
        core.create_namespaced_pod("ns", pod(name, gpus=2))

    def used() -> dict[str, str]:
        return dict(core.read_namespaced_resource_quota("sits-quota", "ns").status.used)

    status = core.read_namespaced_resource_quota("sits-quota", "ns").status
    assert status.hard == {"requests.nvidia.com/gpu": "4", "pods": "10", "requests.memory": "8Gi"}
    assert used() == {"pods": "2", "requests.memory": "2Gi", "requests.nvidia.com/gpu": "4"}
    core.delete_namespaced_pod("a", "ns")
    assert used()["requests.nvidia.com/gpu"] == "2"
    # A finished pod no longer counts: its GPUs are free for the next creation.
    core.patch_namespaced_pod_status("b", "ns", {"status": {"phase": "Succeeded"}})
    assert used() == {"pods": "0", "requests.memory": "0", "requests.nvidia.com/gpu": "0"}
    core.create_namespaced_pod("ns", pod("c", gpus=4))


def test_a_lowered_quota_refuses_the_next_creation(core: k8s_client.CoreV1Api) -> None:
    core.create_namespaced_resource_quota("ns", quota({"requests.nvidia.com/gpu": "8"}))
    core.create_namespaced_pod("ns", pod("a", gpus=2))
    core.patch_namespaced_resource_quota(
        "sits-quota", "ns", {"spec": {"hard": {"requests.nvidia.com/gpu": "2"}}}
    )
    stored = core.read_namespaced_resource_quota("sits-quota", "ns").status
    assert stored.hard == {"requests.nvidia.com/gpu": "2"}
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_pod("ns", pod("b", gpus=1))
    assert refused.value.status == 403
    # Another namespace's quota is not this one's.
    core.create_namespaced_pod("other", pod("b", gpus=1))
