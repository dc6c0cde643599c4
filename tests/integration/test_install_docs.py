"""docs/install.md names no flag, file or object that the CLI or the manifests lack.

Read from the page: every ``kind/name`` object reference (``deployment/sits-observe``,
``configmap/sits-observe-scheduler-config`` ...), every overlay and repository path, every
``--flag`` in backticks or on a ``sits-observe`` command line, every ``docker build --target``,
and the figures of the "Images" section. Each must exist: objects in what the overlays (or
``collectors/dcgm-exporter``) render, or be named by a rendered object (a Secret a pod mounts,
the Lease a Role grants); flags among the options of the ``sits-observe`` commands (or the few
other tools' flags the page uses, listed below); figures in docs/benchmarks.md's table.
"""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
from typing import Any

import pytest
import typer
import yaml

from tests.integration.test_install_kustomize import (
    DEPLOY,
    OVERLAYS,
    ROOT,
    SIDECAR_OVERLAYS,
    rendered,
)

DOC = ROOT / "docs" / "install.md"
KIND = {
    "deployment": "Deployment",
    "daemonset": "DaemonSet",
    "service": "Service",
    "configmap": "ConfigMap",
    "secret": "Secret",
    "clusterrole": "ClusterRole",
    "clusterrolebinding": "ClusterRoleBinding",
    "role": "Role",
    "rolebinding": "RoleBinding",
    "serviceaccount": "ServiceAccount",
    "servicemonitor": "ServiceMonitor",
    "podmonitor": "PodMonitor",
    "prometheusrule": "PrometheusRule",
    "pvc": "PersistentVolumeClaim",
    "lease": "Lease",
}
REFERENCE = re.compile(rf"\b({'|'.join(KIND)})/([a-z0-9][a-z0-9.-]*[a-z0-9])")
PATH = re.compile(
    r"\b((?:deploy|collectors|grafana|bench|tests|docs)/[A-Za-z0-9_./-]+|requirements-\w+\.lock"
    r"|Dockerfile)"
)
#: Flags of other tools the page names (kubectl, helm, kube-scheduler), not sits-observe's.
OTHER_TOOLS_FLAGS = {"--load-restrictor", "--reuse-values", "--config", "--target"}

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")


def text() -> str:
    return DOC.read_text(encoding="utf-8")


def code_lines() -> list[str]:
    """The lines of the page's fenced blocks, continuation lines joined."""
    blocks = re.findall(r"```[a-z]*\n(.*?)```", text(), flags=re.S)
    return [ln.strip() for block in blocks for ln in block.replace("\\\n", " ").splitlines()]


@functools.cache
def everything() -> tuple[dict[str, Any], ...]:
    dcgm = subprocess.run(
        [
            "kubectl",
            "kustomize",
            "--load-restrictor=LoadRestrictionsNone",
            "collectors/dcgm-exporter",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    docs = [d for d in yaml.safe_load_all(dcgm) if d]
    overlays = (*OVERLAYS, *SIDECAR_OVERLAYS)
    return tuple(d for overlay in overlays for d in rendered(overlay)) + tuple(docs)


def named_by_rendered_objects() -> set[tuple[str, str]]:
    """Objects the manifests refer to without creating them: mounted Secrets, granted Leases."""
    found = set()
    for doc in everything():
        pod = doc.get("spec", {}).get("template", {}).get("spec", {})
        for volume in pod.get("volumes", []):
            if "secret" in volume:
                found.add(("Secret", volume["secret"]["secretName"]))
        for rule in doc.get("rules", []) if doc["kind"] in ("Role", "ClusterRole") else []:
            if "leases" in rule.get("resources", []):
                found.update(("Lease", name) for name in rule.get("resourceNames", []))
    return found


def test_every_object_the_page_names_is_rendered_or_referenced() -> None:
    objects = {(d["kind"], d["metadata"]["name"]) for d in everything()}
    objects |= named_by_rendered_objects()
    named = {(KIND[kind], name) for kind, name in REFERENCE.findall(text())}
    assert len(named) >= 15, named
    missing = sorted(named - objects)
    assert not missing, f"docs/install.md names objects nothing renders: {missing}"


def test_every_path_and_overlay_the_page_names_exists() -> None:
    for path in set(PATH.findall(text())):
        assert (ROOT / path.rstrip(".")).exists(), path
    overlays = set(re.findall(r"deploy/overlays/([a-z-]+)", text()))
    assert overlays == {*OVERLAYS, *SIDECAR_OVERLAYS}
    assert {p.name for p in (DEPLOY / "overlays").iterdir()} == overlays


def sits_options() -> dict[str, set[str]]:
    """Options of each ``sits-observe`` command (the CLI's --help, as Click holds it)."""
    from sits_observe.surfaces.cli.main import app

    root = typer.main.get_command(app)
    options = {}
    for name, command in root.commands.items():  # type: ignore[attr-defined]
        options[name] = {
            opt
            for param in command.params
            if param.param_type_name == "option"
            for opt in (*param.opts, *param.secondary_opts)
        }
    return options


def test_every_flag_the_page_names_exists() -> None:
    options = sits_options()
    known = set().union(*options.values()) | OTHER_TOOLS_FLAGS
    known.add("--help")  # every command has it (Click)
    in_prose = {f.split("=", 1)[0] for f in re.findall(r"`(--[a-z][a-z0-9-]*(?:=[^`]*)?)`", text())}
    assert in_prose, "no flag found in backticks"
    assert not in_prose - known, sorted(in_prose - known)
    for line in code_lines():
        match = re.search(r"\bsits-observe(?:-agent)? ([a-z-]+)(.*)", line)
        if match and match.group(1) in options:
            for flag in re.findall(r"(--[a-z][a-z0-9-]*)", match.group(2)):
                assert flag in options[match.group(1)], (line, flag)
        for flag in re.findall(r"kubectl kustomize (--[a-z-]+)", line):
            assert flag == "--load-restrictor", line
    help_text = subprocess.run(
        ["kubectl", "kustomize", "--help"], capture_output=True, text=True, check=True
    ).stdout
    assert "--load-restrictor" in help_text


def test_the_images_the_page_builds_are_dockerfile_targets() -> None:
    stages = set(re.findall(r"^FROM \S+ AS (\S+)$", (ROOT / "Dockerfile").read_text(), re.M))
    targets = {t for ln in code_lines() for t in re.findall(r"--target (\S+)", ln)}
    assert targets == {"agent", "service"} and targets <= stages
    base = yaml.safe_load((DEPLOY / "base" / "kustomization.yaml").read_text())
    names = {image["name"] for image in base["images"]}
    used = {
        c["image"].rsplit(":", 1)[0]
        for d in rendered("dry-run")
        if d["kind"] in ("Deployment", "DaemonSet")
        for c in d["spec"]["template"]["spec"]["containers"]
    }
    assert used == names


def test_the_images_figures_are_the_benchmarks() -> None:
    section = text().split("## Images", 1)[1].split("\n## ", 1)[0]
    figures = set(re.findall(r"\b([\d,]+) MB\b", section))
    bench = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    table = bench.split("<!-- agent-install:begin -->", 1)[1].split("<!-- agent-install:end -->")[0]
    cells = {c.strip().replace(",", "") for row in table.splitlines() for c in row.split("|")}
    budget = re.search(r"under (\d+) MB", section)
    assert budget, "the page states the replay test's budget"
    for figure in figures - {budget.group(1)}:
        assert figure.replace(",", "") in cells, f"{figure} MB is not in docs/benchmarks.md"
    from tests.integration.test_install_image import AGENT_VENV_BUDGET_MB

    assert int(budget.group(1)) == AGENT_VENV_BUDGET_MB
