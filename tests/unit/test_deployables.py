"""The node agent's deployables in ``collectors/``: manifests and the dcgm-exporter counters."""

from __future__ import annotations

import csv
import importlib
import json
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from kubernetes import client as k8s_client

from sits_observe.domain.quantity import quantity_milli, quantity_value

DEPLOYABLES = Path(__file__).resolve().parents[2] / "collectors"
MANIFESTS = sorted(DEPLOYABLES.glob("*.yaml"))

#: apiVersion/kind -> the official client's model.
MODELS = {
    ("v1", "Namespace"): "V1Namespace",
    ("v1", "ServiceAccount"): "V1ServiceAccount",
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): "V1ClusterRole",
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): "V1ClusterRoleBinding",
    ("apps/v1", "DaemonSet"): "V1DaemonSet",
}


def load(name: str) -> list[dict[str, Any]]:
    docs = list(yaml.safe_load_all((DEPLOYABLES / name).read_text(encoding="utf-8")))
    return [d for d in docs if d is not None]


def only(kind: str, docs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    found = [d for d in (docs or all_objects()) if d["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def all_objects() -> list[dict[str, Any]]:
    return [doc for path in MANIFESTS for doc in load(path.name)]


def test_the_deployables_are_there() -> None:
    names = {p.name for p in DEPLOYABLES.iterdir()}
    assert {"daemonset.yaml", "rbac.yaml", "dcgm-counters.csv", "README.md"} <= names


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_every_object_round_trips_through_the_client_models(path: Path) -> None:
    """Deserialise into the official model and back: a misspelt field would be lost."""
    api = k8s_client.ApiClient()
    docs = load(path.name)
    assert docs, f"{path.name} holds no objects"
    for doc in docs:
        key = (doc.get("apiVersion"), doc.get("kind"))
        assert key in MODELS, f"{path.name}: no model known for {key}"
        model = api.deserialize(json.dumps(doc), MODELS[key], "application/json")
        assert type(model).__name__ == MODELS[key]
        assert api.sanitize_for_serialization(model) == doc, f"{path.name}: {key} lost fields"


AGENT_ACCOUNT = ("sits-observe", "sits-observe-agent")
#: Every manifest a cluster may hold: a binding anywhere could grant the agent access.
ALL_MANIFESTS = MANIFESTS + sorted((DEPLOYABLES.parent / "deploy").glob("*.yaml"))
BINDINGS = ("RoleBinding", "ClusterRoleBinding")


def _binds_the_agent(subject: dict[str, Any], binding_namespace: str | None) -> bool:
    namespace, name = AGENT_ACCOUNT
    if subject.get("kind") == "ServiceAccount":
        ns = subject.get("namespace") or binding_namespace
        return (ns, subject.get("name")) == AGENT_ACCOUNT
    if subject.get("kind") == "Group":
        # The groups every service account (of the namespace) belongs to.
        return subject.get("name") in (
            "system:serviceaccounts",
            f"system:serviceaccounts:{namespace}",
        )
    return subject.get("kind") == "User" and subject.get("name") == (
        f"system:serviceaccount:{namespace}:{name}"
    )


def test_no_role_is_bound_to_the_agent_account() -> None:
    """The agent never calls the Kubernetes API (it reads cgroups, DCGM, NVML and vLLM on its
    node): no binding in any manifest may give its account a role."""
    docs = [d for path in ALL_MANIFESTS for d in yaml.safe_load_all(path.read_text()) if d]
    bindings = [d for d in docs if d["kind"] in BINDINGS]
    assert bindings, "expected the service's and the controller's bindings in deploy/"
    for binding in bindings:
        namespace = binding["metadata"].get("namespace")
        for subject in binding.get("subjects") or []:
            assert not _binds_the_agent(subject, namespace), (binding["metadata"], subject)
    assert not [d for d in all_objects() if d["kind"] in ("Role", "ClusterRole", *BINDINGS)]


def test_the_agent_gets_no_service_account_token() -> None:
    account = only("ServiceAccount")
    assert (account["metadata"]["namespace"], account["metadata"]["name"]) == AGENT_ACCOUNT
    assert account["automountServiceAccountToken"] is False
    pod = _pod()
    assert pod["automountServiceAccountToken"] is False
    projected = [
        source
        for volume in pod["volumes"]
        for source in volume.get("projected", {}).get("sources", [])
        if "serviceAccountToken" in source
    ]
    assert projected == []


def test_the_daemonset_runs_under_the_agent_account() -> None:
    account = only("ServiceAccount")
    daemonset = only("DaemonSet")
    assert daemonset["metadata"]["namespace"] == account["metadata"]["namespace"]
    assert (
        daemonset["spec"]["template"]["spec"]["serviceAccountName"] == (account["metadata"]["name"])
    )
    assert only("Namespace")["metadata"]["name"] == account["metadata"]["namespace"]


def _pod() -> dict[str, Any]:
    return dict(only("DaemonSet")["spec"]["template"]["spec"])


def _agent() -> dict[str, Any]:
    containers = _pod()["containers"]
    assert len(containers) == 1
    return dict(containers[0])


def test_daemonset_mounts_cgroup_read_only() -> None:
    volumes = {v["name"]: v for v in _pod()["volumes"]}
    cgroup = [
        n for n, v in volumes.items() if v.get("hostPath", {}).get("path") == "/sys/fs/cgroup"
    ]
    assert len(cgroup) == 1
    mounts = [m for m in _agent()["volumeMounts"] if m["name"] == cgroup[0]]
    assert mounts and all(m.get("readOnly") is True for m in mounts)
    # The only hostPaths are the cgroup tree and /sys (NUMA counters), both read-only:
    # nothing of the host is writable.
    sys_ = [n for n, v in volumes.items() if v.get("hostPath", {}).get("path") == "/sys"]
    assert sorted(n for n, v in volumes.items() if "hostPath" in v) == sorted(cgroup + sys_)
    sys_mounts = [m for m in _agent()["volumeMounts"] if m["name"] in sys_]
    assert sys_mounts and all(m.get("readOnly") is True for m in sys_mounts)
    args = _agent()["args"]
    assert f"--cgroup-root={mounts[0]['mountPath']}" in args
    assert f"--sys-root={sys_mounts[0]['mountPath']}" in args


def test_daemonset_runs_on_gpu_nodes_only() -> None:
    pod = _pod()
    assert any(
        t.get("key") == "nvidia.com/gpu" and t.get("operator") == "Exists"
        for t in pod["tolerations"]
    )
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    keys = {e["key"] for term in terms for e in term["matchExpressions"]}
    assert "nvidia.com/gpu.present" in keys


def test_daemonset_is_locked_down() -> None:
    pod = _pod()
    agent = _agent()
    assert pod.get("hostPID", False) is False
    assert pod.get("hostNetwork", False) is False
    assert pod.get("hostIPC", False) is False
    assert pod["securityContext"]["runAsNonRoot"] is True
    security = agent["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    assert "privileged" not in security


def test_daemonset_gets_node_name_and_token_safely() -> None:
    agent = _agent()
    env = {e["name"]: e for e in agent["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert "--node=$(NODE_NAME)" in agent["args"]
    assert all("value" not in e or "token" not in e["name"].lower() for e in agent["env"])
    volumes = {v["name"]: v for v in _pod()["volumes"]}
    token_volume = [n for n, v in volumes.items() if "secret" in v]
    assert len(token_volume) == 1
    mount = next(m for m in agent["volumeMounts"] if m["name"] == token_volume[0])
    assert mount["readOnly"] is True
    token_arg = next(a for a in agent["args"] if a.startswith("--token-file="))
    assert token_arg.split("=", 1)[1].startswith(mount["mountPath"] + "/")


def test_daemonset_spool_is_a_writable_empty_dir() -> None:
    agent = _agent()
    volumes = {v["name"]: v for v in _pod()["volumes"]}
    spool_arg = next(a for a in agent["args"] if a.startswith("--spool-dir="))
    spool_dir = spool_arg.split("=", 1)[1]
    mount = next(m for m in agent["volumeMounts"] if m["mountPath"] == spool_dir)
    assert not mount.get("readOnly", False)
    assert "emptyDir" in volumes[mount["name"]]
    size_limit = quantity_value(volumes[mount["name"]]["emptyDir"]["sizeLimit"])
    spool_bytes = int(
        next(a for a in agent["args"] if a.startswith("--spool-max-bytes=")).split("=", 1)[1]
    )
    # The spool, the dead letters and the quarantine are each bounded by --spool-max-bytes.
    assert size_limit >= 3 * spool_bytes


def test_daemonset_budget() -> None:
    """Requests hold the agent's budget: < 2 % of one core and < 100 MB."""
    resources = _agent()["resources"]
    assert quantity_milli(resources["requests"]["cpu"]) <= 20
    assert quantity_value(resources["requests"]["memory"]) < 100 * 10**6
    assert quantity_value(resources["limits"]["memory"]) >= quantity_value(
        resources["requests"]["memory"]
    )
    assert quantity_milli(resources["limits"]["cpu"]) >= quantity_milli(
        resources["requests"]["cpu"]
    )


def test_daemonset_passes_only_flags_the_agent_knows() -> None:
    agent_cli = importlib.import_module("sits_observe.surfaces.cli.agent")
    app = typer.Typer()
    agent_cli.register(app)
    command = typer.main.get_command(app)
    options = {
        opt
        for param in command.params
        if param.param_type_name == "option"
        for opt in (*param.opts, *param.secondary_opts)
    }
    assert "--node" in options
    agent = _agent()
    assert agent["command"] == ["python", "-m", "sits_observe.surfaces.cli.agent"]
    for arg in agent["args"]:
        flag = arg.split("=", 1)[0]
        assert flag in options, f"{flag} is not an option of `sits-observe agent`"
    metrics_port = next(a for a in agent["args"] if a.startswith("--metrics-port="))
    assert int(metrics_port.split("=")[1]) == agent["ports"][0]["containerPort"]


# -- dcgm-exporter counters ---------------------------------------------------------------


def counters() -> list[list[str]]:
    text = (DEPLOYABLES / "dcgm-counters.csv").read_text(encoding="utf-8")
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    return [[cell.strip() for cell in row] for row in csv.reader(lines)]


def test_counters_file_format() -> None:
    rows = counters()
    assert rows
    for row in rows:
        assert len(row) == 3, row
        field, kind, help_text = row
        assert field.startswith("DCGM_FI_"), row
        assert kind in {"gauge", "counter"}, row
        assert help_text, row
    fields = [r[0] for r in rows]
    assert len(fields) == len(set(fields)), "duplicate counters"


def test_counters_cover_what_the_analytics_need() -> None:
    fields = {r[0] for r in counters()}
    assert {
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_FB_FREE",
        "DCGM_FI_DEV_FB_RESERVED",
        "DCGM_FI_DEV_FB_TOTAL",
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_PROF_SM_ACTIVE",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "DCGM_FI_PROF_PCIE_RX_BYTES",
        "DCGM_FI_PROF_NVLINK_TX_BYTES",
        "DCGM_FI_PROF_NVLINK_RX_BYTES",
    } <= fields
    types = {r[0]: r[1] for r in counters()}
    assert types["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] == "counter"
    assert types["DCGM_FI_PROF_PCIE_TX_BYTES"] == "gauge"  # a rate, not a byte count


def test_every_counter_is_one_the_dcgm_parser_stores() -> None:
    fields = importlib.import_module("sits_observe.domain.schema.dcgm_fields")
    specs = getattr(fields, "FIELDS", None)
    assert specs, (
        "sits_observe.domain.schema.dcgm_fields.FIELDS (the parser's field table) is missing"
    )
    known = {family for spec in specs for family in spec.families}
    unknown = sorted({r[0] for r in counters()} - known)
    assert not unknown, f"counters the DCGM parser would drop: {unknown}"


def test_counters_are_our_own_list(shared_data: Path) -> None:
    """Checked against dcgm-exporter's default list (../shared/data/dcgm/default-counters.csv):
    every DCGM_FI_DEV field we name exists there or is one of the documented additions."""
    reference = (shared_data / "dcgm" / "default-counters.csv").read_text(encoding="utf-8")
    names = {
        ln.lstrip("# ").split(",")[0].strip()
        for ln in reference.splitlines()
        if ln.lstrip("# ").startswith("DCGM_FI_")
    }
    additions = {
        "DCGM_FI_DEV_FB_TOTAL",
        "DCGM_FI_PROF_SM_ACTIVE",
        "DCGM_FI_PROF_NVLINK_TX_BYTES",
        "DCGM_FI_PROF_NVLINK_RX_BYTES",
    }
    ours = {r[0] for r in counters()}
    assert ours - names <= additions
    assert (DEPLOYABLES / "dcgm-counters.csv").read_text(encoding="utf-8") != reference
