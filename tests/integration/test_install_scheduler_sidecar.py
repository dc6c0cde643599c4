"""deploy/overlays/scheduler-sidecar: kube-scheduler in the service's pod, started only once
the extender is warm.

Rendered with plain ``kubectl kustomize`` as the other overlays are
(:mod:`.test_install_kustomize`) and validated against Kubernetes 1.29 to 1.32. What makes the
guarantee is checked on the rendered objects: the service is a native sidecar (an init
container with ``restartPolicy: Always``) whose startupProbe is the extender's readiness
route on the extender port, kube-scheduler is the pod's only main container, and its
configuration calls that port on loopback with the settings of deploy/scheduler-config.yaml.
That the route answers 503 before the view is warm and 200 after is
:mod:`.test_extender_readiness`, on a real ``serve``.
"""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest
import yaml

from sits_observe.surfaces.service.extender import (
    BIND_PATH,
    FILTER_PATH,
    PRIORITIZE_PATH,
    READY_PATH,
)
from tests.integration.test_install_kustomize import (
    DEPLOY,
    KUBECTL,
    KUBERNETES_VERSIONS,
    ROLES,
    SERVICE_ACCOUNT,
    SIDECAR_OVERLAYS,
    rendered,
    serve_options,
)

pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl not installed (Debian: kubectl)")

(OVERLAY,) = SIDECAR_OVERLAYS
SCHEDULER_ROLES = {
    "system:kube-scheduler",
    "system:volume-scheduler",
    "extension-apiserver-authentication-reader",
}


def one(kind: str, name: str) -> dict[str, Any]:
    found = [d for d in rendered(OVERLAY) if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, (kind, name)
    return found[0]


def pod() -> dict[str, Any]:
    spec: dict[str, Any] = one("Deployment", "sits-observe")["spec"]["template"]["spec"]
    return spec


def flag(args: list[str], name: str) -> str:
    (value,) = [a.split("=", 1)[1] for a in args if a.startswith(f"{name}=")]
    return value


def scheduler_config() -> dict[str, Any]:
    (text,) = one("ConfigMap", "sits-observe-scheduler-config")["data"].values()
    config: dict[str, Any] = yaml.safe_load(text)
    return config


def test_every_object_validates_against_four_kubernetes_versions() -> None:
    problems = []
    for doc in rendered(OVERLAY):
        if doc["apiVersion"].startswith("monitoring.coreos.com/"):
            continue  # the operator's kinds: test_install_kustomize checks them
        for version in KUBERNETES_VERSIONS:
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                problems.append(f"{doc['kind']}/{doc['metadata']['name']} ({version}): {exc}")
    assert not problems, "\n".join(problems)


def test_the_service_is_a_sidecar_whose_startup_probe_is_the_extenders_readiness() -> None:
    (service,) = pod()["initContainers"]
    assert service["restartPolicy"] == "Always"  # a native sidecar, not a one-shot init
    assert service["command"] == ["sits-observe"] and service["args"][0] == "serve"
    unknown = [a for a in service["args"][1:] if a.split("=", 1)[0] not in serve_options()]
    assert not unknown, f"not options of `sits-observe serve`: {unknown}"
    # The view is built as the service starts, and the controller still runs in it.
    assert {"--extender-warm-view", "--in-cluster", "--controller"} <= set(service["args"])
    probe = service["startupProbe"]["httpGet"]
    assert probe["path"] == READY_PATH
    ports = {p["name"]: p["containerPort"] for p in service["ports"]}
    assert ports[probe["port"]] == int(flag(service["args"], "--extender-port"))
    # The existing probes stay: /readyz (the store takes writes) for the Service, /healthz.
    assert service["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert service["livenessProbe"]["httpGet"]["path"] == "/healthz"


def test_kube_scheduler_is_the_main_container_and_reads_the_sidecar_config() -> None:
    (scheduler,) = pod()["containers"]
    assert scheduler["name"] == "kube-scheduler"
    assert scheduler["image"].startswith("registry.k8s.io/kube-scheduler:v1.")
    config_path = flag(scheduler["args"], "--config")
    (mount,) = [m for m in scheduler["volumeMounts"] if config_path.startswith(m["mountPath"])]
    (volume,) = [v for v in pod()["volumes"] if v["name"] == mount["name"]]
    assert volume["configMap"]["name"] == "sits-observe-scheduler-config"
    key = config_path.removeprefix(mount["mountPath"]).lstrip("/")
    assert key in one("ConfigMap", "sits-observe-scheduler-config")["data"]


def test_the_scheduler_calls_the_sidecar_on_loopback_with_the_shipped_settings() -> None:
    config = scheduler_config()
    (service,) = pod()["initContainers"]
    port = flag(service["args"], "--extender-port")
    scorer, binder = config["extenders"]
    for extender in (scorer, binder):
        assert extender["urlPrefix"] == f"http://127.0.0.1:{port}/scheduler"
    assert f"/scheduler/{scorer['filterVerb']}" == FILTER_PATH
    assert f"/scheduler/{scorer['prioritizeVerb']}" == PRIORITIZE_PATH
    assert f"/scheduler/{binder['bindVerb']}" == BIND_PATH
    # Every other extender setting is the control-plane configuration's (measured there).
    shipped = yaml.safe_load((DEPLOY / "scheduler-config.yaml").read_text(encoding="utf-8"))
    for mine, theirs in zip(config["extenders"], shipped["extenders"], strict=True):
        assert {**mine, "urlPrefix": None} == {**theirs, "urlPrefix": None}
    (profile,) = config["profiles"]
    assert profile["schedulerName"] == "sits-scheduler"
    assert profile["percentageOfNodesToScore"] == shipped["profiles"][0]["percentageOfNodesToScore"]
    # One replica, Recreate: leader election is off, so it needs no Lease of its own.
    assert config["leaderElection"] == {"leaderElect": False}
    deployment = one("Deployment", "sits-observe")
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"]["type"] == "Recreate"
    assert "clientConnection" not in config  # the pod's account, in-cluster


def test_the_pods_account_gets_kube_schedulers_roles_as_well() -> None:
    bindings = [d for d in rendered(OVERLAY) if d["kind"] in ("ClusterRoleBinding", "RoleBinding")]
    assert {b["roleRef"]["name"] for b in bindings} == ROLES["with-extender"] | SCHEDULER_ROLES
    for binding in bindings:
        assert binding["subjects"] == [SERVICE_ACCOUNT], binding["metadata"]["name"]
    reader = "extension-apiserver-authentication-reader"  # a Role of kube-system
    (binding,) = [b for b in bindings if b["roleRef"]["name"] == reader]
    assert binding["kind"] == "RoleBinding" and binding["metadata"]["namespace"] == "kube-system"
