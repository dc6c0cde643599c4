"""In-process informers on the emulator: a lab component's cache sees every change, in order,
before the request that made it is answered."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client as k8s_client

from sits_observe.collectors.kube.api import KubeJson
from sits_observe.lab.kube.emulator import KubeEmulator

pytestmark = pytest.mark.k8s


def _pod(name: str, namespace: str = "default") -> Any:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }


def _names(items: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(i["metadata"]["namespace"], i["metadata"]["name"]) for i in items]


def test_an_informer_starts_from_the_live_objects_and_follows_every_write(
    kube: KubeEmulator, core: k8s_client.CoreV1Api
) -> None:
    core.create_namespaced_pod("default", _pod("b"))
    informer = kube.informer("pods")
    assert _names(informer.items()) == [("default", "b")]

    core.create_namespaced_pod("team", _pod("a", "team"))
    core.create_namespaced_pod("default", _pod("a"))
    # The list's order: namespace, then name (as the API server's list answers).
    assert _names(informer.items()) == [("default", "a"), ("default", "b"), ("team", "a")]

    core.patch_namespaced_pod("b", "default", {"metadata": {"labels": {"x": "1"}}})
    core.delete_namespaced_pod("a", "team")
    items = {n: i for n, i in zip(_names(informer.items()), informer.items(), strict=True)}
    assert list(items) == [("default", "a"), ("default", "b")]
    assert items[("default", "b")]["metadata"]["labels"] == {"x": "1"}


def test_an_informer_sees_a_binding_and_a_replace_like_a_list_does(kube: KubeEmulator) -> None:
    json_api = KubeJson(kube.api_client())
    json_api.request("POST", "/api/v1/namespaces/default/pods", body=_pod("p"))
    informer = kube.informer("pods")
    json_api.request(
        "POST",
        "/api/v1/namespaces/default/pods/p/binding",
        body={
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": "p", "namespace": "default"},
            "target": {"apiVersion": "v1", "kind": "Node", "name": "node-1"},
        },
    )
    listed = json_api.list_all("/api/v1/pods")
    assert informer.items() == listed
    assert informer.items()[0]["spec"]["nodeName"] == "node-1"


def test_a_closed_informer_receives_nothing_more(
    kube: KubeEmulator, core: k8s_client.CoreV1Api
) -> None:
    informer = kube.informer("pods")
    other = kube.informer("pods")
    informer.close()
    core.create_namespaced_pod("default", _pod("late"))
    assert informer.items() == []
    assert _names(other.items()) == [("default", "late")]
