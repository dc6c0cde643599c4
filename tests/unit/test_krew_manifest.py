"""The krew plug-in manifest (deploy/krew/sits.yaml): krew's Plugin format, an archive whose
sha256 is the one the manifest names, and a launcher that runs the package's entry point."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import io
import os
import re
import stat
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
KREW = ROOT / "deploy" / "krew"
MANIFEST = KREW / "sits.yaml"
SCRIPT = "kubectl-sits"


def manifest() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(MANIFEST.read_text(encoding="utf-8"))
    return doc


def project() -> dict[str, Any]:
    with (ROOT / "pyproject.toml").open("rb") as f:
        doc: dict[str, Any] = tomllib.load(f)["project"]
    return doc


def archive() -> bytes:
    """What ``python deploy/krew/archive.py`` writes."""
    spec = importlib.util.spec_from_file_location("krew_archive", KREW / "archive.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    data: bytes = module.archive_bytes()
    return data


def test_the_manifest_is_a_krew_plugin_named_like_its_file() -> None:
    doc = manifest()
    assert doc["apiVersion"] == "krew.googlecontainertools.github.com/v1alpha2"
    assert doc["kind"] == "Plugin"
    # krew: the name is how the plug-in is invoked (`kubectl sits`) and the file's name.
    assert doc["metadata"]["name"] == MANIFEST.stem == "sits"
    spec = doc["spec"]
    assert spec["version"] == f"v{project()['version']}"
    assert re.fullmatch(r"v\d+\.\d+\.\d+", spec["version"])
    for key in ("homepage", "shortDescription", "description", "caveats", "platforms"):
        assert spec[key], key
    # Honest about what it needs: Python and the package, which the archive does not hold.
    assert "pip install" in spec["caveats"] and "Python 3.11" in spec["caveats"]


def test_each_platform_installs_the_entry_point_named_in_pyproject() -> None:
    scripts = project()["scripts"]
    assert scripts[SCRIPT] == "sits_observe.surfaces.cli.main:kubectl_main"
    module, function = scripts[SCRIPT].split(":")
    assert callable(getattr(importlib.import_module(module), function))
    launcher = (KREW / SCRIPT).read_text(encoding="utf-8")
    assert f"from {module} import {function}" in launcher
    packed = archive()
    members = zipfile.ZipFile(io.BytesIO(packed)).namelist()
    (platform,) = manifest()["spec"]["platforms"]
    assert platform["bin"] == SCRIPT
    assert platform["selector"]["matchExpressions"][0]["key"] == "os"
    assert platform["uri"].startswith("https://") and platform["uri"].endswith(".zip")
    assert {f["from"] for f in platform["files"]} <= set(members)
    assert platform["sha256"] == hashlib.sha256(packed).hexdigest(), (
        "deploy/krew/kubectl-sits changed: run `python deploy/krew/archive.py` and put the "
        "printed sha256 in deploy/krew/sits.yaml"
    )
    assert archive() == packed  # reproducible, so a release can be checked against it
    info = zipfile.ZipFile(io.BytesIO(packed)).getinfo(SCRIPT)
    assert stat.S_IMODE(info.external_attr >> 16) == 0o755


def test_the_launcher_runs_the_read_commands_only(tmp_path: Path) -> None:
    env = {**os.environ, "SITS_PYTHON": sys.executable, "COLUMNS": "120"}
    shown = subprocess.run(
        ["sh", str(KREW / SCRIPT), "--help"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert shown.returncode == 0, shown.stderr
    assert "kubectl sits" in shown.stdout and "recommend" in shown.stdout
    served = subprocess.run(
        ["sh", str(KREW / SCRIPT), "serve"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert served.returncode == 2 and "No such command 'serve'" in served.stderr


def test_the_launcher_says_what_to_install_when_the_package_is_missing(tmp_path: Path) -> None:
    bare = tmp_path / "python"
    # -S: no site-packages, so the package cannot be imported (as on a fresh machine).
    bare.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n', encoding="utf-8")
    bare.chmod(0o755)
    missing = subprocess.run(
        ["sh", str(KREW / SCRIPT), "recommend"],
        capture_output=True,
        text=True,
        env={**os.environ, "SITS_PYTHON": str(bare)},
        timeout=120,
        check=False,
    )
    assert missing.returncode == 1
    assert "needs the sits-observe Python package" in missing.stderr
    assert "pip install" in missing.stderr
