"""The emulator runner and the kmock gaps it fills, driven through the official client."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client as k8s_client
from kubernetes import watch as k8s_watch
from kubernetes.client.exceptions import ApiException

from sits_observe.lab.kube.emulator import RESOURCES, KubeEmulator, api_client_for
from tests.integration.kube import bodies

pytestmark = pytest.mark.k8s


def lease(name: str, holder: str) -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name},
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": 15,
            "renewTime": "2024-05-01T10:00:00.000000Z",
        },
    }


def raw_list(call: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
    response = call(*args, _preload_content=False, **kwargs)
    return dict(json.loads(response.data))


# -- runner ---------------------------------------------------------------------------------


def test_serves_on_loopback_and_stops() -> None:
    emulator = KubeEmulator()
    url = emulator.start()
    assert url.startswith("http://127.0.0.1:")
    api = api_client_for(url)
    assert k8s_client.CoreV1Api(api).list_namespace().items == []
    emulator.stop()
    assert not emulator.running
    with pytest.raises(RuntimeError, match="not running"):
        _ = emulator.url
    emulator.stop()  # idempotent
    api.close()


def test_refuses_a_non_loopback_host() -> None:
    with pytest.raises(ValueError, match="not loopback"):
        KubeEmulator(host="0.0.0.0")


def test_discovery_lists_the_registered_resources(api: k8s_client.ApiClient) -> None:
    core = k8s_client.CoreV1Api(api).get_api_resources()
    by_name = {r.name: r for r in core.resources}
    assert by_name["pods"].namespaced is True
    assert by_name["pods"].kind == "Pod"
    assert by_name["nodes"].namespaced is False
    assert "pods/status" in by_name
    groups = {g.name for g in k8s_client.ApisApi(api).get_api_versions().groups}
    assert {"coordination.k8s.io", "scheduling.k8s.io"} <= groups
    assert {r.group for r in RESOURCES if r.group} <= groups


def test_every_registered_resource_creates_and_lists(api: k8s_client.ApiClient) -> None:
    host = api.configuration.host
    for spec in RESOURCES:
        base = f"/api/{spec.version}" if not spec.group else f"/apis/{spec.group}/{spec.version}"
        collection = (
            f"{base}/namespaces/ns/{spec.plural}" if spec.namespaced else (f"{base}/{spec.plural}")
        )
        created = api.call_api(
            "POST",
            f"{host}{collection}",
            header_params={"Content-Type": "application/json"},
            body={"metadata": {"name": f"one-{spec.plural}"}},
        )
        created.read()
        assert created.status == 200, (spec, created.data)
        response = api.call_api("GET", f"{host}{base}/{spec.plural}")
        response.read()
        body = json.loads(response.data)
        assert response.status == 200, spec
        assert body["kind"] == f"{spec.kind}List"
        [item] = body["items"]
        assert item["kind"] == spec.kind
        assert item["apiVersion"] == spec.api_version
        assert item["metadata"]["name"] == f"one-{spec.plural}"
        assert item["metadata"].get("namespace") == ("ns" if spec.namespaced else None)


# -- create: namespace defaulting and server-set metadata ----------------------------------


def test_create_fills_namespace_uid_time_and_revision(core: k8s_client.CoreV1Api) -> None:
    body = bodies.pod("p1", created=None)
    assert "namespace" not in body["metadata"]
    created = core.create_namespaced_pod("team-a", body)
    assert created.metadata.namespace == "team-a"
    assert created.metadata.uid
    assert created.metadata.creation_timestamp is not None
    assert int(created.metadata.resource_version) > 0
    listed = raw_list(core.list_namespaced_pod, "team-a")["items"]
    assert [p["metadata"]["namespace"] for p in listed] == ["team-a"]


def test_create_keeps_client_sent_uid_and_time(core: k8s_client.CoreV1Api) -> None:
    body = bodies.pod("p1")
    body["metadata"]["uid"] = "pinned-uid"
    created = core.create_namespaced_pod("ns", body)
    assert created.metadata.uid == "pinned-uid"
    assert created.metadata.creation_timestamp.isoformat() == "2024-05-01T10:00:00+00:00"


def test_create_rejects_a_namespace_mismatch(core: k8s_client.CoreV1Api) -> None:
    body = bodies.pod("p1")
    body["metadata"]["namespace"] = "other"
    with pytest.raises(ApiException) as info:
        core.create_namespaced_pod("ns", body)
    assert info.value.status == 400
    assert core.list_pod_for_all_namespaces().items == []


def test_generate_name(core: k8s_client.CoreV1Api) -> None:
    body = bodies.pod("x")
    body["metadata"] = {"generateName": "worker-"}
    created = core.create_namespaced_pod("ns", body)
    assert created.metadata.name.startswith("worker-")
    assert len(created.metadata.name) == len("worker-") + 5


def test_create_twice_conflicts(core: k8s_client.CoreV1Api) -> None:
    core.create_namespaced_pod("ns", bodies.pod("p1"))
    with pytest.raises(ApiException) as info:
        core.create_namespaced_pod("ns", bodies.pod("p1"))
    assert info.value.status == 409


# -- PUT / replace --------------------------------------------------------------------------


def test_replace_lease_renews_with_optimistic_concurrency(api: k8s_client.ApiClient) -> None:
    coordination = k8s_client.CoordinationV1Api(api)
    created = coordination.create_namespaced_lease("sits", lease("leader", "agent-a"))
    current = coordination.read_namespaced_lease("leader", "sits")
    current.spec.holder_identity = "agent-b"
    current.spec.lease_transitions = 1
    renewed = coordination.replace_namespaced_lease("leader", "sits", current)
    assert renewed.spec.holder_identity == "agent-b"
    assert int(renewed.metadata.resource_version) > int(created.metadata.resource_version)
    assert renewed.metadata.uid == created.metadata.uid
    stored = coordination.read_namespaced_lease("leader", "sits")
    assert stored.spec.holder_identity == "agent-b"
    assert stored.spec.lease_transitions == 1
    # A second writer holding the old revision loses.
    with pytest.raises(ApiException) as info:
        coordination.replace_namespaced_lease("leader", "sits", current)
    assert info.value.status == 409
    assert json.loads(info.value.body)["reason"] == "Conflict"
    assert coordination.read_namespaced_lease("leader", "sits").spec.holder_identity == "agent-b"


def test_replace_without_revision_is_unconditional(api: k8s_client.ApiClient) -> None:
    coordination = k8s_client.CoordinationV1Api(api)
    coordination.create_namespaced_lease("sits", lease("leader", "a"))
    replaced = coordination.replace_namespaced_lease("leader", "sits", lease("leader", "c"))
    assert replaced.spec.holder_identity == "c"
    assert replaced.metadata.namespace == "sits"


def test_replace_errors(api: k8s_client.ApiClient) -> None:
    coordination = k8s_client.CoordinationV1Api(api)
    with pytest.raises(ApiException) as missing:
        coordination.replace_namespaced_lease("nope", "sits", lease("nope", "a"))
    assert missing.value.status == 404
    coordination.create_namespaced_lease("sits", lease("leader", "a"))
    with pytest.raises(ApiException) as renamed:
        coordination.replace_namespaced_lease("leader", "sits", lease("other", "a"))
    assert renamed.value.status == 400


def test_replace_status_and_spec_stay_separate(core: k8s_client.CoreV1Api) -> None:
    core.create_namespaced_pod("ns", bodies.pod("p1", phase="Pending"))
    current = core.read_namespaced_pod("p1", "ns")
    current.status.phase = "Running"
    current.spec.priority_class_name = "ignored-by-status-put"
    after_status = core.replace_namespaced_pod_status("p1", "ns", current)
    assert after_status.status.phase == "Running"
    assert after_status.spec.priority_class_name is None
    # A main-resource PUT of a kind with a status subresource keeps the stored status.
    current = core.read_namespaced_pod("p1", "ns")
    current.status.phase = "Failed"
    current.metadata.labels = {"edited": "yes"}
    after_spec = core.replace_namespaced_pod("p1", "ns", current)
    assert after_spec.metadata.labels == {"edited": "yes"}
    assert after_spec.status.phase == "Running"


def test_patch_bumps_the_revision(core: k8s_client.CoreV1Api) -> None:
    created = core.create_namespaced_pod("ns", bodies.pod("p1"))
    patched = core.patch_namespaced_pod("p1", "ns", {"metadata": {"labels": {"a": "b"}}})
    assert patched.metadata.labels["a"] == "b"
    assert int(patched.metadata.resource_version) > int(created.metadata.resource_version)


# -- LIST: pagination and selectors ---------------------------------------------------------


def test_list_paginates_in_key_order(core: k8s_client.CoreV1Api, kube: KubeEmulator) -> None:
    for i in (4, 1, 6, 0, 3, 5, 2):
        core.create_namespaced_config_map("ns", {"metadata": {"name": f"cm-{i}"}, "data": {}})
    first = core.list_namespaced_config_map("ns", limit=3)
    assert [c.metadata.name for c in first.items] == ["cm-0", "cm-1", "cm-2"]
    assert first.metadata.remaining_item_count == 4
    second = core.list_namespaced_config_map("ns", limit=3, _continue=first.metadata._continue)
    assert [c.metadata.name for c in second.items] == ["cm-3", "cm-4", "cm-5"]
    third = core.list_namespaced_config_map("ns", limit=3, _continue=second.metadata._continue)
    assert [c.metadata.name for c in third.items] == ["cm-6"]
    assert third.metadata._continue is None
    # Expired tokens answer 410, as after etcd compaction.
    kube.expire_continue_tokens()
    with pytest.raises(ApiException) as info:
        core.list_namespaced_config_map("ns", limit=3, _continue=first.metadata._continue)
    assert info.value.status == 410
    with pytest.raises(ApiException) as bad:
        core.list_namespaced_config_map("ns", limit=3, _continue="not-a-token")
    assert bad.value.status == 400


def test_label_and_field_selectors(core: k8s_client.CoreV1Api) -> None:
    core.create_namespaced_pod("ns", bodies.pod("a1", labels={"app": "a"}, node_name="n1"))
    core.create_namespaced_pod("ns", bodies.pod("a2", labels={"app": "a"}, node_name="n2"))
    core.create_namespaced_pod("ns", bodies.pod("b1", labels={"app": "b"}, node_name="n1"))
    names = lambda r: sorted(p.metadata.name for p in r.items)  # noqa: E731
    assert names(core.list_pod_for_all_namespaces(label_selector="app=a")) == ["a1", "a2"]
    assert names(core.list_pod_for_all_namespaces(label_selector="app!=a")) == ["b1"]
    assert names(core.list_pod_for_all_namespaces(label_selector="!app")) == []
    assert names(core.list_pod_for_all_namespaces(field_selector="spec.nodeName=n1")) == [
        "a1",
        "b1",
    ]
    assert names(
        core.list_pod_for_all_namespaces(label_selector="app=a", field_selector="metadata.name!=a1")
    ) == ["a2"]
    with pytest.raises(ApiException) as info:
        core.list_pod_for_all_namespaces(label_selector="app in (a, b)")
    assert info.value.status == 400


# -- WATCH ----------------------------------------------------------------------------------


def test_namespaced_watch_sees_objects_created_without_namespace(
    core: k8s_client.CoreV1Api,
) -> None:
    core.create_namespaced_pod("team-a", bodies.pod("seed"))
    watcher = k8s_watch.Watch()
    stream = watcher.stream(core.list_namespaced_pod, "team-a", timeout_seconds=30)
    try:
        first = next(stream)
        assert (first["type"], first["object"].metadata.name) == ("ADDED", "seed")
        # Both bodies lack metadata.namespace; only the URL says where they go.
        core.create_namespaced_pod("team-b", bodies.pod("elsewhere"))
        core.create_namespaced_pod("team-a", bodies.pod("late"))
        second = next(stream)
        assert (second["type"], second["object"].metadata.name) == ("ADDED", "late")
        assert second["object"].metadata.namespace == "team-a"
        core.patch_namespaced_pod("late", "team-a", {"metadata": {"labels": {"x": "y"}}})
        third = next(stream)
        assert (third["type"], third["object"].metadata.labels) == ("MODIFIED", {"x": "y"})
    finally:
        watcher.stop()


def test_watch_ends_at_timeout_seconds(core: k8s_client.CoreV1Api) -> None:
    core.create_namespaced_pod("ns", bodies.pod("p1"))
    events = list(k8s_watch.Watch().stream(core.list_namespaced_pod, "ns", timeout_seconds=1))
    assert [(e["type"], e["object"].metadata.name) for e in events] == [("ADDED", "p1")]


def test_watch_from_a_list_revision_skips_what_the_list_had(
    core: k8s_client.CoreV1Api,
) -> None:
    core.create_namespaced_pod("ns", bodies.pod("old"))
    listed = core.list_namespaced_pod("ns")
    core.create_namespaced_pod("ns", bodies.pod("new"))
    events = list(
        k8s_watch.Watch().stream(
            core.list_namespaced_pod,
            "ns",
            resource_version=listed.metadata.resource_version,
            timeout_seconds=1,
        )
    )
    assert [e["object"].metadata.name for e in events] == ["new"]


def test_stop_closes_open_watches(kube: KubeEmulator, core: k8s_client.CoreV1Api) -> None:
    core.create_namespaced_pod("ns", bodies.pod("p1"))
    response = core.list_namespaced_pod("ns", watch=True, _preload_content=False)
    first = json.loads(response.readline())
    assert first["object"]["metadata"]["name"] == "p1"
    kube.stop()
    assert response.read() == b""  # the server ended the stream
    response.release_conn()


# -- injected errors ------------------------------------------------------------------------


def test_injected_errors(kube: KubeEmulator, core: k8s_client.CoreV1Api) -> None:
    kube.inject_error(r"GET /api/v1/nodes", 403, reason="Forbidden", message="no", times=1)
    with pytest.raises(ApiException) as info:
        core.list_node()
    assert info.value.status == 403
    assert json.loads(info.value.body)["message"] == "no"
    assert core.list_node().items == []  # fired once only
    kube.inject_error(r"GET /api/v1/pods", 500)
    with pytest.raises(ApiException):
        core.list_pod_for_all_namespaces()
    kube.clear_errors()
    assert core.list_pod_for_all_namespaces().items == []


def test_objects_snapshot(kube: KubeEmulator, core: k8s_client.CoreV1Api) -> None:
    core.create_node(bodies.node("n1"))
    assert [o["metadata"]["name"] for o in kube.objects("nodes")] == ["n1"]


def test_namespaces_are_a_resource_of_their_own(core: k8s_client.CoreV1Api) -> None:
    """kmock alone reads /api/v1/namespaces as a namespace prefix and answers 500."""
    core.create_namespace({"metadata": {"name": "team-a", "labels": {"tier": "gold"}}})
    core.create_namespace({"metadata": {"name": "team-b"}})
    core.create_namespaced_pod("team-a", bodies.pod("p1"))  # a namespaced path still works
    assert [n.metadata.name for n in core.list_namespace(limit=1).items] == ["team-a"]
    assert core.read_namespace("team-b").metadata.name == "team-b"
    assert core.read_namespace("team-a").kind == "Namespace"
    assert [n.metadata.name for n in core.list_namespace(label_selector="tier=gold").items] == [
        "team-a"
    ]
    core.delete_namespace("team-b")
    assert [n.metadata.name for n in core.list_namespace().items] == ["team-a"]
    assert [p.metadata.name for p in core.list_namespaced_pod("team-a").items] == ["p1"]
    resources = {r.name for r in core.get_api_resources().resources}
    assert "namespaces" in resources
    assert not any(name.startswith("sits-") for name in resources)


def test_watch_with_a_bad_selector_answers_400(core: k8s_client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as info:
        core.list_namespaced_pod(
            "ns", watch=True, label_selector="app=a", field_selector="spec.nodeName"
        )
    assert info.value.status == 400


def test_keeps_only_recent_requests() -> None:
    emulator = KubeEmulator(keep_requests=5)
    with emulator:
        api = emulator.api_client()
        for _ in range(30):
            k8s_client.CoreV1Api(api).list_node()
        kept = len(emulator._handler._requests)  # type: ignore[union-attr]
        api.close()
    assert kept <= 10
