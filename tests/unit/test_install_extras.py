"""The installs that fit each role: pyproject's extras and the locks made from them.

A GPU node installs the core dependencies and the ``agent`` extra, pinned by
``requirements-agent.lock``: nothing there may be one of the packages a node must not carry,
and every third-party module the agent's code really imports (measured in a subprocess) must
come from a distribution of that lock, so a new import cannot slip a package past the agent's
install. The locks agree with ``requirements.lock`` (``make lock`` resolves them within it),
and the project declares the Python versions it is tested on.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
#: Distributions a node agent's install must not contain (docs/install.md, "Images").
NOT_ON_A_NODE = {
    "duckdb",
    "polars",
    "streamlit",
    "scikit-learn",
    "scipy",
    "kmock",
    "pandas",
    "fastapi",
    "uvicorn",
    "kubernetes",
}
#: What the agent's process imports: its entry point, the collectors it can build, tracing.
AGENT_MODULES = (
    "sits_observe.surfaces.cli.agent",
    "sits_observe.collectors.agent",
    "sits_observe.collectors.dcgm",
    "sits_observe.collectors.cgroup.collector",
    "sits_observe.collectors.nvml",
    "sits_observe.collectors.inference.vllm",
    "sits_observe.collectors.http",
    "sits_observe.surfaces.tracing",
)
#: Imported only because this venv happens to have them; the agent's install runs without
#: them (tests/agent_smoke.py, tests/integration/test_install_image.py prove it).
OPTIONAL_WHEN_PRESENT = {
    "click": "typer imports click when installed, else uses the copy it vendors",
    "cloudpickle": "pyarrow imports it when installed, else falls back to pickle",
    "_distutils_hack": "setuptools' .pth hook of this venv, not an import of the agent",
}


def name(requirement: str) -> str:
    """The normalised distribution name of a requirement or a lock line."""
    bare = re.split(r"[\s<>=!~;\[]", requirement.strip(), maxsplit=1)[0]
    return re.sub(r"[-_.]+", "-", bare).lower()


def lock(path: str) -> dict[str, str]:
    lines = (ROOT / path).read_text(encoding="utf-8").splitlines()
    pins = [ln.split("==") for ln in lines if ln.strip() and not ln.startswith("#")]
    return {name(n): v for n, v in pins}


def test_the_agent_extra_and_its_lock_carry_nothing_a_node_must_not() -> None:
    core = {name(r) for r in PYPROJECT["project"]["dependencies"]}
    agent = {name(r) for r in PYPROJECT["project"]["optional-dependencies"]["agent"]}
    assert not (core | agent) & NOT_ON_A_NODE
    assert not set(lock("requirements-agent.lock")) & NOT_ON_A_NODE
    service = {name(r) for r in PYPROJECT["project"]["optional-dependencies"]["service"]}
    assert {"duckdb", "polars", "fastapi", "uvicorn", "kubernetes"} <= service


def test_every_extra_exists_and_the_locks_agree() -> None:
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert {"agent", "service", "ui", "sim", "dev"} <= set(extras)
    full = lock("requirements.lock")
    for role in ("agent", "service"):
        pinned = lock(f"requirements-{role}.lock")
        assert pinned, role
        differ = {n: (v, full.get(n)) for n, v in pinned.items() if full.get(n) != v}
        assert not differ, f"requirements-{role}.lock differs from requirements.lock: {differ}"
    # Everything the extras name is pinned in the full lock (what .venv and CI install).
    named = {name(r) for reqs in extras.values() for r in reqs if not r.startswith("sits-")}
    named |= {name(r) for r in PYPROJECT["project"]["dependencies"]}
    assert not named - set(full), sorted(named - set(full))


def test_python_3_11_to_3_13_are_declared() -> None:
    assert PYPROJECT["project"]["requires-python"] == ">=3.11,<3.14"
    classifiers = set(PYPROJECT["project"]["classifiers"])
    for minor in (11, 12, 13):
        assert f"Programming Language :: Python :: 3.{minor}" in classifiers
    assert PYPROJECT["project"]["scripts"]["sits-observe-agent"] == (
        "sits_observe.surfaces.cli.agent:main"
    )


def test_what_the_agent_imports_comes_from_its_own_lock() -> None:
    probe = (
        "import json, sys\n"
        + "".join(f"import {m}\n" for m in AGENT_MODULES)
        + "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    loaded = json.loads(
        subprocess.run(
            [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
        ).stdout
    )
    third_party = [
        m
        for m in loaded
        if m not in sys.stdlib_module_names
        and m != "sits_observe"
        and m not in OPTIONAL_WHEN_PRESENT
    ]
    owners = packages_distributions()
    agent_lock = set(lock("requirements-agent.lock"))
    outside = {}
    for module in third_party:
        dists = {name(d) for d in owners.get(module, [])}
        if dists and not dists & agent_lock:
            outside[module] = sorted(dists)
    assert "pyarrow" in third_party and "httpx" in third_party  # the probe saw the agent
    assert not outside, f"the agent imports modules its install does not have: {outside}"
