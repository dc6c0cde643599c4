"""deploy/: the service's manifests and the kube-scheduler configuration of the extender."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from kubernetes import client as k8s_client

from sits_observe.surfaces.cli.main import app
from sits_observe.surfaces.service.extender import BIND_PATH, FILTER_PATH, PRIORITIZE_PATH

DEPLOY = Path(__file__).resolve().parents[3] / "deploy"
MANIFESTS = ["deployment.yaml", "rbac.yaml"]
MODELS = {
    ("v1", "ServiceAccount"): "V1ServiceAccount",
    ("v1", "PersistentVolumeClaim"): "V1PersistentVolumeClaim",
    ("v1", "Service"): "V1Service",
    ("apps/v1", "Deployment"): "V1Deployment",
    ("networking.k8s.io/v1", "NetworkPolicy"): "V1NetworkPolicy",
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): "V1ClusterRole",
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): "V1ClusterRoleBinding",
}
#: json tags of Extender and ExtenderManagedResource, k8s.io/kube-scheduler/config/v1/types.go.
EXTENDER_FIELDS = {
    "urlPrefix",
    "filterVerb",
    "preemptVerb",
    "prioritizeVerb",
    "weight",
    "bindVerb",
    "enableHTTPS",
    "tlsConfig",
    "httpTimeout",
    "nodeCacheCapable",
    "managedResources",
    "ignorable",
}
MANAGED_RESOURCE_FIELDS = {"name", "ignoredByScheduler"}


def load(name: str) -> list[dict[str, Any]]:
    docs = yaml.safe_load_all((DEPLOY / name).read_text(encoding="utf-8"))
    return [d for d in docs if d is not None]


def objects() -> list[dict[str, Any]]:
    return [doc for name in MANIFESTS for doc in load(name)]


def only(kind: str) -> dict[str, Any]:
    found = [d for d in objects() if d["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


@pytest.mark.parametrize("name", MANIFESTS)
def test_objects_round_trip_through_the_client_models(name: str) -> None:
    """Deserialise into the official model and back: a misspelt field would be lost."""
    api = k8s_client.ApiClient()
    for doc in load(name):
        key = (doc["apiVersion"], doc["kind"])
        assert key in MODELS, f"{name}: no model known for {key}"
        model = api.deserialize(json.dumps(doc), MODELS[key], "application/json")
        assert api.sanitize_for_serialization(model) == doc


def test_the_role_only_reads_nodes_pods_and_dra_objects() -> None:
    rules = only("ClusterRole")["rules"]
    assert rules == [
        {"apiGroups": [""], "resources": ["nodes", "pods"], "verbs": ["get", "list", "watch"]},
        {
            "apiGroups": ["resource.k8s.io"],
            "resources": ["resourceslices", "resourceclaims"],
            "verbs": ["get", "list", "watch"],
        },
    ]
    binding = only("ClusterRoleBinding")
    account = only("ServiceAccount")["metadata"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["name"], "namespace": account["namespace"]}
    ]
    deployment = only("Deployment")
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == account["name"]


def test_the_deployment_runs_serve_with_known_flags() -> None:
    deployment = only("Deployment")
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"]["type"] == "Recreate"  # one DuckDB writer
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["sits-observe"]
    assert container["args"][0] == "serve"
    serve = typer.main.get_command(app).commands["serve"]  # type: ignore[attr-defined]
    options = {opt for p in serve.params for opt in (*p.opts, *p.secondary_opts)}
    for arg in container["args"][1:]:
        flag = arg.split("=", 1)[0]
        assert flag in options, f"{flag} is not an option of `sits-observe serve`"
    port = next(a for a in container["args"] if a.startswith("--port="))
    assert int(port.split("=")[1]) == container["ports"][0]["containerPort"]
    service = only("Service")
    assert (
        service["spec"]["selector"].items()
        <= deployment["spec"]["template"]["metadata"]["labels"].items()
    )


def test_scheduler_config_calls_the_extender_routes() -> None:
    (config,) = load("scheduler-config.yaml")
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert config["kind"] == "KubeSchedulerConfiguration"
    scorer, binder = config["extenders"]
    service = only("Service")
    (port,) = [p["port"] for p in service["spec"]["ports"] if p["name"] == "extender"]
    for extender in (scorer, binder):
        assert set(extender) <= EXTENDER_FIELDS
        # kube-scheduler: url = strings.TrimRight(urlPrefix, "/") + "/" + verb.
        prefix = extender["urlPrefix"].rstrip("/")
        host = prefix.split("://", 1)[1].split("/", 1)[0]
        assert host == f"sits-observe.sits-observe.svc.cluster.local:{port}"
        assert extender["ignorable"] is True
    path = "/" + scorer["urlPrefix"].rstrip("/").split("://", 1)[1].split("/", 1)[1]
    assert f"{path}/{scorer['filterVerb']}" == FILTER_PATH
    assert f"{path}/{scorer['prioritizeVerb']}" == PRIORITIZE_PATH
    assert f"{path}/{binder['bindVerb']}" == BIND_PATH
    # Validation (pkg/scheduler/apis/config/validation): a prioritize verb needs weight > 0,
    # and one extender at most binds.
    assert isinstance(scorer["weight"], int) and scorer["weight"] > 0
    assert sum(1 for e in config["extenders"] if e.get("bindVerb")) == 1
    # One rank step (weight x 10) outweighs the 200 points of the two default score plugins.
    assert scorer["weight"] * 10 > 200
    assert scorer["nodeCacheCapable"] is True
    assert "managedResources" not in scorer  # CPU-only pods are scored too (docs/extender.md)
    (resource,) = binder["managedResources"]
    assert set(resource) <= MANAGED_RESOURCE_FIELDS
    assert resource == {"name": "nvidia.com/gpu", "ignoredByScheduler": False}
    assert "filterVerb" not in binder and "prioritizeVerb" not in binder


def test_the_bind_role_only_creates_bindings_and_patches_pods() -> None:
    docs = load("extender-bind-rbac.yaml")
    api = k8s_client.ApiClient()
    for doc in docs:
        model = api.deserialize(
            json.dumps(doc), MODELS[(doc["apiVersion"], doc["kind"])], "application/json"
        )
        assert api.sanitize_for_serialization(model) == doc
    role, binding = docs
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["pods/binding"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["patch"]},
    ]
    account = only("ServiceAccount")["metadata"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["name"], "namespace": account["namespace"]}
    ]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
