"""deploy/controller-rbac.yaml grants exactly what the controller does on the API, no more."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import polars as pl
import pytest
import yaml
from kubernetes import client as k8s_client

from sits_observe.control.apply import Applier
from sits_observe.control.inputs import Signals
from sits_observe.control.kube import JsonObject, KubeJson
from sits_observe.control.leader import LeaderElector
from sits_observe.control.plan import plan
from sits_observe.control.record import StoreRecorder
from sits_observe.control.safety import TokenBucket
from sits_observe.control.settings import ControllerSettings
from sits_observe.control.state import read_state
from tests.integration.control.conftest import FakeClock, seed
from tests.integration.control.signals import cluster_signals

pytestmark = pytest.mark.k8s

RBAC = Path(__file__).resolve().parents[3] / "deploy" / "controller-rbac.yaml"
MODELS = {
    "ServiceAccount": "V1ServiceAccount",
    "ClusterRole": "V1ClusterRole",
    "ClusterRoleBinding": "V1ClusterRoleBinding",
    "Role": "V1Role",
    "RoleBinding": "V1RoleBinding",
}
_PATH = re.compile(
    r"^/apis?/(?:(?P<group>[^/]+)/)?v1(?:/namespaces/(?P<ns>[^/]+))?/(?P<resource>[a-z]+)"
    r"(?:/(?P<name>[^/?]+))?$"
)


class Recording(KubeJson):
    """Keeps (verb, group, resource, namespace, name) of every request."""

    def __init__(self, base: KubeJson) -> None:
        super().__init__(base.api, timeout_s=base.timeout_s)
        self.seen: set[tuple[str, str, str, str | None, str | None]] = set()

    def request(self, method: str, path: str, **kw: Any) -> JsonObject:
        match = _PATH.match(path)
        assert match, path
        group = match["group"] if path.startswith("/apis/") else ""
        name = match["name"]
        verb = {"GET": "get" if name else "list", "PATCH": "patch", "PUT": "update",
                "POST": "create", "DELETE": "delete"}[method]  # fmt: skip
        self.seen.add((verb, group or "", match["resource"], match["ns"], name))
        return super().request(method, path, **kw)


def documents() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(RBAC.read_text(encoding="utf-8")) if d]


def allowed(verb: str, group: str, resource: str, ns: str | None, name: str | None) -> bool:
    for doc in documents():
        if doc["kind"] not in ("ClusterRole", "Role"):
            continue
        if doc["kind"] == "Role" and doc["metadata"]["namespace"] != ns:
            continue
        for rule in doc["rules"]:
            names = rule.get("resourceNames")
            if (group in rule["apiGroups"] and resource in rule["resources"]
                    and verb in rule["verbs"] and (names is None or name in names)):  # fmt: skip
                return True
    return False


def test_every_object_round_trips_through_the_client_models() -> None:
    api = k8s_client.ApiClient()
    for doc in documents():
        model = api.deserialize(json.dumps(doc), MODELS[doc["kind"]], "application/json")
        assert api.sanitize_for_serialization(model) == doc


def test_the_roles_cover_every_request_of_an_act_pass_and_nothing_else(
    kube: KubeJson, clock: FakeClock, recorder: StoreRecorder
) -> None:
    seed(kube)
    kube.request("POST", "/api/v1/namespaces", body={"metadata": {"name": "lab"}})
    recording = Recording(kube)
    settings = ControllerSettings(
        mode="act", time_slicing_configmap="gpu-operator/time-slicing-config"
    )
    kube.request(
        "POST", "/api/v1/namespaces/gpu-operator/configmaps",
        body={"metadata": {"name": "time-slicing-config"}, "data": {}},
    )  # fmt: skip
    elector = LeaderElector(recording, settings, clock=clock)
    assert elector.tick()  # create
    assert elector.tick()  # get + update
    state = read_state(recording, settings)
    signals = cluster_signals(clock())
    # A namespace without the managed quota gets its advice as a Namespace annotation.
    extra = pl.DataFrame(
        {"namespace": ["lab"], "resource": ["requests.nvidia.com/gpu"], "daily_peaks": [[2.0]]}
    )
    signals = Signals.of(
        signals.at,
        nodes=signals.nodes,
        pods=signals.pods,
        namespaces=pl.concat([signals.namespaces, extra]),
    )
    decisions = plan(signals, state, settings, at=clock())
    Applier(recording, settings, recorder, limiter=TokenBucket(1000, 1000),
            sleep=clock.sleep, clock=clock).apply(decisions)  # fmt: skip
    elector.release()
    denied = [r for r in recording.seen if not allowed(*r)]
    assert denied == []
    used = {(verb, resource) for verb, _, resource, _, _ in recording.seen}
    granted = {
        (verb, resource)
        for doc in documents()
        if doc["kind"] in ("ClusterRole", "Role")
        for rule in doc["rules"]
        for verb in rule["verbs"]
        for resource in rule["resources"]
    }
    assert granted == used  # least privilege: nothing granted that the controller never uses
