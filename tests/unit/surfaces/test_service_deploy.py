"""deploy/: the extender has its own port, and only kube-scheduler may reach it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

DEPLOY = Path(__file__).resolve().parents[3] / "deploy"


def objects(name: str) -> list[dict[str, Any]]:
    docs = yaml.safe_load_all((DEPLOY / name).read_text(encoding="utf-8"))
    return [d for d in docs if d is not None]


def only(kind: str) -> dict[str, Any]:
    (found,) = [d for d in objects("deployment.yaml") if d["kind"] == kind]
    return found


def flag(args: list[str], name: str) -> str:
    (value,) = [a.split("=", 1)[1] for a in args if a.startswith(f"{name}=")]
    return value


def test_the_extender_port_is_wired_from_serve_to_the_scheduler_config() -> None:
    container = only("Deployment")["spec"]["template"]["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert int(flag(container["args"], "--extender-port")) == ports["extender"]
    assert int(flag(container["args"], "--port")) == ports["http"]
    service = {p["name"]: p for p in only("Service")["spec"]["ports"]}
    assert service["extender"]["targetPort"] == "extender"
    (config,) = objects("scheduler-config.yaml")
    extenders = config["extenders"]
    assert extenders, "the shipped configuration calls the extender"
    for extender in extenders:
        assert f":{service['extender']['port']}/scheduler" in extender["urlPrefix"]


def test_only_kube_scheduler_may_reach_the_extender_port() -> None:
    policy = only("NetworkPolicy")
    labels = only("Deployment")["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    rules = policy["spec"]["ingress"]
    assert all(rule.get("ports") for rule in rules), "a rule without ports opens every port"
    to_extender = [r for r in rules if any(p["port"] == "extender" for p in r["ports"])]
    assert len(to_extender) == 1
    (rule,) = to_extender
    assert [p["port"] for p in rule["ports"]] == ["extender"]
    assert rule["from"] == [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
            "podSelector": {"matchLabels": {"component": "kube-scheduler"}},
        }
    ]
