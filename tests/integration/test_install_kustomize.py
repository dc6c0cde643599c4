"""The kustomize install: every overlay renders with plain ``kubectl kustomize`` (no
``--load-restrictor``, as ``kubectl apply -k``, Argo CD and Flux build it), the images are set
in one place, every object
validates against the Kubernetes OpenAPI schemas of 1.29 to 1.32 (``kubernetes-validate``;
the Prometheus Operator's kinds against their CRD schema, :mod:`.install_crd_schemas`), each
mode carries the RBAC it needs and nothing more, the controller runs inside ``serve`` (the
one process that opens the store), and the monitoring objects select what they scrape.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import typer
import yaml

from sits_observe.surfaces.alerts import rules_yaml
from sits_observe.surfaces.grafana import dashboards, render
from tests.integration.install_crd_schemas import SCHEMAS

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
OVERLAYS = ("dry-run", "annotate", "act", "with-extender")
#: Overlays whose pod runs `serve` as a sidecar of kube-scheduler, checked on their own
#: (tests/integration/test_install_scheduler_sidecar.py).
SIDECAR_OVERLAYS = ("scheduler-sidecar",)
KUBERNETES_VERSIONS = ("1.29", "1.30", "1.31", "1.32")
KUBECTL = shutil.which("kubectl")
PROMTOOL = shutil.which("promtool")
SERVICE_ACCOUNT = {"kind": "ServiceAccount", "name": "sits-observe", "namespace": "sits-observe"}

pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl not installed (Debian: kubectl)")


def build(overlay_dir: Path) -> tuple[dict[str, Any], ...]:
    """The objects ``kubectl kustomize`` renders for a folder, with kustomize's default load
    restrictor (files only from inside each kustomization's folder), as ``kubectl apply -k``,
    Argo CD and Flux build it: no ``--load-restrictor`` flag."""
    result = subprocess.run(
        [str(KUBECTL), "kustomize", str(overlay_dir)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return tuple(d for d in yaml.safe_load_all(result.stdout) if d)


@functools.cache
def rendered(overlay: str) -> tuple[dict[str, Any], ...]:
    """The objects ``kubectl kustomize`` renders for ``overlay`` (see :func:`build`)."""
    return build(DEPLOY / "overlays" / overlay)


def objects(overlay: str, kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in rendered(overlay) if d["kind"] == kind}


def one(overlay: str, kind: str, name: str) -> dict[str, Any]:
    found = objects(overlay, kind)
    assert name in found, f"{overlay}: no {kind} {name} (have {sorted(found)})"
    return found[name]


def source(path: str, kind: str, name: str) -> dict[str, Any]:
    """An object as written in one of the repository's manifests."""
    docs = [d for d in yaml.safe_load_all((ROOT / path).read_text(encoding="utf-8")) if d]
    (found,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return dict(found)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_object_validates_against_four_kubernetes_versions(overlay: str) -> None:
    problems = []
    kinds = set()
    for doc in rendered(overlay):
        kinds.add(doc["kind"])
        where = f"{doc['kind']}/{doc['metadata']['name']}"
        if doc["apiVersion"].startswith("monitoring.coreos.com/"):
            # Not in Kubernetes' schemas: the operator's CRD schema, written down.
            try:
                jsonschema.validate(doc, SCHEMAS[doc["kind"]])
            except jsonschema.ValidationError as exc:
                problems.append(f"{where}: {exc.message} at {list(exc.absolute_path)}")
            continue
        for version in KUBERNETES_VERSIONS:
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                problems.append(f"{where} ({version}): {exc.message} at {list(exc.path)}")
            except kubernetes_validate.SchemaNotFoundError as exc:
                problems.append(f"{where} ({version}): {exc.message}")
    assert not problems, "\n".join(problems)
    assert {"Deployment", "DaemonSet", "ServiceMonitor", "PodMonitor", "PrometheusRule"} <= kinds


def test_the_written_down_crd_schemas_refuse_a_misspelt_field() -> None:
    monitor = one("dry-run", "ServiceMonitor", "sits-observe")
    jsonschema.validate(monitor, SCHEMAS["ServiceMonitor"])
    endpoint = monitor["spec"]["endpoints"][0]
    bad = {**monitor, "spec": {**monitor["spec"], "endpoints": [{**endpoint, "intervall": "1m"}]}}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, SCHEMAS["ServiceMonitor"])
    late = {**monitor, "spec": {**monitor["spec"], "endpoints": [{**endpoint, "interval": "1 m"}]}}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(late, SCHEMAS["ServiceMonitor"])


#: Roles bound in each mode; all to the service's account (the controller runs in `serve`).
ROLES = {
    "dry-run": {
        "sits-observe-service",
        "sits-observe-controller-read",
        "sits-observe-controller-lease",
    },
}
ROLES["annotate"] = ROLES["act"] = ROLES["dry-run"] | {"sits-observe-controller-write"}
ROLES["with-extender"] = ROLES["dry-run"] | {"sits-observe-extender-bind"}
#: Where each role is written (its rules must be rendered unchanged).
ROLE_FILES = {
    ("ClusterRole", "sits-observe-service"): "deploy/rbac.yaml",
    ("ClusterRole", "sits-observe-controller-read"): "deploy/controller-rbac.yaml",
    ("Role", "sits-observe-controller-lease"): "deploy/controller-rbac.yaml",
    ("ClusterRole", "sits-observe-controller-write"): "deploy/controller-write-rbac.yaml",
    ("ClusterRole", "sits-observe-extender-bind"): "deploy/extender-bind-rbac.yaml",
}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_each_mode_gets_its_rbac_and_nothing_more(overlay: str) -> None:
    bindings = [d for d in rendered(overlay) if d["kind"] in ("ClusterRoleBinding", "RoleBinding")]
    bound = {b["roleRef"]["name"] for b in bindings}
    assert bound == ROLES[overlay]
    for binding in bindings:
        # Only the service's account: not the agent's, not a standalone controller's.
        assert binding["subjects"] == [SERVICE_ACCOUNT], binding["metadata"]["name"]
    roles = [d for d in rendered(overlay) if d["kind"] in ("ClusterRole", "Role")]
    assert {r["metadata"]["name"] for r in roles} == bound
    for role in roles:
        key = (role["kind"], role["metadata"]["name"])
        assert role["rules"] == source(ROLE_FILES[key], *key)["rules"], key
    accounts = set(objects(overlay, "ServiceAccount"))
    assert accounts == {"sits-observe", "sits-observe-agent"}
    agent = one(overlay, "ServiceAccount", "sits-observe-agent")
    assert agent["automountServiceAccountToken"] is False


def serve_options() -> set[str]:
    from sits_observe.surfaces.cli import serve

    app = typer.Typer()
    serve.register(app)
    command = typer.main.get_command(app)
    return {
        opt
        for param in command.params
        if param.param_type_name == "option"
        for opt in (*param.opts, *param.secondary_opts)
    }


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_serve_gets_only_flags_it_knows(overlay: str) -> None:
    (container,) = one(overlay, "Deployment", "sits-observe")["spec"]["template"]["spec"][
        "containers"
    ]
    assert container["command"] == ["sits-observe"] and container["args"][0] == "serve"
    options = serve_options()
    unknown = [a for a in container["args"][1:] if a.split("=", 1)[0] not in options]
    assert not unknown, f"not options of `sits-observe serve`: {unknown}"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_controller_runs_inside_serve_the_one_owner_of_the_store(overlay: str) -> None:
    workloads = [d for d in rendered(overlay) if d["kind"] in ("Deployment", "DaemonSet")]
    owners = []
    for workload in workloads:
        pod = workload["spec"]["template"]["spec"]
        claims = [v for v in pod.get("volumes", []) if "persistentVolumeClaim" in v]
        for container in pod["containers"]:
            assert "controller" not in container.get("args", [])[:1], workload["metadata"]
        if claims:
            owners.append(workload)
    (owner,) = owners  # one workload holds the DuckDB file ...
    assert owner["kind"] == "Deployment" and owner["spec"]["replicas"] == 1
    assert owner["spec"]["strategy"]["type"] == "Recreate"  # ... and never two pods of it
    args = owner["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--controller" in args and "--in-cluster" in args


def test_the_monitors_select_the_service_port_and_the_agents_port() -> None:
    monitor = one("dry-run", "ServiceMonitor", "sits-observe")
    service = one("dry-run", "Service", "sits-observe")
    wanted = monitor["spec"]["selector"]["matchLabels"]
    assert wanted.items() <= service["metadata"]["labels"].items()
    assert service["metadata"]["namespace"] in monitor["spec"]["namespaceSelector"]["matchNames"]
    ports = {p["name"] for p in service["spec"]["ports"]}
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == ["http"] and "http" in ports
    pods = one("dry-run", "PodMonitor", "sits-observe-agent")
    daemonset = one("dry-run", "DaemonSet", "sits-observe-agent")
    template = daemonset["spec"]["template"]
    assert pods["spec"]["selector"]["matchLabels"].items() <= template["metadata"]["labels"].items()
    (agent,) = template["spec"]["containers"]
    container_ports = {p["name"]: p["containerPort"] for p in agent["ports"]}
    (endpoint,) = pods["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] in container_ports
    assert f"--metrics-port={container_ports[endpoint['port']]}" in agent["args"]
    assert "--metrics-host=0.0.0.0" in agent["args"]  # reachable from Prometheus's pod


def test_the_prometheus_rule_is_the_rules_file_and_passes_promtool(tmp_path: Path) -> None:
    rule = one("dry-run", "PrometheusRule", "sits-observe")
    assert rule["spec"]["groups"] == yaml.safe_load(rules_yaml())["groups"]
    for alert in rule["spec"]["groups"][0]["rules"]:
        assert alert["annotations"]["runbook_url"].endswith(f"#{alert['alert'].lower()}")
    if PROMTOOL is None:
        pytest.skip("promtool not installed (Debian package prometheus)")
    rules = tmp_path / "rules.yml"
    rules.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}), encoding="utf-8")
    tests = yaml.safe_load(
        (ROOT / "grafana/alerts/tests/sits-observe.test.yml").read_text(encoding="utf-8")
    )
    tests["rule_files"] = [str(rules)]
    test_file = tmp_path / "rules.test.yml"
    test_file.write_text(yaml.safe_dump(tests), encoding="utf-8")
    for command in (["check", "rules", str(rules)], ["test", "rules", str(test_file)]):
        result = subprocess.run(
            [PROMTOOL, *command], capture_output=True, text=True, timeout=120, check=False
        )
        assert result.returncode == 0, result.stdout + result.stderr


def test_dashboards_are_configmaps_for_the_grafana_sidecar() -> None:
    files = render()
    maps = objects("dry-run", "ConfigMap")
    for stem in dashboards():
        board = maps[f"sits-observe-dashboard-{stem}"]
        assert board["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert board["metadata"]["annotations"]["grafana_folder"] == "sits-observe"
        assert board["data"] == {f"{stem}.json": files[f"dashboards/{stem}.json"]}
    source_map = maps["sits-observe-grafana-datasource"]
    assert source_map["metadata"]["labels"]["grafana_datasource"] == "1"
    (datasource,) = yaml.safe_load(source_map["data"]["sits-observe.yaml"])["datasources"]
    assert datasource["type"] == "prometheus" and datasource["url"].startswith("http")


def test_only_with_extender_carries_the_scheduler_config_and_the_bind_role() -> None:
    config = one("with-extender", "ConfigMap", "sits-observe-scheduler-config")
    text = (DEPLOY / "scheduler-config.yaml").read_text(encoding="utf-8")
    assert config["data"] == {"scheduler-config.yaml": text}
    for overlay in ("dry-run", "annotate", "act"):
        assert "sits-observe-scheduler-config" not in objects(overlay, "ConfigMap")
        assert "sits-observe-extender-bind" not in objects(overlay, "ClusterRole")


# -- dcgm-exporter, as users run it ---------------------------------------------------------


def _render(path: Path) -> list[dict[str, Any]]:
    result = subprocess.run(
        [str(KUBECTL), "kustomize", "--load-restrictor=LoadRestrictionsNone", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d]


def test_dcgm_exporter_values_mount_the_counters_and_serve_each_agent_its_node() -> None:
    dcgm = ROOT / "collectors" / "dcgm-exporter"
    (counters,) = _render(dcgm)
    for version in KUBERNETES_VERSIONS:
        kubernetes_validate.validate(counters, version, strict=True)
    name, namespace = counters["metadata"]["name"], counters["metadata"]["namespace"]
    # The GPU Operator mounts the key dcgm-metrics.csv of the ConfigMap it is given.
    assert counters["data"] == {
        "dcgm-metrics.csv": (ROOT / "collectors/dcgm-counters.csv").read_text(encoding="utf-8")
    }
    operator = yaml.safe_load((dcgm / "gpu-operator.values.yaml").read_text(encoding="utf-8"))
    assert operator["dcgmExporter"]["config"]["name"] == name
    assert operator["dcgmExporter"]["service"]["internalTrafficPolicy"] == "Local"
    chart = yaml.safe_load((dcgm / "dcgm-exporter.values.yaml").read_text(encoding="utf-8"))
    (volume,) = chart["extraConfigMapVolumes"]
    assert volume["configMap"]["name"] == name
    (item,) = volume["configMap"]["items"]
    (mount,) = chart["extraVolumeMounts"]
    assert (mount["name"], mount["subPath"]) == (volume["name"], item["path"])
    assert item["key"] == "dcgm-metrics.csv"
    assert chart["arguments"] == ["-f", mount["mountPath"]]
    assert chart["service"]["internalTrafficPolicy"] == "Local"
    # Both installs' Service (the operator's is nvidia-dcgm-exporter, port 9400) is the URL
    # every agent reads.
    daemonset = one("dry-run", "DaemonSet", "sits-observe-agent")
    (agent,) = daemonset["spec"]["template"]["spec"]["containers"]
    url = f"http://{chart['fullnameOverride']}.{namespace}.svc:{chart['service']['port']}/metrics"
    assert url == "http://nvidia-dcgm-exporter.gpu-operator.svc:9400/metrics"
    assert f"--dcgm-url={url}" in agent["args"]


#: The one kustomization that sets the images (docs/install.md, "Images").
IMAGES_FILE = DEPLOY / "base" / "kustomization.yaml"


def kustomizations() -> list[Path]:
    """Every kustomization the overlays can reach: deploy/'s, collectors/ and grafana/.

    (collectors/dcgm-exporter is a separate install into the GPU Operator's namespace.)
    """
    extra = [ROOT / "collectors" / "kustomization.yml", ROOT / "grafana" / "kustomization.yaml"]
    return sorted([*DEPLOY.rglob("kustomization.yaml"), *extra])


def containers(objects_: tuple[dict[str, Any], ...]) -> dict[str, str]:
    """``kind/name/container`` -> image, for the workloads of a render."""
    return {
        f"{d['kind']}/{d['metadata']['name']}/{c['name']}": c["image"]
        for d in objects_
        if d["kind"] in ("Deployment", "DaemonSet")
        for c in d["spec"]["template"]["spec"]["containers"]
    }


def test_the_images_are_set_in_one_place() -> None:
    with_images = [p for p in kustomizations() if "images" in yaml.safe_load(p.read_text())]
    assert with_images == [IMAGES_FILE]
    images = {i["name"]: i for i in yaml.safe_load(IMAGES_FILE.read_text())["images"]}
    assert set(images) == {"sits-observe", "sits-observe-agent"}
    for overlay in OVERLAYS:
        used = containers(rendered(overlay))
        assert set(used.values()) == {f"{i['newName']}:{i['newTag']}" for i in images.values()}
        assert not any("ghcr.io/example" in image for image in used.values())
    # The manifests carry a bare name and no tag: the tag is written down in that file only.
    for manifest in ("deploy/base/deployment.yaml", "collectors/daemonset.yaml"):
        for doc in yaml.safe_load_all((ROOT / manifest).read_text()):
            if doc and doc["kind"] in ("Deployment", "DaemonSet"):
                for c in doc["spec"]["template"]["spec"]["containers"]:
                    assert c["image"] in images, (manifest, c["image"])


def test_an_image_set_in_that_place_reaches_every_overlay(tmp_path: Path) -> None:
    """Edit the one ``images:`` entry in a copy of the tree, as a user does, and render."""
    for folder in ("deploy", "collectors", "grafana"):
        shutil.copytree(ROOT / folder, tmp_path / folder, symlinks=True)
    copy = tmp_path / IMAGES_FILE.relative_to(ROOT)
    kustomization = yaml.safe_load(copy.read_text())
    for image in kustomization["images"]:
        image["newName"] = f"registry.test/team/{image['name']}"
        image["newTag"] = "9.9.9"
    copy.write_text(yaml.safe_dump(kustomization))
    for overlay in OVERLAYS:
        used = set(containers(build(tmp_path / "deploy" / "overlays" / overlay)).values())
        assert used == {
            "registry.test/team/sits-observe:9.9.9",
            "registry.test/team/sits-observe-agent:9.9.9",
        }, overlay


def test_no_kustomization_loads_a_file_outside_its_folder() -> None:
    """What kustomize's default load restrictor enforces, said per file: a kustomization
    includes other folders (kustomizations) anywhere, but files only from inside its own."""
    for path in kustomizations():
        doc = yaml.safe_load(path.read_text())
        entries = list(doc.get("resources", []))
        for generator in doc.get("configMapGenerator", []):
            entries += [f.split("=", 1)[-1] for f in generator.get("files", [])]
        entries += [p["path"] for p in doc.get("patches", []) if "path" in p]
        for entry in entries:
            target = (path.parent / entry).resolve()
            if target.is_dir():
                continue
            assert target.is_relative_to(path.parent.resolve()), (path, entry)
